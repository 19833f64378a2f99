"""The GPU comparison page: the calculator's default scenario on every GPU preset, as a table
and a bar chart (plain HTML, SVG and CSS, generated here, so it needs no script)."""

from __future__ import annotations

import html

from docs_common import DEFAULT_SCENARIO, calc_link, gib, md_table, num_gib, pct

from calc import ScenarioError, estimate, gpus, models
from calc.plan import DEFAULT_TARGET, max_micro_batch


def context(src: str) -> dict[str, str]:
    rows, bars, results, rejected = [], [], [], []
    for g in gpus().values():
        scenario = {**DEFAULT_SCENARIO, "gpu": g.id}
        try:
            e = estimate(scenario)
        except ScenarioError as exc:  # e.g. bf16 on a V100: the page says why, not a number
            rejected.append(f"- **{g.name}**: `{exc}`")
            continue
        fit = max_micro_batch(scenario)
        results.append((g, e, fit))
    results.sort(key=lambda t: -t[0].usable_bytes)
    scale = max(g.usable_bytes for g, _, _ in results)
    for g, e, fit in results:
        within = e.utilization <= DEFAULT_TARGET
        verdict = "within target" if within else "fits, tight" if e.fits else "does not fit"
        bf16 = g.dense_tflops.get("bf16")
        rows.append([f"[{g.name}]({calc_link({**DEFAULT_SCENARIO, 'gpu': g.id}, src)})",
                     num_gib(g.usable_bytes), num_gib(e.device_bytes), pct(e.utilization),
                     verdict, str(fit.value) if fit.value else "none",
                     f"{bf16:g}" if bf16 else "-", f"{g.memory_bandwidth_gbps:,.0f}"])
        cls = "ok" if within else "tight" if e.fits else "over"
        used = min(e.device_bytes, g.usable_bytes)
        # SVG geometry, not style attributes: the Content-Security-Policy allows none
        bars.append(
            f'<div class="gpu-row"><span class="gpu-name">{html.escape(g.name)}</span>'
            f'<svg class="gpu-track" width="{100 * g.usable_bytes / scale:.2f}%" aria-hidden="true">'
            f'<rect class="gpu-back" width="100%" height="100%" rx="2"/>'
            f'<rect class="gpu-used gpu-used--{cls}" width="{100 * used / g.usable_bytes:.2f}%"'
            f' height="100%" rx="2"/>'
            f'<rect class="gpu-target" x="{100 * DEFAULT_TARGET:.0f}%" width="2" height="100%"/></svg>'
            f'<span class="gpu-value">{pct(e.utilization)}</span></div>')
    e0 = results[0][1]
    t = e0.scenario.training
    p = e0.scenario.parallelism
    return {
        "scenario_link": calc_link(DEFAULT_SCENARIO, src),
        "model": models()[DEFAULT_SCENARIO["model"]].name,
        "seq_len": str(t.seq_len), "micro_batch": str(t.micro_batch_size),
        "dp": str(p.dp), "zero": str(p.zero), "checkpointing": t.activation_checkpointing,
        "device": gib(e0.device_bytes), "target": f"{DEFAULT_TARGET:.0%}",
        "count": str(len(results) + len(rejected)),
        "rejected": "\n".join(rejected) or "None.",
        "table": md_table(["GPU (opens the calculator)", "usable GiB", "needed GiB", "of usable",
                           "verdict", f"largest micro-batch at {DEFAULT_TARGET:.0%}",
                           "dense bf16 TFLOPS", "memory GB/s"], rows, "lrrrlcrr"),
        "chart": '<div class="gpu-chart" role="img" aria-label="Memory needed on each GPU">'
                 + "".join(bars) + "</div>",
    }
