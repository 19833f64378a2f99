"""How far an estimate is backed by the validation set (`validation/`).

`validated` means the committed traced cases cover this model family and every feature the
scenario uses; otherwise `extrapolated`, listing what is not covered. The coverage below is
checked against `validation/cases.json` by `tests/test_validation.py`, so it cannot drift.
"""

from __future__ import annotations

from typing import Any

from .optimizers import OPTIMIZERS
from .params import count_params
from .scenario import Resolved

VALIDATED_FAMILIES = frozenset({"llama", "mistral", "qwen2", "qwen3", "gemma2", "phi3", "gpt2"})
VALIDATED_FEATURES: dict[str, frozenset[Any]] = {
    "training.precision": frozenset({"bf16", "fp32"}),
    "training.mixed_precision": frozenset({"pure", "amp", "master"}),
    "training.optimizer": frozenset(o.id for o in OPTIMIZERS.values() if o.traced),
    "training.activation_checkpointing": frozenset({"none", "full"}),
    "training.attention": frozenset({"flash", "eager"}),
    "training.loss": frozenset({"standard"}),
    "training.finetuning": frozenset({"full", "lora"}),
    "training.lora_targets": frozenset({"all_linear", "attention"}),
    "training.implementation": frozenset({"hf"}),
    "parallelism.tp": frozenset({1}),
    "parallelism.pp": frozenset({1}),
    "parallelism.cp": frozenset({1}),
    "parallelism.ep": frozenset({1}),
    "parallelism.zero": frozenset({0, 3}),
    "parallelism.offload_optimizer": frozenset({False}),
    "parallelism.offload_params": frozenset({False}),
    "parallelism.sequence_parallel": frozenset({False}),
}


# Families traced with one attention path only (transformers runs Gemma 2 with eager attention:
# its SDPA path rejects the attention soft-capping).
VALIDATED_ATTENTION: dict[str, frozenset[str]] = {"gemma2": frozenset({"eager"})}
# The largest model among the traced cases: beyond it the per-layer mechanisms are the same, but
# the evidence is not.
MAX_TRACED_PARAMS = 8_030_261_248


def confidence(r: Resolved) -> dict[str, Any]:
    missing: list[str] = []
    family = r.arch.model_type
    if family not in VALIDATED_FAMILIES:
        missing.append(f"model family {family!r} has no traced case")
    attention = r.scenario.training.attention
    if attention not in VALIDATED_ATTENTION.get(family, frozenset({attention})):
        missing.append(f"{family} is traced with {attention!r} attention in no case")
    size = count_params(r.arch).total
    if size > MAX_TRACED_PARAMS:
        missing.append(f"{size / 1e9:.1f}B parameters is beyond the largest traced model "
                       f"({MAX_TRACED_PARAMS / 1e9:.1f}B)")
    for path, allowed in VALIDATED_FEATURES.items():
        group, name = path.split(".")
        value = getattr(getattr(r.scenario, group), name)
        if value not in allowed:
            missing.append(f"{path} = {value!r} is not in the traced cases")
    p = r.scenario.parallelism
    if p.zero in (1, 2) or (p.zero == 3 and r.scenario.training.mixed_precision != "amp"):
        missing.append("only FSDP2 (zero 3 with amp) is traced among the sharded setups")
    return {
        "level": "extrapolated" if missing else "validated",
        "missing": missing,
        "basis": "traced PyTorch training steps (validation/), CPU fake tensors",
    }
