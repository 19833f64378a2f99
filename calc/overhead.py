"""Memory outside PyTorch's tensors: allocator slack, CUDA context, communication buffers.

All figures here are EMPIRICAL: they come from observation, not from a formula, and are
labelled as such in every report. They are the parts between `peak_bytes` (comparable to
`torch.cuda.max_memory_allocated()`) and `device_bytes` (comparable to nvidia-smi).
"""

from __future__ import annotations

from .formula import Formula, Term
from .setup import Setup
from .sources import ALLOCATOR, CUDA_CONTEXT, GPU_PRESETS, NCCL

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
CUDA_CONTEXT_BYTES = 500 * MiB

# EMPIRICAL. NCCL allocates its channel buffers per communicator (NCCL_BUFFSIZE = 4 MiB per
# channel and peer direction); in practice about 256 MiB per process group in use.
NCCL_PER_GROUP = 256 * MiB

ALLOCATOR_TERM = Formula(
    "overhead/allocator", "lambda M, f_a, M_0: max(M_0, floor(M * f_a))", id="overhead.allocator",
    title="Allocator cache (empirical)", source=ALLOCATOR,
    note="the caching allocator's reserve above the allocated peak: reserved = peak + this")
CONTEXT_TERM = Formula("overhead/cuda_context", "lambda C_x: C_x", id="overhead.cuda_context",
                       title="CUDA context (empirical)", source=CUDA_CONTEXT)
NCCL_TERM = Formula("overhead/nccl", "lambda G_n, B_n: G_n * B_n", id="overhead.nccl",
                    title="NCCL buffers (empirical)", source=NCCL,
                    note="G_n: process groups of more than one rank (dp x cp, tp, pp, ep)")
RESERVED = Formula("reserved", "lambda M, A_o: M + A_o", id="overhead.reserved",
                   title="Reserved by PyTorch's caching allocator", source=ALLOCATOR)
DEVICE = Formula("device", "lambda M, A_o, C_x, N_o: M + A_o + C_x + N_o", id="overhead.device",
                 title="On the device (what nvidia-smi shows)", source=GPU_PRESETS)


def overhead(peak_bytes: int, x: Setup) -> tuple[Term, Term, Term]:
    """(allocator, CUDA context, NCCL) beside an allocated peak of `peak_bytes`."""
    groups = sum(1 for size in (x.dp * x.cp, x.tp, x.pp, x.ep) if size > 1)
    return (ALLOCATOR_TERM(peak_bytes, ALLOCATOR_FRACTION, ALLOCATOR_FLOOR),
            CONTEXT_TERM(CUDA_CONTEXT_BYTES), NCCL_TERM(groups, NCCL_PER_GROUP))


def beyond(peak_bytes: int, x: Setup) -> tuple[tuple[Term, Term, Term], Term, Term]:
    """The overheads, then what PyTorch reserves and what the device shows."""
    terms = overhead(peak_bytes, x)
    alloc, context, nccl = (t.bytes for t in terms)
    return terms, RESERVED(peak_bytes, alloc), DEVICE(peak_bytes, alloc, context, nccl)
