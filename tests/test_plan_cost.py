"""Time and cost: the FLOP count of the documented formula, hand-checked for Llama-3-8B."""

import math

import pytest
from pydantic import ValidationError

from calc import GpuPrice, gpus, models
from calc.plan import PlanError, training_cost
from calc.plan.cost import attention_forward_flops, matmul_weights

# Llama-3-8B per layer: q, o 4096 x 4096; k, v 4096 x 1024; gate, up, down 4096 x 14336.
LAYER = 2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336  # 218,103,808
HEAD = 4096 * 128256  # untied output head
ATTN_FWD_8K = 2 * 32 * 32 * (128 + 128) * 8192  # 2 L H (d_qk + d_v) T at T = 8192
LLAMA_8K = {"model": "llama-3-8b", "training": {"seq_len": 8192}, "parallelism": {"dp": 8}}


def test_llama3_8b_matmul_weights_by_hand() -> None:
    arch = models()["llama-3-8b"].architecture()
    assert matmul_weights(arch) == (32 * LAYER, HEAD) == (6_979_321_856, 525_336_576)
    assert attention_forward_flops(arch, 8192) == ATTN_FWD_8K


def test_full_training_is_6n_plus_palm_attention() -> None:
    """PaLM appendix B: 6N + 12 L H Q T per token."""
    c = training_cost(LLAMA_8K, tokens=10**9)
    f = c.flops_per_token
    assert f.matmul == 6 * (32 * LAYER + HEAD)
    assert f.attention == 12 * 32 * 32 * 128 * 8192
    assert f.recompute == 0 and f.executed == f.model


def test_step_time_tokens_and_money_follow_the_formula() -> None:
    c = training_cost(LLAMA_8K, tokens=10**9, mfu=0.5, price_per_gpu_hour=2.0)
    tokens_per_step = 1 * 1 * 8 * 8192
    step = c.flops_per_token.executed * tokens_per_step / (8 * 989.4e12 * 0.5)
    assert c.tokens_per_step == tokens_per_step
    assert c.step_seconds == pytest.approx(step)
    assert c.tokens_per_second == pytest.approx(tokens_per_step / step)
    assert c.steps == math.ceil(10**9 / tokens_per_step)
    assert c.gpu_hours == pytest.approx(c.steps * step / 3600 * 8)
    assert c.cost_usd == pytest.approx(c.gpu_hours * 2.0)
    assert c.price_source == "given"


def test_full_checkpointing_adds_one_forward_of_the_layers() -> None:
    base = training_cost(LLAMA_8K, tokens=10**9).flops_per_token
    ckpt = training_cost({**LLAMA_8K, "training": {"seq_len": 8192,
                                                   "activation_checkpointing": "full"}},
                         tokens=10**9)
    assert ckpt.flops_per_token.recompute == 2 * 32 * LAYER + ATTN_FWD_8K
    assert ckpt.flops_per_token.model == base.model
    assert ckpt.model_flops_utilization == pytest.approx(0.4 * base.model / (
        base.model + 2 * 32 * LAYER + ATTN_FWD_8K))


def test_lora_frozen_base_costs_4n_plus_6_adapters() -> None:
    c = training_cost({"model": "llama-3-8b", "training": {"seq_len": 8192, "finetuning": "lora"}},
                      tokens=10**6)
    adapters = c.flops_per_token.matmul - 4 * (32 * LAYER + HEAD)
    assert adapters > 0 and adapters % 6 == 0


def test_default_price_is_a_labelled_list_price() -> None:
    c = training_cost(LLAMA_8K, tokens=10**9)
    price = gpus()["h100-sxm-80gb"].price
    assert price is not None and c.price_per_gpu_hour == price.usd_per_gpu_hour
    assert c.price_source and "unverified" in c.price_source
    none = training_cost({**LLAMA_8K, "gpu": "mi300x-192gb"}, tokens=10**9)
    assert none.cost_usd is None and any("no default price" in n for n in none.notes)


def test_every_price_names_its_offer_a_source_and_a_month() -> None:
    priced = {g.id: g.price for g in gpus().values() if g.price is not None}
    assert len(priced) >= 10  # the list prices the presets carried when they moved there
    for price in priced.values():
        assert price.usd_per_gpu_hour > 0 and price.source.startswith("https://") and price.as_of
        assert price.offer


@pytest.mark.parametrize("bad", [{"usd_per_gpu_hour": 0}, {"usd_per_gpu_hour": float("inf")},
                                 {"usd_per_gpu_hour": float("nan")}, {"as_of": "2025-1"},
                                 {"as_of": "2025-13"}, {"source": "lambda.ai"}, {"currency": "EUR"}])
def test_a_price_is_finite_positive_sourced_and_dated(bad) -> None:
    good = {"usd_per_gpu_hour": 2.0, "offer": "1x H100", "source": "https://example.com/p",
            "as_of": "2025-01", "verified": False}
    GpuPrice.model_validate(good)
    with pytest.raises(ValidationError):
        GpuPrice.model_validate({**good, **bad})


def test_a_gpu_without_a_price_says_why() -> None:
    for g in gpus().values():
        assert g.price is not None or "No `price`" in g.verification_note, g.id


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"tokens": 0}, "tokens"), ({"tokens": 10, "mfu": 0}, "mfu"),
    ({"tokens": 10, "mfu": 1.2}, "mfu"), ({"tokens": 10, "price_per_gpu_hour": -1},
                                          "price_per_gpu_hour"),
])
def test_bad_inputs_name_the_field(kwargs, field) -> None:
    with pytest.raises(PlanError) as exc:
        training_cost(LLAMA_8K, **kwargs)
    assert exc.value.field == field
