"""Parse calc's framework exports with the frameworks themselves and check the values.

    make verify-exports     # needs .venv-val (torch 2.13.0 CPU) plus deepspeed

Not part of `make test`: these libraries need torch. Each scenario is exported, handed to the
framework's own config parser, and the parsed values are compared with the scenario.

- DeepSpeed (`deepspeed.runtime.config.DeepSpeedConfig`): parsed without `train_batch_size`,
  because DeepSpeed checks it against the world size of an initialised process group (1 here);
  the global batch is checked separately as micro-batch x accumulation x dp.
- Accelerate (`accelerate.commands.config.config_args.load_config_from_file`).
- Hugging Face (`transformers.TrainingArguments`): built with `use_cpu=True`, since bf16 is
  refused on a machine without a GPU; nothing else is changed.

Not checked, with the reason printed: torchtitan (0.3 reads Python config registries, no longer
TOML job files, and its model registry does not import beside torch 2.13 here) and Megatron-LM
(its argument parser ships with the Megatron-LM repository, not the megatron-core package).
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from calc.plan import export

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
    "fsdp2-amp": {
        "model": "llama-3-8b",
        "training": {"micro_batch_size": 2, "activation_checkpointing": "full"},
        "parallelism": {"dp": 8, "zero": 3},
    },
}


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
    assert cfg.bfloat16_config.enabled
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
    assert args.bf16
    assert args.gradient_checkpointing == (t.get("activation_checkpointing") == "full")
    return f"micro {args.per_device_train_batch_size} x gas {args.gradient_accumulation_steps}"


CHECKS: dict[str, tuple[Callable[[str, dict[str, Any]], str], tuple[str, ...]]] = {
    "deepspeed": (check_deepspeed, ("zero2-offload-master", "zero3-master")),
    "accelerate-fsdp": (check_accelerate, ("fsdp2-amp",)),
    "hf-trainer": (check_hf_trainer, ("zero2-offload-master", "fsdp2-amp")),
}
NOT_CHECKED = {
    "torchtitan": "torchtitan 0.3 reads Python config registries, not TOML job files, and its "
    "model registry does not import beside torch 2.13 here",
    "megatron": "Megatron-LM's argument parser ships with its repository, not with megatron-core",
}


def main() -> int:
    failed = 0
    for fmt, (check, names) in CHECKS.items():
        for name in names:
            try:
                print(f"ok    {fmt:<16} {name:<22} {check(name, SCENARIOS[name])}")
            except Exception as exc:  # report every failure, then exit non-zero
                failed += 1
                print(f"FAIL  {fmt:<16} {name:<22} {type(exc).__name__}: {exc}")
    for fmt, why in NOT_CHECKED.items():
        print(f"skip  {fmt:<16} {why}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
