"""Which dtype each tensor has, per `precision` x `mixed_precision` x sharding.

Every memory term asks this module for byte widths instead of branching on modes itself.

- `pure`: weights, gradients and optimizer states in `precision` (`model.to(torch.bfloat16)`).
- `amp`: fp32 weights, gradients and states; matmuls under `torch.autocast`. Autocast casts each
  matmul input separately (casts of activations are not cached) and caches one low-precision
  copy of each weight for the whole forward; the copy is saved for backward.
- `master`: weights and gradients in `precision`, fp32 master weights + fp32 optimizer states.
- FSDP2 (`zero: 3` with `amp`) gathers parameters directly in `precision`
  (`MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`), so compute runs as in `pure`
  while the sharded parameters, gradients and states stay fp32.
- fp8 matmuls (Transformer Engine / torchao float8) keep bf16 weights and activations and save
  fp8 copies of matmul inputs: modelled as 1-byte linear inputs, 2-byte everything else.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True, slots=True, eq=False)  # memoised singletons: hashed by identity
class Numerics:
    compute: int  # activations produced by matmuls
    linear_input: int  # the copy of a matmul input saved for backward
    residual: int  # the residual stream between layers
    weight: int  # stored (sharded) parameters
    gathered_weight: int  # parameters as the matmul sees them (FSDP-gathered / autocast copy)
    grad: int  # stored gradients (what accumulates in .grad)
    state: int  # one optimizer-state element (Adam moment etc.)
    master: int  # fp32 master copy per parameter, 0 when none
    autocast: bool  # matmul inputs and weights cast per op under torch.autocast
    fsdp_mixed: bool  # FSDP2 gathers in low precision (no autocast weight copies)


@lru_cache(maxsize=64)
def numerics(precision: str, mixed_precision: str, fsdp: bool) -> Numerics:
    """Widths for `precision` x `mixed_precision`; `fsdp`: ZeRO stage 3 is asked for."""
    low = 2 if precision in ("bf16", "fp16", "fp8") else 4
    linear_in = 1 if precision == "fp8" else low
    if precision == "fp32":
        return Numerics(4, 4, 4, 4, 4, 4, 4, 0, autocast=False, fsdp_mixed=False)
    if mixed_precision == "pure":
        return Numerics(low, linear_in, low, low, low, low, low, 0, autocast=False,
                        fsdp_mixed=False)
    if mixed_precision == "master":
        return Numerics(low, linear_in, low, low, low, low, 4, 4, autocast=False,
                        fsdp_mixed=False)
    if fsdp:  # FSDP2 with a low-precision param_dtype: compute as pure, store fp32
        return Numerics(low, linear_in, low, 4, low, 4, 4, 0, autocast=False, fsdp_mixed=True)
    return Numerics(low, linear_in, 4, 4, low, 4, 4, 0, autocast=True, fsdp_mixed=False)
