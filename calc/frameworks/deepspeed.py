"""DeepSpeed: the JSON config (https://www.deepspeed.ai/docs/config-json/), written from a
scenario and read back as one.

Export writes batch sizes (`train_batch_size` = micro-batch x accumulation x dp), the bf16/fp16
section (DeepSpeed keeps fp32 master weights in the optimizer: mixed_precision master) or, for
mixed_precision amp at ZeRO 0-2, the `torch_autocast` section (DeepSpeed >= 0.17.2), ZeRO
and its CPU offload, the optimizer and the `activation_checkpointing` section. Import reads the
same sections; `"auto"` values (filled in by the HF Trainer) are read as unknown, with a note,
and a `train_batch_size` that is not micro-batch x accumulation x dp is an error.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from ..coordinator import zero_sizes
from ..errors import shown
from ..optimizers import OptimizerId
from ..scenario import ZERO_SIZES, Resolved
from .common import (
    AUTO,
    TORCH_DTYPE,
    ConfigImportError,
    Export,
    ExportError,
    hf_notes,
    no_fp8,
    no_partial_recompute,
    only_data_parallel,
    precision_from_flags,
)
from .reader import Reader, enabled, finish, integer, text

# ---------------------------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------------------------

# Keys that do not change device memory (the import lists them together, unread).
DEEPSPEED_INERT = frozenset({
    "steps_per_print", "wall_clock_breakdown", "gradient_clipping", "scheduler", "lr", "betas",
    "eps", "weight_decay", "prescale_gradients", "gradient_predivide_factor", "dump_state",
    "tensorboard", "wandb", "csv_monitor", "comet", "flops_profiler", "comms_logger",
    "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "loss_scale",
    "loss_scale_window", "initial_scale_power", "hysteresis", "min_loss_scale",
    "consecutive_hysteresis", "bias_correction", "amsgrad", "memory_breakdown",
    "stage3_gather_16bit_weights_on_model_save", "gather_16bit_weights_on_model_save",
    "synchronize_checkpoint_boundary", "profile", "checkpoint", "seed",
    "pin_memory",  # pinned host buffers for offload: host memory, not device
})

# The optimizer types the config names, by scenario optimizer. Adam and AdamW are one class
# (FusedAdam, or torch's foreach Adam with `torch_adam`; no for-loop) told apart by
# `adam_w_mode`; another name is built as that torch.optim class (SGD, its momentum a parameter),
# which ZeRO runs only with `zero_allow_untested_optimizer`.
OPTIMIZER_TYPES: dict[OptimizerId, str] = {
    "adamw": "AdamW", "adam": "Adam", "lion": "Lion", "sgd": "SGD", "sgd_momentum": "SGD"}
# Types DeepSpeed builds by name that keep what a scenario optimizer keeps (import only).
SIMILAR: dict[str, OptimizerId] = {
    "lamb": "adamw", "onebitadam": "adamw", "zerooneadam": "adamw", "onebitlamb": "adamw",
    "fusedlamb": "adamw", "adagrad": "sgd_momentum", "cpuadam": "adamw",
    "deepspeedcpuadam": "adamw", "fusedadam": "adamw"}


# ---------------------------------------------------------------------------------------------
# Export
# ---------------------------------------------------------------------------------------------

def zero_settings(r: Resolved) -> dict[str, int]:
    """The ZeRO sizes the estimate counts, in elements (calc.coordinator.zero_sizes): the
    scenario's, or the reduce and prefetch buckets and the persistence threshold as the HF
    Trainer fills their "auto" and DeepSpeed's own defaults for the rest; those of stage 3 at
    stage 3 only."""
    sizes = zero_sizes(r.arch.hidden_size, r.parallelism)
    names = ZERO_SIZES if r.parallelism.zero == 3 else ZERO_SIZES[:1]
    return dict(zip(names, sizes[:len(names)], strict=True))


def deepspeed_config(r: Resolved) -> tuple[dict[str, Any], list[str]]:
    """The config as a mapping and its notes (the HF Trainer export nests it)."""
    t, p = r.training, r.parallelism
    fw = "DeepSpeed"
    only_data_parallel(r, fw)
    no_partial_recompute(r, fw)
    no_fp8(r, fw)
    notes: list[str] = []
    cfg: dict[str, Any] = {
        "train_batch_size": t.micro_batch_size * t.gradient_accumulation_steps * p.dp,
        "train_micro_batch_size_per_gpu": t.micro_batch_size,
        "gradient_accumulation_steps": t.gradient_accumulation_steps,
    }
    if t.precision != "fp32" and t.mixed_precision == "amp":
        cfg["torch_autocast"] = _torch_autocast(r, notes)
    elif t.precision != "fp32":
        if t.mixed_precision != "master":
            raise ExportError("training.mixed_precision", f"DeepSpeed's {t.precision} mode keeps "
                              f"{t.precision} weights with fp32 master weights in the optimizer: "
                              f"that is mixed_precision master, not {t.mixed_precision}")
        cfg[t.precision] = {"enabled": True}
        if t.precision == "fp16":
            cfg["fp16"]["loss_scale"] = 0  # dynamic loss scaling
    _engine_note(r, notes)
    zero: dict[str, Any] = {"stage": p.zero}
    if p.zero:  # the sizes calc counts (`zero_settings`)
        zero.update(zero_settings(r))
    if p.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if p.offload_params:
        if p.zero != 3:
            raise ExportError("parallelism.offload_params", "DeepSpeed offloads parameters "
                              "only with zero 3")
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    cfg["zero_optimization"] = zero
    cfg["optimizer"] = _optimizer(r)
    if cfg["optimizer"]["type"] == "SGD" and p.zero:  # a torch.optim class, "untested" by ZeRO
        cfg["zero_allow_untested_optimizer"] = True
    if t.activation_checkpointing == "full":
        cfg["activation_checkpointing"] = {
            "partition_activations": False, "cpu_checkpointing": False,
            "contiguous_memory_optimization": False, "synchronize_checkpoint_boundary": False,
        }
        notes.append("activation_checkpointing full: Hugging Face models also need "
                     "model.activation_checkpointing_enable() (TrainingArguments "
                     "activation_checkpointing=True; gradient_checkpointing before "
                     "transformers 5); the section above configures deepspeed.checkpointing")
    notes.append("optimizer: set lr, betas and weight_decay in optimizer.params")
    return cfg, notes


def _torch_autocast(r: Resolved, notes: list[str]) -> dict[str, Any]:
    """mixed_precision amp as DeepSpeed's `torch_autocast` section (DeepSpeed >= 0.17.2,
    deepspeed/runtime/torch_autocast.py): fp32 parameters, gradients and optimizer states, the
    forward under torch.autocast in `dtype`, the gradients of nn.Linear reduced in `dtype`. It
    excludes the bf16/fp16 sections. At ZeRO-3 the nn.Linear weights are all-gathered in
    `dtype` (their communication dtype) and held as their fp32 parameters, and its linear
    casts inside autocast, keeping its fp32 input."""
    t = r.training
    notes.append("torch_autocast: needs DeepSpeed >= 0.17.2, the release that added it; load "
                 "the model in fp32 and let the engine apply autocast (no torch.autocast "
                 "around its forward)")
    return {"enabled": True, "dtype": TORCH_DTYPE[t.precision]}


def _engine_note(r: Resolved, notes: list[str]) -> None:
    """A scenario estimated as torch's form (fp32 parameters, no framework named) runs
    DeepSpeed's own ZeRO in this config: the note gives both figures, from the estimator."""
    t, p = r.training, r.parallelism
    if not p.zero or p.engine(t.mixed_precision) != "torch":
        return
    from ..estimate import estimate  # the estimator, not a formula of its own here

    scenario = r.scenario.model_dump(mode="json")
    torch_form = estimate(scenario).device_bytes
    scenario["parallelism"]["framework"] = "deepspeed"
    own = estimate(scenario).device_bytes
    form = ("ZeroRedundancyOptimizer", "FSDP2", "FSDP2")[p.zero - 1]
    notes.append(f"zero {p.zero} with fp32 parameters: the scenario is estimated as torch's "
                 f"form ({form}, {torch_form / 1024**3:,.1f} GiB per GPU); this config runs "
                 f"DeepSpeed's ZeRO-{p.zero}: {own / 1024**3:,.1f} GiB (set "
                 "parallelism.framework deepspeed to estimate it)")


