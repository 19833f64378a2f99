"""Make FakeTensors on device "cuda" usable with a CPU-only PyTorch build.

Why: the estimator models a CUDA training step. Tracing on fake *CPU* tensors would use
CPU autocast op lists, the CPU SDPA kernels (flash on CPU keeps different buffers, and any
attention dropout falls back to math), CPU dropout (saves a float noise tensor instead of
a bool mask), and would skip the CUDA caching allocator's 512-byte rounding in MemTracker.

What it takes (all verified with torch 2.13.0+cpu):
 1. A tiny C++ library (fake_cuda_guard.cpp, built here with g++ on first use, ~2 s)
    registering c10's FakeGuardImpl<CUDA> and a minimal CUDAHooks (hasCUDA()==true).
    Autograd needs both for CUDA tensors (stream bookkeeping). It MUST be loaded before
    `import torch` -> import this module first.
 2. Python patches (apply_patches()):
    * torch.autocast("cuda") refuses to enable without a driver -> patch the availability
      check; bf16 support check -> True. The autocast *op lists* used are then the real
      CUDA ones (dispatch key AutocastCUDA), e.g. softmax/log_softmax/cross_entropy in fp32.
    * Tensor.uniform_ on fake cuda tensors hits a prim that wants a CUDA generator ->
      replaced by normal_ (values are irrelevant under FakeTensorMode) during model build.
    * F.scaled_dot_product_attention: the CUDA backend chooser is not compiled into the CPU
      build (it would pick math). We re-implement the chooser (flash > mem-efficient > math,
      with the sm90 constraints) and call the same aten ops the CUDA SDPA calls
      (_scaled_dot_product_flash_attention / _scaled_dot_product_efficient_attention),
      whose meta kernels give exactly the output + logsumexp (+ rng state) buffers.
"""
from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import sysconfig

_HERE = os.path.dirname(os.path.abspath(__file__))
_LIB = None


def _torch_dir() -> str:
    import importlib.util
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        raise RuntimeError("torch not found")
    return os.path.dirname(spec.origin)


def load_fake_cuda_lib() -> bool:
    """Build (if needed) and load the fake CUDA guard/hooks library. Returns True if active."""
    global _LIB
    if _LIB is not None:
        return bool(_LIB.fake_cuda_hooks_active())
    if "torch" in sys.modules:
        # getCUDAHooks() may already have been resolved; we can still try.
        pass
    tdir = _torch_dir()
    src = os.path.join(_HERE, "fake_cuda_guard.cpp")
    build = os.path.join(_HERE, "_build")
    os.makedirs(build, exist_ok=True)
    so = os.path.join(build, "libfake_cuda_guard.so")
    if not os.path.exists(so) or os.path.getmtime(so) < os.path.getmtime(src):
        cmd = ["g++", "-O1", "-std=c++20", "-shared", "-fPIC", "-w",
               f"-I{tdir}/include", src, f"-L{tdir}/lib", "-lc10", "-ltorch_cpu",
               f"-Wl,-rpath,{tdir}/lib", "-o", so + ".tmp"]
        subprocess.run(cmd, check=True)
        os.replace(so + ".tmp", so)
    _LIB = ctypes.CDLL(so, mode=ctypes.RTLD_GLOBAL)
    return bool(_LIB.fake_cuda_hooks_active())


_PATCHED = False
_ORIG_SDPA = None
_CUDA_LIB = None
FUSED_ON_CUDA = ("silu_backward", "mish_backward")


def _never_called(op: str):
    def kernel(*args, **kwargs):
        raise RuntimeError(f"fake CUDA: the {op} kernel ran on real data")
    return kernel


