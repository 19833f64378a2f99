"""Accuracy: calc's prediction vs the traced peak (and the other tools' formulas), and vs
published GPU measurements. Reads only committed files, so it needs no torch.

    python validation/accuracy.py [--split dev|test|all] [--json OUT]

Develop against `--split dev`; score `test` when a change is done, so the figure reported is
not tuned to the cases it is reported on.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from calc import ScenarioError, estimate
from calc.baselines import BASELINES
from calc.coverage import covered_pairs
from calc.scenario import ZERO_SIZES, engine_of, parse_scenario, resolve

HERE = Path(__file__).resolve().parent
GiB = 1024**3
# Which report figure a published measurement is compared with, like with like.
METRIC_FIELD = {"max_memory_allocated": "peak_bytes", "max_memory_reserved": "reserved_bytes",
                "nvidia_smi": "device_bytes"}


def load(name: str) -> Any:
    return json.loads((HERE / name).read_text())


def traced_rows(split: str = "all") -> list[dict[str, Any]]:
    cases = load("cases.json")
    traced = load("results/traced.json")["cases"]
    rows = []
    for case in cases:
        if split != "all" and case["split"] != split:
            continue
        result = traced.get(case["id"])
        if not result or "peak_bytes" not in result:
            continue
        report = estimate(case["scenario"])
        actual = result["peak_bytes"]
        row = {
            "id": case["id"], "split": case["split"], "traced": actual,
            "features": features(case["scenario"], report.resolved.arch.model_type),
            "validated": report.confidence["level"] == "validated",
            "predicted": report.peak_bytes,
            "error": report.peak_bytes / actual - 1,
            "traced_phase": result.get("peak_phase"), "predicted_phase": report.peak_phase,
        }
        row["omits"] = {b.name: b.omits(report.setup) for b in BASELINES}
        for b in BASELINES:  # None where the formula's source does not model the scenario
            predicted = None if row["omits"][b.name] else b.predict(report.setup).bytes
            row[b.name] = None if predicted is None else predicted / actual - 1
            row[f"{b.name}_bytes"] = predicted  # the accuracy page's scatter
        rows.append(row)
    return rows


# Why a published measurement is not compared (each exclusion is explained, none is silent).
_UPPER = ("the effective sequence length is unknown: unpacked samples are padded per batch to "
          "their longest, far below the configured maximum")
_ASSUMED = "settings the source does not state were assumed (from configs or defaults)"
_OPEN = "the source leaves the unit, the model version or the code open"
_APPROX = "the value is an approximate comment, not a logged measurement"
_NOT_STEP = "the peak may not be the training step's (evaluation or generation ran too)"
_MODEL = "the model differs from the preset or is approximated"
_CONTRADICTS = "the source contradicts itself"
EXCLUDED_FLAGS = {
    "seq_len_is_upper_bound_only": _UPPER,
    "short_samples_actual_seq_far_below_bound": _UPPER,
    "seq_len_unknown": "the sequence length is not stated by the source",
    "settings_assumed": _ASSUMED,
    "settings_assumed_from_config": _ASSUMED,
    "seq_len_from_config": _ASSUMED,
    "activation_checkpointing_assumed_none": _ASSUMED,
    "lora_config_unverified": _ASSUMED,
    "hardware_assumed": _ASSUMED,
    "unit_ambiguous": _OPEN,
    "model_version_ambiguous": _OPEN,
    "code_not_available": _OPEN,
    "approximate_value": _APPROX,
    "comment_may_predate_script": _APPROX,
    "peak_may_include_eval_generation": _NOT_STEP,
    "peak_probably_not_training_step": _NOT_STEP,
    "attention_kernel_uncertain": "which attention kernel ran is uncertain",
    "architecture_approximated": _MODEL,
    "model_config_from_secondary_sources": _MODEL,
    "preset_is_mistral_v0.3": _MODEL,
    "ep_ambiguous_script_vs_readme": _CONTRADICTS,
    "table_model_column_typo": _CONTRADICTS,
    "source_internal_inconsistency": _CONTRADICTS,
    "identical_values_in_table": _CONTRADICTS,
    "metric_peak_aggregation_unstated": "over which ranks and steps the peak was taken is unstated",
}


def exclusion(entry: dict[str, Any]) -> str | None:
    """The reason a published entry is not compared, or None when it is kept."""
    if entry["metric"] not in METRIC_FIELD:
        return f"metric {entry['metric']!r}: the source does not say which statistic it reports"
    if entry.get("settings_not_expressible"):
        return "uses settings the scenario cannot express: " + \
            ", ".join(entry["settings_not_expressible"])
    for flag in entry.get("flags") or ():
        if flag in EXCLUDED_FLAGS:
            return EXCLUDED_FLAGS[flag]
    return None


def published_rows() -> list[dict[str, Any]]:
    rows = []
    for entry in load("published.json"):
        field = METRIC_FIELD.get(entry["metric"])
        row: dict[str, Any] = {"id": entry["id"], "metric": entry["metric"],
                               "published": entry["value_bytes"],
                               "not_expressible": entry.get("settings_not_expressible", [])}
        try:
            report = estimate(entry["scenario"]).as_dict()
        except ScenarioError as exc:
            row["excluded"] = f"scenario rejected: {exc}"
            rows.append(row)
            continue
        reason = exclusion(entry)
        if reason:
            row["excluded"] = reason
        row["predicted"] = report[field or "peak_bytes"]
        row["error"] = row["predicted"] / entry["value_bytes"] - 1
        rows.append(row)
    return rows


MOE_FAMILIES = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v3", "gpt_oss")
# the pipeline schedules traced beside 1F1B (torch.distributed.pipelining's)
SCHEDULES = ("gpipe", "interleaved_1f1b", "zero_bubble", "zbv", "dualpipev")
FEATURES = ("tp", "tp+sp", "fsdp x tp", "cp", "pp", "fsdp + pp", "tp x pp", *SCHEDULES, "ep",
            *MOE_FAMILIES, "moe + lora", "deepspeed zero 1/2", "deepspeed zero 3",
            "deepspeed zero-offload", "deepspeed + lora", "deepspeed + qlora", "deepspeed sizes")
TARGET = 0.03  # each feature: at least 2 held-out test cases within 3%


def features(scenario: dict[str, Any], family: str) -> list[str]:
    """The parallel features and MoE families a case exercises (issue 11's per-feature target)."""
    p = scenario.get("parallelism", {})
    tp, cp, pp, ep = (int(p.get(k, 1)) for k in ("tp", "cp", "pp", "ep"))
    sharded = int(p.get("dp", 1)) * cp > 1 and int(p.get("zero", 0)) >= 2
    out = []
    if tp > 1:
        out.append("tp+sp" if p.get("sequence_parallel") else "tp")
        if sharded:
            out.append("fsdp x tp")
    if cp > 1:
        out.append("cp")
    if pp > 1:
        out.append("fsdp + pp" if sharded else "pp")
        if tp > 1:
            out.append("tp x pp")
        schedule = p.get("pipeline_schedule", "1f1b")
        if schedule != "1f1b":
            out.append(schedule)
    if ep > 1:
        out.append("ep")
    deepspeed = engine_of(p.get("framework"),
                          scenario["training"].get("mixed_precision", "amp")) == "deepspeed"
    zero = int(p.get("zero", 0)) if deepspeed and int(p.get("dp", 1)) > 1 else 0
    if zero in (1, 2):
        out.append("deepspeed zero 1/2")  # DeepSpeed's own engine (not torch's forms)
    if zero == 3:
        out.append("deepspeed zero 3")  # its parameter coordinator and gradient partitions
    if deepspeed and p.get("offload_optimizer") and not p.get("offload_params"):
        out.append("deepspeed zero-offload")  # the optimizer step on the host
    if zero and scenario["training"].get("finetuning", "full") != "full":
        out.append("deepspeed + lora")  # the engine's cast adapters, the frozen base's gathers
    if zero and scenario["training"].get("finetuning") == "qlora":
        out.append("deepspeed + qlora")  # at stage 3 the packed 4-bit weights partitioned
    if deepspeed and any(key in p for key in ZERO_SIZES):
        out.append("deepspeed sizes")  # zero_optimization sizes set in the scenario
    if family in MOE_FAMILIES:
        out.append(family)
        if scenario["training"].get("finetuning", "full") != "full":
            out.append("moe + lora")
    return out


def feature_targets(rows: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per feature: held-out test cases, and how many are within the target."""
    out = {}
    for f in FEATURES:
        test = [r for r in rows if r["split"] == "test" and f in r["features"]]
        out[f] = {"test_cases": len(test),
                  "within_3_percent": sum(abs(r["error"]) <= TARGET for r in test)}
    return out


def summary(rows: list[dict[str, Any]], key: str = "error") -> dict[str, float]:
    """Median and worst absolute error over the rows compared (a baseline's None: not compared)."""
    errors = [abs(r[key]) for r in rows if r[key] is not None]
    if not errors:
        return {"cases": 0}
    return {"cases": len(errors), "median_abs_error": statistics.median(errors),
            "max_abs_error": max(errors)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--split", default="dev", choices=["dev", "test", "all"])
    parser.add_argument("--json", help="write the rows and summaries to this file")
    parser.add_argument("--write", action="store_true",
                        help="write validation/results/accuracy.json (all splits)")
    args = parser.parse_args(argv)
    if args.write:
        args.split, args.json = "all", str(HERE / "results" / "accuracy.json")
    rows = traced_rows(args.split)
    print(f"{'case':<52}{'traced GiB':>11}{'calc':>8}{'korth.':>8}{'megatron':>9}{'eleuther':>9}"
          f"  phase (traced/calc)")
    def cell(x: float | None, width: int) -> str:
        return f"{'-':>{width}}" if x is None else f"{x:>+{width}.1%}"

    for r in rows:
        print(f"{r['id']:<52}{r['traced'] / GiB:>11.2f}{r['error']:>+8.1%}{cell(r['korthikanti'], 8)}"
              f"{cell(r['megatron'], 9)}{cell(r['eleuther'], 9)}  {r['traced_phase']}/{r['predicted_phase']}")
    out: dict[str, Any] = {"split": args.split, "traced": rows, "summary": {}}
    for key in ("error", *(b.name for b in BASELINES)):
        s = summary(rows, key)
        out["summary"][key] = s
        if s["cases"]:
            print(f"{key:>12}: median |error| {s['median_abs_error']:.1%}, "
                  f"worst {s['max_abs_error']:.1%} over {s['cases']} cases")
    if args.split == "all":
        out["features"] = feature_targets(rows)
        print("\nper feature (target: >= 2 held-out test cases within 3%):")
        for f, t in out["features"].items():
            mark = "met" if t["within_3_percent"] >= 2 else "NOT met"
            print(f"  {f:<12} {t['within_3_percent']} of {t['test_cases']} test cases within 3%: "
                  f"{mark}")
    pub = published_rows()
    kept = [r for r in pub if "excluded" not in r]
    out["published"] = pub
    print(f"\npublished measurements: {len(kept)} comparable, {len(pub) - len(kept)} excluded")
    for r in kept:
        print(f"  {r['id']:<60}{r['metric']:<22}{r['error']:>+8.1%}")
    out["summary"]["published"] = summary(kept)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    if args.write:
        COVERAGE.write_text(coverage_source(rows))
    return 0


COVERAGE = HERE.parent / "calc" / "coverage_data.py"


def coverage_source(rows: list[dict[str, Any]]) -> str:
    """calc/coverage_data.py: the pairs of settings the traced cases within 3% cover."""
    scenarios = {c["id"]: c["scenario"] for c in load("cases.json")}
    within = [resolve(parse_scenario(scenarios[r["id"]])) for r in rows
              if abs(r["error"]) <= TARGET]
    lines = [f"    {pair!r}," for pair in sorted(covered_pairs(within))]
    return ('"""The pairs of settings (calc.coverage.DIMENSIONS) that traced cases within 3% '
            'cover.\n\nGenerated by `python validation/accuracy.py --write` from '
            'validation/cases.json; do not edit.\n"""\n\n'
            "COVERED: frozenset[tuple[str, str, str, str]] = frozenset({\n"
            + "\n".join(lines) + "\n})\n")


if __name__ == "__main__":
    sys.exit(main())
