"""Framework exports: golden outputs, hand-checked against each framework's documented keys,
and refusals that name the setting the framework cannot express."""

import json
import tomllib

import pytest

from calc.plan import FORMATS, ExportError, export

DEEPSPEED = {"model": "llama-3.1-8b",
             "training": {"micro_batch_size": 2, "gradient_accumulation_steps": 4,
                          "seq_len": 8192, "mixed_precision": "master",
                          "activation_checkpointing": "full"},
             "parallelism": {"dp": 8, "zero": 3, "offload_optimizer": True}}


def test_deepspeed_golden() -> None:
    """https://www.deepspeed.ai/docs/config-json/: train_batch_size = micro x gas x dp."""
    e = export(DEEPSPEED, "deepspeed")
    assert json.loads(e.text) == e.data == {
        "train_batch_size": 64,
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 4,
        "bf16": {"enabled": True},
        "zero_optimization": {"stage": 3,
                              "offload_optimizer": {"device": "cpu", "pin_memory": True}},
        "optimizer": {"type": "AdamW", "params": {}},
        "activation_checkpointing": {
            "partition_activations": False, "cpu_checkpointing": False,
            "contiguous_memory_optimization": False, "synchronize_checkpoint_boundary": False},
    }
    assert any("gradient_checkpointing" in n for n in e.notes)


def test_accelerate_fsdp2_golden() -> None:
    e = export({"model": "llama-3.1-8b",
                "training": {"seq_len": 8192, "activation_checkpointing": "full"},
                "parallelism": {"dp": 8, "zero": 3}}, "accelerate-fsdp")
    assert e.text == """\
compute_environment: LOCAL_MACHINE
distributed_type: FSDP
fsdp_config:
  fsdp_version: 2
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer
  fsdp_reshard_after_forward: true
  fsdp_offload_params: false
  fsdp_activation_checkpointing: true
  fsdp_cpu_ram_efficient_loading: true
  fsdp_state_dict_type: SHARDED_STATE_DICT
mixed_precision: bf16
num_machines: 1
num_processes: 8
machine_rank: 0
rdzv_backend: static
same_network: true
use_cpu: false
"""


def test_accelerate_pure_precision_writes_no_and_quotes_it() -> None:
    e = export({"model": "llama-3.2-1b", "training": {"mixed_precision": "pure"},
                "parallelism": {"dp": 2, "zero": 2}}, "accelerate-fsdp")
    assert "mixed_precision: 'no'\n" in e.text and "fsdp_reshard_after_forward: false" in e.text
    assert any("torch_dtype=torch.bfloat16" in n for n in e.notes)


def test_torchtitan_golden() -> None:
    e = export({"model": "llama-3.1-8b",
                "training": {"seq_len": 8192, "activation_checkpointing": "selective",
                             "gradient_accumulation_steps": 2},
                "parallelism": {"dp": 4, "tp": 2, "zero": 3, "sequence_parallel": True}},
               "torchtitan")
    assert tomllib.loads(e.text) == e.data == {
        "job": {"description": "calc export: llama-3.1-8b"},
        "model": {"name": "llama3", "flavor": "8B"},
        "optimizer": {"name": "AdamW", "implementation": "fused"},
        "training": {"local_batch_size": 1, "global_batch_size": 8, "seq_len": 8192,
                     "mixed_precision_param": "bfloat16", "mixed_precision_reduce": "float32",
                     "enable_cpu_offload": False},
        "parallelism": {"data_parallel_replicate_degree": 1, "data_parallel_shard_degree": 4,
                        "fsdp_reshard_after_forward": "always", "tensor_parallel_degree": 2,
                        "pipeline_parallel_degree": 1, "context_parallel_degree": 1,
                        "expert_parallel_degree": 1},
        "activation_checkpoint": {"mode": "selective", "selective_ac_option": "op"},
    }


