"""Activation formulas against their published sources."""

import pytest

from calc.activations import decoder_layer, shape
from calc.architecture import Architecture
from calc.numerics import numerics
from calc.params import count_params
from calc.scenario import Parallelism, Training

# GPT-3 style: 4h GeLU MLP, multi-head attention, dropout everywhere (Korthikanti et al.'s setup)
GPT = Architecture(model_type="gpt2", hidden_size=2048, num_hidden_layers=4,
                   num_attention_heads=16, intermediate_size=8192, vocab_size=50257,
                   max_position_embeddings=4096, attention_dropout=0.1, resid_pdrop=0.1)


def _megatron_layer_bytes(tp: int, sp: bool, s: int = 2048, b: int = 4) -> int:
    t = Training(implementation="megatron", attention="eager", seq_len=s, micro_batch_size=b,
                 mixed_precision="master")
    p = Parallelism(tp=tp, sequence_parallel=sp)
    layer = count_params(GPT).dense_layer
    return decoder_layer(GPT, layer, numerics(t, p), t, p, shape(GPT, t, p),
                         trainable_weights=True).total


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
    layer = count_params(arch).dense_layer
    per_token = []
    for s in (1024, 4096):
        t = Training(seq_len=s)
        p = Parallelism()
        per_token.append(decoder_layer(arch, layer, numerics(t, p), t, p, shape(arch, t, p),
                                       trainable_weights=True).total / s)
    # only the (sequence-independent) weight copies differ in per-token terms
    assert per_token[0] > per_token[1]
    t = Training(seq_len=1024)
    p = Parallelism()
    weights = decoder_layer(arch, layer, numerics(t, p), t, p, shape(arch, t, p),
                            trainable_weights=True).saved["activations/weight_copies"]
    assert per_token[0] - weights / 1024 == pytest.approx(per_token[1] - weights / 4096)
