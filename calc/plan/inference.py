r"""Serving (inference) memory: what an engine like vLLM holds on each GPU, and how many
sequences of a context length its KV cache takes at once.

vLLM's startup arithmetic (``vllm/v1/worker/gpu_worker.py``, ``determine_available_memory``,
and ``vllm/v1/core/kv_cache_utils.py``), which this module follows:

\[
M_{KV} = u \cdot M_{GPU} - W - A - O, \qquad
T_{KV} = \left\lfloor \frac{M_{KV}}{B \cdot m_{tok}} \right\rfloor B, \qquad
n = \min\left(\left\lfloor T_{KV} / s \right\rfloor, n_{max}\right)
\]

- \(u\): `gpu_memory_utilization` (vLLM's default 0.9), of the GPU's total memory
  \(M_{GPU}\) (the preset's `usable_bytes`, what ``torch.cuda.mem_get_info`` reports);
- \(W\): the weights on one GPU, \(\lceil N b_w / t \rceil\) (\(N\) parameters,
  \(b_w\) bytes per weight, tensor parallelism \(t\); vLLM shards every linear and the
  vocabulary over tp; norms are replicated, a rounding error). 4- and 8-bit weights are counted
  at their bits, without the quantisation scales (about 1-3% more);
- \(A\): the activation peak of vLLM's profiling forward pass over
  `max_num_batched_tokens` tokens \(T\): the residual stream and its normed copy, the
  attention projections and the MLP's gate/up output with its activation at once,
  \(T a (2h + (q + 2kv)/t + 3i/t)\), plus the sampler's fp32 logits and probabilities of
  `max_num_seqs` sequences, \(2 \cdot 4 n_{max} V\). Modelled, not traced (vLLM logs it as
  "PyTorch activation peak memory");
- \(O\): memory outside PyTorch: the CUDA context, NCCL buffers with tp > 1 and the CUDA
  graphs vLLM captures (none with `enforce_eager`), EMPIRICAL constants;
- \(m_{tok}\): KV bytes per token on one GPU (`calc.plan.kv_cache.kv_elements_per_token`
  times the cache dtype's bytes), \(B\) = `block_size` tokens per block (16);
- \(s\) = `max_model_len` (default: the model's `max_position_embeddings`, as vLLM), and
  \(n_{max}\) = `max_num_seqs`. vLLM logs \(T_{KV}/s\) as "Maximum concurrency for s
  tokens per request"; shorter requests fit more (blocks are allocated as tokens arrive).

Checked against vLLM's own log lines (tests/test_plan_inference.py): "GPU KV cache size"
tokens times the bytes per token give the "Available KV cache memory" it printed, and the
weights its "Model loading took".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from ..architecture import Architecture
from ..estimate import FitStatus
from ..formatting import COMPONENT_LABELS, FIT_WORDS
from ..operations import Operation, Request, request_error
from ..overhead import CUDA_CONTEXT_BYTES, NCCL_PER_GROUP
from ..params import count_params
from ..presets import GpuPreset, UnknownPreset, resolve_gpu
from ..scenario import ModelSpec, parse_scenario, resolve
from ._common import MAX_COUNT, MAX_SEQ, PlanError, gib
from .kv_cache import check_tp, kv_elements_per_token

MiB = 1024**2
WeightDtype = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4"]
KVDtype = Literal["auto", "fp32", "bf16", "fp16", "fp8"]
WEIGHT_BITS: dict[str, int] = {"fp32": 32, "bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "int4": 4}
KV_BYTES: dict[str, int] = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 1}
DEFAULT_UTILIZATION = 0.9  # vLLM's gpu_memory_utilization default
DEFAULT_MAX_NUM_SEQS = 256  # vLLM's max_num_seqs default
DEFAULT_BATCHED_TOKENS = 8192  # vLLM V1's max_num_batched_tokens for serving on large GPUs
DEFAULT_BLOCK_SIZE = 16  # vLLM's KV cache block (tokens) on CUDA
# EMPIRICAL: vLLM's CUDA graph capture (decode batch sizes up to 512) logs about 0.2-1 GiB
# ("Graph capturing finished ... took 0.45 GiB" on 7-8B models); a judgement, not measured here.
CUDA_GRAPH_BYTES = 512 * MiB


class InferenceRequest(Request):
    """A model served by one engine instance over `tp` GPUs."""

    model: str | dict[str, Any] = Field(description="model preset id, or a scenario's model "
                                        "object ({\"hf_config\": {...}} or an architecture)")
    gpu: str = Field("h100-sxm-80gb", description="GPU preset id")
    tp: int = Field(1, ge=1, le=1024, title="Tensor-parallel GPUs (tp)",
                    description="tensor-parallel GPUs of one engine")
    max_model_len: int | None = Field(
        None, ge=1, le=MAX_SEQ, title="Context length (max_model_len)", description=(
            "context length per sequence, prompt + output (default: the model's "
            "max_position_embeddings, as vLLM)"))
    weight_dtype: WeightDtype = Field("bf16", title="Weights", description="weights as loaded")
    kv_cache_dtype: KVDtype = Field("auto", title="KV cache dtype", description=(
        "KV cache dtype (auto: the weights' dtype, bf16 for quantised weights)"))
    gpu_memory_utilization: float = Field(DEFAULT_UTILIZATION, gt=0, le=1,
                                          title="GPU memory utilization", description=(
        "fraction of the GPU's memory the engine may use (vLLM's --gpu-memory-utilization)"))
    max_num_seqs: int = Field(DEFAULT_MAX_NUM_SEQS, ge=1, le=MAX_COUNT,
                              title="Most sequences at once (max_num_seqs)",
                              description="most sequences scheduled at once")
    max_num_batched_tokens: int = Field(DEFAULT_BATCHED_TOKENS, ge=1, le=MAX_SEQ,
                                        title="Tokens per forward pass",
                                        description="tokens per forward pass (the profiling "
                                                    "run's size)")
    block_size: int = Field(DEFAULT_BLOCK_SIZE, ge=1, le=1024, title="KV cache block (tokens)",
                            description="tokens per KV cache block")
    enforce_eager: bool = Field(False, title="No CUDA graphs (enforce_eager)",
                                description="no CUDA graphs (vLLM's --enforce-eager)")

    @model_validator(mode="after")
    def _kv_dtype(self) -> InferenceRequest:
        if self.kv_cache_dtype == "fp32" and WEIGHT_BITS[self.weight_dtype] < 32:
            raise PlanError("kv_cache_dtype", "fp32 needs fp32 weights (vLLM caches in the "
                            "model dtype or fp8)")
        return self


@dataclass(frozen=True, slots=True)
class InferenceMemory:
    """Per-GPU bytes of one engine instance, and the sequences its KV cache holds."""

    request: InferenceRequest
    gpu: GpuPreset
    param_count: int
    max_model_len: int
    weight_bytes: int
    activation_bytes: int
    non_torch_bytes: dict[str, int]
    budget_bytes: int  # gpu_memory_utilization x the GPU's memory
    kv_bytes_per_token: int  # on one GPU
    notes: tuple[str, ...] = field(default=())

    @property
    def kv_cache_bytes(self) -> int:
        """What is left for the KV cache (negative: the engine does not start)."""
        return (self.budget_bytes - self.weight_bytes - self.activation_bytes
                - sum(self.non_torch_bytes.values()))

    @property
    def kv_cache_tokens(self) -> int:
        blocks = max(0, self.kv_cache_bytes) // (self.request.block_size * self.kv_bytes_per_token)
        return blocks * self.request.block_size

    @property
    def kv_bytes_per_sequence(self) -> int:
        return self.kv_bytes_per_token * self.max_model_len

    @property
    def max_concurrency(self) -> float:
        """vLLM's "Maximum concurrency for max_model_len tokens per request"."""
        return self.kv_cache_tokens / self.max_model_len

    @property
    def max_concurrent_sequences(self) -> int:
        """Full-length sequences held at once, at most max_num_seqs."""
        return min(self.kv_cache_tokens // self.max_model_len, self.request.max_num_seqs)

    @property
    def device_bytes(self) -> int:
        """What the engine holds: its whole budget once the KV cache is allocated."""
        return max(self.budget_bytes, self.budget_bytes - self.kv_cache_bytes)

    @property
    def status(self) -> FitStatus:
        """fits: at least one sequence of max_model_len; else does_not_fit (vLLM refuses to
        start). The engine takes its budget by design, so there is no "tight"."""
        return "fits" if self.kv_cache_tokens >= self.max_model_len else "does_not_fit"

    def as_dict(self) -> dict[str, Any]:
        q = self.request
        return {
            "gpu": self.gpu.id, "tp": q.tp, "param_count": self.param_count,
            "weight_dtype": q.weight_dtype, "gpu_memory_utilization": q.gpu_memory_utilization,
            "max_num_seqs": q.max_num_seqs, "max_num_batched_tokens": q.max_num_batched_tokens,
            "max_model_len": self.max_model_len, "budget_bytes": self.budget_bytes,
            "weight_bytes": self.weight_bytes, "activation_bytes": self.activation_bytes,
            "non_torch_bytes": dict(self.non_torch_bytes),
            "kv_cache_bytes": self.kv_cache_bytes, "kv_bytes_per_token": self.kv_bytes_per_token,
            "kv_bytes_per_sequence": self.kv_bytes_per_sequence,
            "kv_cache_tokens": self.kv_cache_tokens,
            "max_concurrency": round(self.max_concurrency, 4),
            "max_concurrent_sequences": self.max_concurrent_sequences,
            "device_bytes": self.device_bytes, "usable_bytes": self.gpu.usable_bytes,
            "status": self.status, "notes": list(self.notes),
        }


def _architecture(model: ModelSpec | str | dict[str, Any], gpu: str) -> Architecture:
    """The model as the estimator reads it (a preset id, a config.json or an architecture)."""
    return resolve(parse_scenario({"model": model, "gpu": gpu,
                                   "training": {"seq_len": 1}})).arch


def activation_bytes(arch: Architecture, tokens: int, seqs: int, tp: int,
                     act_bytes: int = 2) -> int:
    r"""The profiling forward pass's activation peak (module docstring, \(A\))."""
    T, h, t = tokens, arch.hidden_size, tp
    i = max(arch.intermediate_size, (arch.moe_intermediate_size or 0)
            * (arch.num_experts_per_tok or 0))
    q = arch.num_attention_heads * arch.head_size
    kv = 2 * arch.kv_heads * arch.head_size
    layer = T * act_bytes * (2 * h + (q + kv) // t + 3 * i // t)
    sampler = 2 * 4 * seqs * arch.vocab_size
    return layer + sampler


def inference_memory(model: str | dict[str, Any], **settings: Any) -> InferenceMemory:
    """Per-GPU serving memory and the sequences that fit; `settings` are
    `InferenceRequest`'s fields (errors name the field).

        >>> m = inference_memory("llama-3.1-8b", gpu="h100-sxm-80gb", max_model_len=8192)
        >>> m.kv_bytes_per_token  # 32 layers x 2 x 8 heads x 128 x 2 bytes
        131072
        >>> m.max_concurrent_sequences > 40
        True
    """
    try:
        request = InferenceRequest.model_validate({"model": model, **settings})
    except ValidationError as exc:
        raise request_error(exc) from None
    return serve(request)


def serve(q: InferenceRequest) -> InferenceMemory:
    try:
        gpu = resolve_gpu(q.gpu)
    except UnknownPreset as exc:
        raise PlanError("gpu", str(exc)) from None
    arch = _architecture(q.model, gpu.id)
    check_tp(arch, q.tp)
    notes = []
    max_len = q.max_model_len or arch.max_position_embeddings
    if q.max_model_len is None:
        notes.append(f"max_model_len defaults to max_position_embeddings ({max_len:,}), as "
                     "vLLM; set it to the context your requests need")
    elif q.max_model_len > arch.max_position_embeddings:
        notes.append(f"max_model_len {q.max_model_len:,} is beyond max_position_embeddings "
                     f"({arch.max_position_embeddings:,}): vLLM needs a rope-scaling config")
    params = count_params(arch).total
    weight_bytes = -(-params * WEIGHT_BITS[q.weight_dtype] // (8 * q.tp))
    if q.weight_dtype in ("int8", "int4"):
        notes.append("quantised weights counted at their bits, without scales (~1-3% more)")
    kv_dtype: str = q.kv_cache_dtype
    if kv_dtype == "auto":
        kv_dtype = q.weight_dtype if q.weight_dtype in KV_BYTES and q.weight_dtype != "fp8" \
            else "bf16"
    per_token = kv_elements_per_token(arch, q.tp) * KV_BYTES[kv_dtype]
    act = 4 if q.weight_dtype == "fp32" else 2
    activation = activation_bytes(arch, q.max_num_batched_tokens, q.max_num_seqs, q.tp, act)
    non_torch = {"cuda_context": CUDA_CONTEXT_BYTES}
    if q.tp > 1:
        non_torch["nccl"] = NCCL_PER_GROUP
    if not q.enforce_eager:
        non_torch["cuda_graphs"] = CUDA_GRAPH_BYTES
    budget = int(q.gpu_memory_utilization * gpu.usable_bytes)
    m = InferenceMemory(q, gpu, params, max_len, weight_bytes, activation, non_torch, budget,
                        per_token, tuple(notes))
    if m.status != "fits":
        notes.append(f"vLLM would refuse to start: one sequence of {max_len:,} tokens needs "
                     f"{gib(m.kv_bytes_per_sequence)} of KV cache, {gib(max(0, m.kv_cache_bytes))}"
                     " is left")
        m = InferenceMemory(q, gpu, params, max_len, weight_bytes, activation, non_torch,
                            budget, per_token, tuple(notes))
    return m


# ---------------------------------------------------------------------------------------------
# The operation: calc inference
# ---------------------------------------------------------------------------------------------

def _text(m: InferenceMemory, request: InferenceRequest) -> str:
    d = m.as_dict()
    lines = [
        f"{d['param_count']:,} parameters on {m.gpu.name}, tp {m.request.tp}, "
        f"{d['max_model_len']:,} tokens per sequence:",
        f"  engine budget    {gib(m.budget_bytes):>14}  ({m.request.gpu_memory_utilization:.0%}"
        f" of {gib(m.gpu.usable_bytes)})",
        f"  weights          {gib(m.weight_bytes):>14}",
        f"  activations      {gib(m.activation_bytes):>14}  (profiling pass of "
        f"{m.request.max_num_batched_tokens:,} tokens)",
        f"  outside PyTorch  {gib(sum(m.non_torch_bytes.values())):>14}  (empirical)",
        f"  KV cache         {gib(m.kv_cache_bytes):>14}  = {m.kv_cache_tokens:,} tokens "
        f"of {m.kv_bytes_per_token:,} bytes",
        f"  per sequence     {gib(m.kv_bytes_per_sequence):>14}",
        f"max concurrent sequences: {m.max_concurrent_sequences} "
        f"(concurrency {m.max_concurrency:.2f}x; max_num_seqs {m.request.max_num_seqs}); "
        f"{FIT_WORDS[m.status]}",
    ]
    lines += [f"  note: {n}" for n in m.notes]
    return "\n".join(lines)


# What the page calls each part of the memory outside PyTorch (the training report's names where
# the part is the same)
NON_TORCH_LABELS = {"cuda_context": COMPONENT_LABELS["overhead/cuda_context"],
                    "nccl": COMPONENT_LABELS["overhead/nccl"], "cuda_graphs": "CUDA graphs"}


def _page(m: InferenceMemory, request: InferenceRequest) -> dict[str, Any]:
    """The answer with the names of the parts outside PyTorch, as the page shows them."""
    return {**m.as_dict(), "non_torch_labels": {k: NON_TORCH_LABELS[k] for k in m.non_torch_bytes}}


OPERATIONS: tuple[Operation[InferenceRequest, InferenceMemory], ...] = (
    Operation("inference", "serving memory (vLLM-style): weights, KV cache, concurrent "
              "sequences per GPU", InferenceRequest, run=serve, text=_text, browser=_page),
)

__all__ = ["InferenceMemory", "InferenceRequest", "activation_bytes", "inference_memory",
           "serve"]
