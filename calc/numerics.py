"""Which dtype each tensor has, per `precision` x `mixed_precision` x sharding.

Every memory term asks this module for byte widths instead of branching on modes itself.

- `pure`: weights, gradients and optimizer states in `precision` (`model.to(torch.bfloat16)`).
- `amp`: fp32 weights, gradients and states; matmuls under `torch.autocast`. Autocast casts each
  matmul input separately (casts of activations are not cached) and caches one low-precision
  copy of each weight for the whole forward; the copy is saved for backward.
- `master`: weights and gradients in `precision`, fp32 master weights + fp32 optimizer states.
- `autocast`: weights, gradients and states in `precision` (a model loaded in bf16), matmuls and
  the rest under `torch.autocast` (Trainer(bf16=True)): no weight copies, since the weights are
  already low-precision, but autocast's fp32 ops (layer norm, softmax) and its casts of fp32
  tensors (LoRA's fp32 adapters) as in `amp`. LoRA and QLoRA default to it.
- DeepSpeed's ZeRO-1/2 optimizer (`framework: deepspeed`) clones its partition of the parameters
  into fp32 whatever their dtype (stage_1_and_2.py, `single_partition_of_fp32_groups`): with
  `amp` (its `torch_autocast`) or fp32 the parameters stay fp32 and the clone is a second copy.
- FSDP2 (`zero: 2` or `3` with `amp`) gathers parameters directly in `precision`
  (`MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`), so compute runs as in `pure`
  while the sharded parameters, gradients and states stay fp32.
- fp8 matmuls (Transformer Engine / torchao float8) keep bf16 weights and activations and save
  fp8 copies of matmul inputs: modelled as 1-byte linear inputs, 2-byte everything else.
- LoRA adapters: peft keeps them fp32 (`autocast_adapter_dtype`), except under DeepSpeed's
  bf16/fp16 mode, whose engine casts every parameter to that dtype (engine.py,
  `_cast_module_mixed_precision`) and keeps the fp32 masters of the trainable ones.
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
    autocast: bool  # the forward runs under torch.autocast (fp32 norms, casts per op)
    fsdp_mixed: bool  # FSDP2 gathers in low precision (MixedPrecisionPolicy)
    weight_copies: bool  # autocast caches a low-precision copy of each fp32 weight
    adapter: int = 4  # a LoRA adapter's parameters and gradients (peft's fp32)

    def fsdp_grads(self, g: int) -> tuple[int, int]:
        """(g_u, g_r) for gradients of `g` bytes under FSDP: autograd's unsharded gradients come
        in the gathered dtype under a mixed-precision policy, else in their own; the
        reduce-scatter runs in fp32 under the policy (reduce_dtype), else in their own."""
        return (self.gathered_weight, 4) if self.fsdp_mixed else (g, g)

    @property
    def adapter_compute(self) -> int:
        """Bytes of what an adapter computes: its own dtype, or autocast's, or the one FSDP2
        gathers it in (peft casts the adapter's input to lora_A's weight dtype)."""
        return self.compute if self.autocast or self.fsdp_mixed else self.adapter

    @property
    def adapter_copies(self) -> bool:
        """Autocast caches a copy of each fp32 LoRA adapter, unless FSDP2 gathers them low."""
        return self.autocast and not self.fsdp_mixed

    @property
    def autocast_ops(self) -> bool:
        """The forward runs under autocast, whose fp32 ops (softmax, layer_norm, pow) compute
        in fp32: torch's amp, and FSDP2's mixed precision, which Accelerate wraps in autocast
        too (traced: GPT-2 under FSDP2's amp, random run 784/4, -11.2% without it)."""
        return self.autocast or self.fsdp_mixed

    @property
    def casts_weights(self) -> bool:
        """Autocast casts fp32 weights for its matmuls: into its cache (`weight_copies`), or
        inside DeepSpeed's ZeRO-3 linear, which caches none."""
        return self.autocast and self.weight != self.compute


@lru_cache(maxsize=64)
def numerics(precision: str, mixed_precision: str, fsdp: bool, clone: bool = False,
             engine_cast: bool = False, zero3_linear: bool = False) -> Numerics:
    """Widths for `precision` x `mixed_precision`; `fsdp`: FSDP2 at ZeRO stage 2 or 3 (the
    parameters are gathered in the compute dtype); `clone`: DeepSpeed's ZeRO optimizer keeps
    an fp32 copy of its partition beside fp32 parameters (amp or fp32); `engine_cast`:
    DeepSpeed's engine casts every parameter to `precision`, LoRA's adapters included;
    `zero3_linear`: DeepSpeed's stage 3, whose linear casts inside autocast, so no weight copy
    is cached and the fp32 parameters are what is gathered (communicated in `precision`)."""
    low = 2 if precision in ("bf16", "fp16", "fp8") else 4
    linear_in = 1 if precision == "fp8" else low
    copy = 4 if clone else 0
    if precision == "fp32":
        return Numerics(4, 4, 4, 4, 4, 4, 4, copy, False, False, False)
    if mixed_precision == "pure":
        return Numerics(low, linear_in, low, low, low, low, low, 0, False, False, False)
    if mixed_precision == "master":
        return Numerics(low, linear_in, low, low, low, low, 4, 4, False, False, False,
                        low if engine_cast else 4)
    if mixed_precision == "autocast":  # low-precision weights, the forward under autocast
        return Numerics(low, linear_in, low, low, low, low, low, 0, True, fsdp, False)
    if fsdp:  # FSDP2 with a low-precision param_dtype: compute as pure, store fp32
        return Numerics(low, linear_in, low, 4, low, 4, 4, 0, False, True, False)
    if zero3_linear:  # DeepSpeed's ZeRO-3 linear casts inside: autocast caches no copy of
        # the weight it casts there (its input kept as given: `Setup.frozen_linear_inputs`)
        return Numerics(low, linear_in, 4, 4, 4, 4, 4, copy, True, False, False)
    return Numerics(low, linear_in, 4, 4, low, 4, 4, copy, True, False, True)


def numerics_for(precision: str, mixed_precision: str, zero: int, deepspeed: bool) -> Numerics:
    """The widths of a layout: FSDP2 gathers low at stages 2-3 under torch; DeepSpeed's ZeRO
    (stages 1-3) clones fp32 parameters' partition for its optimizer (master weights have
    theirs already)."""
    return numerics(precision, mixed_precision, zero >= 2 and not deepspeed,
                    clone=deepspeed and zero >= 1 and mixed_precision != "master",
                    engine_cast=deepspeed, zero3_linear=deepspeed and zero == 3)
