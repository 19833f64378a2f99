"""Activation formulas against their published sources."""

from typing import Any

import pytest

from calc.activations import decoder_layer
from calc.architecture import Architecture
from calc.megatron import megatron_layer
from calc.scenario import parse_scenario, resolve
from calc.setup import Setup, setup

# GPT-3 style: 4h GeLU MLP, multi-head attention, dropout everywhere (Korthikanti et al.'s setup)
GPT = Architecture(model_type="gpt2", hidden_size=2048, num_hidden_layers=4,
                   num_attention_heads=16, intermediate_size=8192, vocab_size=50257,
                   max_position_embeddings=4096, attention_dropout=0.1, resid_pdrop=0.1)


def _setup(arch: Architecture, training: dict[str, Any], parallelism: dict[str, Any]) -> Setup:
    return setup(resolve(parse_scenario({"model": arch.model_dump(), "training": training,
                                         "parallelism": parallelism})))


def _megatron_layer_bytes(tp: int, sp: bool, s: int = 2048, b: int = 4) -> int:
    x = _setup(GPT, {"implementation": "megatron", "attention": "eager", "seq_len": s,
                     "micro_batch_size": b, "mixed_precision": "master"},
               {"tp": tp, "sequence_parallel": sp})
    return megatron_layer(x, x.counts.dense_layer).total


@pytest.mark.parametrize(("tp", "sp"), [(1, False), (2, False), (8, False), (8, True)])
def test_megatron_layer_matches_korthikanti_table2(tp: int, sp: bool) -> None:
    """Korthikanti et al. 2022, Table 2: sbh(10 + 24/t + 5as/(ht)); with SP sbh/t (34 + 5as/h)."""
    s, b, h, a = 2048, 4, GPT.hidden_size, GPT.num_attention_heads
    if sp:
        expected = s * b * h / tp * (34 + 5 * a * s / h)
    else:
        expected = s * b * h * (10 + 24 / tp + 5 * a * s / (h * tp))
    assert _megatron_layer_bytes(tp, sp) == pytest.approx(expected, rel=1e-9)


def test_flash_attention_removes_quadratic_term() -> None:
    arch = Architecture(hidden_size=1024, num_hidden_layers=2, num_attention_heads=8,
                        intermediate_size=2816, vocab_size=1000, max_position_embeddings=1 << 16)
    per_token, weights = [], []
    for s in (1024, 4096):
        x = _setup(arch, {"seq_len": s}, {})
        act = decoder_layer(x, x.counts.dense_layer)
        per_token.append(act.total / s)
        weights.append(sum(t.bytes for t in act.weight_copies))
    # only the (sequence-independent) weight copies differ in per-token terms
    assert per_token[0] > per_token[1]
    assert weights[0] == weights[1]
    assert per_token[0] - weights[0] / 1024 == pytest.approx(per_token[1] - weights[1] / 4096)
