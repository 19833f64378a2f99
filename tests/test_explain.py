"""calc.explain: the formula reference's worked formulas agree with the report they explain."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from test_properties import scenarios  # tests/ is on sys.path (rootdir conftest)

from calc import ScenarioError, estimate
from calc.explain import Step, explain, num

CASES = [
    {"model": "gpt2", "training": {"seq_len": 1024}},
    {"model": "llama-3.1-8b", "training": {"seq_len": 4096, "activation_checkpointing": "full"},
     "parallelism": {"dp": 8, "zero": 3}},
    {"model": "qwen2.5-7b", "training": {"finetuning": "lora", "seq_len": 8192},
     "parallelism": {"dp": 2, "zero": 2}},
    {"model": "llama-3.1-8b", "training": {"finetuning": "qlora", "lora_rank": 64}},
    {"model": "llama-3.1-70b", "gpu": "h100-sxm-80gb",
     "training": {"mixed_precision": "master", "gradient_accumulation_steps": 8},
     "parallelism": {"tp": 8, "pp": 4, "dp": 2, "zero": 1, "sequence_parallel": True}},
    {"model": "mixtral-8x7b", "parallelism": {"ep": 8, "dp": 8, "zero": 3}},
    {"model": "deepseek-v3", "parallelism": {"tp": 8, "pp": 16, "ep": 8, "dp": 8},
     "training": {"gradient_accumulation_steps": 16}},
    {"model": "gemma-2-2b", "training": {"attention": "eager", "loss": "chunked"}},
    {"model": "llama-3.2-1b", "training": {"optimizer": "adamw_8bit"}, "parallelism": {"dp": 4}},
    {"model": "qwen3-0.6b", "training": {"optimizer": "adafactor", "precision": "fp32"}},
    {"model": "llama-3.1-8b", "training": {"optimizer": "sgd"},
     "parallelism": {"dp": 4, "zero": 3, "offload_optimizer": True, "offload_params": True}},
]


def at(report: dict[str, Any], path: str) -> Any:
    value: Any = report
    for key in path.split("."):
        value = value[key]
    return value


def check(scenario: dict[str, Any]) -> list[Step]:
    steps = list(explain(scenario).steps)
    report = estimate(scenario).as_dict()
    for step in steps:
        if step.report:
            assert step.value == at(report, step.report), (step.id, step.report)
        assert step.formula and step.substituted and step.title and step.source
        for tex in (step.formula, step.substituted):
            assert tex.count("{") == tex.count("}"), (step.id, tex)
    return steps


@pytest.mark.parametrize("scenario", CASES, ids=lambda s: s["model"])
def test_every_step_shows_the_number_the_report_shows(scenario: dict[str, Any]) -> None:
    steps = check(scenario)
    ids = [s.id for s in steps]
    assert {"parameters", "weights", "gradients", "activations", "peak", "allocator",
            "device"} <= set(ids)
    assert ids.index("parameters") < ids.index("peak") < ids.index("device")


@pytest.mark.parametrize("scenario", CASES, ids=lambda s: s["model"])
def test_the_arithmetic_shown_ends_in_the_steps_value(scenario: dict[str, Any]) -> None:
    for step in explain(scenario).steps:
        if step.id != "usable":  # a ratio: the value is the usable memory it divides by
            assert re.search(rf"= {re.escape(num(step.value))}(\\text{{ B}}.*)?$", step.substituted), \
                (step.id, step.substituted)


def test_the_peak_step_sums_the_components_at_the_peak() -> None:
    scenario = CASES[1]
    peak = next(s for s in explain(scenario).steps if s.id == "peak")
    e = estimate(scenario)
    assert peak.value == e.peak_bytes == sum(e.components.values())
    assert e.peak_phase.replace("_", " ") in peak.title


def test_lora_explains_the_trainable_count() -> None:
    steps = {s.id: s for s in check(CASES[2])}
    assert steps["trainable"].value == estimate(CASES[2]).trainable_param_count
    assert steps["trainable"].value < steps["parameters"].value


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios)
def test_any_valid_scenario_explains_consistently(scenario: dict[str, Any]) -> None:
    """explain() re-states the estimator's arithmetic and checks it against the estimator's
    own numbers: no valid scenario may make the two disagree."""
    try:
        estimate(scenario)
    except ScenarioError:
        return
    check(scenario)


def test_fsdp_and_optimizer_temporaries_are_explained_where_they_exist() -> None:
    fsdp = {s.id: s for s in check(CASES[1])}  # ZeRO-3 over 8 GPUs
    assert fsdp["fsdp_buffers"].value > 0
    foreach = {"model": "gpt2", "training": {"optimizer_impl": "foreach", "seq_len": 1024}}
    step = {s.id: s for s in check(foreach)}["optimizer_step_temporary"]
    assert step.value == estimate(foreach).as_dict()["phases"]["optimizer_step"]["components"][
        "temporaries"]
    assert "optimizer_step_temporary" not in {s.id for s in check(CASES[0])}  # fused: none
