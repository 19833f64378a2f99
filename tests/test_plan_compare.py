"""Comparison: side-by-side figures and differences against the first scenario."""

import pytest

from calc import ScenarioError, estimate
from calc.plan import PlanError, compare

A = {"model": "llama-3.2-1b", "training": {"seq_len": 2048}}
B = {"model": "llama-3.2-1b", "training": {"seq_len": 2048, "micro_batch_size": 2,
                                           "gradient_accumulation_steps": 4},
     "parallelism": {"dp": 8, "zero": 2}}


def test_columns_match_the_estimates_and_differences_are_against_the_first() -> None:
    d = compare([A, B], labels=["a", "b"]).as_dict()
    a, b = d["scenarios"]
    assert d["baseline"] == "a"
    assert a["device_bytes"] == estimate(A).device_bytes
    assert b["global_batch_size"] == 2 * 4 * 8 and b["tokens_per_step"] == 64 * 2048
    assert a["difference"]["device_bytes"] == 0
    assert b["difference"]["device_bytes"] == b["device_bytes"] - a["device_bytes"]
    assert sum(b["difference"]["components"].values()) == b["peak_bytes"] - a["peak_bytes"]
    assert {"utilization", "fits", "micro_batch_size", "peak_bytes"} <= b.keys()


def test_a_bad_scenario_is_named_by_its_label() -> None:
    with pytest.raises(ScenarioError) as exc:
        compare([A, {"model": "gpt2"}], labels=["ok", "bad"])
    assert exc.value.field == "bad: training.seq_len"


def test_empty_or_mislabelled_input_is_an_error() -> None:
    with pytest.raises(PlanError):
        compare([])
    with pytest.raises(PlanError):
        compare([A], labels=["x", "y"])
