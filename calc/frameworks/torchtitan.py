"""torchtitan 0.3.0 (PyPI): the scenario as `torchtitan.train` command-line arguments.

torchtitan reads no TOML job files: `ConfigManager.parse_args` in torchtitan/config/manager.py
takes `--module` and `--config` (a function of the model's config_registry.py) and tyro
overrides of `Trainer.Config` (torchtitan/trainer.py; the `training` and `parallelism` fields in
torchtitan/config/configs.py, `optimizer` in components/optimizer/optimizer.py, `loss` in
components/loss.py); activation checkpointing is a subcommand (`ActivationCheckpointingConfig`
in distributed/activation_checkpoint.py). Export only; checked with torchtitan's own
ConfigManager by `make verify-exports`.
"""

from __future__ import annotations

from ..optimizers import OptimizerId
from ..scenario import V_SCHEDULES, Resolved
from .common import (
    TORCH_DTYPE,
    Export,
    ExportError,
    fsdp_offload,
    layers_per_chunk,
    no_fp8,
    torch_engine,
)

# torchtitan 0.3.0's config registry: preset id -> (--module, --config function). The function
# fixes the model (its flavor is no command-line setting), so presets without one are refused.
TORCHTITAN_CONFIGS = {
    "llama-3-8b": ("llama3", "llama3_8b"), "llama-3.1-8b": ("llama3", "llama3_8b"),
    "llama-3-70b": ("llama3", "llama3_70b"), "llama-3.1-70b": ("llama3", "llama3_70b"),
    "qwen3-0.6b": ("qwen3", "qwen3_0_6b"), "qwen3-32b": ("qwen3", "qwen3_32b"),
    "qwen3-30b-a3b": ("qwen3", "qwen3_30b_a3b"), "deepseek-v3": ("deepseek_v3", "deepseek_v3_671b"),
}
_NO_CONFIG = {
    "llama-3.1-405b": "its llama3_405b config trains with Float8 linear layers",
    "qwen3-8b": "the 8B flavor has only NVFP4 and SFT configs",
}
# components/optimizer's names for the scenario's optimizers, in any implementation
# (`--optimizer.implementation fused|foreach|for-loop`); its DistMuon is no scenario optimizer.
OPTIMIZER_NAMES: dict[OptimizerId, str] = {"adamw": "AdamW", "adam": "Adam"}


def _loss_chunks(r: Resolved) -> int:
    """`--loss.num_chunks` for a chunked loss: chunks of about T h / V tokens, as logits.py
    models one, rounded up to a divisor of the rank's sequence (torchtitan splits it evenly)."""
    h, V = r.arch.hidden_size, -(-r.arch.vocab_size // r.parallelism.tp)
    local = r.training.seq_len // r.parallelism.cp
    return next(n for n in range(min(-(-V // h), local), local + 1) if local % n == 0)


# calc's schedules as torchtitan names them (torch.distributed.pipelining's schedule classes)
_SCHEDULES = {"1f1b": "1F1B", "gpipe": "GPipe", "interleaved_1f1b": "Interleaved1F1B",
              "zbv": "ZBVZeroBubble", "dualpipev": "DualPipeV"}


def export_torchtitan(r: Resolved) -> Export:
    t, p = r.training, r.parallelism
    fw = "torchtitan"
    torch_engine(r, fw)
    preset = r.preset.id if r.preset else None
    if preset not in TORCHTITAN_CONFIGS:
        why = _NO_CONFIG.get(preset or "", "no config function")
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
    no_fp8(r, fw)
    if t.precision == "fp16":
        raise ExportError("training.precision", "torchtitan computes in bfloat16 or float32")
    if t.precision == "bf16" and t.mixed_precision == "master":
        raise ExportError("training.mixed_precision", "torchtitan keeps fp32 weights with "
                          "bfloat16 compute (amp) or everything in bfloat16 (pure); no bfloat16 "
                          "weights with fp32 master copies")
    if t.optimizer not in OPTIMIZER_NAMES:
        raise ExportError("training.optimizer", "torchtitan's optimizer names are Adam, AdamW "
                          "and DistMuon")
    if p.zero == 1:
        raise ExportError("parallelism.zero", "torchtitan shards with FSDP2: zero 0 (replicate), "
                          "2 or 3; there is no optimizer-only stage")
    if p.zero == 0 and p.cp > 1:
        raise ExportError("parallelism.zero", "torchtitan shards parameters over the context-"
                          "parallel ranks with FSDP: use zero 2 or 3 with cp > 1")
    offload = fsdp_offload(r, fw)
    if offload and p.zero == 0:
        raise ExportError("parallelism.offload_params", "torchtitan offloads through FSDP2: "
                          "use zero 2 or 3")
    shard = p.dp if p.zero else 1
    if p.zero and p.shard_group == 1 and p.tp == p.pp == 1:
        raise ExportError("parallelism.zero", "torchtitan applies FSDP only over a dimension "
                          "with ranks: on one GPU it trains unwrapped, while the estimate counts "
                          "FSDP wrapping one rank (Accelerate's); use zero 0 for torchtitan")
    if (shard * p.cp * p.tp) % p.ep:
        raise ExportError("parallelism.ep", "torchtitan takes the expert-parallel ranks from the "
                          f"FSDP x cp x tp ranks ({shard * p.cp * p.tp}); ep must divide them"
                          + (" (zero 0 shards over none: use zero 2 or 3)" if not p.zero else ""))
    m, g = t.micro_batch_size, t.gradient_accumulation_steps
    # With pp, torchtitan pipelines the local batch in micro-batches within one step: the
    # scenario's gradient-accumulation steps become pipeline micro-batches, as Megatron counts them.
    local = m * g if p.pp > 1 else m
    pure = t.precision == "bf16" and t.mixed_precision == "pure"
    param_dtype = TORCH_DTYPE["fp32" if t.precision == "fp32" else "bf16"]
    chunks = _loss_chunks(r) if t.loss == "chunked" else 1
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
        schedule = _SCHEDULES.get(p.pipeline_schedule)
        if schedule is None:
            raise ExportError("parallelism.pipeline_schedule", "torchtitan builds its zero-bubble "
                              "schedules with two stages a rank (InterleavedZeroBubble, "
                              "ZBVZeroBubble) and has no bidirectional DualPipe, not the "
                              f"{p.pipeline_schedule} schedule calc models")
        args += [f"--parallelism.pipeline_parallel_microbatch_size {m}",
                 f"--parallelism.pipeline_parallel_schedule {schedule}"]
        if p.virtual_stages > 1 or p.pipeline_schedule in V_SCHEDULES:
            args.append("--parallelism.pipeline_parallel_layers_per_stage "
                        f"{layers_per_chunk(r, 'torchtitan')}")
    args += [f"--parallelism.context_parallel_degree {p.cp}",
             f"--parallelism.expert_parallel_degree {p.ep}",
             f"--optimizer.param_groups.0.optimizer_name {OPTIMIZER_NAMES[t.optimizer]}",
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
