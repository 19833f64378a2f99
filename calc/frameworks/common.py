"""What the framework modules share: the result and error types, and the rules several
frameworks apply (data parallelism only, FSDP's resharding and offload, the settings of a
Hugging Face training script that live outside its config, bf16/fp16 flags, FSDP sharding
strategies).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from ..errors import FieldError, PlanError
from ..scenario import V_SCHEDULES, Resolved, Scenario

if TYPE_CHECKING:
    from .registry import ExportFormat

AUTO = "auto"  # a value the HF Trainer fills in from its own arguments


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


class ConfigImportError(PlanError):
    """A config that cannot be read as a scenario: `field` names the setting (a dotted path
    inside the config), `message` the rule."""


class Imported(NamedTuple):
    """The scenario a config describes and what the import could not express."""

    scenario: Scenario
    notes: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario.model_dump(mode="json"), "notes": list(self.notes)}


# ---------------------------------------------------------------------------------------------
# Export rules
# ---------------------------------------------------------------------------------------------

TORCH_DTYPE = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}

# HF decoder-layer classes, for FSDP's transformer-based auto-wrap policy (Accelerate and the
# HF Trainer wrap transformers' models by these class names).
DECODER_LAYER = {
    "llama": "LlamaDecoderLayer", "mistral": "MistralDecoderLayer",
    "mixtral": "MixtralDecoderLayer", "qwen2": "Qwen2DecoderLayer",
    "qwen2_moe": "Qwen2MoeDecoderLayer", "qwen3": "Qwen3DecoderLayer",
    "qwen3_moe": "Qwen3MoeDecoderLayer", "gemma": "GemmaDecoderLayer",
    "gemma2": "Gemma2DecoderLayer", "gemma3_text": "Gemma3DecoderLayer",
    "phi3": "Phi3DecoderLayer", "gpt2": "GPT2Block", "deepseek_v3": "DeepseekV3DecoderLayer",
    "gpt_oss": "GptOssDecoderLayer",
}


def only_data_parallel(r: Resolved, framework: str) -> None:
    p = r.parallelism
    for name in ("tp", "pp", "cp", "ep"):
        if getattr(p, name) > 1:
            raise ExportError(f"parallelism.{name}", f"{framework} has no {name} setting; "
                              "export to megatron or torchtitan instead")
    if p.sequence_parallel:
        raise ExportError("parallelism.sequence_parallel", f"{framework} has no sequence "
                          "parallelism over tensor-parallel ranks")


def torch_engine(r: Resolved, framework: str) -> None:
    """Frameworks built on torch's FSDP2/DDP cannot run a scenario set to DeepSpeed's engine."""
    if r.parallelism.framework == "deepspeed":
        raise ExportError("parallelism.framework", f"is deepspeed: {framework} shards with "
                          "torch's FSDP2, not DeepSpeed's ZeRO; export deepspeed or hf-trainer")


def no_partial_recompute(r: Resolved, framework: str) -> None:
    t = r.training
    if t.activation_checkpointing == "selective":
        raise ExportError("training.activation_checkpointing",
                          f"{framework} has no selective recomputation; use full or none")
    if t.recompute_layers is not None:
        raise ExportError("training.recompute_layers",
                          f"{framework} checkpoints every layer or none")


def fsdp_offload(r: Resolved, framework: str) -> bool:
    """FSDP's CPU offload moves parameters, gradients and optimizer states together."""
    p = r.parallelism
    if p.offload_optimizer != p.offload_params:
        field = "offload_params" if p.offload_optimizer else "offload_optimizer"
        raise ExportError(f"parallelism.{field}", f"{framework}'s CPU offload moves parameters "
                          "and optimizer states together: set both offload flags alike")
    return p.offload_params


def fsdp_reshard(r: Resolved, framework: str) -> bool:
    """ZeRO-3 reshards after forward, ZeRO-2 keeps the gathered parameters until backward."""
    zero = r.parallelism.zero
    if zero < 2:
        raise ExportError("parallelism.zero", f"{framework} shards with FSDP: zero 2 "
                          "(reshard_after_forward false) or 3 (true); there is no FSDP "
                          f"stage {zero}")
    return zero == 3


