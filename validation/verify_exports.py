"""Parse calc's framework exports with the frameworks themselves and check the values.

    make verify-exports     # in .venv-val: torch 2.13.0 CPU, DeepSpeed, torchtitan and the rest

Not part of `make test`: these libraries need torch. Each scenario is exported, handed to the
framework's own config parser, and the parsed values are compared with the scenario.

- DeepSpeed (`deepspeed.runtime.config.DeepSpeedConfig`): parsed without `train_batch_size`,
  because DeepSpeed checks it against the world size of an initialised process group (1 here);
  the global batch is checked separately as micro-batch x accumulation x dp. mixed_precision
  amp is read back as `torch_autocast` (DeepSpeed >= 0.17.2) with bf16 off.
- Accelerate (`accelerate.commands.config.config_args.load_config_from_file`).
- Hugging Face (`transformers.TrainingArguments`): built with `use_cpu=True`, since bf16 is
  refused on a machine without a GPU; nothing else is changed.
- torchtitan 0.3.0 (`torchtitan.config.ConfigManager.parse_args`, the parser `torchtitan.train`
  runs): the arguments load the named config function and apply the overrides; the parallel
  degrees are also handed to `ParallelDims`, which checks that they multiply to the world size.
- Megatron-LM (`megatron.training.arguments.parse_args`), when this interpreter can import it:
  megatron-core ships the parser from 0.17 on, and those releases need Python >= 3.12, which
  `.venv-val` (torch 2.13.0 CPU, Python 3.11) is not. Run `python verify_exports.py megatron`
  with megatron-core installed in a Python 3.12 environment.

    python validation/verify_exports.py [FORMAT ...]     # default: every format
"""

from __future__ import annotations

import logging
import shlex
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from calc.plan import export
from calc.scenario import Resolved, parse_scenario, resolve

SCENARIOS: dict[str, dict[str, Any]] = {
    "zero2-offload-master": {
        "model": "llama-3-8b",
        "training": {"micro_batch_size": 2, "gradient_accumulation_steps": 4, "seq_len": 4096,
                     "mixed_precision": "master", "activation_checkpointing": "full"},
        "parallelism": {"dp": 8, "zero": 2, "offload_optimizer": True},
    },
    "zero3-master": {
        "model": "qwen2.5-7b",
        "training": {"micro_batch_size": 1, "gradient_accumulation_steps": 16,
                     "mixed_precision": "master"},
        "parallelism": {"dp": 16, "zero": 3},
    },
    "zero2-amp-autocast": {  # DeepSpeed's torch_autocast (>= 0.17.2): fp32 weights
        "model": "llama-3-8b",
        "training": {"micro_batch_size": 2, "gradient_accumulation_steps": 4,
                     "activation_checkpointing": "full"},
        "parallelism": {"dp": 8, "zero": 2},
    },
    "zero2-deepspeed-autocast": {  # framework deepspeed: the HF Trainer nests torch_autocast
        "model": "llama-3-8b",
        "training": {"micro_batch_size": 2, "gradient_accumulation_steps": 4,
                     "activation_checkpointing": "full"},
        "parallelism": {"dp": 8, "zero": 2, "framework": "deepspeed"},
    },
    "fsdp2-amp": {
        "model": "llama-3-8b",
        "training": {"micro_batch_size": 2, "activation_checkpointing": "full"},
        "parallelism": {"dp": 8, "zero": 3},
    },
    "fsdp2-zero2-bf16": {  # FSDP2 without resharding after forward, no checkpointing
        "model": "qwen2.5-7b",
        "training": {"micro_batch_size": 4, "gradient_accumulation_steps": 2},
        "parallelism": {"dp": 4, "zero": 2},
    },
    "4d-pp-tp-sp": {
        "model": "llama-3.1-70b",
        "training": {"micro_batch_size": 2, "gradient_accumulation_steps": 8, "seq_len": 8192,
                     "activation_checkpointing": "full"},
        "parallelism": {"dp": 4, "tp": 8, "pp": 4, "zero": 3, "sequence_parallel": True},
    },
    "pure-cp-chunked": {
        "model": "qwen3-0.6b",
        "training": {"micro_batch_size": 4, "seq_len": 8192, "mixed_precision": "pure",
                     "optimizer_impl": "foreach", "loss": "chunked"},
        "parallelism": {"dp": 4, "cp": 2, "zero": 2},
    },
    "moe-ep-offload": {
        "model": "qwen3-30b-a3b",
        "training": {"gradient_accumulation_steps": 4, "optimizer": "adam",
                     "optimizer_impl": "for_loop"},
        "parallelism": {"dp": 8, "zero": 3, "ep": 8, "offload_optimizer": True,
                        "offload_params": True},
    },
    "megatron-3d-block": {
        "model": "llama-3.1-70b",
        "training": {"seq_len": 8192, "mixed_precision": "master",
                     "gradient_accumulation_steps": 16, "activation_checkpointing": "full",
                     "recompute_layers": 4, "implementation": "megatron"},
        "parallelism": {"dp": 4, "tp": 8, "pp": 4, "zero": 1, "sequence_parallel": True},
    },
    "megatron-fsdp2": {
        "model": "llama-3-8b",
        "training": {"micro_batch_size": 2, "mixed_precision": "master",
                     "activation_checkpointing": "full"},
        "parallelism": {"dp": 8, "zero": 3},
    },
    "megatron-moe-selective": {
        "model": "qwen3-30b-a3b",
        "training": {"micro_batch_size": 2, "gradient_accumulation_steps": 2, "seq_len": 4096,
                     "mixed_precision": "master", "activation_checkpointing": "selective",
                     "implementation": "megatron"},
        "parallelism": {"dp": 8, "ep": 8, "zero": 2},
    },
}


