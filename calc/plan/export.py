"""Framework configuration export: the scenario as DeepSpeed, Accelerate FSDP, torchtitan,
Megatron-LM or Hugging Face Trainer settings.

Every scenario setting is either written into the output, named in `notes` (it belongs to
another place: the model loading, peft, the data pipeline) or refused with an
:class:`ExportError` naming the field, when the framework cannot run it that way. Nothing is
dropped silently. Learning rates and schedules are not part of a scenario and not exported.

Keys follow each framework's documentation:
- DeepSpeed: https://www.deepspeed.ai/docs/config-json/
- Accelerate (FSDP2): https://huggingface.co/docs/accelerate/usage_guides/fsdp
- torchtitan 0.3.0 (PyPI), which reads no TOML job files: `ConfigManager.parse_args` in
  torchtitan/config/manager.py takes `--module` and `--config` (a function of the model's
  config_registry.py) and tyro overrides of `Trainer.Config` (torchtitan/trainer.py; the
  `training` and `parallelism` fields in torchtitan/config/configs.py, `optimizer` in
  components/optimizer/optimizer.py, `loss` in components/loss.py); activation checkpointing
  is a subcommand (`ActivationCheckpointingConfig` in distributed/activation_checkpoint.py)
- Megatron-LM: megatron/training/arguments.py, which the megatron-core wheel ships from 0.17
  (checked against 0.19.2)
- transformers: `TrainingArguments`
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from ..architecture import Architecture
from ..errors import FieldError
from ..scenario import Resolved, parse_scenario, resolve
from ._common import ScenarioInput
from ._formats import to_yaml

ExportFormat = Literal["deepspeed", "accelerate-fsdp", "torchtitan", "megatron", "hf-trainer"]
FORMATS: tuple[str, ...] = get_args(ExportFormat)


class ExportError(FieldError):
    """The target framework cannot express a setting: `field` names it, `message` says why."""


@dataclass(frozen=True, slots=True)
class Export:
    """A rendered configuration (`text`), its data, and the settings that live elsewhere."""

    format: ExportFormat
    data: dict[str, Any] | list[str]
    text: str
    notes: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        return {"format": self.format, "config": self.data, "text": self.text,
                "notes": list(self.notes)}


# HF decoder-layer classes, for FSDP's transformer-based auto-wrap policy.
DECODER_LAYER = {
    "llama": "LlamaDecoderLayer", "mistral": "MistralDecoderLayer",
    "mixtral": "MixtralDecoderLayer", "qwen2": "Qwen2DecoderLayer",
    "qwen2_moe": "Qwen2MoeDecoderLayer", "qwen3": "Qwen3DecoderLayer",
    "qwen3_moe": "Qwen3MoeDecoderLayer", "gemma": "GemmaDecoderLayer",
    "gemma2": "Gemma2DecoderLayer", "gemma3_text": "Gemma3DecoderLayer",
    "phi3": "Phi3DecoderLayer", "gpt2": "GPT2Block", "deepseek_v3": "DeepseekV3DecoderLayer",
}

# torchtitan 0.3.0's config registry: preset id -> (--module, --config function). The function
# fixes the model (its flavor is no command-line setting), so presets without one are refused.
TORCHTITAN_CONFIGS = {
    "llama-3-8b": ("llama3", "llama3_8b"), "llama-3.1-8b": ("llama3", "llama3_8b"),
    "llama-3-70b": ("llama3", "llama3_70b"), "llama-3.1-70b": ("llama3", "llama3_70b"),
    "qwen3-0.6b": ("qwen3", "qwen3_0_6b"), "qwen3-32b": ("qwen3", "qwen3_32b"),
    "qwen3-30b-a3b": ("qwen3", "qwen3_30b_a3b"), "deepseek-v3": ("deepseek_v3", "deepseek_v3_671b"),
}
_TORCHTITAN_NO_CONFIG = {
    "llama-3.1-405b": "its llama3_405b config trains with Float8 linear layers",
    "qwen3-8b": "the 8B flavor has only NVFP4 and SFT configs",
}

_DTYPE = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def export(scenario: ScenarioInput, format: ExportFormat) -> Export:
    """The scenario as `format`'s configuration; :class:`ExportError` where it cannot be.

        >>> e = export({"model": "llama-3-8b", "training": {"mixed_precision": "master"},
        ...             "parallelism": {"dp": 8, "zero": 3}}, "deepspeed")
        >>> e.data["zero_optimization"]["stage"], e.data["train_batch_size"]
        (3, 8)
    """
    if format not in FORMATS:
        raise ExportError("format", f"unknown format {format!r}; known: {', '.join(FORMATS)}")
    r = resolve(parse_scenario(scenario))
    return _EXPORTERS[format](r)


# ---------------------------------------------------------------------------------------------
# Shared rules
# ---------------------------------------------------------------------------------------------

def _only_data_parallel(r: Resolved, framework: str) -> None:
    p = r.parallelism
    for name in ("tp", "pp", "cp", "ep"):
        if getattr(p, name) > 1:
            raise ExportError(f"parallelism.{name}", f"{framework} has no {name} setting; "
                              "export to megatron or torchtitan instead")
    if p.sequence_parallel:
        raise ExportError("parallelism.sequence_parallel", f"{framework} has no sequence "
                          "parallelism over tensor-parallel ranks")


def _no_partial_recompute(r: Resolved, framework: str) -> None:
    t = r.training
    if t.activation_checkpointing == "selective":
        raise ExportError("training.activation_checkpointing",
                          f"{framework} has no selective recomputation; use full or none")
    if t.recompute_layers is not None:
        raise ExportError("training.recompute_layers",
                          f"{framework} checkpoints every layer or none")


def _fsdp_offload(r: Resolved, framework: str) -> bool:
    """FSDP's CPU offload moves parameters, gradients and optimizer states together."""
    p = r.parallelism
    if p.offload_optimizer != p.offload_params:
        field = "offload_params" if p.offload_optimizer else "offload_optimizer"
        raise ExportError(f"parallelism.{field}", f"{framework}'s CPU offload moves parameters "
                          "and optimizer states together: set both offload flags alike")
    return p.offload_params


