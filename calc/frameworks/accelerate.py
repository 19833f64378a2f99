"""Accelerate: the YAML `accelerate config` writes
(https://huggingface.co/docs/accelerate/usage_guides/fsdp), written from a scenario as FSDP2 and
read back as one.

Export writes `distributed_type: FSDP` with FSDP2 (`fsdp_version: 2`), the decoder layer to
wrap, resharding (zero 3) or not (zero 2), CPU offload and activation checkpointing; the batch
sizes and the optimizer belong to the training script and come back as notes. Import reads
FSDP1 or FSDP2 and also `distributed_type` MULTI_GPU, NO and DEEPSPEED with an inline
`deepspeed_config`; only the YAML subset Accelerate writes is read (`.yaml`), and JSON is
accepted too.
"""

from __future__ import annotations

from typing import Any

from ..scenario import Resolved
from .common import (
    DECODER_LAYER,
    TORCH_DTYPE,
    ConfigImportError,
    Export,
    ExportError,
    fsdp_offload,
    fsdp_reshard,
    fsdp_stage,
    hf_notes,
    no_fp8,
    no_partial_recompute,
    only_data_parallel,
    torch_engine,
)
from .deepspeed import DEEPSPEED_INERT
from .reader import Reader, finish, flag, integer, positive, text
from .yaml import to_yaml

# ---------------------------------------------------------------------------------------------
# Export
# ---------------------------------------------------------------------------------------------

def _mixed_precision(r: Resolved, framework: str) -> tuple[str, list[str]]:
    t = r.training
    no_fp8(r, framework)
    if t.precision == "fp32":
        return "no", []
    if t.mixed_precision == "amp":
        return t.precision, []
    if t.mixed_precision == "autocast":
        return t.precision, [f"mixed_precision autocast: load the model with torch_dtype="
                             f"torch.{TORCH_DTYPE[t.precision]} (peft keeps LoRA adapters in "
                             "fp32)"]
    if t.mixed_precision == "pure":
        return "no", [f"mixed_precision pure: load the model with torch_dtype="
                      f"torch.{TORCH_DTYPE[t.precision]}"]
    raise ExportError("training.mixed_precision", f"{framework} keeps no separate fp32 master "
                      "copy: use amp (fp32 sharded weights, low-precision compute), autocast or "
                      "pure")


def export_accelerate_fsdp(r: Resolved) -> Export:
    t, p = r.training, r.parallelism
    fw = "Accelerate FSDP"
    only_data_parallel(r, fw)
    torch_engine(r, fw)
    no_partial_recompute(r, fw)
    reshard = fsdp_reshard(r, fw)
    offload = fsdp_offload(r, fw)
    mixed, notes = _mixed_precision(r, fw)
    cfg: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "distributed_type": "FSDP",
        "fsdp_config": {
            "fsdp_version": 2,
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_transformer_layer_cls_to_wrap": DECODER_LAYER[r.arch.model_type],
            "fsdp_reshard_after_forward": reshard,
            "fsdp_offload_params": offload,
            "fsdp_activation_checkpointing": t.activation_checkpointing == "full",
            "fsdp_cpu_ram_efficient_loading": True,
            "fsdp_state_dict_type": "SHARDED_STATE_DICT",
        },
        "mixed_precision": mixed,
        "num_machines": 1,
        "num_processes": p.world_size,
        "machine_rank": 0,
        "rdzv_backend": "static",
        "same_network": True,
        "use_cpu": False,
    }
    if p.world_size > 8:
        notes.append("several nodes: set num_machines, machine_rank and main_process_ip")
    notes.append(f"micro_batch_size {t.micro_batch_size}, gradient_accumulation_steps "
                 f"{t.gradient_accumulation_steps}, optimizer {t.optimizer}: set in the "
                 "training script (or TrainingArguments)")
    notes += hf_notes(r)
    return Export("accelerate-fsdp", cfg, to_yaml(cfg), tuple(notes))


# ---------------------------------------------------------------------------------------------
# Import
# ---------------------------------------------------------------------------------------------

# Keys that do not change device memory (listed together in the notes, unread).
_INERT = frozenset({
    "compute_environment", "debug", "machine_rank", "main_process_ip", "main_process_port",
    "main_training_function", "rdzv_backend", "same_network", "tpu_env", "tpu_use_cluster",
    "tpu_use_sudo", "enable_cpu_affinity", "gpu_ids", "downcast_bf16", "num_machines",
    "fsdp_auto_wrap_policy", "fsdp_transformer_layer_cls_to_wrap", "fsdp_min_num_params",
    "fsdp_backward_prefetch", "fsdp_backward_prefetch_policy", "fsdp_forward_prefetch",
    "fsdp_state_dict_type", "fsdp_sync_module_states", "fsdp_use_orig_params",
    "fsdp_cpu_ram_efficient_loading", "zero3_init_flag", "zero3_save_16bit_model",
    "gradient_clipping", "deepspeed_multinode_launcher", "dynamo_config", "ipex_config",
    "mpirun_config", "tpu_name", "tpu_zone", "commands", "command_file",
})


