"""The formulas other calculators use, for the accuracy comparison (not for estimates).

Each returns a per-GPU peak in bytes, as its source computes it: model states plus activations
summed, no phases, no logits or loss buffers unless the source has them. ZeRO sharding, sequence
parallelism and recomputation are applied where the source defines how (the ZeRO paper's stages,
Korthikanti et al.'s Table 2 rows); what a source does not model at all (LoRA, offload, context
and expert parallelism, ...) makes the comparison unfair, and `Baseline.omits` says so, so the
accuracy page compares each formula only where it applies. Their symbols are the whole model's: S the sequence length, b the micro-batch, H the hidden size, n_h
the attention heads, I the MLP intermediate size, V the vocabulary, L the layers, P the
parameters, t = tp, p = pp.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .formula import Formula, Term
from .setup import Setup
from .sources import KORTHIKANTI, MEGATRON_THEORETICAL, TRANSFORMER_MATH

# Korthikanti et al. (2022), Table 2: activations of the L layers in bytes, by how they are
# recomputed and whether sequence parallelism splits the rest over t; the first pipeline stage
# keeps L / p layers. Transformer Math 101 quotes the same table.
ACTIVATIONS = {
    ("none", False): "S * b * H * L * (10 + 24 / t + 5 * n_h * S / (H * t))",
    ("none", True): "S * b * H * L * (34 + 5 * n_h * S / H) / t",
    ("selective", False): "S * b * H * L * (10 + 24 / t)",
    ("selective", True): "S * b * H * L * 34 / t",
    ("full", False): "2 * S * b * H * L",
}
_ARGS = {("none", False): "S, b, H, L, n_h", ("none", True): "S, b, H, L, n_h"}
_RECOMPUTE = {"none": "", "selective": " with selective recomputation",
              "full": " with full recomputation (each layer keeps its input)"}
# Model states with ZeRO as Rajbhandari et al. (2020) define the stages: the 16-bit weights
# sharded at stage 3, their gradients from stage 2, the optimizer's 12 bytes from stage 1 (N_k:
# the data-parallel ranks N where stage k is in effect, else 1); over tensor and pipeline ranks.
KORTHIKANTI_PEAK = {
    (ckpt, sp): Formula(
        "baseline/korthikanti",
        f"lambda P, N_1, N_2, N_3, t, p, {_ARGS.get((ckpt, sp), 'S, b, H, L')}: floor("
        f"2 * P / (N_3 * t * p) + 2 * P / (N_2 * t * p) + 12 * P / (N_1 * t * p) + {act} / p)",
        id=f"baseline.korthikanti_{ckpt}{'_sp' if sp else ''}", source=KORTHIKANTI,
        title="Korthikanti et al.'s activations plus 16 bytes per parameter, sharded by ZeRO"
              + _RECOMPUTE[ckpt] + (", sequence parallel" if sp else ""),
        note="mixed-precision Adam's 2 + 2 + 12 bytes per parameter, sharded as the ZeRO paper's "
             "stages (Rajbhandari et al. 2020); 16-bit activations, no flash attention, no "
             "logits")
    for (ckpt, sp), act in ACTIVATIONS.items()}
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
# Transformer Math 101's ZeRO section: stage 1 shards the optimizer, 2 also the gradients,
# 3 also the weights.
ELEUTHER_PEAK = {
    (ckpt, sp): Formula(
        "baseline/eleuther",
        f"lambda w_p, P, o_p, N_1, N_2, N_3, t, p, {_ARGS.get((ckpt, sp), 'S, b, H, L')}: "
        f"floor(w_p * P / (N_3 * t * p) + w_p * P / (N_2 * t * p) + o_p * P / (N_1 * t * p) + "
        f"{act} / p)",
        id=f"baseline.eleuther_{ckpt}{'_sp' if sp else ''}", source=TRANSFORMER_MATH,
        title="Transformer Math 101: weights, gradients, optimizer (sharded by ZeRO), "
              "activations" + _RECOMPUTE[ckpt] + (", sequence parallel" if sp else ""))
    for (ckpt, sp), act in ACTIVATIONS.items()}


def _dims(x: Setup) -> tuple[int, int, int, int, int, int]:
    a = x.arch
    return (x.seq_len, x.b, a.hidden_size, a.num_attention_heads, a.num_hidden_layers,
            x.counts.total)


def _shards(x: Setup) -> tuple[int, int, int]:
    """N_1, N_2, N_3: the ranks each ZeRO stage shards over where it is in effect, else 1."""
    return tuple(x.N if x.z >= k else 1 for k in (1, 2, 3))  # type: ignore[return-value]


def _activations(x: Setup) -> tuple[tuple[str, bool], tuple[int, ...]]:
    """The row of Korthikanti's Table 2 the scenario is, and its symbols' values."""
    s, b, h, a, L, _ = _dims(x)
    ckpt = "full" if x.full_checkpointing else "selective" if x.selective_attention else "none"
    key = (ckpt, x.sequence_parallel and x.tp > 1 and ckpt != "full")
    return key, (s, b, h, L, a) if ckpt == "none" else (s, b, h, L)


def korthikanti(x: Setup) -> Term:
    key, act = _activations(x)
    return KORTHIKANTI_PEAK[key](x.counts.total, *_shards(x), x.tp, x.pp, *act)


def megatron_theoretical(x: Setup) -> Term:
    s, b, h, _, L, P = _dims(x)
    f, V = x.arch.intermediate_size, x.arch.vocab_size
    formula = MEGATRON_PEAK[(x.zero >= 1, x.pp == 1)]
    rest = (P, x.tp, x.pp, s, b, h, f, L, *((V,) if x.pp == 1 else ()))
    return formula(*((x.N,) if x.zero >= 1 else ()), *rest)


def eleuther_transformer_math(x: Setup) -> Term:
    half = x.n.compute < 4  # 16-bit training: 2-byte weights and gradients, an fp32 master copy
    w_p = 2 if half else 4
    o_p = x.optimizer.paper_bytes_per_param - (0 if half else 4)  # no master copy in fp32
    key, act = _activations(x)
    return ELEUTHER_PEAK[key](w_p, x.counts.total, o_p, *_shards(x), x.tp, x.pp, *act)


def _beyond_all(x: Setup) -> str | None:
    """What none of the three sources models: a reason the comparison would not be fair."""
    if x.lora:
        return "LoRA / QLoRA (they count every parameter as trained)"
    if x.offload_optimizer or x.offload_params:
        return "CPU offload"
    if x.cp > 1 or x.ep > 1:
        return "context or expert parallelism"
    if x.selective_ops or x.recompute_layers or x.checkpoint_every:
        return "recomputation other than the paper's (per-op, or only some layers)"
    return None


def _korthikanti_omits(x: Setup) -> str | None:
    if not x.optimizer.id.startswith("adam") or x.n.compute == 4:
        return "training other than mixed-precision Adam (the bytes per parameter it counts)"
    return _beyond_all(x)


def _megatron_omits(x: Setup) -> str | None:
    if x.zero >= 2:
        return "ZeRO-2 and 3 (its distributed optimizer is ZeRO-1)"
    if x.full_checkpointing or (x.eager and not x.selective_attention):
        return "full recomputation, or attention scores kept (it assumes selective recomputation)"
    if x.tp > 1 and not x.sequence_parallel:
        return "tensor parallelism without sequence parallelism (it assumes both)"
    return _korthikanti_omits(x)


@dataclass(frozen=True, slots=True)
class Baseline:
    """A published formula, and which scenarios it can be fairly compared on: `omits` names
    what the scenario uses that the formula's source does not model (None: comparable)."""

    name: str
    source: str
    predict: Callable[[Setup], Term]
    omits: Callable[[Setup], str | None]


BASELINES: tuple[Baseline, ...] = (
    Baseline("korthikanti", "Korthikanti et al. 2022, Table 2 (+16 B/param, ZeRO-sharded as "
             "Rajbhandari et al. 2020)", korthikanti, _korthikanti_omits),
    Baseline("megatron", "Megatron-LM theoretical_memory_usage.py", megatron_theoretical,
             _megatron_omits),
    Baseline("eleuther", "EleutherAI, Transformer Math 101 (ZeRO stages as it defines them)",
             eleuther_transformer_math, _beyond_all),
)
