"""Which SDPA kernel a layer runs on GPUs before sm80, as the review of the GPU-dependent
kernel choice found it: a masked layer (sliding or padded) has K/V repeated by transformers
and runs the memory-efficient kernel, only unmasked layers with grouped heads run math."""

from __future__ import annotations

import pytest

from calc import estimate
from calc.frameworks.common import hf_notes
from calc.scenario import parse_scenario, resolve
from calc.setup import Setup

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


def test_phi_3_and_mistral_slide_every_layer_from_their_window() -> None:
    """Mistral's and Phi-3's sliding_window makes transformers mask every layer with the
    window: from it on SDPA runs the memory-efficient kernel, each layer keeping the mask as a
    bias and its output needing no copy to transpose; below it the layers stay causal (flash).
    Phi-3 was read as causal (-1.06% under QLoRA; +0.39% in full, its output copy counted)."""
    from traced import traced_case

    phi = resolve(parse_scenario({"model": "phi-3-mini"})).arch
    assert (phi.sliding_window, len(phi.sliding_layers), phi.mask_kinds) == (2047, 32, 1)
    assert resolve(parse_scenario({"model": "mistral-7b"})).arch.sliding_layers == ()
    for case in ("phi-3-mini_b1_s2048_pure_flash", "phi-3-mini-4L_b1_s2048_amp_flash_qlora16attn"):
        scenario, traced = traced_case(case)
        assert estimate(scenario).peak_bytes == pytest.approx(traced["peak_bytes"], rel=0.002)
    at = {s: Setup(resolve(parse_scenario({"model": "phi-3-mini",
                                           "training": {"seq_len": s}}))).sliding_sdpa
          for s in (1024, 2048)}
    assert at == {1024: False, 2048: True}
