"""Accuracy against the committed validation results. No torch needed: the traced peaks are
committed, the predictions are recomputed from the current code. Re-tracing: `make trace`."""

import json
import statistics
import sys
from pathlib import Path

import pytest

from calc.confidence import (
    AUTOCAST_ZERO3_ADAPTED_MOE,
    MAX_TRACED_PARAMS,
    VALIDATED_ATTENTION,
    VALIDATED_FAMILIES,
    VALIDATED_FEATURES,
)
from calc.params import count_params
from calc.scenario import parse_scenario, resolve

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "validation"))
import accuracy  # noqa: E402

CASES = json.loads((ROOT / "validation" / "cases.json").read_text())


@pytest.fixture(scope="module")
def traced() -> list[dict]:
    return accuracy.traced_rows("all")


def test_validation_set_is_large_and_fully_traced(traced) -> None:
    """At least 40 cases, and every case has a traced result committed."""
    assert len(CASES) >= 40
    assert {r["id"] for r in traced} == {c["id"] for c in CASES}


def test_peak_within_3_percent_median_and_10_percent_worst(traced) -> None:
    """The issue's target, on dev and test splits together, for every case the estimator
    reports as `validated`; a traced mechanism not modelled yet keeps its cases `extrapolated`
    (confidence names why), and those are held to 25%."""
    errors = [abs(r["error"]) for r in traced]
    assert statistics.median(errors) <= 0.03
    validated = [r for r in traced if r["validated"]]
    assert len(validated) >= 0.8 * len(traced)
    worst = max(validated, key=lambda r: abs(r["error"]))
    assert abs(worst["error"]) <= 0.10, worst
    for r in traced:
        assert abs(r["error"]) <= 0.25, r


def test_test_split_is_scored_too(traced) -> None:
    test = [abs(r["error"]) for r in traced if r["split"] == "test" and r["validated"]]
    assert len(test) >= 10
    assert statistics.median(test) <= 0.03 and max(test) <= 0.10


def test_kept_published_measurements_within_15_percent() -> None:
    rows = accuracy.published_rows()
    kept = [r for r in rows if "excluded" not in r]
    assert len(kept) >= 3, "the published comparison must not pass vacuously"
    for r in kept:
        assert abs(r["error"]) <= 0.15, r
    for r in rows:
        assert "excluded" not in r or r["excluded"], "every exclusion states its reason"


def test_confidence_claims_are_backed_by_traced_cases() -> None:
    """`validated` in a report must mean the traced cases cover that family and feature."""
    families, seen = set(), {path: set() for path in VALIDATED_FEATURES}
    attention: dict[str, set[str]] = {}
    largest = 0
    adapted_moe = set()  # LoRA/QLoRA on a MoE family under DeepSpeed's ZeRO-3, torch_autocast
    for case in CASES:
        r = resolve(parse_scenario(case["scenario"]))
        families.add(r.arch.model_type)
        t, p = r.scenario.training, r.scenario.parallelism
        if r.arch.is_moe and t.finetuning != "full" and t.mixed_precision == "amp" \
                and p.engine(t.mixed_precision) == "deepspeed" and p.zero_in_effect(t) == 3:
            adapted_moe.add(r.arch.model_type)
        attention.setdefault(r.arch.model_type, set()).add(r.scenario.training.attention)
        largest = max(largest, count_params(r.arch).total)
        for path in VALIDATED_FEATURES:
            group, name = path.split(".")
            seen[path].add(getattr(getattr(r.scenario, group), name))
    assert families >= VALIDATED_FAMILIES
    assert adapted_moe >= AUTOCAST_ZERO3_ADAPTED_MOE
    assert largest == MAX_TRACED_PARAMS
    for family, allowed in VALIDATED_ATTENTION.items():
        assert attention[family] == allowed, f"{family}: traced with {attention[family]}"
    for path, allowed in VALIDATED_FEATURES.items():
        assert allowed <= seen[path], f"{path}: {allowed - seen[path]} not traced"


def test_covered_pairs_are_generated_from_the_traced_cases(traced) -> None:
    """calc/coverage_data.py is what `accuracy.py --write` makes of the committed traces."""
    assert accuracy.COVERAGE.read_text() == accuracy.coverage_source(accuracy.traced_rows("all"))


def test_a_pair_of_settings_no_case_traces_together_is_extrapolated() -> None:
    """QLoRA and Adafactor are each traced, never together (QLoRA under amp was so, and
    random combinations traced against the estimate missed by 15% there until it was
    modelled): the estimate names the pair instead of `validated`."""
    from calc import estimate
    e = estimate({"model": "llama-3.2-1b", "training": {
        "finetuning": "qlora", "optimizer": "adafactor", "seq_len": 512}})
    assert e.confidence["level"] == "extrapolated"
    assert any("finetuning 'qlora' with optimizer 'adafactor'" in m
               for m in e.confidence["missing"])


def test_a_family_in_a_layout_no_case_traces_is_extrapolated() -> None:
    """The family is paired with the whole layout: DeepSeek-V3 under FSDP2 missed by 6-18%
    (its dense first layer beside MoE layers, gathered at the widest width) while Mixtral's and
    Qwen3-MoE's were exact, until traced there; under DDP it is not traced."""
    from calc import estimate
    cut = next(c["scenario"]["model"] for c in CASES
               if c["id"] == "deepseek-v3-3L-e32-v32k_b1_s1024_amp_flash")  # 3 layers
    traced = estimate({"model": cut, "training": {"seq_len": 2048},
                       "parallelism": {"dp": 4, "zero": 3}})
    assert not any("family 'deepseek_v3'" in m for m in traced.confidence["missing"])
    e = estimate({"model": cut, "training": {"seq_len": 2048},
                  "parallelism": {"dp": 4, "zero": 0}})
    assert e.confidence["level"] == "extrapolated"
    assert any("family 'deepseek_v3' with layout 'ddp/none'" in m
               for m in e.confidence["missing"])


def test_every_traced_case_within_target_is_validated(traced) -> None:
    """Each traced case's own settings are covered, pair by pair, by the case itself."""
    from calc import estimate
    rows = {r["id"]: r for r in accuracy.traced_rows("all")}
    for case in accuracy.load("cases.json"):
        row = rows.get(case["id"])
        if row is None or abs(row["error"]) > accuracy.TARGET:
            continue
        missing = estimate(case["scenario"]).confidence["missing"]
        assert not any(m.startswith("no traced case combines") for m in missing), case["id"]
