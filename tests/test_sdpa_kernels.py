"""Which SDPA kernel a layer runs on GPUs before sm80, as the review of the GPU-dependent
kernel choice found it: a masked layer (sliding or padded) has K/V repeated by transformers
and runs the memory-efficient kernel, only unmasked layers with grouped heads run math."""

from __future__ import annotations

from calc import estimate
from calc.frameworks.common import hf_notes
from calc.scenario import parse_scenario, resolve

GiB = 2**30
T4 = {"gpu": "t4-16gb"}


def _gemma3(**training) -> dict:
    return {"model": "gemma-3-1b", **T4, "training": {"seq_len": 2048, "precision": "fp16",
                                                       **training}}


def test_gemma3_sliding_layers_are_not_math_on_a_t4() -> None:
    """Traced: gemma-3-1b_b1_s2048_amp-fp16_flash_t4, 25.530 GiB (read as math in every
    layer: +5.9%)."""
    e = estimate(_gemma3())
    assert e.setup.math_attention and e.setup.sliding_sdpa
    assert abs(e.peak_bytes / GiB - 25.530) / 25.530 < 0.001


def test_the_math_warning_is_not_given_for_a_padded_batch() -> None:
    codes = {w["code"] for w in estimate(
        {"model": "llama-3.2-1b", **T4,
         "training": {"precision": "fp16", "seq_len": 2048, "padded": True}}).warnings}
    assert "sdpa_math" not in codes
    codes = {w["code"] for w in estimate(
        {"model": "llama-3.2-1b", **T4, "training": {"precision": "fp16", "seq_len": 2048}}
    ).warnings}
    assert "sdpa_math" in codes


def test_recomputed_attention_keeps_no_math_probabilities() -> None:
    """Megatron-style attention recompute (selective, policy attention) frees the math
    kernel's fp32 probabilities as it frees eager attention's."""
    base = {"model": "llama-3.2-1b", **T4,
            "training": {"precision": "fp16", "seq_len": 2048, "finetuning": "lora"}}
    plain = estimate(base)
    recomputed = estimate({**base, "training": {**base["training"],
                                                "activation_checkpointing": "selective",
                                                "selective_policy": "attention"}})
    assert recomputed.components["activations"] < plain.components["activations"] - 4 * GiB


def test_the_export_names_the_attention_the_estimate_models() -> None:
    r = resolve(parse_scenario({"model": "llama-3.2-1b", **T4,
                                "training": {"precision": "fp16", "padded": True}}))
    assert any("attn_implementation='sdpa'" in n for n in hf_notes(r))