def _fsdp_reshard(r: Resolved, framework: str) -> bool:
    """ZeRO-3 reshards after forward, ZeRO-2 keeps the gathered parameters until backward."""
    zero = r.parallelism.zero
    if zero < 2:
        raise ExportError("parallelism.zero", f"{framework} shards with FSDP: zero 2 "
                          "(reshard_after_forward false) or 3 (true); there is no FSDP "
                          f"stage {zero}")
    return zero == 3


def _hf_notes(r: Resolved, loss_expressed: bool = False) -> list[str]:
    """Settings of a Hugging Face training script that live outside the config."""
    t = r.training
    notes = [f"seq_len {t.seq_len}: tokenize or pack to this length in the data pipeline",
             f"attention {t.attention}: from_pretrained(attn_implementation="
             f"{'flash_attention_2' if t.attention == 'flash' else 'eager'!r})"]
    if t.finetuning != "full":
        notes.append(f"finetuning {t.finetuning}: peft LoraConfig(r={t.lora_rank}, "
                     f"target_modules={_peft_targets(t.lora_targets)}, "
                     f"lora_dropout={t.lora_dropout})"
                     + (", base loaded with BitsAndBytesConfig(load_in_4bit=True, "
                        "bnb_4bit_quant_type='nf4')" if t.finetuning == "qlora" else ""))
    if t.loss == "chunked" and not loss_expressed:
        notes.append("loss chunked: a chunked cross-entropy in the training script "
                     "(e.g. Liger's fused linear cross-entropy)")
    if t.implementation != "hf":
        notes.append("implementation megatron: the estimate assumed Megatron kernels; "
                     "re-estimate with implementation hf for this framework")
    return notes


def _peft_targets(targets: str) -> str:
    return {"all_linear": "'all-linear'", "attention": "['q_proj', 'k_proj', 'v_proj', 'o_proj']",
            "query_value": "['q_proj', 'v_proj']"}[targets]


def _no_fp8(r: Resolved, framework: str) -> None:
    if r.training.precision == "fp8":
        raise ExportError("training.precision", f"{framework}: fp8 training needs a "
                          "Transformer Engine / torchao recipe that this export does not write")


# ---------------------------------------------------------------------------------------------
# DeepSpeed
# ---------------------------------------------------------------------------------------------

