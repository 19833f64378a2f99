r"""KV cache of inference and RL rollouts: keys and values kept for every generated token.

\[
M_{KV} = L \cdot 2 \cdot k \cdot d \cdot s \cdot b \cdot B
\]

\(L\) layers, 2 for keys and values, \(k\) key-value heads (on one GPU: divided by tp,
at least one, since engines replicate a head rather than split it), \(d\) head_dim,
\(s\) tokens per sequence, \(b\) sequences, \(B\) bytes per element. Multi-head
latent attention (DeepSeek-V2/V3) caches one compressed latent and the shared rotary key per
token instead, replicated across tp ranks:

\[
M_{KV}^{MLA} = L \cdot (r_{kv} + d_{rope}) \cdot s \cdot b \cdot B
\]

(DeepSeek-AI (2024), "DeepSeek-V2", section 2.1.2, table 1: (d_c + d_h^R) l per token.)

A quantised cache (e.g. Hugging Face's `QuantizedCache`, vLLM's fp8 cache) stores `bits` per
element plus one scale (and zero point) per group of `group_size` elements, and may keep the
newest `residual_length` tokens unquantised. Assumed: every layer caches the full sequence
(sliding-window layers, as in Gemma 2, would keep only their window).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..architecture import Architecture
from ..errors import rule, shown
from ..operations import Cli, Operation, Request
from ..presets import UnknownPreset, resolve_model
from ._common import MAX_COUNT, MAX_SEQ, PlanError, bounded, gib

DEFAULT_DTYPE_BYTES = 2  # bf16 / fp16: what engines cache in unless told otherwise
KV_CACHE_DTYPES = {2: "bf16 / fp16", 1: "fp8", 4: "fp32"}  # bytes per element -> the dtypes


class KVQuant(BaseModel):
    """A quantised cache: `bits` per element, a scale (and zero point) per group."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    bits: Literal[2, 4, 8] = 8
    group_size: int = Field(default=64, ge=1, le=1 << 20, description="elements sharing one scale")
    scale_bytes: int = Field(default=2, ge=1, le=8, description="bytes of a scale (fp16: 2)")
    zero_point: bool = Field(default=True, description="asymmetric: a zero point per group too")
    residual_length: int = Field(default=0, ge=0, le=MAX_SEQ,
                                 description="newest tokens kept unquantised (HF default 128)")


def _arch(model: Architecture | str) -> Architecture:
    if isinstance(model, Architecture):
        return model
    try:
        return resolve_model(model).architecture()
    except UnknownPreset as exc:
        raise PlanError("model", str(exc)) from None


def check_tp(arch: Architecture, tp: int, field: str = "tp") -> None:
    """Engines split the heads over tp: tp divides the query heads, and the key/value heads
    are either split (tp divides them) or replicated (they divide tp), as vLLM requires.
    `field`: the request field that sets tp (named in the error)."""
    bounded(field, tp, 1, arch.num_attention_heads, integer=True)
    k = arch.kv_heads
    if arch.num_attention_heads % tp or (not arch.is_mla and k % tp and tp % k):
        raise PlanError(field, f"tp ({tp}) must divide num_attention_heads "
                        f"({arch.num_attention_heads}), and num_key_value_heads ({k}) must "
                        "divide tp or be divisible by it")


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
    bounded("batch", batch, 1, MAX_COUNT, integer=True)
    bounded("seq", seq, 1, MAX_SEQ, integer=True)
    if dtype_bytes not in KV_CACHE_DTYPES:
        raise PlanError("dtype_bytes", f"must be one of {', '.join(map(str, KV_CACHE_DTYPES))} "
                        f"({', '.join(KV_CACHE_DTYPES.values())}), got {shown(dtype_bytes)}")
    arch = _arch(model)
    check_tp(arch, tp)
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
        try:
            quant = KVQuant(bits=q.quant_bits, group_size=q.group_size,
                            residual_length=q.residual_length)
        except ValidationError as exc:
            err = exc.errors(include_url=False)[0]
            raise PlanError(str(err["loc"][0]), rule(err)) from None
    else:
        given = sorted({"group_size", "residual_length"} & q.model_fields_set)
        if given:
            raise PlanError(given[0], "describes a quantised cache: give quant_bits too")
    return kv_cache_bytes(q.model, q.batch, q.seq_len, q.dtype_bytes, quant=quant, tp=q.tp)


OPERATIONS: tuple[Operation[KVCacheRequest, int], ...] = (
    Operation("kv-cache", "KV cache bytes for inference or RL rollouts", KVCacheRequest,
              run=_kv_cache, text=lambda n, q: f"KV cache: {gib(n)} per GPU",
              data=lambda n, q: {"kv_cache_bytes": n}),
)

__all__ = ["DEFAULT_DTYPE_BYTES", "KV_CACHE_DTYPES", "KVCacheRequest", "KVQuant", "kv_cache_bytes",
           "kv_elements_per_token"]