def _resolved(scenario: dict[str, Any]) -> Resolved:
    """The scenario with calc's defaults filled in: the values the export must carry."""
    return resolve(parse_scenario(scenario))


def _argv(text: str) -> list[str]:
    """The export's command line as a shell splits it (backslash-newline continues a line)."""
    return shlex.split(text.replace("\\\n", " "))


def check_deepspeed(name: str, scenario: dict[str, Any]) -> str:
    from deepspeed.runtime.config import DeepSpeedConfig

    data = dict(export(scenario, "deepspeed").data)
    t, p = scenario["training"], scenario["parallelism"]
    global_batch = data.pop("train_batch_size")
    assert global_batch == t["micro_batch_size"] * t.get("gradient_accumulation_steps", 1) * p["dp"]
    cfg = DeepSpeedConfig(data)
    assert cfg.zero_optimization_stage == p["zero"]
    assert cfg.train_micro_batch_size_per_gpu == t["micro_batch_size"]
    assert cfg.gradient_accumulation_steps == t.get("gradient_accumulation_steps", 1)
    amp = _resolved(scenario).training.mixed_precision == "amp"
    assert cfg.bfloat16_config.enabled != amp
    assert cfg.torch_autocast_enabled == amp
    if amp:
        import torch

        assert cfg.torch_autocast_dtype == torch.bfloat16
    offload = cfg.zero_config.offload_optimizer
    assert (offload is not None and str(offload.device).endswith("cpu")) == \
        p.get("offload_optimizer", False)
    return f"stage {cfg.zero_optimization_stage}, micro {cfg.train_micro_batch_size_per_gpu}"


def check_accelerate(name: str, scenario: dict[str, Any]) -> str:
    from accelerate.commands.config.config_args import load_config_from_file

    text = export(scenario, "accelerate-fsdp").text
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(text)
    cfg = load_config_from_file(f.name)
    p, t = scenario["parallelism"], scenario["training"]
    assert str(cfg.distributed_type).endswith("FSDP")
    assert cfg.num_processes == p["dp"]
    assert cfg.mixed_precision == "bf16"
    assert cfg.fsdp_config["fsdp_version"] == 2
    assert cfg.fsdp_config["fsdp_reshard_after_forward"] is True
    assert cfg.fsdp_config["fsdp_activation_checkpointing"] == \
        (t.get("activation_checkpointing") == "full")
    return f"FSDP{cfg.fsdp_config['fsdp_version']} x {cfg.num_processes}"


