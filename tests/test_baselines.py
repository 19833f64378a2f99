"""The published formulas the accuracy page compares calc with (calc.baselines) get the
scenario's ZeRO stage, sequence parallelism and recomputation as their sources define them, and
are not compared where their sources model nothing of the kind."""

import pytest

from calc import estimate
from calc.baselines import BASELINES, eleuther_transformer_math, korthikanti

BASE = {"model": "llama-3.2-1b", "training": {"seq_len": 2048, "activation_checkpointing": "full"},
        "parallelism": {"dp": 8}}
OMITS = {b.name: b.omits for b in BASELINES}


def setup(training: dict | None = None, parallelism: dict | None = None):
    return estimate({**BASE, "training": {**BASE["training"], **(training or {})},
                     "parallelism": {**BASE["parallelism"], **(parallelism or {})}}).setup


def full_recompute_bytes(x) -> int:
    """Korthikanti et al., Table 2: with full recomputation each layer keeps its input, 2sbh."""
    return 2 * x.seq_len * x.b * x.arch.hidden_size * x.arch.num_hidden_layers


# Rajbhandari et al. (2020), section 3 / figure 1: bytes per parameter on each of N ranks,
# weights 2 + gradients 2 + optimizer 12, by stage.
ZERO_PAPER = {0: lambda n: 16, 1: lambda n: 4 + 12 / n, 2: lambda n: 2 + 14 / n, 3: lambda n: 16 / n}


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_korthikanti_states_are_sharded_as_the_zero_paper_defines_the_stages(zero: int) -> None:
    x = setup(parallelism={"zero": zero})
    expected = ZERO_PAPER[zero](8) * x.counts.total + full_recompute_bytes(x)
    assert korthikanti(x).bytes == pytest.approx(expected, abs=1)


def test_transformer_math_shards_weights_gradients_and_optimizer_at_zero3() -> None:
    x = setup(parallelism={"zero": 3})
    # bf16 AdamW: 2-byte weights and gradients, 12 bytes of optimizer (master copy included)
    expected = (2 + 2 + 12) * x.counts.total / 8 + full_recompute_bytes(x)
    assert eleuther_transformer_math(x).bytes == pytest.approx(expected, abs=1)


def test_sequence_parallel_uses_table2s_row_for_it() -> None:
    x = setup({"activation_checkpointing": "none"}, {"dp": 1, "tp": 2, "sequence_parallel": True})
    s, b, h, a, L = (x.seq_len, x.b, x.arch.hidden_size, x.arch.num_attention_heads,
                     x.arch.num_hidden_layers)
    acts = s * b * h * L * (34 + 5 * a * s / h) / 2
    assert korthikanti(x).bytes == pytest.approx(16 * x.counts.total / 2 + acts, abs=1)


def test_recomputation_lowers_every_formula_that_models_it() -> None:
    kept, recomputed = setup({"activation_checkpointing": "none"}), setup()
    for b in BASELINES:
        if b.omits(kept) is None and b.omits(recomputed) is None:
            assert b.predict(recomputed).bytes < b.predict(kept).bytes, b.name


@pytest.mark.parametrize(("training", "parallelism", "names"), [
    ({"finetuning": "lora"}, {}, {"korthikanti", "megatron", "eleuther"}),
    ({}, {"offload_optimizer": True, "zero": 3}, {"korthikanti", "megatron", "eleuther"}),
    ({}, {"zero": 3}, {"megatron"}),  # its distributed optimizer is ZeRO-1
    ({}, {}, {"megatron"}),  # full recomputation: it assumes selective
])
def test_a_formula_is_not_compared_where_its_source_models_nothing_of_the_kind(
        training: dict, parallelism: dict, names: set[str]) -> None:
    x = setup(training, parallelism)
    assert {name for name, omits in OMITS.items() if omits(x)} == names


def test_plain_mixed_precision_adam_with_zero1_is_compared_by_all_three() -> None:
    x = setup({"activation_checkpointing": "none"}, {"zero": 1})
    assert all(omits(x) is None for omits in OMITS.values())
