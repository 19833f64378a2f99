"""Which combinations of settings the traced cases cover, two at a time.

Each setting on its own being traced (`confidence.VALIDATED_FEATURES`) does not make a
combination traced: random combinations of traced settings (`validation/fuzz.py`), traced
against the estimate, missed by 5-30% where two of them met in no case (QLoRA over an fp32
base under amp, the zero-bubble schedule over MoE layers, LoRA dropout with checkpointing every
other layer). An estimate is `validated` only where every pair of the scenario's settings (its
`dimensions`) occurs together in some traced case within 3%. `COVERED` is generated from the
traced cases by `validation/accuracy.py --write` (`covered_pairs`) into
`calc/coverage_data.py`; a test keeps the two in step.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import combinations

from .coverage_data import COVERED
from .optimizers import OPTIMIZERS
from .scenario import Resolved

# The settings compared, in order; each a short label of what the scenario does.
DIMENSIONS = ("family", "layers", "finetuning", "mixed_precision", "precision", "optimizer",
              "checkpointing", "attention", "loss", "batches", "accumulation", "data_parallel",
              "model_parallel", "layout")
# The model family pairs with what its modules change: which projections LoRA and QLoRA
# wrap, what data and model parallelism together gather and shard as units (`layout`:
# DeepSeek-V3's dense first layers and MLA under FSDP2 without EP missed by 8-25%, traced
# only with EP, while Mixtral's and Qwen3-MoE's were exact), and its attention path. The
# layout pairs with nothing else (its two halves do).
FAMILY_PAIRS = ("finetuning", "attention", "layout")


def dimensions(r: Resolved) -> dict[str, str]:
    """The scenario's settings as the pairs compare them (`DIMENSIONS`)."""
    t, p = r.training, r.parallelism
    finetuning: str = t.finetuning
    if finetuning != "full" and t.lora_dropout > 0:
        finetuning += "+dropout"
    checkpointing: str = t.activation_checkpointing
    if checkpointing == "selective":
        checkpointing += f":{t.policy}"
    elif checkpointing == "full" and (t.checkpoint_every or t.recompute_layers):
        checkpointing += ":partial"
    deepspeed = p.engine(t.mixed_precision) == "deepspeed"
    engine = "deepspeed-" if deepspeed else ""
    if p.shard_group == 1:
        # ZeRO on one rank shards nothing; a wrapper's buffers stay, unlike on many ranks
        zero = p.zero_in_effect(t)
        data = f"{engine}zero{zero}:one-rank" if zero else "single"
    elif p.zero == 0:
        data = engine + "ddp"
    else:
        data = f"{engine}zero{p.zero}"
    if p.offload_params:
        data += "+offload-params"
    elif p.offload_optimizer:
        data += "+offload-optimizer"
    parallel = [name for name, n in (("tp", p.tp), ("cp", p.cp), ("pp", p.pp), ("ep", p.ep))
                if n > 1]
    if p.pp > 1:  # the schedule decides what a stage holds
        parallel[parallel.index("pp")] = f"pp:{p.pipeline_schedule}"
    if p.sequence_parallel and p.tp > 1:
        parallel[0] = "tp+sp"
    model_parallel = "+".join(parallel) or "none"
    return {
        "family": r.arch.model_type,
        "layers": "moe" if r.arch.is_moe else "dense",
        "finetuning": finetuning,
        "mixed_precision": t.mixed_precision,
        "precision": t.precision,
        "optimizer": f"{t.optimizer}:{t.optimizer_impl}"  # (where the choice means something)
        if OPTIMIZERS[t.optimizer].implementations else t.optimizer,
        "checkpointing": checkpointing,
        "attention": t.attention,
        "loss": t.loss,
        "batches": "padded" if t.padded else "unpadded",
        "accumulation": "accumulating" if t.gradient_accumulation_steps > 1 else "one",
        "data_parallel": data,
        "model_parallel": model_parallel,
        "layout": f"{data}/{model_parallel}",
    }


def pairs(dims: dict[str, str]) -> Iterable[tuple[str, str, str, str]]:
    """Every pair of the settings, as (dimension, value, dimension, value) in `DIMENSIONS`'
    order."""
    for a, b in _DIMENSION_PAIRS:
        yield a, dims[a], b, dims[b]


def uncovered(r: Resolved) -> list[str]:
    """The pairs of the scenario's settings no traced case has together, described."""
    dims = dimensions(r)
    return [f"{a} {dims[a]!r} with {b} {dims[b]!r}" for a, b in _DIMENSION_PAIRS
            if (a, dims[a], b, dims[b]) not in COVERED]


_DIMENSION_PAIRS = tuple((a, b) for a, b in combinations(DIMENSIONS, 2)
                         if (b in FAMILY_PAIRS if a == "family" else b != "layout"))


def covered_pairs(resolved: Iterable[Resolved]) -> frozenset[tuple[str, str, str, str]]:
    """The pairs the traced cases cover (`validation/accuracy.py --write` writes them)."""
    return frozenset(pair for r in resolved for pair in pairs(dimensions(r)))
