"""Megatron-LM: the scenario as the training scripts' command-line arguments, as
megatron/training/arguments.py defines them (the megatron-core wheel ships it from 0.17;
checked against 0.19.2). Export only.
"""

from __future__ import annotations

from ..architecture import Architecture
from ..optimizers import OptimizerId
from ..scenario import Resolved
from .common import Export, ExportError, layers_per_chunk

# `--optimizer` by scenario optimizer: Megatron's adam decouples weight decay (AdamW), its sgd
# takes the momentum apart (`--sgd-momentum`); both are fused kernels.
_OPTIMIZERS: dict[OptimizerId, str] = {"adamw": "adam", "adam": "adam", "sgd": "sgd",
                                       "sgd_momentum": "sgd"}

def _architecture(arch: Architecture) -> tuple[list[str], list[str]]:
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


def _fsdp2(r: Resolved) -> None:
    """What `validate_args` (megatron/training/arguments.py, megatron-core 0.19.2) asserts for
    `--use-torch-fsdp2`: no pipeline or expert parallelism, no fp16, untied embeddings."""
    p, t = r.parallelism, r.training
    clash = ["pp > 1"] * (p.pp > 1) + ["ep > 1"] * (p.ep > 1) + \
        ["fp16"] * (t.precision == "fp16") + ["tied embeddings"] * r.arch.tie_word_embeddings
    if clash:
        raise ExportError("parallelism.zero", "Megatron-LM's torch FSDP2 (zero 3) does not run "
                          f"with {', '.join(clash)}; use zero 1 or 2 (the distributed optimizer)")


def export_megatron(r: Resolved) -> Export:
    t, p = r.training, r.parallelism
    if p.framework == "deepspeed":
        raise ExportError("parallelism.framework", "is deepspeed: Megatron-LM runs its own "
                          "data parallelism and distributed optimizer; leave framework out")
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
    args, notes = _architecture(r.arch)
    args += [f"--seq-length {t.seq_len}", f"--micro-batch-size {t.micro_batch_size}",
             f"--global-batch-size {t.micro_batch_size * t.gradient_accumulation_steps * p.dp}",
             f"--tensor-model-parallel-size {p.tp}", f"--pipeline-model-parallel-size {p.pp}",
             f"--context-parallel-size {p.cp}"]
    if p.pipeline_schedule == "interleaved_1f1b":
        args.append("--num-layers-per-virtual-pipeline-stage "
                    f"{layers_per_chunk(r, 'Megatron-LM')}")
    elif p.pipeline_schedule != "1f1b":
        raise ExportError("parallelism.pipeline_schedule", "Megatron-LM runs 1F1B or "
                          f"interleaved 1F1B, not {p.pipeline_schedule}")
    if p.ep > 1:
        args.append(f"--expert-model-parallel-size {p.ep}")
    if p.sequence_parallel:
        args.append("--sequence-parallel")
    if p.zero in (1, 2):  # the distributed optimizer shards optimizer states (and gradients)
        args.append("--use-distributed-optimizer")
    elif p.zero == 3:
        _fsdp2(r)
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
    name = _OPTIMIZERS.get(t.optimizer)
    if name is None:
        raise ExportError("training.optimizer", f"Megatron-LM has no {t.optimizer} optimizer")
    args.append(f"--optimizer {name}")
    if name == "sgd":
        args.append(f"--sgd-momentum {0.9 if t.optimizer == 'sgd_momentum' else 0.0}")
    if t.optimizer == "adam":
        notes.append("optimizer adam: Megatron's adam decouples weight decay (AdamW); the "
                     "same memory, and the same update with weight decay 0")
    args.append("--attention-backend " + ("flash" if t.attention == "flash" else "unfused"))
    notes.append(f"launch on {p.world_size} GPUs (data parallel {p.dp} is derived); "
                 "tokenizer, data and learning rate are not exported")
    if t.implementation != "megatron":
        notes.append("implementation hf: the estimate assumed Hugging Face kernels; "
                     "re-estimate with implementation megatron")
    text = " \\\n".join(args) + "\n"
    return Export("megatron", args, text, tuple(notes))