def check_hf_trainer(name: str, scenario: dict[str, Any]) -> str:
    from transformers import TrainingArguments

    kwargs = dict(export(scenario, "hf-trainer").data)
    with tempfile.TemporaryDirectory() as out:
        args = TrainingArguments(output_dir=out, use_cpu=True, **kwargs)
    t = scenario["training"]
    assert args.per_device_train_batch_size == t["micro_batch_size"]
    assert args.gradient_accumulation_steps == t.get("gradient_accumulation_steps", 1)
    nested = kwargs.get("deepspeed") or {}
    if "torch_autocast" in nested:  # the precision is the nested config's, its flags off
        from deepspeed.runtime.config import DeepSpeedConfig

        assert not args.bf16 and not args.fp16
        cfg = DeepSpeedConfig({k: v for k, v in nested.items() if k != "train_batch_size"})
        assert cfg.torch_autocast_enabled and not cfg.bfloat16_config.enabled
    else:
        assert args.bf16
    p = scenario.get("parallelism", {})
    ckpt = t.get("activation_checkpointing") == "full"
    if p.get("zero") in (2, 3) and "deepspeed" not in kwargs:  # FSDP: TrainingArguments' own reading
        plugin = args.fsdp_plugin_args
        assert plugin["fsdp_version"] == 2
        assert plugin["reshard_after_forward"] == (p["zero"] == 3)
        assert bool(plugin.get("cpu_offload")) == bool(p.get("offload_params"))
        assert bool(plugin.get("activation_checkpointing")) == ckpt
        return (f"micro {args.per_device_train_batch_size} x gas {args.gradient_accumulation_steps}"
                f", FSDP{plugin['fsdp_version']} reshard {plugin['reshard_after_forward']}")
    assert args.activation_checkpointing == ckpt
    return f"micro {args.per_device_train_batch_size} x gas {args.gradient_accumulation_steps}"


def check_torchtitan(name: str, scenario: dict[str, Any]) -> str:
    from torchtitan.config import ConfigManager
    from torchtitan.distributed import ParallelDims
    from torchtitan.distributed.activation_checkpoint import FullAC

    r = _resolved(scenario)
    t, p, arch = r.training, r.parallelism, r.arch
    argv = _argv(export(scenario, "torchtitan").text)
    logging.disable(logging.WARNING)  # the config functions' checkpoint and asset-path warnings
    try:
        cfg: Any = ConfigManager().parse_args(argv)
    finally:
        logging.disable(logging.NOTSET)
    model = cfg.model_spec.model
    assert (model.dim, len(model.layers), model.vocab_size) == \
        (arch.hidden_size, arch.num_hidden_layers, arch.vocab_size)
    m, g = t.micro_batch_size, t.gradient_accumulation_steps
    tr, par = cfg.training, cfg.parallelism
    assert tr.global_batch_size == m * g * p.dp
    assert tr.seq_len == t.seq_len
    # torchtitan's own arithmetic (trainer.py): accumulation steps and pipeline micro-batches
    accumulation = tr.global_batch_size // (tr.local_batch_size * p.dp)
    if p.pp > 1:
        micro_batches = tr.local_batch_size // par.pipeline_parallel_microbatch_size
        assert (accumulation, micro_batches) == (1, g)
        assert par.pipeline_parallel_microbatch_size == m
        assert par.pipeline_parallel_schedule == "1F1B"
    else:
        assert (tr.local_batch_size, accumulation) == (m, g)
    pure = t.precision == "bf16" and t.mixed_precision == "pure"
    assert tr.dtype == ("bfloat16" if pure else "float32")
    assert tr.mixed_precision_param == ("float32" if t.precision == "fp32" else "bfloat16")
    assert tr.enable_cpu_offload == p.offload_params == p.offload_optimizer
    assert tr.disable_cuda_graphs
    dims = ParallelDims.from_config(par, p.world_size)  # checks the product is the world size
    assert (dims.dp_replicate, dims.dp_shard) == ((1, p.dp) if p.zero else (p.dp, 1))
    assert (dims.tp, dims.pp, dims.cp, dims.ep) == (p.tp, p.pp, p.cp, p.ep)
    assert par.fsdp_reshard_after_forward == ("always" if p.zero == 3 else "never")
    if p.tp > 1:
        assert par.enable_sequence_parallel == p.sequence_parallel
    ac = cfg.activation_checkpoint
    assert {"none": ac is None, "full": isinstance(ac, FullAC.Config)}[t.activation_checkpointing]
    names = {group.optimizer_name for group in cfg.optimizer.param_groups}
    assert names == {"AdamW" if t.optimizer == "adamw" else "Adam"}
    assert cfg.optimizer.implementation == t.optimizer_impl.replace("_", "-")
    chunks = cfg.loss.num_chunks
    assert (t.seq_len // p.cp) % chunks == 0 and (chunks > 1) == (t.loss == "chunked")
    return (f"{argv[1]}/{argv[3]}: shard {dims.dp_shard} tp {dims.tp} pp {dims.pp} "
            f"cp {dims.cp} ep {dims.ep}, local {tr.local_batch_size}, {tr.dtype}")


def check_megatron(name: str, scenario: dict[str, Any]) -> str:
    from megatron.training.arguments import parse_args

    r = _resolved(scenario)
    t, p, arch = r.training, r.parallelism, r.arch
    argv, sys.argv = sys.argv, ["pretrain_gpt.py", *_argv(export(scenario, "megatron").text)]
    try:
        a = parse_args()  # reads sys.argv, as pretrain_gpt.py does
    finally:
        sys.argv = argv
    assert (a.num_layers, a.hidden_size, a.ffn_hidden_size, a.num_attention_heads) == \
        (arch.num_hidden_layers, arch.hidden_size, arch.intermediate_size,
         arch.num_attention_heads)
    assert (a.num_query_groups or a.num_attention_heads) == arch.kv_heads
    if arch.is_moe:
        assert (a.num_experts, a.moe_router_topk) == \
            (arch.num_local_experts, arch.num_experts_per_tok)
    assert (a.seq_length, a.micro_batch_size) == (t.seq_len, t.micro_batch_size)
    parallel = (a.tensor_model_parallel_size, a.pipeline_model_parallel_size,
                a.context_parallel_size, a.expert_model_parallel_size)
    assert parallel == (p.tp, p.pp, p.cp, p.ep)
    # Megatron's arithmetic (validate_args, which needs a GPU when tp or cp > 1): data parallel
    # from the world size, then micro-batches per step from the global batch
    dp = p.world_size // (a.tensor_model_parallel_size * a.pipeline_model_parallel_size
                          * a.context_parallel_size)
    steps = divmod(a.global_batch_size, a.micro_batch_size * dp)
    assert steps == (t.gradient_accumulation_steps, 0)
    assert a.sequence_parallel == p.sequence_parallel
    assert a.use_distributed_optimizer == (p.zero in (1, 2))
    assert a.use_torch_fsdp2 == (p.zero == 3)
    assert a.gradient_accumulation_fusion == (p.zero != 3)  # validate_args asserts it for FSDP2
    assert (a.bf16, a.fp16) == (t.precision in ("bf16", "fp8"), t.precision == "fp16")
    assert a.fp8 == ("hybrid" if t.precision == "fp8" else None)
    recompute = {"none": None}.get(t.activation_checkpointing, t.activation_checkpointing)
    assert a.recompute_granularity == recompute
    if recompute == "full":
        assert (a.recompute_method, a.recompute_num_layers) == \
            (("uniform", 1) if t.recompute_layers is None else ("block", t.recompute_layers))
    assert a.optimizer == ("adam" if t.optimizer in ("adam", "adamw") else "sgd")
    return (f"tp {a.tensor_model_parallel_size} pp {a.pipeline_model_parallel_size} "
            f"ep {a.expert_model_parallel_size}, micro {a.micro_batch_size}, "
            f"recompute {a.recompute_granularity}")