def _optimizer(r: Resolved) -> dict[str, Any]:
    t = r.training
    kind = OPTIMIZER_TYPES.get(t.optimizer)
    if kind is None:
        raise ExportError("training.optimizer", f"DeepSpeed's config has no {t.optimizer} "
                          "optimizer; pass it to deepspeed.initialize(optimizer=...) in code")
    if kind == "SGD":
        return {"type": kind, "params": {"momentum": 0.9 if t.optimizer == "sgd_momentum"
                                         else 0.0}}
    if kind == "Lion":
        return {"type": kind, "params": {}}
    if t.optimizer_impl == "for_loop":
        raise ExportError("training.optimizer_impl", "DeepSpeed's Adam is fused "
                          "(FusedAdam) or torch's foreach (torch_adam); no for_loop")
    params: dict[str, Any] = {}
    if t.optimizer == "adam":
        params["adam_w_mode"] = False
    if t.optimizer_impl == "foreach":
        params["torch_adam"] = True
    return {"type": kind, "params": params}


def export_deepspeed(r: Resolved) -> Export:
    cfg, notes = deepspeed_config(r)
    notes += hf_notes(r)
    return Export("deepspeed", cfg, json.dumps(cfg, indent=2) + "\n", tuple(notes))


# ---------------------------------------------------------------------------------------------
# Import
# ---------------------------------------------------------------------------------------------

