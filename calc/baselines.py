"""The formulas other calculators use, for the accuracy comparison (not for estimates).

Each returns a per-GPU peak in bytes, as its source computes it: model states plus activations
summed, no phases, no logits or loss buffers unless the source has them. They ignore what they do
not model (LoRA, eager attention details, ...), exactly as a user of that formula would. Their
symbols are the whole model's: S the sequence length, b the micro-batch, H the hidden size, n_h
the attention heads, I the MLP intermediate size, V the vocabulary, L the layers, P the
parameters, t = tp, p = pp.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .formula import Formula, Term
from .setup import Setup
from .sources import KORTHIKANTI, MEGATRON_THEORETICAL, TRANSFORMER_MATH

_ACT = "S * b * H * L * (10 + 24 / t + 5 * n_h * S / (H * t))"  # Table 2, with tensor parallelism
KORTHIKANTI_PEAK = Formula(
    "baseline/korthikanti",
    f"lambda P, t, p, S, b, H, L, n_h: floor(16 * P / (t * p) + {_ACT} / p)",
    id="baseline.korthikanti", source=KORTHIKANTI,
    title="Korthikanti et al.'s activations plus 16 bytes per parameter",
    note="mixed-precision Adam's 16 bytes per parameter (Rajbhandari et al. 2020); 16-bit "
         "activations, no flash attention, no ZeRO, no logits")
KORTHIKANTI_PEAK_RECOMPUTE = Formula(
    "baseline/korthikanti", "lambda P, t, p, S, b, H, L: floor(16 * P / (t * p) + "
    "2 * S * b * H * L / p)", id="baseline.korthikanti_recompute", source=KORTHIKANTI,
    title="Korthikanti et al. with full recomputation (each layer keeps its input)")
_MEGATRON_ACT = "(S * b * H * (18 + 4 * I / H) * L + (8 * S * b * p + S * b * H * p))"
MEGATRON_PEAK = {
    (distributed, first): Formula(
        "baseline/megatron",
        f"lambda {'N, ' if distributed else ''}P, t, p, S, b, H, I, L{', V' if first else ''}: "
        f"floor({'(6 + 12 / N)' if distributed else '18'} * P / (t * p) + "
        f"({_MEGATRON_ACT}{' + S * b * H * 4 * (1 + V / H)' if first else ''}) / t)",
        id=f"baseline.megatron{'_distributed' if distributed else ''}{'_pp1' if first else ''}",
        source=MEGATRON_THEORETICAL,
        title="Megatron-LM's theoretical memory" + (" (distributed optimizer)" if distributed
                                                    else ""),
        note="18 bytes per parameter, 6 + 12 / N with the distributed optimizer; sbh(18 + 4I/h) "
             "per layer (selective recomputation assumed); the output layer's terms without pp")
    for distributed in (False, True) for first in (False, True)}
ELEUTHER_PEAK = Formula(
    "baseline/eleuther",
    f"lambda w_p, P, o_p, t, p, S, b, H, L, n_h: floor((w_p * P + w_p * P + o_p * P) / (t * p) + "
    f"{_ACT} / p)", id="baseline.eleuther", source=TRANSFORMER_MATH,
    title="EleutherAI's Transformer Math 101: weights, gradients, optimizer, activations")
ELEUTHER_PEAK_RECOMPUTE = Formula(
    "baseline/eleuther", "lambda w_p, P, o_p, t, p, S, b, H, L: floor((w_p * P + w_p * P + "
    "o_p * P) / (t * p) + 2 * S * b * H * L / p)", id="baseline.eleuther_recompute",
    source=TRANSFORMER_MATH, title="Transformer Math 101 with full recomputation")


def _dims(x: Setup) -> tuple[int, int, int, int, int, int]:
    a = x.arch
    return (x.seq_len, x.b, a.hidden_size, a.num_attention_heads, a.num_hidden_layers,
            x.counts.total)


def korthikanti(x: Setup) -> Term:
    s, b, h, a, L, P = _dims(x)
    if x.full_checkpointing:
        return KORTHIKANTI_PEAK_RECOMPUTE(P, x.tp, x.pp, s, b, h, L)
    return KORTHIKANTI_PEAK(P, x.tp, x.pp, s, b, h, L, a)


def megatron_theoretical(x: Setup) -> Term:
    s, b, h, _, L, P = _dims(x)
    f, V = x.arch.intermediate_size, x.arch.vocab_size
    formula = MEGATRON_PEAK[(x.zero >= 1, x.pp == 1)]
    rest = (P, x.tp, x.pp, s, b, h, f, L, *((V,) if x.pp == 1 else ()))
    return formula(*((x.N,) if x.zero >= 1 else ()), *rest)


def eleuther_transformer_math(x: Setup) -> Term:
    s, b, h, a, L, P = _dims(x)
    half = x.n.compute < 4  # 16-bit training: 2-byte weights and gradients, an fp32 master copy
    w_p = 2 if half else 4
    o_p = x.optimizer.paper_bytes_per_param - (0 if half else 4)  # no master copy in fp32
    if x.full_checkpointing:
        return ELEUTHER_PEAK_RECOMPUTE(w_p, P, o_p, x.tp, x.pp, s, b, h, L)
    return ELEUTHER_PEAK(w_p, P, o_p, x.tp, x.pp, s, b, h, L, a)


@dataclass(frozen=True, slots=True)
class Baseline:
    name: str
    source: str
    predict: Callable[[Setup], Term]


BASELINES: tuple[Baseline, ...] = (
    Baseline("korthikanti", "Korthikanti et al. 2022, Table 2 (+16 B/param ZeRO model states)",
             korthikanti),
    Baseline("megatron", "Megatron-LM theoretical_memory_usage.py", megatron_theoretical),
    Baseline("eleuther", "EleutherAI, Transformer Math 101", eleuther_transformer_math),
)