def apply_patches() -> None:
    global _PATCHED, _ORIG_SDPA
    if _PATCHED:
        return
    import torch
    import torch.nn.functional as F
    import torch.cuda.amp.common as amp_common

    amp_common.amp_definitely_not_available = lambda: False
    torch.cuda.is_bf16_supported = lambda *a, **k: True

    _orig_uniform = torch.Tensor.uniform_

    def _uniform_(self, *args, **kwargs):
        if self.device.type == "cuda":
            return self.normal_()
        return _orig_uniform(self, *args, **kwargs)

    torch.Tensor.uniform_ = _uniform_

    # torch.optim.SGD(fused=True) calls aten._fused_sgd_, which has no meta/fake kernel in
    # 2.13 (FakeTensorMode would try to run it for real on cuda). It updates params and
    # momentum buffers in place and allocates nothing, so a no-op fake impl is exact.
    from torch._subclasses import fake_impls
    aten = torch.ops.aten
    for ov in (aten._fused_sgd_.default, aten._fused_sgd_.tensor_lr):
        if ov not in fake_impls.op_implementations_dict:
            fake_impls.register_op_impl(ov)(lambda fake_mode, func, *a, **k: None)

    # The CPU build registers no CUDA kernels, so an op that has both a backend kernel and a
    # CompositeImplicitAutograd one is decomposed on fake CUDA tensors, where a CUDA build runs
    # its one fused kernel: silu_backward becomes sigmoid, 1 - sigmoid, x * (...), 1 + ... and
    # two products, each a B x S x intermediate temporary a real GPU never allocates. Only
    # silu_backward and mish_backward are such ops in torch 2.13 (every aten op with a CPU and a
    # CompositeImplicitAutograd kernel, checked with _dispatch_has_kernel_for_dispatch_key).
    # Registering a CUDA kernel keeps the op whole; FakeTensorMode then computes its output from
    # the meta kernel and the kernel itself is never called.
    # transformers' MoE experts (grouped_mm, its default experts implementation) ask for the
    # device's compute capability to choose torch's grouped GEMM; answer as an H100 does.
    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
    # aten._grouped_mm: the Python meta kernel of torch 2.13 accepts bf16 only, but the CUDA
    # op (GroupedBlas.cpp, _grouped_mm_validate_inputs in GroupedMMUtils.h) takes fp32 and
    # fp16 too (CUTLASS for bf16 on sm90, else a loop of mm_out into the output). Under amp
    # the experts' fp32 weights reach it in fp32 (it is on no autocast list). Both paths
    # allocate only the output, shaped as create_grouped_gemm_output_tensor makes it.
    if aten._grouped_mm.default not in fake_impls.op_implementations_dict:
        fake_impls.register_op_impl(aten._grouped_mm.default)(_grouped_mm_fake)

    global _CUDA_LIB
    _CUDA_LIB = torch.library.Library("aten", "IMPL")
    for op in FUSED_ON_CUDA:
        _CUDA_LIB.impl(op, _never_called(op), "CUDA")

    _ORIG_SDPA = F.scaled_dot_product_attention
    # torch's context_parallel() monkey-patches F by the replaced function's __name__
    sdpa_cuda.__name__ = "scaled_dot_product_attention"
    F.scaled_dot_product_attention = sdpa_cuda
    torch.nn.functional.scaled_dot_product_attention = sdpa_cuda
    _PATCHED = True


def _grouped_mm_fake(fake_mode, func, mat_a, mat_b, offs=None, bias=None, out_dtype=None):
    """aten._grouped_mm on a fake CUDA device: the output of _grouped_mm_cuda (torch
    GroupedMMUtils.h create_grouped_gemm_output_tensor: the last dim's stride padded to 16
    bytes), for the dtypes the CUDA op accepts (bf16, fp16, fp32; output in mat_a's dtype)."""
    import torch
    if mat_a.device.type != "cuda":
        return NotImplemented
    ok = (torch.bfloat16, torch.float16, torch.float32)
    if mat_a.dtype not in ok or mat_b.dtype not in ok or bias is not None:
        raise RuntimeError(f"_grouped_mm: unsupported {mat_a.dtype}/{mat_b.dtype}/bias")
    dt = out_dtype or mat_a.dtype
    if dt != mat_a.dtype:
        raise RuntimeError("Grouped gemm output dtype must match `mat_a` dtype")
    a2, b2 = mat_a.dim() == 2, mat_b.dim() == 2
    if a2 and b2:
        size = [offs.size(0), mat_a.size(0), mat_b.size(1)]
    elif a2:
        size = [mat_a.size(0), mat_b.size(-1)]
    elif b2:
        size = [mat_a.size(1), mat_b.size(1)]
    else:
        size = [mat_a.size(0), mat_a.size(1), mat_b.size(-1)]
    align = 16 // dt.itemsize
    padded = (size[-1] + align - 1) // align * align
    stride = [padded, 1] if a2 != b2 else [size[1] * padded, padded, 1]
    with fake_mode:
        return torch.empty_strided(size, stride, dtype=dt, device=mat_a.device)


SDPA_CHOICES: dict = {}
# The traced GPU's compute capability (major * 10 + minor), which the CUDA chooser reads: flash
# needs sm80 or newer, and the memory-efficient kernel bf16 only there (set per scenario from
# its GPU preset's architecture by the harness; sm90, an H100, by default).
SM = 90


def _note(kind: str) -> None:
    SDPA_CHOICES[kind] = SDPA_CHOICES.get(kind, 0) + 1


