"""The Hugging Face Trainer: `TrainingArguments` keyword arguments (transformers 5's names),
written from a scenario as a JSON object and read back as one.

Export writes the batch sizes, `optim`, the bf16/fp16 flags, activation checkpointing, and
either a nested `deepspeed` config (mixed_precision master: DeepSpeed keeps the fp32 master
copy) or FSDP2 in transformers 5's form (`fsdp=True` and `fsdp_config`). Import reads the same
arguments (and TRL's `max_length`); a nested `deepspeed` dict is imported with the DeepSpeed
rules, its `"auto"` values filled from the arguments as the Trainer does, and a conflicting
value is an error as in the Trainer.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import shown
from ..optimizers import OptimizerId, OptimizerImpl
from ..scenario import Resolved
from .common import (
    AUTO,
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
    precision_from_flags,
)
from .deepspeed import DEEPSPEED_INERT, batch_and_dp, deepspeed_config, read_deepspeed
from .reader import Reader, finish, flag, positive, text

# ---------------------------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------------------------

# `optim` names of TrainingArguments (transformers' OptimizerNames) -> the optimizer calc models
# and, where the name fixes it, its implementation; the import reads these.
OPTIM: dict[str, tuple[OptimizerId, OptimizerImpl | None]] = {
    "adamw_torch": ("adamw", "foreach"), "adamw_torch_fused": ("adamw", "fused"),
    "adamw_hf": ("adamw", "for_loop"), "adamw_apex_fused": ("adamw", "fused"),
    "adamw_bnb_8bit": ("adamw_8bit", None), "adamw_8bit": ("adamw_8bit", None),
    "paged_adamw_8bit": ("adamw_8bit", None), "paged_adamw_32bit": ("adamw", "foreach"),
    "adafactor": ("adafactor", None), "sgd": ("sgd", None), "lion_32bit": ("lion", None),
    "paged_lion_32bit": ("lion", None), "adamw_torch_npu_fused": ("adamw", "fused"),
}
# The name the export writes: AdamW (Adam too, with weight_decay 0) by implementation, the
# others by optimizer. TrainingArguments has no AdamW for-loop name (adamw_hf is deprecated) and
# its sgd no momentum.
_ADAMW_WRITTEN: dict[OptimizerImpl, str] = {"fused": "adamw_torch_fused",
                                            "foreach": "adamw_torch"}
_WRITTEN: dict[OptimizerId, str] = {"adafactor": "adafactor", "lion": "lion_32bit",
                                    "adamw_8bit": "adamw_bnb_8bit", "sgd": "sgd"}
_DEFAULT_BATCH = 8  # TrainingArguments.per_device_train_batch_size's default


# ---------------------------------------------------------------------------------------------
# Export
# ---------------------------------------------------------------------------------------------

def export_hf_trainer(r: Resolved) -> Export:
    t, p = r.training, r.parallelism
    fw = "Hugging Face Trainer"
    only_data_parallel(r, fw)
    no_partial_recompute(r, fw)
    no_fp8(r, fw)
    args: dict[str, Any] = {
        "per_device_train_batch_size": t.micro_batch_size,
        "gradient_accumulation_steps": t.gradient_accumulation_steps,
        "activation_checkpointing": t.activation_checkpointing == "full",
    }
    notes: list[str] = []
    if t.activation_checkpointing == "full":
        notes.append("activation_checkpointing: transformers 5's name; releases before 5 call "
                     "it gradient_checkpointing")
    if t.optimizer in ("adamw", "adam"):
        if t.optimizer_impl not in _ADAMW_WRITTEN:
            raise ExportError("training.optimizer_impl", "TrainingArguments' AdamW is fused "
                              "(adamw_torch_fused) or foreach (adamw_torch)")
        args["optim"] = _ADAMW_WRITTEN[t.optimizer_impl]
        if t.optimizer == "adam":
            args["weight_decay"] = 0.0
            notes.append("optimizer adam: AdamW with weight_decay 0 is the same update")
    elif t.optimizer in _WRITTEN:
        args["optim"] = _WRITTEN[t.optimizer]
    else:
        raise ExportError("training.optimizer", f"TrainingArguments has no {t.optimizer} "
                          "optimizer (its sgd has no momentum)")
    if t.precision == "fp32" or t.mixed_precision in ("amp", "autocast"):
        args["bf16"] = t.precision == "bf16"
        args["fp16"] = t.precision == "fp16"
        if t.mixed_precision == "autocast" and t.precision != "fp32":
            notes.append(f"mixed_precision autocast: load the model with torch_dtype="
                         f"torch.{TORCH_DTYPE[t.precision]} (peft keeps LoRA adapters in fp32)")
    elif t.mixed_precision == "pure":
        args["bf16"] = args["fp16"] = False
        notes.append(f"mixed_precision pure: load the model with torch_dtype="
                     f"torch.{TORCH_DTYPE[t.precision]}")
    if p.engine(t.mixed_precision) == "deepspeed" and t.precision != "fp32":
        ds, ds_notes = deepspeed_config(r)  # DeepSpeed keeps the fp32 master copy
        autocast = "torch_autocast" in ds  # the config's own: no bf16/fp16 section beside it
        args["bf16"] = t.precision == "bf16" and not autocast
        args["fp16"] = t.precision == "fp16" and not autocast
        if autocast:
            notes.append("bf16 and fp16 stay off: DeepSpeed's torch_autocast is in the nested "
                         "config, and either flag would add its bf16/fp16 section")
        args["deepspeed"] = ds
        notes += [n for n in ds_notes if not n.startswith("activation_checkpointing")]
    elif p.zero:
        # transformers 5: fsdp=True and everything in fsdp_config (an option string such as
        # "full_shard auto_wrap" is deprecated); version 2 is FSDP2, what the estimate models
        args["fsdp"] = True
        args["fsdp_config"] = {
            "version": 2, "reshard_after_forward": fsdp_reshard(r, fw),
            "cpu_offload": fsdp_offload(r, fw),
            "transformer_layer_cls_to_wrap": [DECODER_LAYER[r.arch.model_type]],
        }
        if t.activation_checkpointing == "full":
            # FSDP's own checkpointing: the TrainingArguments flag would all-gather again in
            # backward (transformers warns); the memory is the same
            args["fsdp_config"]["activation_checkpointing"] = True
            args["activation_checkpointing"] = False
        notes.append("fsdp: transformers 5's form (fsdp=True, fsdp_config); releases before 5 "
                     "take an option string (\"full_shard auto_wrap\") and FSDP1")
    elif p.offload_optimizer or p.offload_params:
        raise ExportError("parallelism.offload_optimizer", "offload needs DeepSpeed or FSDP")
    if t.loss == "chunked":
        args["use_liger_kernel"] = True
        notes.append("loss chunked: use_liger_kernel also swaps in Liger's RMSNorm, RoPE and "
                     "SwiGLU kernels")
    if p.dp > 1:
        notes.append(f"launch on {p.dp} GPUs (torchrun --nproc_per_node or accelerate launch)")
    notes += hf_notes(r, loss_expressed=True)
    return Export("hf-trainer", args, json.dumps(args, indent=2) + "\n", tuple(notes))


# ---------------------------------------------------------------------------------------------
# Import
# ---------------------------------------------------------------------------------------------

# Keys that do not change device memory (listed together in the notes, unread).
_INERT = frozenset({
    "output_dir", "overwrite_output_dir", "do_train", "do_eval", "do_predict",
    "eval_strategy", "evaluation_strategy", "prediction_loss_only", "per_device_eval_batch_size",
    "eval_accumulation_steps", "eval_delay", "learning_rate", "weight_decay", "adam_beta1",
    "adam_beta2", "adam_epsilon", "max_grad_norm", "num_train_epochs", "max_steps",
    "lr_scheduler_type", "lr_scheduler_kwargs", "warmup_ratio", "warmup_steps", "log_level",
    "logging_dir", "logging_strategy", "logging_first_step", "logging_steps", "save_strategy",
    "save_steps", "save_total_limit", "save_safetensors", "save_only_model", "seed",
    "data_seed", "eval_steps", "dataloader_num_workers", "dataloader_pin_memory",
    "dataloader_drop_last", "dataloader_persistent_workers", "dataloader_prefetch_factor",
    "run_name", "disable_tqdm", "remove_unused_columns", "label_names",
    "load_best_model_at_end", "metric_for_best_model", "greater_is_better", "report_to",
    "push_to_hub", "hub_model_id", "hub_strategy", "hub_token", "hub_private_repo",
    "resume_from_checkpoint", "ddp_find_unused_parameters", "ddp_timeout", "ddp_backend",
    "local_rank", "logging_nan_inf_filter", "include_tokens_per_second",
    "include_num_input_tokens_seen", "neftune_noise_alpha", "group_by_length",
    "length_column_name", "ignore_data_skip", "full_determinism", "tf32",
    "transformer_layer_cls_to_wrap", "backward_prefetch", "forward_prefetch",
    "use_orig_params", "sync_module_states", "cpu_ram_efficient_loading", "xla",
    "limit_all_gathers", "min_num_params", "dataset_text_field", "dataset_num_proc",
    "completion_only_loss", "assistant_only_loss", "dataset_kwargs", "eval_packing",
})


def _fsdp(value: Any, notes: list[str]) -> tuple[int, bool]:
    if value is True:  # `fsdp=True`: full_shard
        return 3, False
    if value is None or value is False:
        return 0, False
    if isinstance(value, str):
        options: list[Any] = value.split()
    elif isinstance(value, list):
        options = value
    else:  # TrainingArguments.fsdp is list[FSDPOption] | str | bool
        raise ConfigImportError("fsdp", "must be a string of options (\"full_shard offload\"), "
                                f"a list of them or true/false, got {value!r}")
    options = [str(o).lower() for o in options]
    stage, offload = 0, False
    for option in options:
        if option in ("full_shard", "shard_grad_op", "hybrid_shard", "hybrid_shard_zero2",
                      "no_shard"):
            stage = fsdp_stage(option.upper(), "fsdp", notes)
        elif option == "offload":
            offload = True
        elif option != "auto_wrap":
            raise ConfigImportError("fsdp", f"unknown option {option!r}")
    if options and stage == 0 and "no_shard" not in options:
        stage = 3  # the Trainer reads a bare option list as full_shard
    return stage, offload


def import_hf_trainer(data: dict[str, Any], dp: int | None, notes: list[str]
                      ) -> tuple[dict[str, Any], dict[str, Any]]:
    args = Reader(data, "", _INERT)
    training: dict[str, Any] = {}
    parallelism: dict[str, Any] = {"zero": 0}
    micro = args.get("per_device_train_batch_size")
    if micro is None:
        notes.append(f"per_device_train_batch_size not given: TrainingArguments' default "
                     f"{_DEFAULT_BATCH}")
        micro = _DEFAULT_BATCH
    micro = positive(args, "per_device_train_batch_size", micro)
    accumulation = positive(args, "gradient_accumulation_steps",
                             args.get("gradient_accumulation_steps", 1))
    bf16, fp16 = flag(args, "bf16"), flag(args, "fp16")
    if args.get("bf16_full_eval") or args.get("fp16_full_eval"):
        notes.append("bf16/fp16_full_eval: evaluation only")
    for key in ("max_length", "max_seq_length"):  # TRL's SFTConfig
        if (value := args.get(key)) is not None:
            training["seq_len"] = positive(args, key, value)
            notes.append(f"{key} {value} (TRL SFTConfig): read as seq_len, the longest "
                         "sequence the step sees")
    trl = any(args.get(key) is not None for key in ("max_length", "max_seq_length"))
    if args.get("packing"):
        notes.append("packing: sequences are packed to max_length; seq_len is that length")
    elif args.get("padding_free"):
        notes.append("padding_free: the batch is one row without padding (flash attention's "
                     "variable-length path); read as unpadded")
    elif trl and micro > 1:  # TRL's collator pads each batch to its longest sequence
        training["padded"] = True
        notes.append(f"packing off, {micro} sequences a batch: TRL pads them to the longest "
                     "with an attention mask, read as padded (SDPA masks every layer)")
    # transformers 5 names it activation_checkpointing(_kwargs); gradient_checkpointing(_kwargs)
    # are deprecated aliases, read only where the new name is unset (TrainingArguments
    # __post_init__, transformers 5.23)
    for new, old in (("activation_checkpointing", "gradient_checkpointing"),
                     ("activation_checkpointing_kwargs", "gradient_checkpointing_kwargs")):
        if args.get(new) is not None and args.get(old) is not None:
            notes.append(f"{old}: a deprecated alias, ignored since {new} is set")
    key = "activation_checkpointing" if args.get("activation_checkpointing") is not None \
        else "gradient_checkpointing"
    if args.get(key) is not None and flag(args, key):
        training["activation_checkpointing"] = "full"
        kw_key = "activation_checkpointing_kwargs" \
            if args.get("activation_checkpointing_kwargs") is not None \
            else "gradient_checkpointing_kwargs"
        kwargs = args.get(kw_key) or {}
        if not isinstance(kwargs, dict):
            raise ConfigImportError(kw_key, f"must be a mapping, got {kwargs!r}")
        every = kwargs.get("every_n_layers", 1)
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ConfigImportError(f"{kw_key}.every_n_layers",
                                    f"must be a positive integer, got {every!r}")
        if every > 1:
            training["_every_n_layers"] = every  # layers checkpointed: set once the model is known
        if kwargs.get("offload") is True:
            notes.append(f"{kw_key}.offload: saved activations held in host memory; not "
                         "modelled, so the estimate keeps them on the GPU (conservative)")
        if set(kwargs) - {"every_n_layers", "offload"}:
            notes.append(f"{kw_key}: {', '.join(sorted(set(kwargs) - {'every_n_layers', 'offload'}))}"
                         ": torch.utils.checkpoint options; reentrant or not, the same memory")
    optim = text(args, "optim")
    if optim is None:
        notes.append("optim not given: transformers' default adamw_torch assumed (recent "
                     "releases default to adamw_torch_fused)")
        optim = "adamw_torch"
    if optim not in OPTIM:
        training["optimizer"] = "adamw"
        notes.append(f"optim {optim}: not modelled; estimated as AdamW")
    else:
        training["optimizer"], impl = OPTIM[optim]
        if impl is not None:
            training["optimizer_impl"] = impl
        if optim.startswith("paged_"):
            notes.append(f"optim {optim}: paged states can spill to host memory; not modelled")
        if training["optimizer"] == "adamw" and "weight_decay" in data \
                and data["weight_decay"] == 0:
            training["optimizer"] = "adam"  # the export writes Adam as AdamW with decay 0
    for key in ("optim_args", "optim_target_modules"):
        if args.get(key):
            notes.append(f"{key}: not modelled")
    if flag(args, "use_liger_kernel"):
        training["loss"] = "chunked"
        notes.append("use_liger_kernel: chunked cross-entropy (Liger's RMSNorm, RoPE and "
                     "SwiGLU kernels are not modelled apart)")
    if flag(args, "torch_compile"):
        notes.append("torch_compile: compiled kernels can save activation memory; not modelled")
    deepspeed, fsdp = args.get("deepspeed"), args.get("fsdp")
    if deepspeed and fsdp:
        raise ConfigImportError("deepspeed", "contradicts fsdp: the Trainer runs one of them")
    readers = [args]
    if isinstance(deepspeed, str):
        raise ConfigImportError("deepspeed", f"is a file path ({deepspeed}); embed its JSON "
                                "here or import it with --format deepspeed")
    if deepspeed:
        if not isinstance(deepspeed, dict):
            raise ConfigImportError("deepspeed", "must be a JSON object or a path")
        ds = Reader(deepspeed, "deepspeed.", DEEPSPEED_INERT | _INERT)
        readers.append(ds)
        r = read_deepspeed(ds, notes)
        if "optimizer" in r.training and "optim" in data:
            notes.append("optim: the deepspeed config's optimizer section takes precedence")
        training |= r.training
        if training.get("optimizer") not in ("adamw", "adam"):
            training.pop("optimizer_impl", None)
        parallelism |= r.parallelism
        # The Trainer fills "auto" from its arguments and rejects values that disagree.
        ds_micro, ds_acc, ds_total = r.batch
        for name, mine, theirs in (("train_micro_batch_size_per_gpu", micro, ds_micro),
                                   ("gradient_accumulation_steps", accumulation, ds_acc)):
            if theirs not in (None, AUTO) and theirs != mine:
                raise ConfigImportError(f"deepspeed.{name}", f"{theirs} contradicts the "
                                        f"TrainingArguments value {mine}")
        micro, accumulation, dp = batch_and_dp(micro, accumulation, ds_total, dp, notes,
                                                "deepspeed.")
        for name, mine, theirs in (("bf16", bf16, r.precision[0]), ("fp16", fp16, r.precision[1])):
            if theirs != AUTO and bool(theirs) != mine:
                raise ConfigImportError(f"deepspeed.{name}.enabled", f"{theirs} contradicts "
                                        f"TrainingArguments {name}={mine}")
        if "mixed_precision" not in training:
            training |= precision_from_flags(bf16, fp16, "master", "bf16")
        else:
            training["precision"] = "fp16" if fp16 else "bf16"
    else:
        if dp is None:
            notes.append("dp: TrainingArguments do not say how many GPUs; assumed 1 (set dp)")
        dp = dp or 1
        training |= precision_from_flags(bf16, fp16, "amp", "bf16")
        if training["mixed_precision"] == "amp":
            notes.append("bf16/fp16: mixed_precision amp assumed (the model loaded in fp32); "
                         "a model loaded in bf16/fp16 is mixed_precision autocast")
        if fsdp:
            stage, offload = _fsdp(fsdp, notes)
            parallelism["zero"] = stage
            parallelism["offload_optimizer"] = parallelism["offload_params"] = offload
            notes.append("fsdp: TrainingArguments' FSDP (FSDP1 flat parameters unless "
                         "fsdp_config sets fsdp_version 2); the estimate models FSDP2")
            fsdp_cfg = args.sub("fsdp_config")
            if fsdp_cfg is not None:
                # transformers 5 reads these with or without the "fsdp_" prefix
                def setting(key: str) -> Any:
                    value = fsdp_cfg.get(key)
                    return fsdp_cfg.get(f"fsdp_{key}") if value is None else value

                if _true(setting("activation_checkpointing"),
                         "fsdp_config.activation_checkpointing"):
                    training["activation_checkpointing"] = "full"
                reshard = setting("reshard_after_forward")
                if isinstance(reshard, bool) and parallelism["zero"] == 3 and not reshard:
                    parallelism["zero"] = 2  # FSDP2 without resharding: ZeRO-2's layout
                if _true(setting("cpu_offload"), "fsdp_config.cpu_offload"):
                    parallelism["offload_optimizer"] = parallelism["offload_params"] = True
                setting("version")
                readers.append(fsdp_cfg)
    training |= {"micro_batch_size": micro, "gradient_accumulation_steps": accumulation}
    parallelism["dp"] = dp
    finish(readers, notes)
    return training, parallelism


def _true(value: Any, where: str) -> bool:
    """A TrainingArguments switch: true, false or unset; anything else is named."""
    if value is None or isinstance(value, bool):
        return bool(value)
    raise ConfigImportError(where, f"must be true or false, got {shown(value)}")
