"""The GPU comparison page: one scenario on every GPU preset, as a bar chart and a table (plain
HTML and SVG, generated here, so the page needs no script to show them).

The figures are calc's `gpus` operation's answer for the calculator's default scenario, the
answer the page's script (site/assets/gpu_comparison.mjs) gets from the worker for a scenario
of the reader's own (a share link, or one saved in the calculator) and writes into the same
cells, found by `data-gpu` and `data-key`.
"""

from __future__ import annotations

import html
import json

from docs_common import DEFAULT_SCENARIO, READING_LIMITS, calc_link, gib, num_gib, pct

from calc import gpus, models
from calc.formatting import FIT_WORDS, count, tflops
from calc.operations import get
from calc.plan import DEFAULT_TARGET

BAR = {"fits": "ok", "tight": "tight", "does_not_fit": "over"}  # the bar's class by status


def _cells(row: dict[str, object]) -> dict[str, str]:
    """What the table and the chart show of one GPU's answer (gpu_comparison.mjs: `cells`)."""
    if row["error"] is not None:
        return {"device_bytes": "-", "utilization": "-", "max_micro_batch": "-",
                "status": f"not supported ({row['error']})"}
    mb = row["max_micro_batch"]
    return {"device_bytes": num_gib(row["device_bytes"]),  # type: ignore[arg-type]
            "utilization": pct(row["utilization"]),  # type: ignore[arg-type]
            "max_micro_batch": str(mb) if mb else "none",
            "status": FIT_WORDS[row["status"]]}  # type: ignore[index]


def context(src: str) -> dict[str, str]:
    answer = get("gpus").answer({"scenario": DEFAULT_SCENARIO})
    presets = gpus()
    rows = sorted(answer["gpus"], key=lambda r: -r["usable_bytes"])
    scale = max(r["usable_bytes"] for r in rows)
    table, bars = [], []
    for r in rows:
        g, cells = presets[r["id"]], _cells(r)
        td = {k: f'<td align="right" data-key="{k}">{html.escape(v)}</td>' for k, v in cells.items()}
        bf16 = g.dense_tflops.get("bf16")
        link = calc_link({**DEFAULT_SCENARIO, "gpu": g.id}, src)
        table.append(
            f'<tr data-gpu="{g.id}" data-device-bytes="{r["device_bytes"] or ""}">'
            f'<td><a href="{link}">{html.escape(g.name)}</a></td>'
            f'<td align="right">{num_gib(g.usable_bytes)}</td>{td["device_bytes"]}'
            f'{td["utilization"]}<td data-key="status">{html.escape(cells["status"])}</td>'
            f'{td["max_micro_batch"]}<td align="right">{tflops(bf16) if bf16 else "-"}</td>'
            f'<td align="right">{count(g.memory_bandwidth_gbps)}</td></tr>')
        used = 0 if r["error"] else min(r["device_bytes"], g.usable_bytes)
        cls = "over" if r["error"] else BAR[r["status"]]
        # SVG geometry, not style attributes: the Content-Security-Policy allows none
        bars.append(
            f'<div class="gpu-row" data-gpu="{g.id}"><span class="gpu-name">{html.escape(g.name)}</span>'
            f'<svg class="gpu-track" width="{100 * g.usable_bytes / scale:.2f}%" aria-hidden="true">'
            f'<rect class="gpu-back" width="100%" height="100%" rx="2"/>'
            f'<rect class="gpu-used gpu-used--{cls}" width="{100 * used / g.usable_bytes:.2f}%"'
            f' height="100%" rx="2"/>'
            f'<rect class="gpu-target" x="{100 * DEFAULT_TARGET:.0f}%" width="2" height="100%"/></svg>'
            f'<span class="gpu-value" data-key="utilization">{html.escape(cells["utilization"])}'
            '</span></div>')
    runs = [r for r in rows if r["error"] is None]
    t, p = DEFAULT_SCENARIO["training"], DEFAULT_SCENARIO["parallelism"]
    data = {"limits": READING_LIMITS, "bar": BAR,
            "calculator": "../calculator/"}
    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    header = "".join(f"<th>{h}</th>" for h in (
        "GPU (opens the calculator)", "usable GiB", "needed GiB", "of usable", "verdict",
        f"largest micro-batch at {DEFAULT_TARGET:.0%}", "dense bf16 TFLOPS", "memory GB/s"))
    return {
        "scenario_link": calc_link(DEFAULT_SCENARIO, src),
        "model": models()[DEFAULT_SCENARIO["model"]].name,
        "seq_len": str(t["seq_len"]), "micro_batch": str(t["micro_batch_size"]),
        "dp": str(p["dp"]), "device": gib(runs[0]["device_bytes"]),
        "target": f"{DEFAULT_TARGET:.0%}", "count": str(len(rows)),
        # the picker and status are not the page's text for search (data-search-exclude)
        "live": f'<div id="gpu-live" data-state="static" data-search-exclude>'
                f'<script type="application/json" '
                f'id="gpu-data">{payload}</script><p id="gpu-scenario"></p>'
                '<p><label for="gpu-saved">Or one saved in the calculator:</label> '
                '<select id="gpu-saved"><option value="">(none saved in this browser)</option>'
                '</select></p><p id="gpu-status" class="live-status" role="status"></p></div>'
                '<script type="module" src="../assets/gpu_comparison.mjs"></script>',
        "table": f'<div class="gpu-table"><table><thead><tr>{header}</tr></thead>'
                 f'<tbody>{"".join(table)}</tbody></table></div>',
        "chart": '<div class="gpu-chart" role="img" aria-label="Memory needed on each GPU">'
                 + "".join(bars) + "</div>",
    }
