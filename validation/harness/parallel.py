"""Data parallelism in one process (rank 0 of a `fake` process group), as torch expresses
each ZeRO stage with `amp` or `pure` precision:

- zero 0: DistributedDataParallel (what Trainer/Accelerate wrap a multi-GPU model in).
- zero 1: DDP + `ZeroRedundancyOptimizer` (optimizer states sharded by whole parameters).
- zero 2: FSDP2 `fully_shard(reshard_after_forward=False)` (Accelerate's SHARD_GRAD_OP).
- zero 3: FSDP2 `fully_shard` on every decoder layer, then the root (Accelerate's FULL_SHARD).
  Zero 2 and 3 wrap one rank too (dp 1, as Accelerate's FSDP launched on one GPU): nothing
  is sharded, but FSDP2 still keeps unsharded copies of the gathered units and reduces
  through its own buffers; zero 1 on one rank is the plain optimizer.
  `offload_params`: FSDP2's CPUOffloadPolicy (parameters, gradients and the optimizer step on
  the host; needs `offload_optimizer` too, since the step runs where the states are).
- ep > 1 (zero 3): transformers' own expert parallelism (`DistributedConfig(fsdp_size=dp,
  ep_size=ep)`, `maybe_distribute_model`): the experts' weights Shard(0) over the `ep` mesh, the
  (token, expert) pairs exchanged by `AllToAllEP` (all-to-all there and back), then FSDP2 from the
  model's plan: the experts on the `efsdp` mesh (dp / ep ranks), the rest on `fsdp` (dp ranks).
  The all-to-all split sizes are routing data, which fake tensors do not have: the trace assumes
  balanced routing (each rank sends T*K/ep pairs to each rank, so receives T*K), see
  `_balanced_dispatch`.

Mixed precision under FSDP2 (`amp`, and `autocast` where the stored weights are already
low-precision): MixedPrecisionPolicy(param_dtype=precision, reduce_dtype=fp32), with autocast
kept around the forward as Accelerate does.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from .common import TRACE_DEVICE, Untraceable, fake_cuda
from .models import decoder_layers

PG_READY = False


def init_fake_pg(world: int, rank: int = 0) -> None:
    global PG_READY
    from torch.testing._internal.distributed.fake_pg import FakeStore
    if PG_READY:
        if dist.get_world_size() != world or dist.get_rank() != rank:
            raise RuntimeError("one process per world size and rank")
        return
    dist.init_process_group("fake", rank=rank, world_size=world, store=FakeStore())
    PG_READY = True


def sizes(par: dict) -> dict[str, int]:
    """The mesh dimensions in torchtitan's order (pp, dp, cp, tp)."""
    return {k: int(par.get(k) or 1) for k in ("pp", "dp", "cp", "tp")}


def kind(par: dict) -> str:
    """"single", "ddp", "zero1", "fsdp" (zero 2 or 3): the data-parallel layout.

    With tp, cp or pp > 1 the data-parallel group is sharded by FSDP2 as torchtitan does
    (over dp x cp: CP ranks hold the same weights and shard them like dp ranks); DDP and
    ZeroRedundancyOptimizer are not combined with them."""
    n = sizes(par)
    dp, zero = n["dp"], int(par.get("zero", 0))
    if n["tp"] > 1 or n["cp"] > 1 or n["pp"] > 1:
        if par.get("offload_params") or par.get("offload_optimizer"):
            raise Untraceable("offload with tp/cp/pp")
        shard = dp * n["cp"]
        if shard == 1:
            return "single"
        if zero < 2:
            raise Untraceable("tp/cp/pp with dp x cp > 1 is traced with FSDP2 (zero 2 or 3), "
                              "as torchtitan; not with DDP or ZeRO-1")
        return "fsdp"
    if par.get("offload_params") and not (zero == 3 and par.get("offload_optimizer")):
        raise Untraceable("offload_params is traced as FSDP2's CPUOffloadPolicy: zero 3 with "
                          "offload_optimizer")
    if par.get("offload_optimizer") and not par.get("offload_params"):
        raise Untraceable("optimizer offload alone (DeepSpeed's ZeRO-Offload) has no torch form")
    ep = int(par.get("ep", 1) or 1)
    if ep > 1:
        if zero != 3 or dp % ep or par.get("offload_params"):
            raise Untraceable("ep is traced as transformers' EP + FSDP2: zero 3, ep dividing dp, "
                              "no offload")
        return "ep"
    if dp == 1 and zero in (0, 1):
        return "single"
    return {0: "ddp", 1: "zero1"}.get(zero, "fsdp")


