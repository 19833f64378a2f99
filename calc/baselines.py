"""The formulas other calculators use, for the accuracy comparison (not for estimates).

Each returns a per-GPU peak in bytes for a scenario, as its source would compute it: model
states plus activations summed, no phases, no logits or loss buffers unless the source has them.
They ignore what they do not model (LoRA, eager attention details, ...), exactly as a user of
that formula would.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .params import count_params
from .scenario import Resolved


@dataclass(frozen=True, slots=True)
class Baseline:
    name: str
    source: str
    formula: str
    predict: Callable[[Resolved], int]


def _dims(r: Resolved) -> tuple[int, int, int, int, int, int]:
    a = r.arch
    t = r.training
    return (t.seq_len, t.micro_batch_size, a.hidden_size, a.num_attention_heads,
            a.num_hidden_layers, count_params(a).total)


def _half(r: Resolved) -> bool:
    return r.training.precision != "fp32"


def korthikanti(r: Resolved) -> int:
    """Activations sbhL(34 + 5as/h) (no recomputation; 2sbhL with full recomputation) plus
    16 bytes per parameter of mixed-precision Adam model states."""
    s, b, h, a, L, psi = _dims(r)
    t, p = r.training, r.parallelism
    act: float
    if t.activation_checkpointing == "full":
        act = 2 * s * b * h * L
    else:
        act = s * b * h * L * (10 + 24 / p.tp + 5 * a * s / (h * p.tp))
    return int(16 * psi / (p.tp * p.pp) + act / p.pp)


def megatron_theoretical(r: Resolved) -> int:
    """Megatron-LM `theoretical_memory_usage.py`: 18 bytes per parameter (6 + 12/dp with the
    distributed optimizer) and sbh(18 + 4 f/h) per layer (selective recomputation assumed),
    plus the embedding/output terms, divided by tp."""
    s, b, h, _, L, psi = _dims(r)
    p = r.parallelism
    f = r.arch.intermediate_size
    per_param = 6 + 12 / p.shard_group if p.zero >= 1 else 18
    act = s * b * h * (18 + 4 * f / h) * L
    act += 8 * s * b * p.pp + s * b * h * p.pp
    if p.pp == 1:
        act += s * b * h * 4 * (1 + r.arch.vocab_size / h)
    return int(per_param * psi / (p.tp * p.pp) + act / p.tp)


def eleuther_transformer_math(r: Resolved) -> int:
    """EleutherAI, "Transformer Math 101" (2023): model + gradients + optimizer + activations,
    activations sbhL(10 + 24/t + 5as/(ht)), 2sbhL with full recomputation."""
    s, b, h, a, L, psi = _dims(r)
    t, p = r.training, r.parallelism
    half = _half(r)
    model = (2 if half else 4) * psi
    grads = (2 if half else 4) * psi
    optimizer = {"adamw": 12, "adam": 12, "sgd_momentum": 8, "sgd": 4,
                 "adamw_8bit": 6, "adafactor": 4, "lion": 8}[t.optimizer]
    if not half:
        optimizer -= 4  # no fp32 master copy when training in fp32
    act: float
    if t.activation_checkpointing == "full":
        act = 2 * s * b * h * L
    else:
        act = s * b * h * L * (10 + 24 / p.tp + 5 * a * s / (h * p.tp))
    return int((model + grads + optimizer * psi) / (p.tp * p.pp) + act / p.pp)


BASELINES: tuple[Baseline, ...] = (
    Baseline("korthikanti", "Korthikanti et al. 2022, Table 2 (+16 B/param ZeRO model states)",
             r"sbhL\left(34 + 5\frac{as}{h}\right) + 16\Psi", korthikanti),
    Baseline("megatron", "Megatron-LM theoretical_memory_usage.py",
             r"18\Psi + sbhL\left(18 + 4\frac{f}{h}\right) + 4sbh\left(1 + \frac{V}{h}\right)",
             megatron_theoretical),
    Baseline("eleuther", "EleutherAI, Transformer Math 101",
             r"(2 + 2 + 12)\Psi + sbhL\left(10 + \frac{24}{t} + 5\frac{as}{ht}\right)",
             eleuther_transformer_math),
)
