"""Framework exports: golden outputs, hand-checked against each framework's documented keys,
and refusals that name the setting the framework cannot express."""

import json

import pytest

from calc import estimate
from calc.plan import FORMATS, ExportError, export, import_config

DEEPSPEED = {"model": "llama-3.1-8b",
             "training": {"micro_batch_size": 2, "gradient_accumulation_steps": 4,
                          "seq_len": 8192, "mixed_precision": "master",
                          "activation_checkpointing": "full"},
             "parallelism": {"dp": 8, "zero": 3, "offload_optimizer": True}}


def test_deepspeed_golden() -> None:
    """https://www.deepspeed.ai/docs/config-json/: train_batch_size = micro x gas x dp; the
    reduce bucket the estimate counts, h^2 elements (HF's "auto"), not DeepSpeed's 5e8; at
    stage 3 the coordinator's sizes: HF's "auto" (0.9 h^2, 10 h) and DeepSpeed's defaults."""
    e = export(DEEPSPEED, "deepspeed")
    assert json.loads(e.text) == e.data == {
        "train_batch_size": 64,
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 4,
        "bf16": {"enabled": True},
        "zero_optimization": {"stage": 3, "reduce_bucket_size": 4096**2,
                              "stage3_prefetch_bucket_size": int(0.9 * 4096**2),
                              "stage3_param_persistence_threshold": 10 * 4096,
                              "stage3_max_live_parameters": 10**9,
                              "stage3_max_reuse_distance": 10**9, "sub_group_size": 10**9,
                              "offload_optimizer": {"device": "cpu", "pin_memory": True}},
        "optimizer": {"type": "AdamW", "params": {}},
        "activation_checkpointing": {
            "partition_activations": False, "cpu_checkpointing": False,
            "contiguous_memory_optimization": False, "synchronize_checkpoint_boundary": False},
    }
    assert any("gradient_checkpointing" in n for n in e.notes)


@pytest.mark.parametrize("zero", [0, 1, 2])
def test_deepspeed_amp_is_torch_autocast(zero: int) -> None:
    """DeepSpeed >= 0.17.2 (runtime/torch_autocast.py, PR #6993): fp32 parameters and the
    engine's own autocast; the section excludes bf16/fp16, which would cast the weights."""
    e = export({"model": "llama-3-8b", "parallelism": {"dp": 8, "zero": zero}}, "deepspeed")
    assert isinstance(e.data, dict)
    assert e.data["torch_autocast"] == {"enabled": True, "dtype": "bfloat16"}
    assert "bf16" not in e.data and "fp16" not in e.data
    assert e.data["zero_optimization"]["stage"] == zero
    assert any("0.17.2" in n for n in e.notes)
    # the scenario names no framework, so it is estimated as torch's form: with ZeRO the note
    # gives the figure of DeepSpeed's own ZeRO, the estimator's, not a formula of its own
    own = estimate({"model": "llama-3-8b",
                    "parallelism": {"dp": 8, "zero": zero, "framework": "deepspeed"}})
    said = [n for n in e.notes if "parallelism.framework deepspeed" in n]
    assert len(said) == (zero > 0)
    if zero:
        assert f"DeepSpeed's ZeRO-{zero}: {own.device_bytes / 1024**3:,.1f} GiB" in said[0]
        assert "fp32 parameters" in said[0]
    named = export({"model": "llama-3-8b",
                    "parallelism": {"dp": 8, "zero": zero, "framework": "deepspeed"}}, "deepspeed")
    assert named.data == e.data
    assert not any("parallelism.framework" in n for n in named.notes)


def test_deepspeed_amp_fp16_round_trips() -> None:
    e = export({"model": "llama-3-8b", "training": {"precision": "fp16"},
                "parallelism": {"dp": 4, "zero": 2}}, "deepspeed")
    assert isinstance(e.data, dict) and e.data["torch_autocast"]["dtype"] == "float16"
    s, _ = import_config(e.text, "deepspeed", model="llama-3-8b")
    assert (s.training.mixed_precision, s.training.precision) == ("amp", "fp16")
    assert (s.parallelism.dp, s.parallelism.zero, s.parallelism.framework) == (4, 2, "deepspeed")


