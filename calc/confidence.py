"""How far an estimate is backed by the validation set (`validation/`).

`validated` means the committed traced cases cover this model family and every feature the
scenario uses; otherwise `extrapolated`, listing what is not covered. The coverage below is
checked against `validation/cases.json` by `tests/test_validation.py`, so it cannot drift.
"""

from __future__ import annotations

from typing import Any

from .architecture import SUPPORTED_MODEL_TYPES
from .coordinator import oversized_down, zero_sizes
from .coverage import uncovered
from .optimizers import OPTIMIZERS
from .params import count_params
from .scenario import Parallelism, Resolved, lora_experts_unhooked, selective_autocast_pipeline

VALIDATED_FAMILIES = frozenset({"llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2",
                                "gemma3_text", "phi3", "gpt2", "mixtral", "qwen2_moe",
                                "qwen3_moe", "deepseek_v3", "gpt_oss"})
VALIDATED_FEATURES: dict[str, frozenset[Any]] = {
    "training.precision": frozenset({"bf16", "fp32", "fp16"}),
    "training.mixed_precision": frozenset({"pure", "amp", "master", "autocast"}),
    "training.optimizer": frozenset(o.id for o in OPTIMIZERS.values() if o.traced),
    "training.activation_checkpointing": frozenset({"none", "full", "selective"}),
    "training.selective_policy": frozenset({None, "ops"}),
    "training.attention": frozenset({"flash", "eager"}),
    "training.loss": frozenset({"standard", "chunked"}),
    "training.finetuning": frozenset({"full", "lora", "qlora"}),
    "training.lora_targets": frozenset({"all_linear", "attention", "query_value"}),
    "training.implementation": frozenset({"hf"}),
    "parallelism.tp": frozenset({1, 2, 4, 8}),
    "parallelism.pp": frozenset({1, 2, 4}),
    "parallelism.cp": frozenset({1, 2, 4}),
    "parallelism.ep": frozenset({1, 2, 4, 8}),
    "parallelism.zero": frozenset({0, 1, 2, 3}),
    "parallelism.sequence_parallel": frozenset({False, True}),
    # torch.distributed.pipelining's schedules; DeepSeek's bidirectional DualPipe is not in torch
    "parallelism.pipeline_schedule": frozenset({"1f1b", "gpipe", "interleaved_1f1b",
                                                "zero_bubble", "zbv", "dualpipev"}),
    "parallelism.virtual_stages": frozenset({1, 2}),
    "training.moe_capacity_factor": frozenset({None}),
    "training.moe_load_imbalance": frozenset({1.0}),
}
# The parallel features a scenario can use, each named when it is in use (`traced`/`missing`).
PARALLEL_FEATURES = {
    "parallelism.tp": "tensor parallelism", "parallelism.sequence_parallel": "sequence parallelism",
    "parallelism.pp": "pipeline parallelism", "parallelism.cp": "context parallelism",
    "parallelism.ep": "expert parallelism", "parallelism.zero": "ZeRO / FSDP sharding",
    "parallelism.pipeline_schedule": "the pipeline schedule",
}
_UNUSED = {f"parallelism.{k}": v for k, v in Parallelism().model_dump().items()}
"""A parallel feature is in use where its field is not at its default."""


# Families traced with one attention path only (transformers runs Gemma 2 with eager attention:
# its SDPA path rejects the attention soft-capping; GPT-OSS's sinks too, and its flash path is
# a Hub kernel, vllm-flash-attn3, that the CPU trace cannot run).
VALIDATED_ATTENTION: dict[str, frozenset[str]] = {"gemma2": frozenset({"eager"}),
                                                  "gpt_oss": frozenset({"eager"})}
# MoE families traced with LoRA and QLoRA under DeepSpeed's ZeRO-3 with torch_autocast (GPT-OSS's
# experts a module of their own, Mixtral's sparse block one leaf module)
AUTOCAST_ZERO3_ADAPTED_MOE = frozenset({"gpt_oss", "mixtral"})
# The largest model among the traced cases (Llama 3.1 405B, every layer): beyond it the
# per-layer mechanisms are the same, but the evidence is not.
MAX_TRACED_PARAMS = 405_853_388_800


