"""The speed page: renders the benchmarks' data files (never numbers typed into prose).

The references in `benchmarks/results/`: `estimator_speed.json` from
`benchmarks/bench_estimate.py --out ...` and `site_speed.json` from `benchmarks/bench_site.py
--out ...` (make bench and make bench-site write under build/ instead).
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def _verdict(value: float, target: float) -> str:
    return "met" if value <= target else "**missed**"


def context(src: str) -> dict[str, str]:
    est = json.loads((RESULTS / "estimator_speed.json").read_text())
    site = json.loads((RESULTS / "site_speed.json").read_text())
    r, s, t = est["results"], site["summary"], site["targets_ms"]
    m, snapshot = site["machine"], site["site"]["snapshot"]
    rows = [
        ("One estimate, from a parsed scenario", f"{r['parsed_us']} µs", "< 100 µs",
         _verdict(r["parsed_us"], 100)),
        ("One estimate, from a dict (validation included)", f"{r['dict_us']} µs", "< 100 µs",
         _verdict(r["dict_us"], 100)),
        ("10,000 scenarios (best of 3)", f"{r['sweep_10000_s']} s", "< 1 s",
         _verdict(r["sweep_10000_s"], 1.0)),
    ]
    site_rows = [
        ("Numbers on screen (build-time report), cold / repeat",
         f"{s['numbers_on_screen_ms']['cold']:.0f} / {s['numbers_on_screen_ms']['repeat']:.0f} ms",
         f"< {t['numbers_on_screen']} ms",
         _verdict(max(s["numbers_on_screen_ms"].values()), t["numbers_on_screen"])),
        ("First live result, cold", f"{s['cold_first_live_ms'] / 1000:.1f} s",
         f"< {t['cold_first_live'] / 1000:.0f} s", _verdict(s["cold_first_live_ms"], t["cold_first_live"])),
        ("Cold first live result ÷ a bare Pyodide start (same run)",
         f"{s['cold_vs_bare']:.2f} ({s['cold_first_live_ms'] / 1000:.1f} s / "
         f"{s['bare_pyodide_cold_ms'] / 1000:.1f} s)", f"<= {site['target_cold_vs_bare']}",
         _verdict(s["cold_vs_bare"], site["target_cold_vs_bare"])),
        ("First live result, repeat visit", f"{s['repeat_first_live_ms'] / 1000:.1f} s",
         f"< {t['repeat_first_live'] / 1000:.0f} s",
         _verdict(s["repeat_first_live_ms"], t["repeat_first_live"])),
        ("Longest main-thread task while Python starts", f"{s['longest_task_ms']['cold']:.0f} ms",
         f"< {t['longest_task']} ms", _verdict(s["longest_task_ms"]["cold"], t["longest_task"])),
        ("Recalculation after an input change (median)", f"{s['recalc_ms']['median_painted']:.1f} ms",
         f"< {t['recalc']} ms", _verdict(s["recalc_ms"]["median_painted"], t["recalc"])),
        ("Parallelism advisor, 1024 GPUs (median)", f"{s['advise_1024_ms']['median_call']:.0f} ms",
         f"< {t['advise_1024']} ms", _verdict(s["advise_1024_ms"]["median_call"], t["advise_1024"])),
    ]

    def table(items: list[tuple[str, str, str, str]]) -> str:
        lines = ["| measure | measured | target | |", "| --- | --- | --- | --- |"]
        lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in items]
        return "\n".join(lines)

    transfer = s["cold_transfer"]
    cold = [r["cold"] for r in site["runs"]]
    long = [c["longest_task_ms"] for c in cold if c["long_tasks"]]
    long_tasks = (f"in the run above, {len(long)} of {len(cold)} cold visits had one (the longest "
                  f"{max(long):.0f} ms)" if long else
                  f"in the run above, none of {len(cold)} cold visits had one")
    return {
        "long_tasks": long_tasks,
        "estimator_table": table(rows),
        "estimator_when": f"{est['date']}, {est['machine']['python']} on {est['machine']['machine']}"
                          f" ({est['machine']['nproc']} cores)",
        "estimator_method": est["method"],
        "site_table": table(site_rows),
        "site_when": f"{site['date']}, {m['nproc']} cores ({m['cpu_model']}), Chromium "
                     f"{m['chromium']}, Pyodide {site['site']['pyodide']}",
        "site_method": site["method"],
        "python_start": f"{s['python_start_ms']['cold'] / 1000:.2f} s on a cold visit in the run "
                        f"above, {s['python_start_ms']['repeat'] / 1000:.2f} s on a repeat one; "
                        f"{s['python_start_ms']['visits_from_snapshot']} of "
                        f"{s['python_start_ms']['visits']} visits started from it",
        "snapshot_size": f"{snapshot['bytes'] / 2**20:.0f} MiB of memory, "
                         f"{snapshot['gzip_bytes'] / 2**20:.1f} MiB compressed",
        "transfer": f"{transfer['until_live_bytes'] / 2**20:.1f} MiB "
                    f"({transfer['until_live_gzip_bytes_estimate'] / 2**20:.1f} MiB if served "
                    f"compressed) in {transfer['requests_until_live']} requests until the first "
                    f"live result; {transfer['with_precache_bytes'] / 2**20:.1f} MiB including "
                    f"the offline copy; {site['summary']['repeat_transfer_bytes']} bytes on a "
                    "repeat visit",
    }