def import_accelerate(data: dict[str, Any], dp: int | None, notes: list[str]
                      ) -> tuple[dict[str, Any], dict[str, Any]]:
    cfg = Reader(data, "", _INERT | DEEPSPEED_INERT)
    training: dict[str, Any] = {}
    parallelism: dict[str, Any] = {}
    kind = (text(cfg, "distributed_type", "NO") or "NO").upper()
    if flag(cfg, "use_cpu"):
        raise ConfigImportError("use_cpu", "is true: the job runs on the CPU, not a GPU")
    processes = cfg.get("num_processes", 1)
    processes = positive(cfg, "num_processes", processes)
    if dp is not None and dp != processes:
        notes.append(f"dp {dp} given; the config says num_processes {processes}")
    dp = dp or processes
    mixed = cfg.get("mixed_precision", "no")
    if mixed is False:  # an unquoted `no` read as YAML 1.1
        mixed = "no"
    if mixed not in ("no", "bf16", "fp16", "fp8"):
        raise ConfigImportError("mixed_precision", f"must be no, bf16, fp16 or fp8, got "
                                f"{mixed!r}")
    low_precision = "amp"
    if kind == "FSDP":
        fsdp = cfg.sub("fsdp_config") or Reader({}, "fsdp_config.", cfg.inert)
        version = integer(fsdp, "fsdp_version", 1, (1, 2))
        if version == 1:
            notes.append("fsdp_version 1: FSDP1 flat parameters; the estimate models FSDP2 "
                         "(per-parameter sharding), usually within a few percent")
        stages = {}
        for key in ("fsdp_reshard_after_forward", "fsdp_sharding_strategy"):
            value = fsdp.get(key)
            if value is not None:
                stages[key] = fsdp_stage(value, f"fsdp_config.{key}", notes)
        if len(set(stages.values())) > 1:
            raise ConfigImportError("fsdp_config.fsdp_sharding_strategy",
                                    f"contradicts fsdp_reshard_after_forward ({stages})")
        parallelism["zero"] = next(iter(stages.values()), 3)  # Accelerate's default FULL_SHARD
        offload = flag(fsdp, "fsdp_offload_params")
        parallelism["offload_params"] = parallelism["offload_optimizer"] = offload
        if offload and parallelism["zero"] < 2:
            raise ConfigImportError("fsdp_config.fsdp_offload_params", "offload with NO_SHARD "
                                    "is not modelled; shard (FULL_SHARD) to offload")
        if flag(fsdp, "fsdp_activation_checkpointing"):
            training["activation_checkpointing"] = "full"
    elif kind == "DEEPSPEED":
        ds = cfg.sub("deepspeed_config") or Reader({}, "deepspeed_config.", cfg.inert)
        if ds.get("deepspeed_config_file"):
            raise ConfigImportError("deepspeed_config.deepspeed_config_file",
                                    "the settings are in that file: import it with "
                                    "--format deepspeed")
        stage = integer(ds, "zero_stage", 2, (0, 1, 2, 3))
        parallelism["zero"] = stage
        for key, field in (("offload_optimizer_device", "offload_optimizer"),
                           ("offload_param_device", "offload_params")):
            device = text(ds, key, "none")
            if device not in ("none", "cpu", "nvme", None):
                raise ConfigImportError(f"deepspeed_config.{key}", f"must be none, cpu or "
                                        f"nvme, got {device!r}")
            parallelism[field] = device in ("cpu", "nvme")
        if parallelism["offload_params"] and stage != 3:
            raise ConfigImportError("deepspeed_config.offload_param_device",
                                    "DeepSpeed offloads parameters only with zero_stage 3")
        if parallelism["offload_optimizer"] and stage == 0:
            raise ConfigImportError("deepspeed_config.offload_optimizer_device",
                                    "ZeRO-Offload needs zero_stage 1, 2 or 3")
        accumulation = ds.get("gradient_accumulation_steps")
        if accumulation is not None:
            training["gradient_accumulation_steps"] = positive(
                ds, "gradient_accumulation_steps", accumulation)
        low_precision = "master"
    elif kind in ("MULTI_GPU", "NO"):
        parallelism["zero"] = 0
        if kind == "NO" and dp > 1:
            raise ConfigImportError("distributed_type", f"NO (one process) contradicts "
                                    f"num_processes / dp {dp}")
    else:
        raise ConfigImportError("distributed_type", f"{kind} is not read by this importer "
                                "(FSDP, DEEPSPEED, MULTI_GPU, NO)")
    parallelism["dp"] = dp
    if mixed == "no":
        training |= {"precision": "fp32", "mixed_precision": "pure"}
        notes.append("mixed_precision no: fp32 training, or a model loaded in bf16/fp16 "
                     "(torch_dtype), which the config does not say; imported as fp32")
    else:
        training |= {"precision": mixed, "mixed_precision": low_precision}
        if low_precision == "amp":
            notes.append(f"mixed_precision {mixed}: amp assumed (the model loaded in fp32); a "
                         f"model loaded in {mixed} is mixed_precision autocast")
        if mixed == "fp8":
            notes.append("mixed_precision fp8: the recipe (Transformer Engine, torchao, "
                         "MS-AMP) is not read")
            cfg.get("fp8_config")
    notes.append("micro-batch, gradient accumulation (FSDP), optimizer and sequence length are "
                 "set in the training script: scenario defaults used")
    finish([cfg], notes)
    return training, parallelism