def confidence(r: Resolved) -> dict[str, Any]:
    missing: list[str] = []
    family = r.arch.model_type
    read_as = _fallback_model_type(r)
    if read_as is not None:
        missing.append(f"model_type {read_as!r} is read as llama-like, which no traced case "
                       "checks")
    elif family not in VALIDATED_FAMILIES:
        missing.append(f"model family {family!r} has no traced case")
    attention = r.scenario.training.attention
    if attention not in VALIDATED_ATTENTION.get(family, frozenset({attention})):
        missing.append(f"{family} is traced with {attention!r} attention in no case")
    size = count_params(r.arch).total
    if size > MAX_TRACED_PARAMS:
        missing.append(f"{size / 1e9:.1f}B parameters is beyond the largest traced model "
                       f"({MAX_TRACED_PARAMS / 1e9:.1f}B)")
    if r.arch.num_labels:
        missing.append(f"a classification head of {r.arch.num_labels} outputs (num_labels) is "
                       "in no traced case: its output and loss are counted as logits that wide")
    traced: list[str] = []
    for path, allowed in VALIDATED_FEATURES.items():
        group, name = path.split(".")
        value = getattr(getattr(r.scenario, group), name)
        if value not in allowed:
            missing.append(f"{path} = {value!r} is not in the traced cases")
        elif path in PARALLEL_FEATURES and value != _UNUSED[path] and \
                not (path == "parallelism.zero"
                     and not r.parallelism.zero_in_effect(r.training)):
            traced.append(f"{PARALLEL_FEATURES[path]} ({path.partition('.')[2]} = {value!r})")
    missing += _sharding_gaps(r)
    if not missing:  # each setting traced: are they traced together? (calc.coverage)
        pairs = uncovered(r)
        if pairs:
            missing.append("no traced case combines " + "; ".join(pairs[:3])
                           + (f" (and {len(pairs) - 3} more pairs)" if len(pairs) > 3 else ""))
    if selective_autocast_pipeline(r.scenario.training, r.scenario.parallelism):
        missing.append("torch's per-op selective checkpointing fails in the step under a "
                       "pipeline schedule with autocast (traced, torch 2.13): no step checks "
                       "this figure")
    return {
        "level": "extrapolated" if missing else "validated",
        "traced": traced,  # the parallel features in use that traced cases cover
        "missing": missing,
        "basis": "traced PyTorch training steps (validation/), CPU fake tensors",
    }


def _fallback_model_type(r: Resolved) -> str | None:
    """The pasted config's model_type when the estimator read it as llama-like."""
    spec = r.scenario.model
    config = getattr(spec, "hf_config", None)
    if not isinstance(config, dict):
        return None
    model_type = config.get("model_type")
    text = config.get("text_config")
    if model_type not in SUPPORTED_MODEL_TYPES and isinstance(text, dict):
        model_type = text.get("model_type", model_type)
    if model_type == "gemma3":
        model_type = "gemma3_text"
    return None if model_type in SUPPORTED_MODEL_TYPES else str(model_type)


def _down_unmodelled(r: Resolved) -> bool:
    """The top layer is neither an MoE one (`calc.peak.EXPERTS_OFFLOAD_NORM`) nor a dense one
    whose down projection is over DeepSpeed's reduce bucket (`oversized_down`): ZeRO-Offload's
    fp64 norm inside its backward (`calc.peak.OFFLOAD_LAYER_NORM`) is not modelled for it."""
    arch, p = r.arch, r.parallelism
    bucket = zero_sizes(arch.hidden_size, p).reduce_bucket
    return not arch.is_moe_layer(arch.num_hidden_layers - 1) \
        and oversized_down(count_params(arch).dense_layer, p.tp, bucket) is None