def test_megatron_golden() -> None:
    """megatron/training/arguments.py; block recompute = the first N layers of each stage."""
    e = export({"model": "llama-3.1-70b",
                "training": {"seq_len": 8192, "mixed_precision": "master",
                             "activation_checkpointing": "full", "recompute_layers": 4,
                             "implementation": "megatron", "gradient_accumulation_steps": 16},
                "parallelism": {"dp": 4, "tp": 8, "pp": 4, "zero": 1,
                                "sequence_parallel": True}}, "megatron")
    assert e.data == [
        "--num-layers 80", "--hidden-size 8192", "--ffn-hidden-size 28672",
        "--num-attention-heads 64", "--max-position-embeddings 131072",
        "--group-query-attention", "--num-query-groups 8", "--normalization RMSNorm",
        "--swiglu", "--position-embedding-type rope", "--untie-embeddings-and-output-weights",
        "--disable-bias-linear", "--seq-length 8192", "--micro-batch-size 1",
        "--global-batch-size 64", "--tensor-model-parallel-size 8",
        "--pipeline-model-parallel-size 4", "--context-parallel-size 1", "--sequence-parallel",
        "--use-distributed-optimizer", "--bf16", "--recompute-granularity full",
        "--recompute-method block", "--recompute-num-layers 4", "--optimizer adam",
        "--attention-backend flash",
    ]
    assert e.text.split(" \\\n")[0] == "--num-layers 80"


def test_hf_trainer_golden() -> None:
    e = export({"model": "qwen2.5-7b",
                "training": {"micro_batch_size": 4, "seq_len": 4096, "finetuning": "lora",
                             "activation_checkpointing": "full", "loss": "chunked"}},
               "hf-trainer")
    assert json.loads(e.text) == e.data == {
        "per_device_train_batch_size": 4, "gradient_accumulation_steps": 1,
        "gradient_checkpointing": True, "optim": "adamw_torch_fused", "bf16": True,
        "fp16": False, "use_liger_kernel": True,
    }
    assert any("LoraConfig(r=16" in n for n in e.notes)


def test_hf_trainer_master_precision_embeds_the_deepspeed_config() -> None:
    e = export(DEEPSPEED, "hf-trainer")
    assert isinstance(e.data, dict)
    assert e.data["deepspeed"] == export(DEEPSPEED, "deepspeed").data
    fsdp = export({"model": "llama-3.2-1b", "parallelism": {"dp": 8, "zero": 3}}, "hf-trainer")
    assert isinstance(fsdp.data, dict) and fsdp.data["fsdp"] == "full_shard auto_wrap"


@pytest.mark.parametrize(("fmt", "change", "field"), [
    ("deepspeed", {"parallelism": {"tp": 2}}, "parallelism.tp"),
    ("deepspeed", {"training": {"mixed_precision": "amp"}}, "training.mixed_precision"),
    ("deepspeed", {"training": {"optimizer": "adamw_8bit", "mixed_precision": "master"}},
     "training.optimizer"),
    ("accelerate-fsdp", {"parallelism": {"dp": 8, "zero": 1}}, "parallelism.zero"),
    ("accelerate-fsdp", {"parallelism": {"dp": 8, "zero": 3, "offload_optimizer": True}},
     "parallelism.offload_params"),
    ("accelerate-fsdp", {"parallelism": {"dp": 8, "zero": 3},
                         "training": {"activation_checkpointing": "selective"}},
     "training.activation_checkpointing"),
    ("torchtitan", {"training": {"finetuning": "lora"}}, "training.finetuning"),
    ("torchtitan", {"parallelism": {"tp": 2}}, "parallelism.sequence_parallel"),
    ("megatron", {"training": {"mixed_precision": "amp"}}, "training.mixed_precision"),
    ("megatron", {"training": {"mixed_precision": "master", "optimizer": "adafactor"}},
     "training.optimizer"),
    ("hf-trainer", {"parallelism": {"pp": 2}}, "parallelism.pp"),
    ("hf-trainer", {"training": {"recompute_layers": 2, "activation_checkpointing": "full"}},
     "training.recompute_layers"),
])
def test_inexpressible_settings_are_errors_naming_the_field(fmt, change, field) -> None:
    scenario = {"model": "llama-3-8b", **change}
    with pytest.raises(ExportError) as exc:
        export(scenario, fmt)
    assert exc.value.field == field and exc.value.message


def test_custom_model_has_no_torchtitan_flavor() -> None:
    with pytest.raises(ExportError) as exc:
        export({"model": "gpt2", "training": {"seq_len": 1024}}, "torchtitan")
    assert exc.value.field == "model"


def test_unknown_format_is_an_error() -> None:
    with pytest.raises(ExportError) as exc:
        export({"model": "gpt2"}, "nemo")  # type: ignore[arg-type]
    assert exc.value.field == "format"
    assert set(FORMATS) == {"deepspeed", "accelerate-fsdp", "torchtitan", "megatron",
                            "hf-trainer"}
