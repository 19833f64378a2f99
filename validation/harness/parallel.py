"""Data parallelism in one process (rank 0 of a `fake` process group), as torch expresses
each ZeRO stage with `amp` or `pure` precision:

- zero 0: DistributedDataParallel (what Trainer/Accelerate wrap a multi-GPU model in).
- zero 1: DDP + `ZeroRedundancyOptimizer` (optimizer states sharded by whole parameters).
- zero 2: FSDP2 `fully_shard(reshard_after_forward=False)` (Accelerate's SHARD_GRAD_OP).
- zero 3: FSDP2 `fully_shard` on every decoder layer, then the root (Accelerate's FULL_SHARD).
  `offload_params`: FSDP2's CPUOffloadPolicy (parameters, gradients and the optimizer step on
  the host; needs `offload_optimizer` too, since the step runs where the states are).

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
    if dp == 1 and zero in (0, 1, 2):
        return "single"
    return {0: "ddp", 1: "zero1"}.get(zero, "fsdp")


def mesh(dp: int, dev: torch.device):
    """The 1-D device mesh, built outside fake mode."""
    init_fake_pg(dp)
    if TRACE_DEVICE == "cuda":
        fake_cuda.patch_cuda_runtime_for_fsdp()
    from torch.distributed.device_mesh import init_device_mesh
    return init_device_mesh(dev.type, (dp,))


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