def _sharding_gaps(r: Resolved) -> list[str]:
    """What of the parallel setup the traced cases do not cover. Traced: DDP (zero 0),
    DDP + ZeroRedundancyOptimizer (1), FSDP2 with reshard_after_forward False (2) and True
    (3), FSDP2's CPUOffloadPolicy; DeepSpeed's own engine at stages 1 and 2 (master weights,
    torch_autocast) and 3 (master weights, torch_autocast), full training, LoRA and QLoRA; tp
    (torchtitan's plan, loss parallel), sequence parallel, cp (torch's ring attention) and pp (torch's 1F1B,
    GPipe, interleaved 1F1B, zero bubble, ZBV and DualPipeV, each stage its own FSDP2 root),
    alone or with FSDP2; tp with pp (1F1B, interleaved 1F1B, zero bubble; FSDP2 x tp x pp);
    ep (transformers' all-to-all, balanced routing) with FSDP2 over the experts as their own
    units, tp, cp and pp 1."""
    p, t = r.parallelism, r.training
    gaps = []
    deepspeed = p.engine(t.mixed_precision) == "deepspeed"
    model_parallel = p.tp > 1 or p.cp > 1 or p.pp > 1
    if model_parallel and p.shard_group > 1 and (p.zero < 2 or deepspeed):
        gaps.append("tp, cp and pp are traced with FSDP2 over the data-parallel ranks (as "
                    "torchtitan), not with DDP, ZeRO-1 or DeepSpeed")
    if p.pp > 1 and p.cp > 1:
        gaps.append("pipeline and context parallelism together are not traced")
    if p.pp > 1 and p.pipeline_schedule == "dualpipe":
        gaps.append("DeepSeek's bidirectional DualPipe (two copies of the parameters) is not in "
                    "torch.distributed.pipelining, whose V-shaped DualPipeV is traced "
                    "(pipeline_schedule dualpipev): modelled from the DeepSeek-V3 report")
    if model_parallel and t.implementation == "hf" and (t.finetuning != "full" or
                                                        t.loss != "standard"):
        gaps.append("tp, cp and pp are traced for full training with the standard loss only")
    if p.ep > 1 and (p.zero != 3 or deepspeed or model_parallel or t.implementation != "hf"
                     or t.finetuning != "full"):
        gaps.append("expert parallelism is traced as transformers' all-to-all with FSDP2 (zero "
                    "3, full training, no tp, cp or pp), not with DDP, ZeRO-1/2, DeepSpeed or "
                    "Megatron-LM")
    zero = p.zero_in_effect(t)
    if deepspeed and zero == 2 and p.offload_optimizer and p.shard_group == 1 \
            and t.finetuning == "full" and _down_unmodelled(r):
        gaps.append("ZeRO-Offload at stage 2 on one rank: a projection of the top layer over the "
                    "reduce bucket is normed in fp64 within its backward (traced for a gated "
                    "MLP's down projection: 16% over the estimate without it), which calc models "
                    "for gated MLPs of three projections and MoE layers, not for this model's top "
                    "layer (a fused or plain MLP, or a down projection within the bucket)")
    if deepspeed and zero in (1, 2) and (p.ep > 1 or model_parallel):
        gaps.append(f"DeepSpeed's ZeRO-{p.zero} is traced (its engine, DeepSpeed 0.19.8) for full "
                    "training, LoRA and QLoRA, without tp, cp, pp or ep")
    if deepspeed and t.mixed_precision != "master" and p.zero == 0 and p.shard_group > 1:
        gaps.append("DeepSpeed's engine without ZeRO is estimated as DDP without its buckets "
                    "(the engine all-reduces through transient flat buffers), not traced")
    if deepspeed and zero == 3 and (
            t.mixed_precision not in ("master", "amp") or p.ep > 1 or model_parallel):
        gaps.append("DeepSpeed's ZeRO-3 is traced (its engine, DeepSpeed 0.19.8: the parameter "
                    "coordinator, the gradient partitions, ZeRO-Offload and -Infinity) for full "
                    "training, LoRA and QLoRA with master weights or torch_autocast, without tp, "
                    "cp, pp or ep")
    if deepspeed and zero == 3 and t.mixed_precision == "amp" and t.finetuning != "full" \
            and r.arch.is_moe and r.arch.model_type not in AUTOCAST_ZERO3_ADAPTED_MOE:
        gaps.append("DeepSpeed's ZeRO-3 under torch_autocast is traced with LoRA and QLoRA on "
                    "dense models and of the MoE families on "
                    + " and ".join(sorted(AUTOCAST_ZERO3_ADAPTED_MOE))
                    + f" only, not {r.arch.model_type}")
    if lora_experts_unhooked(r.arch, t, p):
        gaps.append("DeepSpeed's ZeRO-3 stops at the second step with LoRA on the routed experts "
                    "of a MoE block it does not hook as one leaf (traced): no step checks this "
                    "figure")
    zero_offload = deepspeed and zero and (not p.offload_params or p.zero == 3)
    if p.offload_optimizer and not (p.offload_params and p.zero == 3 and not deepspeed) \
            and not zero_offload:
        gaps.append("optimizer offload alone is DeepSpeed's ZeRO-Offload, traced with its "
                    "engine (parallelism.framework deepspeed, or master weights); FSDP2's "
                    "CPUOffloadPolicy offloads the parameters too")
    elif p.offload_params and not p.offload_optimizer:
        gaps.append("parameter offload without optimizer offload is not traced")
    return gaps

