"""Memory outside PyTorch's tensors: allocator slack, CUDA context, communication buffers.

All figures here are EMPIRICAL: they come from observation, not from a formula, and are
labelled as such in every report. They are the parts between `peak_bytes` (comparable to
`torch.cuda.max_memory_allocated()`) and `device_bytes` (comparable to nvidia-smi).
"""

from __future__ import annotations

from .scenario import Parallelism

MiB = 1024**2

# EMPIRICAL. The caching allocator rounds blocks to 2 MiB segments and keeps freed blocks for
# reuse; in training steps without `expandable_segments:True` the reserved pool typically sits
# a few percent above the allocated peak. Not yet measured by this project on a GPU: where a
# published pair of allocated and reserved peaks exists (validation/published.json) it is
# compared there.
ALLOCATOR_FRACTION = 0.05
ALLOCATOR_FLOOR = 64 * MiB

# EMPIRICAL. A CUDA context with PyTorch's kernels (lazy module loading, CUDA 12): about
# 500 MiB on A100/H100 as nvidia-smi shows right after `torch.cuda.init()`.
CUDA_CONTEXT = 500 * MiB

# EMPIRICAL. NCCL allocates its channel buffers per communicator (NCCL_BUFFSIZE = 4 MiB per
# channel and peer direction); in practice about 256 MiB per process group in use.
NCCL_PER_GROUP = 256 * MiB


def overhead(peak_bytes: int, p: Parallelism) -> dict[str, int]:
    groups = sum(1 for size in (p.dp * p.cp, p.tp, p.pp, p.ep) if size > 1)
    return {
        "overhead/allocator": max(ALLOCATOR_FLOOR, int(peak_bytes * ALLOCATOR_FRACTION)),
        "overhead/cuda_context": CUDA_CONTEXT,
        "overhead/nccl": groups * NCCL_PER_GROUP,
    }