def mesh(dp: int, dev: torch.device):
    """The 1-D device mesh, built outside fake mode."""
    init_fake_pg(dp)
    if TRACE_DEVICE == "cuda":
        fake_cuda.patch_cuda_runtime_for_fsdp()
    from torch.distributed.device_mesh import init_device_mesh
    return init_device_mesh(dev.type, (dp,))


def ep_mesh(dp: int, ep: int, dev: torch.device):
    """transformers' two meshes (distributed/utils.py initialize_distributed_mesh, which reads
    the accelerator type and so cannot run on a CPU build): dense (pp, dp_replicate, fsdp, tp) and
    expert (pp, dp_replicate, efsdp, ep), built outside fake mode."""
    init_fake_pg(dp)
    if TRACE_DEVICE == "cuda":
        fake_cuda.patch_cuda_runtime_for_fsdp()
    from torch.distributed.device_mesh import init_device_mesh
    from transformers.distributed.utils import TransformersDeviceMesh
    _mesh_outside_fake_mode()
    dense = init_device_mesh(dev.type, (1, 1, dp, 1), mesh_dim_names=("pp", "dp_replicate", "fsdp", "tp"))
    expert = init_device_mesh(dev.type, (1, 1, dp // ep, ep),
                              mesh_dim_names=("pp", "dp_replicate", "efsdp", "ep"))
    return TransformersDeviceMesh(dense, expert)


def _mesh_outside_fake_mode() -> None:
    """FSDP2 over expert weights that are already DTensors on the `ep` mesh builds a combined
    (efsdp, ep) mesh inside fully_shard; DeviceMesh computes its coordinates with small integer
    tensors, which under FakeTensorMode have no data (`nonzero`). A mesh is bookkeeping, never
    device memory: build every DeviceMesh with fake mode suspended."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.distributed.device_mesh import DeviceMesh
    if getattr(DeviceMesh.__init__, "_outside_fake", False):
        return
    orig = DeviceMesh.__init__

    def init(self, *args, **kwargs):
        with unset_fake_temporarily():
            orig(self, *args, **kwargs)
    init._outside_fake = True
    DeviceMesh.__init__ = init


def shard_ep(model: torch.nn.Module, par: dict, mesh_manager, param_dtype) -> torch.nn.Module:
    """Expert parallelism + FSDP2 as transformers 5.23 applies them (`maybe_distribute_model`)."""
    from transformers.distributed import DistributedConfig
    from transformers.distributed import expert_parallel
    if param_dtype not in (None, torch.bfloat16):
        raise Untraceable("transformers' FSDP mixed precision is bf16 only")
    dp, ep = int(par["dp"]), int(par["ep"])
    cfg = DistributedConfig(fsdp_size=dp, ep_size=ep, ep_implementation="all_to_all",
                            fsdp_mixed_precision=param_dtype is not None)
    expert_parallel.AllToAllEP._dispatch_tokens = _balanced_dispatch
    return type(model).maybe_distribute_model(model, cfg, mesh_manager)


def _balanced_dispatch(self, hidden_states, top_k_index, top_k_weights):
    """transformers' `AllToAllEP._dispatch_tokens` (5.23, tp_size 1) with the split sizes of a
    balanced routing. The original reads the per-rank counts back to the host (`.tolist()`),
    which fake tensors cannot answer; here every rank sends T*K/ep (token, expert) pairs to each
    rank and so receives T*K rows, split evenly over its local experts. Every op and buffer is
    the original's; only the sizes are assumed."""
    from transformers.distributed.expert_parallel import (_AllToAllState, _WaitTensor,
                                                          all_to_all_single,
                                                          all_to_all_single_autograd)
    num_tokens = hidden_states.size(0)
    ep_group, ep_size = self.ep_mesh.get_group(), self.ep_mesh.size()
    num_top_k = top_k_index.size(-1)
    expert_ids = top_k_index.reshape(-1)
    order = torch.argsort(expert_ids)
    send_tokens = hidden_states[order // num_top_k]
    send_counts = torch.zeros(self.num_local_experts * ep_size, dtype=torch.long, device=hidden_states.device)
    send_counts = send_counts.scatter_add_(0, expert_ids, torch.ones_like(expert_ids))
    send_counts = send_counts.view(ep_size, self.num_local_experts)
    recv_counts = torch.empty_like(send_counts)
    all_to_all_single(recv_counts, send_counts, group=ep_group)
    pairs = expert_ids.numel()
    if pairs % ep_size:
        raise Untraceable(f"balanced routing needs T*K ({pairs}) divisible by ep ({ep_size})")
    send_sizes = recv_sizes = [pairs // ep_size] * ep_size       # assumed: balanced routing
    recv_tokens = all_to_all_single_autograd(send_tokens, recv_sizes, send_sizes, ep_group)
    recv_tokens = _WaitTensor.apply(recv_tokens)
    recv_expert_ids = torch.arange(self.num_local_experts, device=hidden_states.device).repeat(ep_size)
    recv_expert_ids = recv_expert_ids.repeat_interleave(pairs // (ep_size * self.num_local_experts))
    recv_expert_ids = recv_expert_ids.unsqueeze(-1)
    recv_weights = torch.ones_like(recv_expert_ids, dtype=recv_tokens.dtype)
    state = _AllToAllState(top_k_weights, order, send_sizes, recv_sizes, num_tokens)
    return recv_tokens, recv_expert_ids, recv_weights, state


def mesh_nd(par: dict, dev: torch.device, rank: int = 0):
    """The (pp, dp, cp, tp) device mesh (dimensions of size 1 kept), built outside fake mode;
    `rank` is the traced rank (0, or the last pipeline stage's first rank)."""
    n = sizes(par)
    world = n["pp"] * n["dp"] * n["cp"] * n["tp"]
    init_fake_pg(world, rank)
    if TRACE_DEVICE == "cuda":
        fake_cuda.patch_cuda_runtime_for_fsdp()
    from torch.distributed.device_mesh import init_device_mesh
    _mesh_coordinates_outside_fake_mode()
    full = init_device_mesh(dev.type, tuple(n.values()), mesh_dim_names=tuple(n))
    # Sub-meshes are sliced here: slicing computes coordinates with nonzero(), which fake
    # tensors cannot run.
    meshes = {k: full[k] for k in n}
    meshes["fsdp"] = full["dp", "cp"]._flatten("dp_cp") if n["cp"] > 1 else meshes["dp"]
    return meshes


def _mesh_coordinates_outside_fake_mode() -> None:
    """FSDP2 over a TP mesh concatenates the dp and tp meshes (`_init_sharding_spec_tp`),
    which builds a rank table and finds the rank in it with nonzero(): fake tensors cannot,
    so the concatenation runs outside fake mode (the table is a small real CPU tensor)."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.distributed.device_mesh import DeviceMesh
    orig = DeviceMesh._concatenate
    if getattr(orig, "_harness", False):
        return

    def concatenate(device_mesh_list):
        with unset_fake_temporarily():
            return orig(device_mesh_list)
    concatenate._harness = True
    DeviceMesh._concatenate = staticmethod(concatenate)


def shard_mesh(device_mesh):
    """The mesh FSDP2 shards over: dp, or dp x cp flattened (torchtitan's dp_shard_cp)."""
    return device_mesh["fsdp"] if isinstance(device_mesh, dict) else device_mesh


def shard(model: torch.nn.Module, par: dict, device_mesh, param_dtype,
          reshard_after_forward: bool | None = None) -> None:
    """FSDP2 over every decoder layer, then the root. `reshard_after_forward` overrides
    the zero stage's choice (torchtitan turns it off with pipeline parallelism)."""
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
    if reshard_after_forward is None:
        reshard_after_forward = int(par["zero"]) == 3
    kw = {"mesh": shard_mesh(device_mesh), "reshard_after_forward": reshard_after_forward}
    if param_dtype is not None:
        kw["mp_policy"] = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    if par.get("offload_params"):
        # pinned or not, host memory is not device memory; fake tensors cannot be pinned
        kw["offload_policy"] = CPUOffloadPolicy(pin_memory=False)
    for layer in decoder_layers(model):
        fully_shard(layer, **kw)
    kw.pop("reshard_after_forward")  # the root: torch's default (not resharded after forward)
    fully_shard(model, **kw)


def ddp(model: torch.nn.Module) -> "BucketedGradients":
    """DistributedDataParallel's gradient buckets. DDP's C++ reducer reads tensor data (its
    shape check, the bucket-order sync, the pinned used-map), which fake tensors do not have,
    so this reproduces its allocations (torch/csrc/distributed/c10d/reducer.cpp) instead."""
    return BucketedGradients(model)


class BucketedGradients:
    """What DDP's reducer holds, with Trainer/Accelerate's defaults (bucket_cap_mb=25, the
    first bucket 1 MiB, gradient_as_bucket_view=False):

    - at construction, `initialize_buckets` allocates one flat tensor per bucket, of the
      parameters' dtype, together the size of every trainable parameter; frozen ones get none;
    - in backward, as each gradient is ready (`mark_variable_ready_dense`) it is copied into its
      bucket view; a full bucket is divided and all-reduced in place (the default hook);
    - after backward, `finalize_bucket_dense` copies each reduced view back into `.grad`.
    With gradient accumulation DDP skips the sync on all but the last micro-batch (no_sync).
    """

    CAP, FIRST = 25 * 1024 * 1024, 1024 * 1024

    def __init__(self, model: torch.nn.Module):
        params = [p for p in model.parameters() if p.requires_grad][::-1]
        self.views: dict[torch.nn.Parameter, torch.Tensor] = {}
        self.buckets: list[torch.Tensor] = []
        cap, group = self.FIRST, []
        for p in params + [None]:
            size = sum(q.numel() * q.element_size() for q in group)
            if p is None or (group and (size + p.numel() * p.element_size() > cap
                                        or p.dtype != group[0].dtype)):
                if group:
                    flat = torch.empty(sum(q.numel() for q in group), dtype=group[0].dtype,
                                       device=group[0].device)
                    offset = 0
                    for q in group:
                        self.views[q] = flat[offset:offset + q.numel()].view_as(q)
                        offset += q.numel()
                    self.buckets.append(flat)
                    cap, group = self.CAP, []
            if p is not None:
                group.append(p)
        self.sync = True
        self.handles = [p.register_post_accumulate_grad_hook(self._ready) for p in params]

    def _ready(self, p):
        if self.sync:
            self.views[p].copy_(p.grad)

    def finalize(self, world: int) -> None:
        """After backward: reduce (in place) and copy back into the gradients."""
        for flat in self.buckets:
            flat.div_(world)
        for p, view in self.views.items():
            if p.grad is not None:
                p.grad.copy_(view)