def _size(zero: Reader, key: str) -> int | None:
    """A ZeRO size as DeepSpeed's pydantic config reads it: an integer, an integral float (1e9)
    or a string of digits; None where it is absent or "auto" (the HF Trainer's)."""
    value = zero.get(key, AUTO)
    if value == AUTO:
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigImportError(zero.path(key), f"must be a number of elements, got "
                                f"{shown(value)}")
    return value


class DeepSpeedSettings(NamedTuple):
    training: dict[str, Any]
    parallelism: dict[str, Any]
    batch: tuple[Any, Any, Any]  # micro, accumulation, train_batch_size as written
    precision: tuple[Any, Any]  # bf16.enabled, fp16.enabled as written


def read_deepspeed(ds: Reader, notes: list[str]) -> DeepSpeedSettings:
    """The DeepSpeed sections (batch sizes are returned raw: their meaning needs dp)."""
    training: dict[str, Any] = {}
    parallelism: dict[str, Any] = {"framework": "deepspeed"}  # its engine, whatever precision
    batch = (ds.get("train_micro_batch_size_per_gpu"), ds.get("gradient_accumulation_steps"),
             ds.get("train_batch_size"))
    switches: list[bool | str] = []
    for name in ("bf16", "fp16"):
        section = ds.sub(name)
        if name == "bf16" and section is None:
            section = ds.sub("bfloat16")  # the old spelling
        switches.append(enabled(section))
    for name in ("amp", "torch_autocast"):
        section = ds.sub(name)
        if section is not None and enabled(section) is True:
            notes.append(f"{name}.enabled: DeepSpeed's {name} keeps fp32 weights and computes "
                         "under autocast; imported as mixed_precision amp")
            training["mixed_precision"] = "amp"
            dtype = section.get("dtype")  # DeepSpeed's DtypeEnum spellings
            if dtype in ("float16", "fp16", "half", "torch.float16"):
                training["precision"] = "fp16"
    zero = ds.sub("zero_optimization")
    stage = 0
    if zero is not None:
        stage = integer(zero, "stage", 0, (0, 1, 2, 3), digits=True)
        for key in ZERO_SIZES:
            value = _size(zero, key)
            if value is None:
                continue
            if stage == 0 or (stage < 3 and key != "reduce_bucket_size"):
                notes.append(f"zero_optimization.{key}: DeepSpeed ignores it at stage {stage}")
            else:
                parallelism[key] = value
        for key, field in (("offload_optimizer", "offload_optimizer"),
                           ("offload_param", "offload_params")):
            section = zero.sub(key)
            device = text(section, "device", "none") if section is not None else "none"
            if device in ("cpu", "nvme"):
                parallelism[field] = True
                if device == "nvme":
                    notes.append(f"zero_optimization.{key}.device nvme: read as host (CPU) "
                                 "offload; device memory is the same")
                if section is not None and section.get("ratio", 1) != 1:
                    notes.append(f"zero_optimization.{key}.ratio: partial offload is not "
                                 "modelled; estimated as offloading everything")
            elif device not in ("none", None):
                raise ConfigImportError(f"zero_optimization.{key}.device",
                                        f"must be cpu, nvme or none, got {device!r}")
        for key in ("cpu_offload", "cpu_offload_params"):  # pre-0.3 spellings
            if enabled(zero, key) is True:
                parallelism["offload_optimizer" if key == "cpu_offload" else "offload_params"] = True
        if parallelism.get("offload_params") and stage != 3:
            raise ConfigImportError("zero_optimization.offload_param", f"DeepSpeed offloads "
                                    f"parameters only with stage 3, not stage {stage}")
        if parallelism.get("offload_optimizer") and stage == 0:
            raise ConfigImportError("zero_optimization.offload_optimizer",
                                    "ZeRO-Offload needs stage 1, 2 or 3")
    parallelism["zero"] = stage
    optimizer = ds.sub("optimizer")
    if optimizer is None:
        notes.append("no optimizer section: the optimizer is built in code (or by the HF "
                     "Trainer); assumed AdamW")
    else:
        kind = (text(optimizer, "type", "") or "").lower()
        params = optimizer.sub("params") or Reader({}, "optimizer.params.", ds.inert)
        if kind in ("adam", "adamw"):
            adam_w = "adam_w_mode" not in params.data or enabled(params, "adam_w_mode") is True
            training["optimizer"] = "adam" if kind == "adam" and not adam_w else "adamw"
            if kind == "adam" and adam_w:
                notes.append("optimizer.type Adam: DeepSpeed defaults to adam_w_mode true, so "
                             "this is AdamW (the same memory either way)")
            training["optimizer_impl"] = "foreach" if enabled(params, "torch_adam") is True \
                else "fused"
        elif kind == "lion":
            training["optimizer"] = "lion"
        elif kind == "sgd":
            momentum = params.get("momentum", 0)
            if isinstance(momentum, bool) or not isinstance(momentum, int | float):
                raise ConfigImportError("optimizer.params.momentum",
                                        f"must be a number, got {shown(momentum)}")
            training["optimizer"] = "sgd_momentum" if momentum else "sgd"
        elif kind in SIMILAR:
            training["optimizer"] = SIMILAR[kind]
            notes.append(f"optimizer.type {optimizer.data.get('type')}: estimated as "
                         f"{SIMILAR[kind]} (the same optimizer states)")
        else:
            training["optimizer"] = "adamw"
            notes.append(f"optimizer.type {optimizer.data.get('type')!r}: not known; "
                         "estimated as AdamW")
    ckpt = ds.sub("activation_checkpointing")
    if ckpt is not None:
        training["activation_checkpointing"] = "full"
        notes.append("activation_checkpointing: the section configures deepspeed.checkpointing; "
                     "it takes effect only if the model calls it (HF models: "
                     "gradient_checkpointing_enable()); imported as full")
        for key, what in (("partition_activations", "splits the checkpoints over tp ranks"),
                          ("cpu_checkpointing", "moves the checkpoints to the CPU")):
            if enabled(ckpt, key) is True:
                notes.append(f"activation_checkpointing.{key}: {what}; not modelled, the "
                             "estimate keeps them on the GPU")
        ckpt.get("contiguous_memory_optimization")
        ckpt.get("number_checkpoints")
    return DeepSpeedSettings(training, parallelism, batch, (switches[0], switches[1]))


