r"""KV cache of inference and RL rollouts: keys and values kept for every generated token.

.. math::

    M_{KV} = L \cdot 2 \cdot k \cdot d \cdot s \cdot b \cdot B

:math:`L` layers, 2 for keys and values, :math:`k` key-value heads (on one GPU: divided by tp,
at least one, since engines replicate a head rather than split it), :math:`d` head_dim,
:math:`s` tokens per sequence, :math:`b` sequences, :math:`B` bytes per element. Multi-head
latent attention (DeepSeek-V2/V3) caches one compressed latent and the shared rotary key per
token instead, replicated across tp ranks:

.. math::

    M_{KV}^{MLA} = L \cdot (r_{kv} + d_{rope}) \cdot s \cdot b \cdot B

(DeepSeek-AI (2024), "DeepSeek-V2", section 2.1.2, table 1: (d_c + d_h^R) l per token.)

A quantised cache (e.g. Hugging Face's `QuantizedCache`, vLLM's fp8 cache) stores `bits` per
element plus one scale (and zero point) per group of `group_size` elements, and may keep the
newest `residual_length` tokens unquantised. Assumed: every layer caches the full sequence
(sliding-window layers, as in Gemma 2, would keep only their window).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..architecture import Architecture
from ..operations import Cli, Operation, Request
from ..presets import UnknownPreset, resolve_model
from ._common import PlanError, gib

DEFAULT_DTYPE_BYTES = 2  # bf16 / fp16: what engines cache in unless told otherwise
KV_CACHE_DTYPES = {2: "bf16 / fp16", 1: "fp8", 4: "fp32"}  # bytes per element -> the dtypes


class KVQuant(BaseModel):
    """A quantised cache: `bits` per element, a scale (and zero point) per group."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bits: Literal[2, 4, 8] = 8
    group_size: int = Field(default=64, ge=1, description="elements sharing one scale")
    scale_bytes: int = Field(default=2, ge=1, description="bytes of a scale (fp16: 2)")
    zero_point: bool = Field(default=True, description="asymmetric: a zero point per group too")
    residual_length: int = Field(default=0, ge=0,
                                 description="newest tokens kept unquantised (HF default 128)")


def _arch(model: Architecture | str) -> Architecture:
    if isinstance(model, Architecture):
        return model
    try:
        return resolve_model(model).architecture()
    except UnknownPreset as exc:
        raise PlanError("model", str(exc)) from None


def kv_elements_per_token(arch: Architecture, tp: int = 1) -> int:
    """Cached elements per token and sequence, over all layers, on one GPU."""
    L = arch.num_hidden_layers
    if arch.is_mla:
        return L * ((arch.kv_lora_rank or 0) + (arch.qk_rope_head_dim or 0))
    k, d = -(-arch.kv_heads // tp), arch.head_size
    return L * 2 * k * d


def kv_cache_bytes(
    model: Architecture | str, batch: int, seq: int, dtype_bytes: int = DEFAULT_DTYPE_BYTES, *,
    quant: KVQuant | None = None, tp: int = 1,
) -> int:
    """Bytes of the KV cache for `batch` sequences of `seq` tokens, on one of `tp` GPUs.

        >>> kv_cache_bytes("llama-3-8b", batch=1, seq=8192)  # 32 x 2 x 8 x 128 x 8192 x 2
        1073741824
    """
    for name, value in (("batch", batch), ("seq", seq), ("dtype_bytes", dtype_bytes),
                        ("tp", tp)):
        if value < 1:
            raise PlanError(name, f"must be at least 1, got {value}")
    arch = _arch(model)
    per_token = kv_elements_per_token(arch, tp)
    if quant is None:
        return per_token * seq * batch * dtype_bytes
    full = min(quant.residual_length, seq)
    quantised = per_token * (seq - full) * batch
    groups = -(-quantised // quant.group_size)
    meta = groups * quant.scale_bytes * (2 if quant.zero_point else 1)
    return -(-quantised * quant.bits // 8) + meta + per_token * full * batch * dtype_bytes


# ---------------------------------------------------------------------------------------------
# The operation: calc kv-cache
# ---------------------------------------------------------------------------------------------

_QUANT = KVQuant.model_fields


class KVCacheRequest(Request):
    model: Annotated[str, Cli(argument="model")] = Field(description="model preset id")
    batch: int = Field(1, description="sequences")
    seq_len: int = Field(description="tokens per sequence")
    dtype_bytes: int = Field(DEFAULT_DTYPE_BYTES, description="bytes per element (bf16: 2)")
    tp: int = Field(1, description="tensor-parallel GPUs sharing the heads")
    quant_bits: Literal[2, 4, 8] | None = Field(None, description="a quantised cache: bits per "
                                                "element (default: not quantised)")
    group_size: int = Field(_QUANT["group_size"].default, description="quantised: elements "
                            "sharing one scale")
    residual_length: int = Field(_QUANT["residual_length"].default, description="quantised: "
                                 "newest tokens kept unquantised")


def _kv_cache(q: KVCacheRequest) -> int:
    quant = None
    if q.quant_bits:
        quant = KVQuant(bits=q.quant_bits, group_size=q.group_size,
                        residual_length=q.residual_length)
    return kv_cache_bytes(q.model, q.batch, q.seq_len, q.dtype_bytes, quant=quant, tp=q.tp)


OPERATIONS: tuple[Operation[KVCacheRequest, int], ...] = (
    Operation("kv-cache", "KV cache bytes for inference or RL rollouts", KVCacheRequest,
              run=_kv_cache, text=lambda n, q: f"KV cache: {gib(n)} per GPU",
              data=lambda n, q: {"kv_cache_bytes": n}),
)

__all__ = ["DEFAULT_DTYPE_BYTES", "KV_CACHE_DTYPES", "KVCacheRequest", "KVQuant", "kv_cache_bytes",
           "kv_elements_per_token"]
