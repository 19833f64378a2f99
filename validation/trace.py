#!/usr/bin/env python
"""Trace the real memory of Hugging Face training steps without a GPU.

Models are built from their config (random init, nothing downloaded) under
FakeTensorMode on a *fake CUDA device* (see fake_cuda.py) and measured with
torch.distributed._tools MemTracker / FSDPMemTracker. See validation/README.md.

Usage:
  python validation/trace.py --case ID             # one case of validation/cases.json
  python validation/trace.py --scenario FILE.json   # one scenario (public JSON contract)
  python validation/trace.py --all [--split dev|test] [--only-missing]
      -> updates validation/results/traced.json after every case
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from harness.common import TRACE_DEVICE, Untraceable  # noqa: E402  (fake CUDA before torch)
from harness import parallel  # noqa: E402
from harness.step import trace_scenario  # noqa: E402

import torch  # noqa: E402
import transformers  # noqa: E402

CASES_FILE = os.path.join(HERE, "cases.json")
RESULTS_FILE = os.path.join(HERE, "results", "traced.json")
MODULES_DIR = os.path.join(HERE, "results", "modules")


# ----------------------------------------------------------------------------- results io
def _meta() -> dict:
    import peft
    return {"torch_version": torch.__version__, "transformers_version": transformers.__version__,
            "peft_version": peft.__version__,
            "device": "cuda(fake)" if TRACE_DEVICE == "cuda" else "cpu"}


def load_results() -> dict:
    if os.path.exists(RESULTS_FILE):
        with open(RESULTS_FILE) as f:
            return json.load(f)
    return {"cases": {}}


def save_results(res: dict) -> None:
    os.makedirs(os.path.dirname(RESULTS_FILE), exist_ok=True)
    res.update(_meta())
    res["generated"] = datetime.date.today().isoformat()
    ordered = {k: res[k] for k in ("torch_version", "transformers_version", "peft_version", "device",
                                   "generated") if k in res}
    ordered["cases"] = dict(sorted(res.get("cases", {}).items()))
    ordered.update({k: v for k, v in res.items() if k not in ordered})
    tmp = RESULTS_FILE + ".tmp"
    with open(tmp, "w") as f:
        json.dump(ordered, f, indent=1)
        f.write("\n")
    os.replace(tmp, RESULTS_FILE)


def load_cases() -> list:
    with open(CASES_FILE) as f:
        return json.load(f)


def run_case(case: dict, pp_stage: str = "first") -> dict:
    dev_split = case.get("split") == "dev"
    pp = int((case["scenario"].get("parallelism") or {}).get("pp") or 1)
    try:
        r = trace_scenario(case["scenario"], with_modules=dev_split and pp == 1,
                           pp_stage=pp_stage)
    except Untraceable as e:
        return {"error": f"untraceable: {e}"}
    mods = r.pop("_modules", None)
    if mods is not None:
        os.makedirs(MODULES_DIR, exist_ok=True)
        with open(os.path.join(MODULES_DIR, f"{case['id']}.json"), "w") as f:
            json.dump({"case": case["id"], "note": "per-module MemTracker snapshots (bytes, rank 0) at "
                       "each module's forward peak and backward peak, second step", "modules": mods},
                      f, indent=1)
    return r


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--case")
    g.add_argument("--scenario")
    g.add_argument("--all", action="store_true")
    ap.add_argument("--split", choices=["dev", "test"])
    ap.add_argument("--only-missing", action="store_true")
    ap.add_argument("--no-save", action="store_true", help="--case: do not write traced.json")
    ap.add_argument("--pp-stage", choices=["first", "middle", "last"], default="first",
                    help="with pp > 1: which pipeline rank this process traces (middle: pp > 2)")
    ap.add_argument("--modules", action="store_true", help="--scenario: include per-module report")
    ap.add_argument("--timeline", metavar="OUT.json",
                    help="--scenario: write the second step's memory after every op to OUT.json")
    a = ap.parse_args(argv)

    if a.scenario:
        with open(a.scenario) as f:
            sc = json.load(f)
        sc = sc.get("scenario", sc)
        try:
            r = trace_scenario(sc, with_modules=a.modules, timeline=bool(a.timeline),
                               pp_stage=a.pp_stage)
        except Untraceable as e:
            r = {"error": f"untraceable: {e}"}
        ops = r.pop("_timeline", None)
        if a.timeline and ops is not None:
            with open(a.timeline, "w") as f:
                json.dump(ops, f)
        print(json.dumps(r, indent=1))
        return 0

    cases = load_cases()
    if a.case:
        sel = [c for c in cases if c["id"] == a.case]
        if not sel:
            print(f"unknown case {a.case}", file=sys.stderr)
            return 2
    else:
        sel = [c for c in cases if not a.split or c.get("split") == a.split]
    results = load_results()
    rc = 0
    for c in sel:
        if a.only_missing and c["id"] in results.get("cases", {}) and "error" not in results["cases"][c["id"]]:
            continue
        # A process group is one per process: every multi-rank case runs in a subprocess
        # (with pp > 1, one for the first pipeline stage and one for the last).
        n = parallel.sizes(c["scenario"].get("parallelism") or {})
        world = n["pp"] * n["dp"] * n["cp"] * n["tp"]
        try:
            if n["pp"] > 1 and not a.no_save:
                r = _pipeline_case(c["id"], n["pp"])
            elif a.no_save:
                r = run_case(c, a.pp_stage)
            elif world > 1 and (a.all or parallel.PG_READY or n["pp"] > 1):
                r = _run_subprocess(c["id"])
            else:
                r = run_case(c)
        except Exception as e:  # keep going; record the failure
            traceback.print_exc()
            r = {"error": f"{type(e).__name__}: {str(e)[:500]}"}
            rc = 1
        r["split"] = c.get("split")
        print(json.dumps({c["id"]: r}), flush=True)
        if not a.no_save:
            results = load_results()
            results.setdefault("cases", {})[c["id"]] = r
            save_results(results)
    return rc


def _pipeline_case(case_id: str, pp: int) -> dict:
    """The first and the last pipeline rank (and with pp > 2 the middle rank that holds the
    most), each in its own process; the case's figures are the largest rank's (what a GPU
    must hold), every rank's kept under `pipeline_stages`."""
    ranks = ("first", "middle", "last") if pp > 2 else ("first", "last")
    stages = {st: _run_subprocess(case_id, st) for st in ranks}
    if any("error" in r for r in stages.values()):
        return next(r for r in stages.values() if "error" in r)
    worst = max(stages.values(), key=lambda r: r["peak_bytes"])
    out = dict(worst)
    out["pipeline_stages"] = {st: {k: r[k] for k in ("peak_bytes", "peak_phase", "phases",
                                                     "categories_at_peak", "per_rank")}
                              for st, r in stages.items()}
    out["seconds"] = round(sum(r["seconds"] for r in stages.values()), 2)
    return out


def _run_subprocess(case_id: str, pp_stage: str = "first") -> dict:
    import subprocess
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--case", case_id, "--no-save",
                        "--pp-stage", pp_stage],
                       capture_output=True, text=True)
    for line in reversed(p.stdout.strip().splitlines()):
        if line.startswith("{"):
            d = json.loads(line)
            if case_id in d:
                return d[case_id]
    raise RuntimeError(f"subprocess failed: {p.stderr[-1500:]}")


if __name__ == "__main__":
    sys.exit(main())