def batch_and_dp(
    micro: Any, accumulation: Any, total: Any, dp: int | None, notes: list[str],
    where: str = "",
) -> tuple[int, int, int]:
    """DeepSpeed's rule train_batch_size = micro x accumulation x dp, solved for what is
    missing (`None`: not given or "auto")."""
    names = (f"{where}train_micro_batch_size_per_gpu", f"{where}gradient_accumulation_steps",
             f"{where}train_batch_size")
    vals: list[int | None] = []
    for name, value in zip(names, (micro, accumulation, total), strict=True):
        if value is None or value == AUTO:
            vals.append(None)
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigImportError(name, f"must be a positive integer, got {value!r}")
        vals.append(value)
    m, g, t = vals
    if t is None:
        if dp is None:
            notes.append("dp: not in the config; assumed 1 (set dp, the number of GPUs)")
        dp = dp or 1
        return m or 1, g or 1, dp
    if dp is None:
        if m is None or g is None:
            notes.append(f"{names[2]} {t} without both micro-batch and accumulation: the "
                         "missing one assumed 1")
            m, g = (m or 1), (g or 1)
        if t % (m * g):
            raise ConfigImportError(names[2], f"{t} is not a multiple of micro-batch x "
                                    f"accumulation ({m} x {g})")
        return m, g, t // (m * g)
    if m is None and g is None:
        m = 1
    if m is None:
        assert g is not None
        if t % (g * dp):
            raise ConfigImportError(names[2], f"{t} is not a multiple of accumulation x dp "
                                    f"({g} x {dp})")
        return t // (g * dp), g, dp
    if g is None:
        if t % (m * dp):
            raise ConfigImportError(names[2], f"{t} is not a multiple of micro-batch x dp "
                                    f"({m} x {dp})")
        return m, t // (m * dp), dp
    if m * g * dp != t:
        raise ConfigImportError(names[2], f"{t} != micro-batch x accumulation x dp "
                                f"({m} x {g} x {dp} = {m * g * dp})")
    return m, g, dp