def hf_notes(r: Resolved, loss_expressed: bool = False) -> list[str]:
    """Settings of a Hugging Face training script that live outside the config."""
    t = r.training
    # what the estimate models: transformers' SDPA (its flash kernel where it can run; the
    # memory-efficient or math kernel on older GPUs and under a mask), not flash_attention_2,
    # which unpads a padded batch and needs sm80; GPT-OSS's sinks take a Hub kernel
    flash = ("kernels-community/vllm-flash-attn3" if r.arch.traits.sinks else "sdpa")
    notes = [f"seq_len {t.seq_len}: " + (
        "pad to this length (padding='max_length'); the attention mask rules SDPA's flash "
        "kernel out" if t.padded else "tokenize or pack to this length in the data pipeline"),
             f"attention {t.attention}: from_pretrained(attn_implementation="
             f"{flash if t.attention == 'flash' else 'eager'!r})"]
    if t.finetuning != "full":
        notes.append(f"finetuning {t.finetuning}: peft LoraConfig(r={t.lora_rank}, "
                     f"target_modules={_peft_targets(t.lora_targets)}, "
                     f"lora_dropout={t.lora_dropout})"
                     + (", base loaded with BitsAndBytesConfig(load_in_4bit=True, "
                        f"bnb_4bit_quant_type='nf4'{_quant_storage(r)})"
                        if t.finetuning == "qlora" else ""))
    if t.loss == "chunked" and not loss_expressed:
        notes.append("loss chunked: a chunked cross-entropy in the training script "
                     "(e.g. Liger's fused linear cross-entropy)")
    if t.implementation != "hf":
        notes.append("implementation megatron: the estimate assumed Megatron kernels; "
                     "re-estimate with implementation hf for this framework")
    return notes


def _quant_storage(r: Resolved) -> str:
    """DeepSpeed's ZeRO-3 partitions the 4-bit weights as parameters: transformers' recipe
    packs them in the compute dtype, as the estimate counts them."""
    p, t = r.parallelism, r.training
    if p.zero_in_effect(t) == 3 and p.engine(t.mixed_precision) == "deepspeed":
        return f", bnb_4bit_quant_storage=torch.{'float16' if t.precision == 'fp16' else 'bfloat16'}"
    return ""


def _peft_targets(targets: str) -> str:
    return {"all_linear": "'all-linear'", "attention": "['q_proj', 'k_proj', 'v_proj', 'o_proj']",
            "query_value": "['q_proj', 'v_proj']"}[targets]


def layers_per_chunk(r: Resolved, framework: str) -> int:
    """Decoder layers in each model chunk of an interleaved pipeline: the frameworks split the
    layers evenly over pp x virtual_stages chunks, so those must divide them."""
    p, layers = r.parallelism, r.arch.num_hidden_layers
    v = 2 if p.pipeline_schedule in V_SCHEDULES else p.virtual_stages  # a V: two chunks a rank
    chunks = p.pp * v
    if layers % chunks:
        raise ExportError("parallelism.virtual_stages", f"{framework} splits the layers evenly: "
                          f"num_hidden_layers ({layers}) must divide by pp x {v} chunks a rank "
                          f"({chunks})")
    return layers // chunks


def no_fp8(r: Resolved, framework: str) -> None:
    if r.training.precision == "fp8":
        raise ExportError("training.precision", f"{framework}: fp8 training needs a "
                          "Transformer Engine / torchao recipe that this export does not write")


# ---------------------------------------------------------------------------------------------
# Import rules
# ---------------------------------------------------------------------------------------------

def precision_from_flags(bf16: Any, fp16: Any, mixed: str, where: str) -> dict[str, Any]:
    if bf16 is True and fp16 is True:
        raise ConfigImportError(where, "bf16 and fp16 cannot both be enabled")
    if bf16 is True:
        return {"precision": "bf16", "mixed_precision": mixed}
    if fp16 is True:
        return {"precision": "fp16", "mixed_precision": mixed}
    return {"precision": "fp32", "mixed_precision": "pure"}


# FSDP1 sharding strategies (names, or the enum's integers in older configs) -> zero stage.
_SHARDING = {"FULL_SHARD": 3, "SHARD_GRAD_OP": 2, "NO_SHARD": 0, "HYBRID_SHARD": 3,
             "_HYBRID_SHARD_ZERO2": 2, "HYBRID_SHARD_ZERO2": 2}
_SHARDING_ENUM = {1: "FULL_SHARD", 2: "SHARD_GRAD_OP", 3: "NO_SHARD", 4: "HYBRID_SHARD",
                  5: "_HYBRID_SHARD_ZERO2"}


def fsdp_stage(value: Any, where: str, notes: list[str]) -> int:
    if isinstance(value, bool):  # FSDP2's fsdp_reshard_after_forward
        return 3 if value else 2
    name = _SHARDING_ENUM.get(value, value) if isinstance(value, int) else str(value).upper()
    if name not in _SHARDING:
        raise ConfigImportError(where, f"unknown sharding strategy {value!r}; known: "
                                f"{', '.join(_SHARDING)}")
    if "HYBRID" in name:
        notes.append(f"{where} {name}: shards within a node and replicates across nodes; "
                     "estimated as sharding over all dp ranks (less memory than the job uses "
                     "on more than one node)")
    return _SHARDING[name]