def _deepspeed_dict(r: Resolved) -> tuple[dict[str, Any], list[str]]:
    t, p = r.training, r.parallelism
    fw = "DeepSpeed"
    _only_data_parallel(r, fw)
    _no_partial_recompute(r, fw)
    _no_fp8(r, fw)
    notes: list[str] = []
    cfg: dict[str, Any] = {
        "train_batch_size": t.micro_batch_size * t.gradient_accumulation_steps * p.dp,
        "train_micro_batch_size_per_gpu": t.micro_batch_size,
        "gradient_accumulation_steps": t.gradient_accumulation_steps,
    }
    if t.precision != "fp32":
        if t.mixed_precision != "master":
            raise ExportError("training.mixed_precision", f"DeepSpeed's {t.precision} mode keeps "
                              f"{t.precision} weights with fp32 master weights in the optimizer: "
                              f"that is mixed_precision master, not {t.mixed_precision}")
        cfg[t.precision] = {"enabled": True}
        if t.precision == "fp16":
            cfg["fp16"]["loss_scale"] = 0  # dynamic loss scaling
    zero: dict[str, Any] = {"stage": p.zero}
    if p.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if p.offload_params:
        if p.zero != 3:
            raise ExportError("parallelism.offload_params", "DeepSpeed offloads parameters "
                              "only with zero 3")
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    cfg["zero_optimization"] = zero
    cfg["optimizer"] = _deepspeed_optimizer(r)
    if t.optimizer in ("sgd", "sgd_momentum") and p.zero:
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


def _deepspeed_optimizer(r: Resolved) -> dict[str, Any]:
    t = r.training
    if t.optimizer in ("adamw", "adam"):
        if t.optimizer_impl == "for_loop":
            raise ExportError("training.optimizer_impl", "DeepSpeed's Adam is fused "
                              "(FusedAdam) or torch's foreach (torch_adam); no for_loop")
        params: dict[str, Any] = {}
        if t.optimizer == "adam":
            params["adam_w_mode"] = False
        if t.optimizer_impl == "foreach":
            params["torch_adam"] = True
        return {"type": "AdamW" if t.optimizer == "adamw" else "Adam", "params": params}
    if t.optimizer == "lion":
        return {"type": "Lion", "params": {}}
    if t.optimizer in ("sgd", "sgd_momentum"):  # any torch.optim class by name
        return {"type": "SGD", "params": {"momentum": 0.9 if t.optimizer == "sgd_momentum"
                                          else 0.0}}
    raise ExportError("training.optimizer", f"DeepSpeed's config has no {t.optimizer} "
                      "optimizer; pass it to deepspeed.initialize(optimizer=...) in code")


def _deepspeed(r: Resolved) -> Export:
    cfg, notes = _deepspeed_dict(r)
    notes += _hf_notes(r)
    return Export("deepspeed", cfg, json.dumps(cfg, indent=2) + "\n", tuple(notes))


# ---------------------------------------------------------------------------------------------
# Accelerate with FSDP2
# ---------------------------------------------------------------------------------------------

def _accelerate_mixed_precision(r: Resolved, framework: str) -> tuple[str, list[str]]:
    t = r.training
    _no_fp8(r, framework)
    if t.precision == "fp32":
        return "no", []
    if t.mixed_precision == "amp":
        return t.precision, []
    if t.mixed_precision == "pure":
        return "no", [f"mixed_precision pure: load the model with torch_dtype="
                      f"torch.{_DTYPE[t.precision]}"]
    raise ExportError("training.mixed_precision", f"{framework} keeps no separate fp32 master "
                      "copy: use amp (fp32 sharded weights, low-precision compute) or pure")


def _accelerate_fsdp(r: Resolved) -> Export:
    t, p = r.training, r.parallelism
    fw = "Accelerate FSDP"
    _only_data_parallel(r, fw)
    _no_partial_recompute(r, fw)
    reshard = _fsdp_reshard(r, fw)
    offload = _fsdp_offload(r, fw)
    mixed, notes = _accelerate_mixed_precision(r, fw)
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
    notes += _hf_notes(r)
    return Export("accelerate-fsdp", cfg, to_yaml(cfg), tuple(notes))


# ---------------------------------------------------------------------------------------------
# torchtitan
# ---------------------------------------------------------------------------------------------