def test_deepspeed_amp_zero3_round_trips() -> None:
    """DeepSpeed's ZeRO-3 under torch_autocast is modelled (traced with its engine): the export
    writes the torch_autocast section beside stage 3, and the import reads it back."""
    scenario = {"model": "llama-3-8b", "parallelism": {"dp": 8, "zero": 3,
                                                       "framework": "deepspeed"}}
    e = export(scenario, "deepspeed")
    assert isinstance(e.data, dict) and e.data["zero_optimization"]["stage"] == 3
    assert e.data["torch_autocast"] == {"enabled": True, "dtype": "bfloat16"}
    s, _ = import_config(e.text, "deepspeed", model="llama-3-8b")
    assert (s.training.mixed_precision, s.parallelism.zero, s.parallelism.framework) == \
        ("amp", 3, "deepspeed")


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
    """torchtitan 0.3.0 reads no TOML: `ConfigManager.parse_args` (torchtitan/config/manager.py)
    takes --module/--config and tyro overrides named as in torchtitan/config/configs.py,
    components/optimizer/optimizer.py and components/loss.py; the activation-checkpointing
    policy is a subcommand (distributed/activation_checkpoint.py). verify_exports.py parses
    this form with torchtitan itself."""
    e = export({"model": "llama-3.1-8b",
                "training": {"seq_len": 8192, "activation_checkpointing": "full",
                             "gradient_accumulation_steps": 2},
                "parallelism": {"dp": 4, "tp": 2, "zero": 3, "sequence_parallel": True}},
               "torchtitan")
    assert e.data == [
        "--module llama3", "--config llama3_8b", "--training.local_batch_size 1",
        "--training.global_batch_size 8", "--training.seq_len 8192", "--training.dtype float32",
        "--training.mixed_precision_param bfloat16", "--training.no_enable_cpu_offload",
        "--training.disable_cuda_graphs", "--parallelism.data_parallel_replicate_degree 1",
        "--parallelism.data_parallel_shard_degree 4",
        "--parallelism.fsdp_reshard_after_forward always",
        "--parallelism.tensor_parallel_degree 2", "--parallelism.enable_sequence_parallel",
        "--parallelism.pipeline_parallel_degree 1", "--parallelism.context_parallel_degree 1",
        "--parallelism.expert_parallel_degree 1",
        "--optimizer.param_groups.0.optimizer_name AdamW", "--optimizer.implementation fused",
        "--loss.num_chunks 1", "activation-checkpoint:full",
    ]
    assert e.text == " \\\n".join(e.data) + "\n"  # one argument a line, as a shell reads it


def test_torchtitan_pipeline_counts_accumulation_as_micro_batches() -> None:
    """torchtitan splits `local_batch_size` into pipeline micro-batches of
    `pipeline_parallel_microbatch_size` within one step; calc (like Megatron) counts the
    gradient-accumulation steps as the micro-batches in flight."""
    e = export({"model": "llama-3.1-70b",
                "training": {"micro_batch_size": 2, "gradient_accumulation_steps": 8,
                             "activation_checkpointing": "full"},
                "parallelism": {"dp": 4, "tp": 8, "pp": 4, "zero": 3,
                                "sequence_parallel": True}}, "torchtitan")
    assert {"--training.local_batch_size 16", "--training.global_batch_size 64",
            "--parallelism.pipeline_parallel_microbatch_size 2",
            "--parallelism.pipeline_parallel_schedule 1F1B"} <= set(e.data)


def test_torchtitan_pure_bf16_and_chunked_loss() -> None:
    """`training.dtype bfloat16` keeps weights, gradients and optimizer states in bf16 (pure);
    a chunked loss gets chunks of about T h / V tokens that divide the rank's sequence."""
    e = export({"model": "qwen3-0.6b",
                "training": {"seq_len": 8192, "mixed_precision": "pure", "loss": "chunked",
                             "optimizer_impl": "for_loop"},
                "parallelism": {"dp": 4, "cp": 2, "zero": 2}}, "torchtitan")
    assert {"--training.dtype bfloat16", "--parallelism.fsdp_reshard_after_forward never",
            "--optimizer.implementation for-loop", "--loss.num_chunks 256"} <= set(e.data)
    # Qwen3 0.6B: V / h = 151936 / 1024 = 148.4 -> 149, rounded up to a divisor of 8192 / 2
    assert any("256 chunks of 16 tokens" in n for n in e.notes)


def test_torchtitan_registry_has_no_config_for_some_presets() -> None:
    """A config function fixes the model; qwen3's 8B flavor and llama3_405b (Float8 linears)
    have no plain bf16 config in 0.3.0."""
    for model in ("qwen3-8b", "llama-3.1-405b", "llama-3.2-1b"):
        with pytest.raises(ExportError) as exc:
            export({"model": model}, "torchtitan")
        assert exc.value.field == "model"


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


def test_megatron_zero3_is_torch_fsdp2_without_gradient_accumulation_fusion() -> None:
    """validate_args (megatron/training/arguments.py, megatron-core 0.19.2) asserts that
    --use-torch-fsdp2 runs without gradient-accumulation fusion and with untied embeddings."""
    e = export({"model": "llama-3-8b", "training": {"mixed_precision": "master"},
                "parallelism": {"dp": 8, "zero": 3}}, "megatron")
    assert {"--use-torch-fsdp2", "--no-gradient-accumulation-fusion"} <= set(e.data)
    with pytest.raises(ExportError) as exc:
        export({"model": "qwen3-0.6b", "training": {"mixed_precision": "master"},
                "parallelism": {"dp": 8, "zero": 3}}, "megatron")
    assert exc.value.field == "parallelism.zero" and "tied embeddings" in exc.value.message


def test_hf_trainer_golden() -> None:
    e = export({"model": "qwen2.5-7b",
                "training": {"micro_batch_size": 4, "seq_len": 4096, "finetuning": "lora",
                             "activation_checkpointing": "full", "loss": "chunked"}},
               "hf-trainer")
    assert json.loads(e.text) == e.data == {
        "per_device_train_batch_size": 4, "gradient_accumulation_steps": 1,
        "activation_checkpointing": True, "optim": "adamw_torch_fused", "bf16": True,
        "fp16": False, "use_liger_kernel": True,
    }
    assert any("LoraConfig(r=16" in n for n in e.notes)


