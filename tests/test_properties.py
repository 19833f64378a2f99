"""Invariants that hold for every scenario, each with its conditions stated."""

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from calc import COMPONENTS, ScenarioError, estimate

MODELS = ["gpt2", "llama-3.2-1b", "qwen3-0.6b", "gemma-2-2b", "phi-3-mini", "mixtral-8x7b",
          "qwen2.5-7b", "deepseek-v3"]

training = st.fixed_dictionaries({}, optional={
    "micro_batch_size": st.integers(-1, 16),
    "seq_len": st.sampled_from([0, 128, 512, 1000, 1024, 4096, 8192]),
    "gradient_accumulation_steps": st.integers(0, 8),
    "precision": st.sampled_from(["fp32", "bf16", "fp16", "fp8", "fp4"]),
    "mixed_precision": st.sampled_from(["pure", "amp", "master"]),
    "optimizer": st.sampled_from(["adamw", "adam", "sgd", "sgd_momentum", "adafactor", "lion",
                                  "adamw_8bit"]),
    "optimizer_impl": st.sampled_from(["fused", "foreach", "for_loop"]),
    "activation_checkpointing": st.sampled_from(["none", "selective", "full"]),
    "recompute_layers": st.one_of(st.none(), st.integers(0, 40)),
    "attention": st.sampled_from(["flash", "eager"]),
    "loss": st.sampled_from(["standard", "chunked"]),
    "finetuning": st.sampled_from(["full", "lora", "qlora"]),
    "lora_rank": st.sampled_from([0, 8, 64]),
    "lora_targets": st.sampled_from(["all_linear", "attention"]),
    "implementation": st.sampled_from(["hf", "megatron"]),
})
parallelism = st.fixed_dictionaries({}, optional={
    "dp": st.sampled_from([1, 2, 8, 64]),
    "tp": st.sampled_from([1, 2, 3, 4, 8]),
    "pp": st.sampled_from([1, 2, 4]),
    "cp": st.sampled_from([1, 2]),
    "ep": st.sampled_from([1, 2, 8]),
    "zero": st.integers(0, 4),
    "sequence_parallel": st.booleans(),
    "offload_optimizer": st.booleans(),
    "offload_params": st.booleans(),
})
scenarios = st.fixed_dictionaries({
    "model": st.sampled_from(MODELS),
    "training": training,
    "parallelism": parallelism,
    "gpu": st.sampled_from(["h100-sxm-80gb", "a100-40gb", "v100-32gb", "mi300x-192gb"]),
})


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios)
def test_every_combination_estimates_or_raises_a_field_error(scenario) -> None:
    """No traceback, NaN, negative or non-integer byte count, whatever the input."""
    try:
        report = estimate(scenario).as_dict()
    except ScenarioError as exc:
        assert exc.field and exc.message
        return
    assert sum(report["components"].values()) == report["peak_bytes"]
    for value in (report["peak_bytes"], report["reserved_bytes"], report["device_bytes"],
                  report["host_bytes"], *report["components"].values(),
                  *report["breakdown"].values()):
        assert isinstance(value, int) and value >= 0
    assert report["peak_bytes"] <= report["reserved_bytes"] <= report["device_bytes"]
    assert math.isfinite(report["utilization"])
    assert report["peak_bytes"] == max(p["peak_bytes"] for p in report["phases"].values())
    assert set(report["components"]) == set(COMPONENTS)


base = st.fixed_dictionaries({
    "model": st.sampled_from(["gpt2", "llama-3.2-1b", "qwen3-0.6b", "gemma-2-2b"]),
    "training": st.fixed_dictionaries({
        "mixed_precision": st.sampled_from(["pure", "amp", "master"]),
        "activation_checkpointing": st.sampled_from(["none", "full"]),
        "attention": st.sampled_from(["flash", "eager"]),
        "finetuning": st.sampled_from(["full", "lora"]),
        "optimizer_impl": st.sampled_from(["fused", "foreach", "for_loop"]),
        "gradient_accumulation_steps": st.integers(1, 4),
        "seq_len": st.sampled_from([256, 1024]),
    }),
    "parallelism": st.fixed_dictionaries({"dp": st.sampled_from([1, 8]),
                                          "zero": st.integers(0, 3)}),
})


@settings(max_examples=150, deadline=None)
@given(base, st.integers(1, 4), st.sampled_from([128, 256, 512]))
def test_memory_grows_with_batch_and_sequence(scenario, batch, seq) -> None:
    """Holds for any fixed model and settings: more tokens never need less memory."""
    def peak(b: int, s: int) -> int:
        sc = {**scenario, "training": {**scenario["training"], "micro_batch_size": b,
                                       "seq_len": s}}
        return estimate(sc).peak_bytes
    assert peak(batch, seq) <= peak(batch + 1, seq)
    assert peak(batch, seq) <= peak(batch, seq * 2)


@settings(max_examples=60, deadline=None)
@given(base)
def test_model_states_do_not_grow_with_zero_stage(scenario) -> None:
    """With dp > 1, parameters + gradients + optimizer states per GPU never grow with the stage."""
    states = []
    for zero in range(4):
        sc = {**scenario, "parallelism": {"dp": 8, "zero": zero}}
        comps = estimate(sc).as_dict()["phases"]["optimizer_step"]["components"]
        states.append(comps["parameters"] + comps["gradients"] + comps["optimizer_states"])
    assert states == sorted(states, reverse=True)


@settings(max_examples=60, deadline=None)
@given(base)
def test_checkpointing_raises_the_peak_by_at_most_one_layer_input(scenario) -> None:
    """Full checkpointing frees saved activations. It can cost one layer input more, when the
    peak is at the end of backward and the recomputed layer does not save its input itself
    (pure bf16: the norm keeps an fp32 copy), but never more than that."""
    def peak(mode: str) -> int:
        return estimate({**scenario, "training": {**scenario["training"],
                                                  "activation_checkpointing": mode}}).peak_bytes
    sc = estimate(scenario)
    t = sc.scenario.training
    layer_input = t.micro_batch_size * t.seq_len * sc.resolved.arch.hidden_size * 4
    assert peak("full") <= peak("none") + layer_input


@settings(max_examples=80, deadline=None)
@given(base, st.integers(1, 3))
def test_memory_does_not_fall_with_accumulation(scenario, steps) -> None:
    """More micro-batches per step never need less memory (they may need more: the
    gradients are held between micro-batches)."""
    def peak(n: int) -> int:
        return estimate({**scenario, "training": {**scenario["training"],
                                                  "gradient_accumulation_steps": n}}).peak_bytes
    assert peak(steps) <= peak(steps + 1)


@settings(max_examples=80, deadline=None)
@given(base)
def test_memory_per_gpu_does_not_grow_with_dp_at_zero3(scenario) -> None:
    """ZeRO-3 shards parameters, gradients and optimizer states over dp: more GPUs never
    need more memory each (activations do not depend on dp)."""
    peaks = [estimate({**scenario, "parallelism": {"dp": dp, "zero": 3}}).peak_bytes
             for dp in (2, 4, 8, 16, 64)]
    assert peaks == sorted(peaks, reverse=True)
