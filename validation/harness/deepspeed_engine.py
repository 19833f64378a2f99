"""DeepSpeed's own engine (ZeRO stages 0-3) traced in one process, rank 0 of the `fake` group.

calc estimates `parallelism.framework: deepspeed` (by default, master weights) from DeepSpeed's
code; this runs that code. `deepspeed.initialize` builds the real `DeepSpeedZeroOptimizer`
(stage_1_and_2.py: the flat low-precision groups, the fp32 partition, the reduce buckets, the
gradient partition), `DeepSpeedZeroOptimizer_Stage3` (stage3.py: every parameter partitioned,
gathered by the parameter coordinator's hooks module by module, prefetched in the order the
first step recorded) or, without ZeRO, DeepSpeed's bf16 optimizer, from the config calc's
DeepSpeed export writes for the scenario, and the step is DeepSpeed's: `engine(batch)`,
`engine.backward(loss)`, `engine.step()` on every micro-batch.

What the CPU build of torch cannot run, and what stands in for it:
- DeepSpeed's CUDA accelerator asks the driver for memory statistics, NVTX ranges and
  availability: answered as a GPU would (no-ops, zeros, available). Streams and events are the
  harness's single fake stream (`fake_cuda.patch_cuda_runtime_for_fsdp`).
- The optimizer: the config's `"optimizer": {"type": "AdamW"}` builds DeepSpeed's FusedAdam,
  a CUDA extension compiled at first use. torch's fused AdamW is passed in its place (the same
  states, fp32 beside the fp32 partition, and no step temporaries either), with
  `zero_allow_untested_optimizer`. Under ZeRO-Offload it steps the host's fp32 partition in
  place of DeepSpeedCPUAdam, another compiled extension (`zero_force_ds_cpu_optimizer`
  false); the host buffers are not pinned (fake tensors cannot be), host memory either way.
- Data-dependent scalars (the overflow check's flag, a gradient norm) have no value under fake
  tensors: read as 0, so no step is skipped and no clipping scales anything. The tensors that
  compute them are allocated as on a GPU.
- ZeRO-3 marks freed partitions as used by the current stream (`record_stream`, a no-op here:
  on CUDA it delays the block's reuse, never the allocated count) and checks that every rank
  recorded the same module order by broadcasting it (the fake group's rank 0 is every rank).
  Its all-gathers run on the one fake stream: a prefetched parameter is allocated when its
  all-gather is issued, as on a GPU, where the buffer is allocated by the host before the
  stream runs it.
"""
from __future__ import annotations

import copy
import os
import sys

import torch

from .common import ROOT, Untraceable, fake_cuda

if ROOT not in sys.path:  # calc: which engine a scenario means, and its DeepSpeed config
    sys.path.insert(0, ROOT)
from calc.plan import ExportError, export  # noqa: E402
from calc.scenario import engine_of  # noqa: E402

_READY = False


def uses_deepspeed(tr: dict, par: dict) -> bool:
    """Whether calc means DeepSpeed's engine for the scenario: its framework, by default
    DeepSpeed with master weights."""
    return engine_of(par.get("framework"), tr["mixed_precision"]) == "deepspeed"


def ds_config(scenario: dict) -> dict:
    """The DeepSpeed config calc's export writes for `scenario`, its optimizer section replaced
    by torch's fused AdamW (see the module's docstring)."""
    try:
        cfg = export(scenario, "deepspeed").data
    except ExportError as e:
        raise Untraceable(f"DeepSpeed export refuses the scenario: {e}") from e
    assert isinstance(cfg, dict)
    optimizer = cfg.pop("optimizer", {})
    if optimizer.get("type") != "AdamW":
        raise Untraceable(f"DeepSpeed optimizer {optimizer.get('type')!r}: only AdamW is traced")
    cfg["zero_allow_untested_optimizer"] = True
    if "offload_optimizer" in cfg.get("zero_optimization", {}):  # torch's AdamW on the host
        cfg["zero_force_ds_cpu_optimizer"] = False
    cfg["steps_per_print"] = 1 << 30
    return cfg


def setup(world: int) -> None:
    """The fake process group, the environment DeepSpeed's launcher sets, and its CUDA
    accelerator answering as a GPU would. Once per process."""
    global _READY
    if _READY:
        return
    from . import parallel
    os.environ.update(DS_ACCELERATOR="cuda", LOCAL_RANK="0", RANK="0", WORLD_SIZE=str(world),
                      MASTER_ADDR="localhost", MASTER_PORT="29500")
    parallel.init_fake_pg(world)
    fake_cuda.patch_cuda_runtime_for_fsdp()
    from deepspeed.accelerator import get_accelerator
    acc = get_accelerator()
    acc.is_available = lambda: True
    for name in ("empty_cache", "reset_peak_memory_stats", "reset_max_memory_allocated",
                 "reset_max_memory_cached", "synchronize", "range_push", "range_pop"):
        setattr(acc, name, lambda *a, **k: None)
    for name in ("memory_allocated", "max_memory_allocated", "memory_reserved",
                 "max_memory_reserved", "memory_cached", "max_memory_cached", "total_memory",
                 "available_memory"):
        setattr(acc, name, lambda *a, **k: 0)
    acc.memory_stats = lambda *a, **k: {}
    # ZeRO-Offload pins its host buffers: host memory either way, and fake tensors cannot pin
    acc.pin_memory = lambda tensor, align_bytes=1: tensor
    acc.is_pinned = lambda tensor: True
    # ZeRO-3 marks a freed partition as used by the (single, fake) current stream: on CUDA that
    # delays the block's reuse, never max_memory_allocated's count (it drops at the free)
    torch.Tensor.record_stream = lambda self, stream: None
    # ZeRO-3 checks that every rank recorded the same module order by broadcasting it: rank 0
    # of the fake group is every rank (its broadcast would read back zeros)
    from deepspeed.runtime.zero import partition_parameters, partitioned_param_coordinator, utils
    for module in (utils, partition_parameters, partitioned_param_coordinator):
        module.assert_ints_same_as_other_ranks = lambda ints: None
    _zero_scalars()
    _READY = True


def _zero_scalars() -> None:
    """`.item()` on a fake tensor reads 0 (False for a flag) instead of raising."""
    from torch._subclasses import fake_impls
    op = torch.ops.aten._local_scalar_dense.default

    def scalar(fake_mode, func, arg):
        return False if arg.dtype == torch.bool else 0.0 if arg.dtype.is_floating_point else 0
    fake_impls.op_implementations_dict[op] = scalar


def initialize(model: torch.nn.Module, optimizer: torch.optim.Optimizer, cfg: dict):
    """(engine, DeepSpeed's optimizer). The model is already on the fake device: DeepSpeed's
    `module.to(device)` would swap every parameter for an identical one."""
    import deepspeed
    model.to = lambda *a, **k: model
    engine, ds_optimizer, _, _ = deepspeed.initialize(model=model, optimizer=optimizer,
                                                      config=copy.deepcopy(cfg),
                                                      dist_init_required=False)
    return engine, ds_optimizer
