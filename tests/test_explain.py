"""calc.explain renders the estimate's own terms: each step's LaTeX, read back as arithmetic,
gives the number it claims, and that number is the report's where a report path is named."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from latex import evaluate, middle  # tests/ is on sys.path (rootdir conftest)
from test_properties import scenarios

from calc import ScenarioError, estimate
from calc.baselines import korthikanti
from calc.explain import Step, explain, result

CASES: dict[str, dict[str, Any]] = {
    "gpt2-amp": {"model": "gpt2", "training": {"seq_len": 1024}},
    "llama8b-default": {"model": "llama-3.1-8b"},
    "llama8b-pure": {"model": "llama-3.1-8b", "training": {"mixed_precision": "pure"}},
    "llama8b-master-zero1": {"model": "llama-3.1-8b", "training": {"mixed_precision": "master"},
                             "parallelism": {"dp": 4, "zero": 1}},
    "llama8b-ddp": {"model": "llama-3.1-8b", "training": {"mixed_precision": "master"},
                    "parallelism": {"dp": 4}},
    "llama8b-zero2": {"model": "llama-3.1-8b", "parallelism": {"dp": 4, "cp": 2, "zero": 2}},
    "llama8b-fsdp-ckpt": {"model": "llama-3.1-8b",
                          "training": {"seq_len": 4096, "activation_checkpointing": "full"},
                          "parallelism": {"dp": 8, "zero": 3}},
    "llama8b-zero3-master": {"model": "llama-3.1-8b", "training": {"mixed_precision": "master"},
                             "parallelism": {"dp": 8, "zero": 3}},
    "llama8b-recompute-some": {"model": "llama-3.1-8b",
                               "training": {"activation_checkpointing": "full",
                                            "recompute_layers": 10}},
    "llama8b-lora": {"model": "llama-3.1-8b", "training": {"finetuning": "lora",
                                                            "lora_targets": "attention"}},
    "llama8b-qlora": {"model": "llama-3.1-8b", "training": {"finetuning": "qlora",
                                                             "lora_rank": 64}},
    "llama8b-sgd-offload": {"model": "llama-3.1-8b", "training": {"optimizer": "sgd"},
                            "parallelism": {"dp": 4, "zero": 3, "offload_optimizer": True,
                                            "offload_params": True}},
    "llama8b-adamw-offload": {"model": "llama-3.1-8b",
                              "parallelism": {"dp": 4, "zero": 2, "offload_optimizer": True}},
    "qwen7b-lora-zero2": {"model": "qwen2.5-7b", "training": {"finetuning": "lora",
                                                              "seq_len": 8192},
                          "parallelism": {"dp": 2, "zero": 2}},
    "llama70b-3d": {"model": "llama-3.1-70b",
                    "training": {"mixed_precision": "master", "gradient_accumulation_steps": 8},
                    "parallelism": {"tp": 8, "pp": 4, "dp": 2, "zero": 1,
                                    "sequence_parallel": True}},
    "llama70b-megatron": {"model": "llama-3.1-70b",
                          "training": {"implementation": "megatron", "mixed_precision": "pure",
                                       "activation_checkpointing": "full"},
                          "parallelism": {"tp": 8, "pp": 2}},
    "mixtral-ep-fsdp": {"model": "mixtral-8x7b", "parallelism": {"ep": 8, "dp": 8, "zero": 3}},
    "qwen3-moe-lora": {"model": "qwen3-30b-a3b", "training": {"finetuning": "lora"},
                       "parallelism": {"dp": 2}},
    "deepseek-v3-mla": {"model": "deepseek-v3",
                        "parallelism": {"tp": 8, "pp": 16, "ep": 8, "dp": 8},
                        "training": {"gradient_accumulation_steps": 16}},
    "gemma2-eager-chunked": {"model": "gemma-2-2b",
                             "training": {"attention": "eager", "loss": "chunked"}},
    "gemma2-eager-softcap": {"model": "gemma-2-2b", "training": {"attention": "eager",
                                                                 "seq_len": 2048}},
    "llama1b-adamw8bit": {"model": "llama-3.2-1b", "training": {"optimizer": "adamw_8bit"},
                          "parallelism": {"dp": 4, "zero": 1}},
    "llama1b-foreach": {"model": "llama-3.2-1b", "training": {"optimizer_impl": "foreach"}},
    "llama1b-lion-master": {"model": "llama-3.2-1b", "training": {"optimizer": "lion",
                                                                  "mixed_precision": "master"}},
    "qwen3-adafactor-fp32": {"model": "qwen3-0.6b", "training": {"optimizer": "adafactor",
                                                                 "precision": "fp32"}},
    "qwen3-adafactor-master-zero1": {"model": "qwen3-0.6b",
                                     "training": {"optimizer": "adafactor",
                                                  "mixed_precision": "master"},
                                     "parallelism": {"dp": 8, "zero": 1}},
    "phi3-momentum-for-loop": {"model": "phi-3-mini",
                               "training": {"optimizer": "sgd_momentum",
                                            "optimizer_impl": "for_loop"}},
}
ALWAYS = {"params.model", "peak.moment", "phase.forward", "phase.backward",
          "phase.optimizer_step", "peak", "overhead.allocator", "overhead.cuda_context",
          "overhead.reserved", "overhead.device", "gpu.usable"}


def at(report: dict[str, Any], path: str) -> Any:
    """The value at a dotted path; keys may contain "/", so split on "." only."""
    value: Any = report
    for key in path.split("."):
        value = value[key]
    return value


def balanced(tex: str) -> bool:
    depth = 0
    for ch in re.sub(r"\\[{}]", "", tex):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if depth < 0:
            return False
    return depth == 0 and tex.count("\\left") == tex.count("\\right")


def check(scenario: dict[str, Any]) -> list[Step]:
    """Every promise a step makes, against the report of the same scenario."""
    explanation = explain(scenario)
    steps = list(explanation.steps)
    report = estimate(scenario).as_dict()
    assert explanation.as_dict()["scenario"] == report["scenario"]
    ids = [s.id for s in steps]
    assert len(ids) == len(set(ids)), ids
    assert set(ids) >= ALWAYS, ALWAYS - set(ids)
    for step in steps:
        if step.report is not None:
            assert step.value == at(report, step.report), (step.id, step.report)
        else:
            assert step.note, f"{step.id}: no report path and no note saying why"
        assert step.substituted.endswith("= " + result(step.value, step.unit)), step.id
        assert evaluate(middle(step.substituted)) == step.value, (step.id, step.substituted)
        assert step.formula and step.title and step.source
        assert "$" not in step.formula + step.substituted
        for tex in (step.formula, step.substituted):
            assert balanced(tex), (step.id, tex)
        assert isinstance(step.value, int) and step.unit in ("bytes", "parameters")
    return steps


@pytest.mark.parametrize("scenario", CASES.values(), ids=CASES.keys())
def test_every_step_evaluates_to_the_number_the_report_shows(scenario: dict[str, Any]) -> None:
    steps = {s.id: s for s in check(scenario)}
    ids = list(steps)
    assert ids.index("params.model") < ids.index("peak.moment") < ids.index("peak") \
        < ids.index("overhead.device") < ids.index("gpu.usable")
    assert steps["params.model"].report == "param_count"
    assert steps["peak"].report == "peak_bytes"
    assert steps["overhead.device"].report == "device_bytes"


@pytest.mark.parametrize("scenario", CASES.values(), ids=CASES.keys())
def test_the_json_is_what_the_page_reads(scenario: dict[str, Any]) -> None:
    data = explain(scenario).as_dict()
    assert json.loads(json.dumps(data)) == data
    assert set(data["steps"][0]) == {"id", "title", "formula", "substituted", "value", "unit",
                                     "report", "source", "note", "symbols"}


def test_the_peak_moment_is_the_reports() -> None:
    scenario = CASES["llama8b-fsdp-ckpt"]
    steps = {s.id: s for s in explain(scenario).steps}
    e = estimate(scenario)
    assert e.peak_moment in steps["peak.moment"].title
    assert steps["peak.moment"].value == e.peak_bytes == sum(e.components.values())
    assert set(steps["peak"].symbols) == {"forward", "backward", "optimizer_step"}


def test_llama31_8b_parameters_show_the_hf_count() -> None:
    step = next(s for s in explain({"model": "llama-3.1-8b"}).steps if s.id == "params.model")
    assert step.value == 8_030_261_248
    assert "32 \\cdot 218\\,112\\,000" in step.substituted


def test_zero_shards_show_the_ceiling_over_the_shard_group() -> None:
    steps = {s.id: s for s in check(CASES["llama8b-zero2"])}  # N_d = dp x cp = 8
    assert "\\left\\lceil 8\\,030\\,261\\,248 / 8 \\right\\rceil" in steps["states.gradients"].substituted
    assert steps["states.weights"].symbols["N_3"] == 8  # FSDP2 (amp) shards weights at stage 2
    assert steps["states.gradients"].symbols["N_2"] == 8
    deepspeed = {**CASES["llama8b-zero2"], "training": {"mixed_precision": "master"}}
    steps = {s.id: s for s in check(deepspeed)}
    assert steps["states.weights"].symbols["N_3"] == 1  # DeepSpeed's stage 2 keeps whole weights


def test_lora_explains_the_trainable_count() -> None:
    scenario = CASES["qwen7b-lora-zero2"]
    steps = {s.id: s for s in check(scenario)}
    assert steps["params.lora"].value == estimate(scenario).trainable_param_count
    assert steps["params.lora"].report == "trainable_param_count"


def test_splits_explain_the_parameters_one_gpu_holds() -> None:
    steps = {s.id: s for s in check(CASES["llama70b-3d"])}
    local = steps["placement.local_parameters"]
    assert local.value * 8 * 4 < steps["params.model"].value * 1.1  # about P / (tp pp)
    assert "placement.local_parameters" not in {s.id for s in check(CASES["llama8b-default"])}


def test_moe_and_mla_models_explain_both_layer_kinds() -> None:
    # the peak is on rank 1 (MoE layers only, 15 micro-batches in flight), not rank 0 (3 dense
    # layers, then MoE): both kinds' parameters are explained, the MoE layer's activations
    ids = {s.id for s in check(CASES["deepseek-v3-mla"])}
    assert {"params.dense_layer", "params.moe_layer", "moe_layer.total",
            "moe_layer.mla_widths"} <= ids
    ids = {s.id for s in check({**CASES["deepseek-v3-mla"], "parallelism": {"tp": 8, "ep": 8,
                                                                             "dp": 8}})}
    assert {"moe_layer.total", "dense_layer.mla_widths"} <= ids


def test_offload_moves_states_to_the_host_steps() -> None:
    steps = {s.id: s for s in check(CASES["llama8b-adamw-offload"])}
    assert steps["states.exp_avg_on_host"].report == "host_breakdown.host/optimizer_states/exp_avg"
    assert "states.exp_avg" not in steps
    assert steps["host.total"].value == estimate(CASES["llama8b-adamw-offload"]).host_bytes > 0


def test_fsdp_and_optimizer_temporaries_are_explained_where_they_exist() -> None:
    fsdp = {s.id: s for s in check(CASES["llama8b-fsdp-ckpt"])}
    assert fsdp["states.gathered_layer"].value > 0
    step = {s.id: s for s in check(CASES["llama1b-foreach"])}["states.step_state_copy"]
    assert step.report == "phases.optimizer_step.components.temporaries"
    assert not any(s.id.startswith("states.step_") for s in check(CASES["gpt2-amp"]))  # fused


def test_the_published_formula_is_shown_beside_not_instead() -> None:
    for scenario in CASES.values():
        step = next(s for s in explain(scenario).steps if s.id.startswith("baseline."))
        assert step.report is None and "not calc's" in step.note
        assert step.value == korthikanti(estimate(scenario).setup).bytes


def test_a_bad_scenario_raises_the_estimators_field_error() -> None:
    with pytest.raises(ScenarioError) as exc:
        explain({"model": "llama-3.1-8b", "parallelism": {"tp": 3}})
    assert exc.value.field == "parallelism.tp"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios)
def test_any_valid_scenario_explains_consistently(scenario: dict[str, Any]) -> None:
    """Each step's LaTeX, evaluated as written, gives its value, and the report agrees: the
    page cannot show arithmetic the estimate did not do."""
    try:
        estimate(scenario)
    except ScenarioError:
        return
    check(scenario)


@pytest.mark.parametrize("scenario", [
    # a tied model, ZeRO-3 on one GPU with its optimizer offloaded: the tied gradients' sum
    # (found by the property test above: its moment had two parts fewer than it names)
    {"model": "gpt2", "training": {"seq_len": 128},
     "parallelism": {"zero": 3, "offload_optimizer": True}},
    # DeepSpeed ZeRO-3 with LoRA on a MoE model: its frozen experts' moment has no pending part
    {"model": "mixtral-8x7b", "training": {"seq_len": 1024, "finetuning": "lora",
                                           "mixed_precision": "master"},
     "parallelism": {"dp": 4, "zero": 3}},
    {"model": "llama-3.2-1b", "training": {"seq_len": 1024, "gradient_accumulation_steps": 4},
     "parallelism": {"dp": 2, "zero": 3, "pp": 2}},
    # a later micro-batch's head backward (its new weight gradient and the fp32 cast) is the peak
    {"model": "llama-3.2-1b", "training": {"seq_len": 512, "gradient_accumulation_steps": 2}},
    # eager attention at 8K tokens: the top layer's softmax backward, its MLP's gradients written
    {"model": "mistral-7b", "training": {"seq_len": 8192, "attention": "eager",
                                         "mixed_precision": "pure"}},
    # DeepSpeed ZeRO-2 accumulating: its partition allocated again beside the gradients, on one
    # rank and over two (rank 0's share only at the lowest layers)
    {"model": "llama-3.2-1b", "training": {"mixed_precision": "master", "loss": "chunked",
                                           "gradient_accumulation_steps": 2},
     "parallelism": {"zero": 2}},
    {"model": "llama-3.2-1b", "training": {"seq_len": 1024, "gradient_accumulation_steps": 2},
     "parallelism": {"dp": 2, "zero": 2, "framework": "deepspeed"}},
])
def test_every_moment_fills_each_part_it_names(scenario) -> None:
    """Each candidate moment carries one entry per part its kind names (None where absent), so
    the explanation can render any peak."""
    from calc.estimate import estimate
    from calc.peak import MOMENTS, stage_peak
    e = estimate(scenario)
    for stage in e.setup.stages:
        for m in stage_peak(e.setup, stage, detail=True).moments:
            assert len(m.parts) == len(MOMENTS[m.name].parts), m.name
    explain(scenario)