def import_deepspeed(data: dict[str, Any], dp: int | None, notes: list[str]
                     ) -> tuple[dict[str, Any], dict[str, Any]]:
    ds = Reader(data, "", DEEPSPEED_INERT)
    r = read_deepspeed(ds, notes)
    training, parallelism = r.training, r.parallelism
    for name, value in zip(("train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                            "train_batch_size"), r.batch, strict=True):
        if value == AUTO:
            notes.append(f"{name} auto: filled in by the HF Trainer; import the "
                         "TrainingArguments (--format hf-trainer) for the real value")
    m, g, dp = batch_and_dp(*r.batch, dp, notes)
    training |= {"micro_batch_size": m, "gradient_accumulation_steps": g}
    parallelism["dp"] = dp
    bf16, fp16 = r.precision
    if AUTO in (bf16, fp16):
        notes.append("bf16/fp16 enabled auto: set by the HF Trainer from its bf16/fp16 "
                     "flags; assumed bf16")
        bf16, fp16 = (True, False) if bf16 == AUTO else (bf16, fp16)
    if "mixed_precision" not in training:
        training |= precision_from_flags(bf16, fp16, "master", "fp16.enabled")
    elif "precision" not in training:
        training["precision"] = "fp16" if fp16 is True else "bf16"
    finish([ds], notes)
    return training, parallelism
