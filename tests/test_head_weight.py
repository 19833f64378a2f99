"""A later micro-batch's head backward and eager attention's top-layer softmax backward: the
moments traced in validation/cases.json (the `accumulating` and `eager` cases of issue 11's
random combinations), checked here for where they apply and what they count."""

from __future__ import annotations

import pytest

from calc import estimate
from calc.peak import stage_peak

GiB = 2**30


def _moments(scenario: dict) -> dict[str, int]:
    e = estimate(scenario)
    (stage,) = e.setup.stages
    return {m.name: m.bytes for m in stage_peak(e.setup, stage, detail=True).moments}


def _scenario(**training) -> dict:
    return {"model": "llama-3.2-1b", "training": {"seq_len": 512, **training}}


def test_head_weight_only_when_accumulating() -> None:
    assert "backward.head_weight" not in _moments(_scenario())
    assert "backward.head_weight" in _moments(_scenario(gradient_accumulation_steps=2))


def test_head_weight_is_the_peak_of_a_short_accumulating_step() -> None:
    # traced: 22.693 GiB (llama-3.2-1b_b1_s512_amp_flash_gas2); the loss's moment alone, 22.45
    e = estimate(_scenario(gradient_accumulation_steps=2))
    assert e.peak.name == "backward.head_weight"
    assert abs(e.peak_bytes / GiB - 22.693) < 0.005


def test_autocast_adds_the_fp32_cast_of_the_head_gradient() -> None:
    """Under amp the bf16 weight gradient is cast to fp32 (V h 4 more) while the head's saved
    copy is freed; in pure bf16 it is added in place as it is."""
    amp = _moments(_scenario(gradient_accumulation_steps=2))
    pure = _moments(_scenario(gradient_accumulation_steps=2, mixed_precision="pure"))
    assert amp["backward.head_weight"] - amp["backward.loss_grad"] > \
        pure["backward.head_weight"] - pure["backward.loss_grad"]


def test_no_head_weight_moment_for_lora_or_the_fused_loss() -> None:
    for training in ({"finetuning": "lora"}, {"loss": "chunked"}):
        assert "backward.head_weight" not in _moments(
            _scenario(gradient_accumulation_steps=2, **training))


def test_eager_top_layer_counts_the_gradients_its_mlp_wrote() -> None:
    """Traced: mistral-7b-4L at 8K tokens in pure bf16, 72.364 GiB; the peak is the top layer's
    softmax backward, after its MLP's (whose activations are freed, gradients written)."""
    config = {"model": "mistral-7b", "training": {"seq_len": 8192, "attention": "eager",
                                                  "mixed_precision": "pure"}}
    e = estimate(config)
    assert e.peak.name == "backward.last_layer"
    written = [p for p in e.peak.parts
               if getattr(getattr(p, "formula", None), "id", None) == "peak.late_written"]
    assert written and written[0].bytes > 0


def test_a_pipeline_s_last_stage_holds_a_later_micro_batch_s_head_weight_gradient() -> None:
    """Under a pipeline schedule too, a later micro-batch's head backward computes its weight
    gradient as a new tensor beside the accumulated one, the schedule's logits still held
    (traced: 2- and 4-layer cuts under 1F1B PP2, -2.7 .. -3.3% without it)."""
    from traced import traced_case

    scenario, traced = traced_case("llama-3.1-8b-4L_b1_s512_pure_flash_gas4_pp2")
    e = estimate(scenario)
    assert e.peak_moment == "backward.head_weight"
    assert e.peak_bytes == pytest.approx(traced["peak_bytes"], rel=1e-3)