def sdpa_cuda(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
              enable_gqa=False):
    """Backend choice of CUDA SDPA on the traced GPU (`SM`): flash > mem-efficient > math."""
    import torch
    aten = torch.ops.aten
    if query.device.type != "cuda":
        return _ORIG_SDPA(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                          is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
    if torch.is_autocast_enabled("cuda"):
        # scaled_dot_product_attention is on CUDA autocast's lower-precision list
        adt = torch.get_autocast_dtype("cuda")
        query, key, value = (t.to(adt) if t.dtype == torch.float32 else t for t in (query, key, value))
        if attn_mask is not None and attn_mask.dtype == torch.float32:
            attn_mask = attn_mask.to(adt)
    dt = query.dtype
    d_q, d_k, d_v = query.shape[-1], key.shape[-1], value.shape[-1]
    hq, hk = query.shape[-3], key.shape[-3]
    lq, lk = query.shape[-2], key.shape[-2]
    # Flash takes grouped K/V heads (enable_gqa). torch 2.13's mem-efficient kernel does not:
    # it checks heads with check_batch_size_and_num_heads_dense<supports_gqa=false> (the
    # two-parameter template of sdp_utils_cpp.h in the 2.13 wheel; GQA came to it later), so
    # fp32 attention with fewer K/V heads than query heads goes to the math kernel, which
    # repeats K/V and keeps the S x S probabilities.
    gqa_ok = hq == hk or (enable_gqa and hq % hk == 0)
    dense4 = query.dim() == 4 and key.dim() == 4 and value.dim() == 4
    flash_ok = (SM >= 80 and dense4 and attn_mask is None
                and dt in (torch.float16, torch.bfloat16) and d_q == d_k == d_v and d_q <= 256 and d_q % 8 == 0 and gqa_ok
                and not (is_causal and lq != lk))
    if flash_ok:
        _note("flash")
        return aten._scaled_dot_product_flash_attention(
            query, key, value, dropout_p, is_causal, False, scale=scale)[0]
    align = 8 if dt in (torch.float16, torch.bfloat16) else 4
    dtypes = (torch.float16, torch.float32) + ((torch.bfloat16,) if SM >= 80 else ())
    eff_ok = (dense4 and dt in dtypes and d_q == d_k and d_q % align == 0 and d_v % align == 0 and hq == hk)
    if eff_ok:
        _note("efficient")
        mask = attn_mask
        if mask is not None and mask.dtype == torch.bool:
            # convert_boolean_attn_mask: where(!mask, -inf, 0) in the query dtype
            mask = torch.where(mask.logical_not(),
                               torch.full((), float("-inf"), dtype=dt, device=query.device),
                               torch.full((), 0.0, dtype=dt, device=query.device))
        if mask is not None:
            # preprocess_mask: pad last dim to a multiple of 16, then expand to (B, H, Lq, Lk)
            if mask.shape[-1] % 16:
                pad = 16 - mask.shape[-1] % 16
                mask = torch.nn.functional.pad(mask, (0, pad))[..., : lk]
            mask = mask.expand(query.shape[0], hq, lq, lk)
        need_lse = query.requires_grad or key.requires_grad or value.requires_grad
        return aten._scaled_dot_product_efficient_attention(
            query, key, value, mask, need_lse, dropout_p, is_causal, scale=scale)[0]
    _note("math")
    return _ORIG_SDPA(query, key, value, attn_mask=attn_mask, dropout_p=dropout_p,
                      is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)


class _FakeEvent:
    def __init__(self, *a, **k):
        pass

    def record(self, stream=None):
        return None

    def wait(self, stream=None):
        return None

    def query(self):
        return True

    def synchronize(self):
        return None


class _FakeStream:
    def __init__(self, *a, **k):
        pass

    def wait_stream(self, other):
        return None

    def wait_event(self, event):
        return None

    def record_event(self, event=None):
        return event if event is not None else _FakeEvent()

    def synchronize(self):
        return None

    def query(self):
        return True

    def __eq__(self, other):
        return isinstance(other, _FakeStream)

    def __hash__(self):
        return 0


_STREAM = None


def patch_cuda_runtime_for_fsdp() -> None:
    """FSDP2 asks torch.cuda for the current device, streams and events (overlap of
    all-gather / reduce-scatter with compute). Single fake device, single fake stream:
    memory-wise this is the same as the real run, except for the small ordering effects
    of multi-stream overlap (FSDP2's own stream sync keeps at most one prefetched
    all-gather in flight, which the eager trace also does)."""
    import torch
    import contextlib
    global _STREAM
    _STREAM = _FakeStream()
    torch.cuda.current_device = lambda: 0
    torch.cuda.device_count = lambda: 8
    torch.cuda.set_device = lambda d: None
    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)  # an H100
    torch.cuda.synchronize = lambda *a, **k: None
    torch.cuda.Stream = _FakeStream
    torch.cuda.Event = _FakeEvent
    torch.cuda.current_stream = lambda *a, **k: _STREAM
    torch.cuda.default_stream = lambda *a, **k: _STREAM
    torch.cuda.stream = lambda s=None: contextlib.nullcontext()