def test_hf_trainer_master_precision_embeds_the_deepspeed_config() -> None:
    e = export(DEEPSPEED, "hf-trainer")
    assert isinstance(e.data, dict)
    assert e.data["deepspeed"] == export(DEEPSPEED, "deepspeed").data
    fsdp = export({"model": "llama-3.2-1b", "parallelism": {"dp": 8, "zero": 3}}, "hf-trainer")
    assert isinstance(fsdp.data, dict) and fsdp.data["fsdp"] is True
    assert fsdp.data["fsdp_config"] | {"transformer_layer_cls_to_wrap": None} == {
        "version": 2, "reshard_after_forward": True, "cpu_offload": False,
        "transformer_layer_cls_to_wrap": None}


def test_hf_trainer_fsdp_checkpoints_through_fsdp_config() -> None:
    """Under FSDP transformers prefers FSDP's own activation checkpointing; the flag beside it
    would all-gather again in backward. The estimate is the same either way."""
    e = export({"model": "llama-3.2-1b", "training": {"activation_checkpointing": "full"},
                "parallelism": {"dp": 8, "zero": 2}}, "hf-trainer")
    assert isinstance(e.data, dict)
    assert e.data["fsdp_config"]["activation_checkpointing"] is True
    assert e.data["fsdp_config"]["reshard_after_forward"] is False
    assert e.data["activation_checkpointing"] is False


@pytest.mark.parametrize(("fmt", "change", "field"), [
    ("deepspeed", {"parallelism": {"tp": 2}}, "parallelism.tp"),
    ("deepspeed", {"training": {"mixed_precision": "pure"}}, "training.mixed_precision"),
    ("deepspeed", {"training": {"optimizer": "adamw_8bit", "mixed_precision": "master"}},
     "training.optimizer"),
    ("accelerate-fsdp", {"parallelism": {"dp": 8, "zero": 1}}, "parallelism.zero"),
    ("accelerate-fsdp", {"parallelism": {"dp": 8, "zero": 3, "offload_optimizer": True}},
     "parallelism.offload_params"),
    ("accelerate-fsdp", {"parallelism": {"dp": 8, "zero": 3},
                         "training": {"activation_checkpointing": "selective"}},
     "training.activation_checkpointing"),
    ("torchtitan", {"training": {"finetuning": "lora"}}, "training.finetuning"),
    ("torchtitan", {"training": {"activation_checkpointing": "selective"}},
     "training.activation_checkpointing"),
    ("torchtitan", {"training": {"mixed_precision": "master"}}, "training.mixed_precision"),
    ("torchtitan", {"model": "qwen3-30b-a3b", "parallelism": {"dp": 4, "ep": 4}},
     "parallelism.ep"),
    ("megatron", {"training": {"mixed_precision": "amp"}}, "training.mixed_precision"),
    ("megatron", {"training": {"mixed_precision": "master", "optimizer": "adafactor"}},
     "training.optimizer"),
    ("megatron", {"training": {"mixed_precision": "master"},
                  "parallelism": {"dp": 4, "pp": 2, "zero": 3}}, "parallelism.zero"),
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


@pytest.mark.parametrize("format", ["accelerate-fsdp", "torchtitan", "megatron"])
def test_a_deepspeed_scenario_is_not_exported_to_torch_frameworks(format: str) -> None:
    with pytest.raises(ExportError) as exc:
        export({"model": "llama-3-8b", "training": {"mixed_precision": "master"},
                "parallelism": {"dp": 8, "zero": 1, "framework": "deepspeed"}}, format)
    assert exc.value.field == "parallelism.framework"


def test_hf_trainer_nests_deepspeed_autocast_with_its_flags_off() -> None:
    """The nested config's torch_autocast is the precision; bf16=True would add a bf16
    section, which DeepSpeed refuses beside it."""
    e = export({"model": "llama-3-8b",
                "parallelism": {"dp": 8, "zero": 2, "framework": "deepspeed"}}, "hf-trainer")
    assert isinstance(e.data, dict)
    assert e.data["deepspeed"]["torch_autocast"]["enabled"] is True
    assert (e.data["bf16"], e.data["fp16"]) == (False, False) and "fsdp" not in e.data


def test_deepspeed_autocast_at_zero3_imports_as_amp() -> None:
    """torch_autocast beside stage 3 is DeepSpeed's ZeRO-3 under autocast: mixed_precision amp
    on DeepSpeed's engine (modelled since it was traced)."""
    s, _ = import_config('{"torch_autocast": {"enabled": true}, "zero_optimization": '
                         '{"stage": 3}}', "deepspeed", model="llama-3-8b", dp=8)
    assert (s.training.mixed_precision, s.parallelism.zero) == ("amp", 3)
    assert s.parallelism.engine(s.training.mixed_precision) == "deepspeed"