def _torchtitan_loss_chunks(r: Resolved) -> int:
    """`--loss.num_chunks` for a chunked loss: chunks of about T h / V tokens, as logits.py
    models one, rounded up to a divisor of the rank's sequence (torchtitan splits it evenly)."""
    h, V = r.arch.hidden_size, -(-r.arch.vocab_size // r.parallelism.tp)
    local = r.training.seq_len // r.parallelism.cp
    return next(n for n in range(min(-(-V // h), local), local + 1) if local % n == 0)


def _torchtitan(r: Resolved) -> Export:
    t, p = r.training, r.parallelism
    fw = "torchtitan"
    preset = r.preset.id if r.preset else None
    if preset not in TORCHTITAN_CONFIGS:
        why = _TORCHTITAN_NO_CONFIG.get(preset or "", "no config function")
        raise ExportError("model", f"torchtitan 0.3.0 has no config for "
                          f"{preset or 'a custom model'} ({why}); known: "
                          f"{', '.join(TORCHTITAN_CONFIGS)}")
    module, config = TORCHTITAN_CONFIGS[preset]
    if t.finetuning != "full":
        raise ExportError("training.finetuning", "torchtitan's LoRA is a model converter set in "
                          "a config function, not a command-line setting")
    if t.attention == "eager":
        raise ExportError("training.attention", "torchtitan's models use flex, SDPA or varlen "
                          "attention, which never keep the score matrix: use flash")
    if t.activation_checkpointing == "selective":
        raise ExportError("training.activation_checkpointing", "torchtitan's selective "
                          "checkpointing is a per-op policy (it recomputes every second matmul), "
                          "not the attention-core recomputation the estimate models, which with "
                          "flash attention equals none: use none or full")
    if t.recompute_layers is not None:
        raise ExportError("training.recompute_layers", "torchtitan checkpoints every layer "
                          "in full mode")
    _no_fp8(r, fw)
    if t.precision == "fp16":
        raise ExportError("training.precision", "torchtitan computes in bfloat16 or float32")
    if t.precision == "bf16" and t.mixed_precision == "master":
        raise ExportError("training.mixed_precision", "torchtitan keeps fp32 weights with "
                          "bfloat16 compute (amp) or everything in bfloat16 (pure); no bfloat16 "
                          "weights with fp32 master copies")
    if t.optimizer not in ("adamw", "adam"):
        raise ExportError("training.optimizer", "torchtitan's optimizer names are Adam, AdamW "
                          "and DistMuon")
    if p.zero == 1:
        raise ExportError("parallelism.zero", "torchtitan shards with FSDP2: zero 0 (replicate), "
                          "2 or 3; there is no optimizer-only stage")
    if p.zero == 0 and p.cp > 1:
        raise ExportError("parallelism.zero", "torchtitan shards parameters over the context-"
                          "parallel ranks with FSDP: use zero 2 or 3 with cp > 1")
    offload = _fsdp_offload(r, fw)
    if offload and p.zero == 0:
        raise ExportError("parallelism.offload_params", "torchtitan offloads through FSDP2: "
                          "use zero 2 or 3")
    shard = p.dp if p.zero else 1
    if (shard * p.cp * p.tp) % p.ep:
        raise ExportError("parallelism.ep", "torchtitan takes the expert-parallel ranks from the "
                          f"FSDP x cp x tp ranks ({shard * p.cp * p.tp}); ep must divide them"
                          + (" (zero 0 shards over none: use zero 2 or 3)" if not p.zero else ""))
    m, g = t.micro_batch_size, t.gradient_accumulation_steps
    # With pp, torchtitan pipelines the local batch in micro-batches within one step: the
    # scenario's gradient-accumulation steps become pipeline micro-batches, as Megatron counts them.
    local = m * g if p.pp > 1 else m
    pure = t.precision == "bf16" and t.mixed_precision == "pure"
    param_dtype = _DTYPE["fp32" if t.precision == "fp32" else "bf16"]
    chunks = _torchtitan_loss_chunks(r) if t.loss == "chunked" else 1
    args = [f"--module {module}", f"--config {config}",
            f"--training.local_batch_size {local}", f"--training.global_batch_size {m * g * p.dp}",
            f"--training.seq_len {t.seq_len}",
            f"--training.dtype {'bfloat16' if pure else 'float32'}",
            f"--training.mixed_precision_param {param_dtype}",
            f"--training.{'' if offload else 'no_'}enable_cpu_offload",
            "--training.disable_cuda_graphs",
            f"--parallelism.data_parallel_replicate_degree {1 if p.zero else p.dp}",
            f"--parallelism.data_parallel_shard_degree {shard}",
            f"--parallelism.fsdp_reshard_after_forward {'always' if p.zero == 3 else 'never'}",
            f"--parallelism.tensor_parallel_degree {p.tp}"]
    if p.tp > 1:
        args.append(f"--parallelism.{'' if p.sequence_parallel else 'no_'}enable_sequence_parallel")
    args.append(f"--parallelism.pipeline_parallel_degree {p.pp}")
    if p.pp > 1:
        args += [f"--parallelism.pipeline_parallel_microbatch_size {m}",
                 "--parallelism.pipeline_parallel_schedule 1F1B"]
    args += [f"--parallelism.context_parallel_degree {p.cp}",
             f"--parallelism.expert_parallel_degree {p.ep}",
             "--optimizer.param_groups.0.optimizer_name "
             + ("AdamW" if t.optimizer == "adamw" else "Adam"),
             f"--optimizer.implementation {t.optimizer_impl.replace('_', '-')}",
             f"--loss.num_chunks {chunks}",
             f"activation-checkpoint:{t.activation_checkpointing}"]
    notes = [f"launch on {p.world_size} GPUs: torchrun -m torchtitan.train with these arguments "
             f"(torchtitan 0.3.0); the tokenizer, data and learning rate come from the {config} "
             "config function",
             "disable_cuda_graphs: the estimate models eager execution; torchtitan captures "
             "forward and backward in a CUDA graph by default (not with pp)"]
    if t.loss == "chunked":
        notes.append(f"loss chunked: torchtitan's ChunkedLossWrapper in {chunks} chunks of "
                     f"{t.seq_len // p.cp // chunks} tokens per sequence")
    else:
        notes.append("loss standard: torchtitan always wraps the loss in ChunkedLossWrapper; "
                     "one chunk computes the logits of the whole sequence at once")
    if p.pp > 1:
        notes.append(f"pp: local_batch_size {local} is {g} pipeline micro-batches of {m}, "
                     "in one step without gradient accumulation")
    if t.implementation != "hf":
        notes.append("implementation megatron: the estimate assumed Megatron kernels")
    text = " \\\n".join(args) + "\n"
    return Export("torchtitan", args, text, tuple(notes))


# ---------------------------------------------------------------------------------------------
# Megatron-LM
# ---------------------------------------------------------------------------------------------

def _megatron_architecture(arch: Architecture) -> tuple[list[str], list[str]]:
    args = [f"--num-layers {arch.num_hidden_layers}", f"--hidden-size {arch.hidden_size}",
            f"--ffn-hidden-size {arch.intermediate_size}",
            f"--num-attention-heads {arch.num_attention_heads}",
            f"--max-position-embeddings {arch.max_position_embeddings}"]
    notes = []
    if arch.kv_heads != arch.num_attention_heads:
        args += ["--group-query-attention", f"--num-query-groups {arch.kv_heads}"]
    if arch.head_dim is not None and arch.head_dim * arch.num_attention_heads != arch.hidden_size:
        args.append(f"--kv-channels {arch.head_dim}")
    if arch.is_moe:
        args += [f"--num-experts {arch.num_local_experts}",
                 f"--moe-router-topk {arch.num_experts_per_tok}",
                 f"--moe-ffn-hidden-size {arch.expert_intermediate_size}"]
    tr = arch.traits
    if tr.norm == "rms":
        args.append("--normalization RMSNorm")
    if tr.mlp == "gated":
        args.append("--swiglu")
    args.append("--position-embedding-type " + ("learned_absolute" if tr.learned_positions
                                                else "rope"))
    if not arch.tie_word_embeddings:
        args.append("--untie-embeddings-and-output-weights")
    if arch.model_type in ("llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe",
                           "qwen2_moe") and not (arch.attention_bias or arch.mlp_bias):
        args.append("--disable-bias-linear")
        if tr.qkv_bias:
            args.append("--add-qkv-bias")
    if tr.qk_norm:
        args.append("--qk-layernorm")
    if arch.is_mla or arch.model_type.startswith(("gemma", "phi3", "deepseek")):
        notes.append(f"{arch.model_type}: family-specific flags (MLA, norms, soft-capping, "
                     "shared experts) are not written; see Megatron's example scripts")
    return args, notes


def _megatron_fsdp2(r: Resolved) -> None:
    """What `validate_args` (megatron/training/arguments.py, megatron-core 0.19.2) asserts for
    `--use-torch-fsdp2`: no pipeline or expert parallelism, no fp16, untied embeddings."""
    p, t = r.parallelism, r.training
    clash = ["pp > 1"] * (p.pp > 1) + ["ep > 1"] * (p.ep > 1) + \
        ["fp16"] * (t.precision == "fp16") + ["tied embeddings"] * r.arch.tie_word_embeddings
    if clash:
        raise ExportError("parallelism.zero", "Megatron-LM's torch FSDP2 (zero 3) does not run "
                          f"with {', '.join(clash)}; use zero 1 or 2 (the distributed optimizer)")


def _megatron(r: Resolved) -> Export:
    t, p = r.training, r.parallelism
    if t.finetuning != "full":
        raise ExportError("training.finetuning", "Megatron-LM trains all weights (LoRA is in "
                          "NeMo)")
    if t.loss == "chunked":
        raise ExportError("training.loss", "Megatron-LM has no chunked cross-entropy")
    if p.offload_optimizer or p.offload_params:
        field = "offload_optimizer" if p.offload_optimizer else "offload_params"
        raise ExportError(f"parallelism.{field}", "this export does not write Megatron's "
                          "CPU offload")
    if t.optimizer_impl != "fused":
        raise ExportError("training.optimizer_impl", "Megatron-LM's optimizers are fused")
    args, notes = _megatron_architecture(r.arch)
    args += [f"--seq-length {t.seq_len}", f"--micro-batch-size {t.micro_batch_size}",
             f"--global-batch-size {t.micro_batch_size * t.gradient_accumulation_steps * p.dp}",
             f"--tensor-model-parallel-size {p.tp}", f"--pipeline-model-parallel-size {p.pp}",
             f"--context-parallel-size {p.cp}"]
    if p.ep > 1:
        args.append(f"--expert-model-parallel-size {p.ep}")
    if p.sequence_parallel:
        args.append("--sequence-parallel")
    if p.zero in (1, 2):  # the distributed optimizer shards optimizer states (and gradients)
        args.append("--use-distributed-optimizer")
    elif p.zero == 3:
        _megatron_fsdp2(r)
        args += ["--use-torch-fsdp2", "--no-gradient-accumulation-fusion"]
    if t.precision != "fp32":
        if t.mixed_precision != "master":
            raise ExportError("training.mixed_precision", f"Megatron-LM's {t.precision} keeps "
                              "low-precision weights with fp32 main weights in the optimizer: "
                              f"that is mixed_precision master, not {t.mixed_precision}")
        if t.precision == "fp8":
            args += ["--bf16", "--fp8-format hybrid"]
        else:
            args.append(f"--{t.precision}")
    if t.activation_checkpointing == "selective":
        args.append("--recompute-granularity selective")
    elif t.activation_checkpointing == "full":
        args.append("--recompute-granularity full")
        if t.recompute_layers is None:
            args += ["--recompute-method uniform", "--recompute-num-layers 1"]
        else:  # block: the first N layers of each pipeline stage
            args += ["--recompute-method block", f"--recompute-num-layers {t.recompute_layers}"]
    if t.optimizer in ("adamw", "adam"):
        args.append("--optimizer adam")
        if t.optimizer == "adam":
            notes.append("optimizer adam: Megatron's adam decouples weight decay (AdamW); the "
                         "same memory, and the same update with weight decay 0")
    elif t.optimizer in ("sgd", "sgd_momentum"):
        args += ["--optimizer sgd",
                 f"--sgd-momentum {0.9 if t.optimizer == 'sgd_momentum' else 0.0}"]
    else:
        raise ExportError("training.optimizer", f"Megatron-LM has no {t.optimizer} optimizer")
    args.append("--attention-backend " + ("flash" if t.attention == "flash" else "unfused"))
    notes.append(f"launch on {p.world_size} GPUs (data parallel {p.dp} is derived); "
                 "tokenizer, data and learning rate are not exported")
    if t.implementation != "megatron":
        notes.append("implementation hf: the estimate assumed Hugging Face kernels; "
                     "re-estimate with implementation megatron")
    text = " \\\n".join(args) + "\n"
    return Export("megatron", args, text, tuple(notes))


# ---------------------------------------------------------------------------------------------
# Hugging Face Trainer
# ---------------------------------------------------------------------------------------------

_HF_OPTIM = {"adafactor": "adafactor", "lion": "lion_32bit", "adamw_8bit": "adamw_bnb_8bit",
             "sgd": "sgd"}


def _hf_trainer(r: Resolved) -> Export:
    t, p = r.training, r.parallelism
    fw = "Hugging Face Trainer"
    _only_data_parallel(r, fw)
    _no_partial_recompute(r, fw)
    _no_fp8(r, fw)
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
        if t.optimizer_impl == "for_loop":
            raise ExportError("training.optimizer_impl", "TrainingArguments' AdamW is fused "
                              "(adamw_torch_fused) or foreach (adamw_torch)")
        args["optim"] = "adamw_torch_fused" if t.optimizer_impl == "fused" else "adamw_torch"
        if t.optimizer == "adam":
            args["weight_decay"] = 0.0
            notes.append("optimizer adam: AdamW with weight_decay 0 is the same update")
    elif t.optimizer in _HF_OPTIM:
        args["optim"] = _HF_OPTIM[t.optimizer]
    else:
        raise ExportError("training.optimizer", f"TrainingArguments has no {t.optimizer} "
                          "optimizer (its sgd has no momentum)")
    if t.precision == "fp32" or t.mixed_precision == "amp":
        args["bf16"] = t.precision == "bf16"
        args["fp16"] = t.precision == "fp16"
    elif t.mixed_precision == "pure":
        args["bf16"] = args["fp16"] = False
        notes.append(f"mixed_precision pure: load the model with torch_dtype="
                     f"torch.{_DTYPE[t.precision]}")
    if t.mixed_precision == "master" and t.precision != "fp32":
        ds, ds_notes = _deepspeed_dict(r)  # DeepSpeed keeps the fp32 master copy
        args["bf16"] = t.precision == "bf16"
        args["fp16"] = t.precision == "fp16"
        args["deepspeed"] = ds
        notes += [n for n in ds_notes if not n.startswith("activation_checkpointing")]
    elif p.zero:
        # transformers 5: fsdp=True and everything in fsdp_config (an option string such as
        # "full_shard auto_wrap" is deprecated); version 2 is FSDP2, what the estimate models
        args["fsdp"] = True
        args["fsdp_config"] = {
            "version": 2, "reshard_after_forward": _fsdp_reshard(r, fw),
            "cpu_offload": _fsdp_offload(r, fw),
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
    notes += _hf_notes(r, loss_expressed=True)
    return Export("hf-trainer", args, json.dumps(args, indent=2) + "\n", tuple(notes))


_EXPORTERS = {
    "deepspeed": _deepspeed, "accelerate-fsdp": _accelerate_fsdp, "torchtitan": _torchtitan,
    "megatron": _megatron, "hf-trainer": _hf_trainer,
}

__all__ = ["DECODER_LAYER", "FORMATS", "Export", "ExportError", "ExportFormat", "export"]


# ---------------------------------------------------------------------------------------------
# The operation: calc export
# ---------------------------------------------------------------------------------------------

from pydantic import Field  # noqa: E402

from ..operations import SCENARIO_HELP, Operation, Request  # noqa: E402

FORMAT_NAMES: dict[str, str] = {  # what each format is called, by its id
    "deepspeed": "DeepSpeed", "accelerate-fsdp": "Accelerate FSDP", "torchtitan": "torchtitan",
    "megatron": "Megatron-LM", "hf-trainer": "HF Trainer"}


class ExportRequest(Request):
    scenario: dict[str, Any] = Field(description=SCENARIO_HELP)
    format: ExportFormat = Field(title="Configuration for", description="the framework",
                                 examples=["accelerate-fsdp"])


OPERATIONS: tuple[Operation[ExportRequest, Export], ...] = (
    Operation("export", "framework configuration for the scenario", ExportRequest,
              run=lambda q: export(q.scenario, q.format), text=lambda e, q: e.text.rstrip("\n"),
              notes=lambda e: e.notes),
)