CHECKS: dict[str, tuple[Callable[[str, dict[str, Any]], str], tuple[str, ...]]] = {
    "deepspeed": (check_deepspeed, ("zero2-offload-master", "zero3-master",
                                    "zero2-amp-autocast", "zero2-deepspeed-autocast")),
    "accelerate-fsdp": (check_accelerate, ("fsdp2-amp",)),
    "hf-trainer": (check_hf_trainer, ("zero2-offload-master", "fsdp2-amp", "fsdp2-zero2-bf16",
                                      "zero2-deepspeed-autocast")),
    "torchtitan": (check_torchtitan, ("fsdp2-amp", "4d-pp-tp-sp", "pure-cp-chunked",
                                      "moe-ep-offload")),
    "megatron": (check_megatron, ("megatron-3d-block", "megatron-fsdp2",
                                  "megatron-moe-selective")),
}


def _megatron_missing() -> str | None:
    """Why Megatron-LM's parser cannot be imported here, or None when it can."""
    try:
        import megatron.training.arguments  # noqa: F401
    except ImportError as exc:
        return (f"Megatron-LM's parser does not import here ({exc}): megatron-core ships "
                "megatron/training/arguments.py from 0.17 on, which needs Python >= 3.12; "
                f"this is {sys.version.split()[0]}")
    return None


def main(formats: list[str]) -> int:
    failed = 0
    for fmt in formats or list(CHECKS):
        check, names = CHECKS[fmt]
        why = _megatron_missing() if fmt == "megatron" else None
        if why:
            print(f"skip  {fmt:<16} {why}")
            continue
        for name in names:
            try:
                print(f"ok    {fmt:<16} {name:<22} {check(name, SCENARIOS[name])}")
            except (Exception, SystemExit) as exc:  # tyro exits on a bad argument
                failed += 1
                print(f"FAIL  {fmt:<16} {name:<22} {type(exc).__name__}: {exc}")
    return 1 if failed else 0

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
