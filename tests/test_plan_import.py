"""Framework config import: the reverse of export. Claims: export then import gives back
every setting the format expresses; unknown settings become notes; contradictions are errors
naming the setting."""

import json

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from calc import estimate
from calc.cli import main
from calc.plan import ConfigImportError, ExportError, export, import_config, parse_yaml

# Scenario fields each format writes (the rest lands in export notes).
EXPRESSED = {
    "deepspeed": ["training.micro_batch_size", "training.gradient_accumulation_steps",
                  "training.optimizer", "training.activation_checkpointing", "parallelism.dp",
                  "parallelism.zero", "parallelism.offload_optimizer",
                  "parallelism.offload_params"],
    "accelerate-fsdp": ["training.activation_checkpointing", "parallelism.dp",
                        "parallelism.zero", "parallelism.offload_optimizer",
                        "parallelism.offload_params"],
    "hf-trainer": ["training.micro_batch_size", "training.gradient_accumulation_steps",
                   "training.optimizer", "training.activation_checkpointing", "training.loss",
                   "parallelism.dp", "parallelism.zero", "parallelism.offload_optimizer",
                   "parallelism.offload_params"],
}

scenarios = st.fixed_dictionaries({
    "model": st.sampled_from(["llama-3.2-1b", "qwen2.5-0.5b", "gpt2"]),
    "training": st.fixed_dictionaries({
        "micro_batch_size": st.integers(1, 8),
        "gradient_accumulation_steps": st.integers(1, 8),
        "seq_len": st.just(1024),
        "precision": st.sampled_from(["bf16", "fp16", "fp32"]),
        "mixed_precision": st.sampled_from(["amp", "master"]),
        "optimizer": st.sampled_from(["adamw", "adam", "sgd", "sgd_momentum", "adafactor",
                                      "lion", "adamw_8bit"]),
        "optimizer_impl": st.sampled_from(["fused", "foreach", "for_loop"]),
        "activation_checkpointing": st.sampled_from(["none", "full"]),
        "loss": st.sampled_from(["standard", "chunked"]),
    }),
    "parallelism": st.fixed_dictionaries({
        "dp": st.sampled_from([1, 2, 8]),
        "zero": st.integers(0, 3),
        "offload_optimizer": st.booleans(),
        "offload_params": st.booleans(),
    }),
})


def _get(scenario, path: str):
    group, name = path.split(".")
    return getattr(getattr(scenario, group), name)


def _precision(s) -> tuple:
    t = s.training
    return ("fp32",) if t.precision == "fp32" else (t.precision, t.mixed_precision)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.filter_too_much])
@given(st.sampled_from(sorted(EXPRESSED)), scenarios)
def test_export_then_import_round_trips_what_the_format_expresses(fmt, data) -> None:
    """For every scenario the exporter accepts: the imported scenario has the same expressed
    fields, and exporting it again writes the same config."""
    try:
        original = export(data, fmt)
    except (ExportError, ValueError):
        assume(False)
        return
    dp = data["parallelism"]["dp"] if fmt == "hf-trainer" else None
    imported, notes = import_config(original.text, fmt, model=data["model"], dp=dp)
    from calc.scenario import parse_scenario
    source = parse_scenario(data)
    for path in EXPRESSED[fmt]:
        if path == "parallelism.offload_params" and source.parallelism.zero < 3 \
                and fmt == "deepspeed":
            continue  # refused by the exporter anyway
        assert _get(imported, path) == _get(source, path), path
    assert _precision(imported) == _precision(source)
    if source.training.optimizer in ("adamw", "adam") and fmt != "accelerate-fsdp":
        assert imported.training.optimizer_impl == source.training.optimizer_impl
    again = export(imported.model_copy(update={"training": imported.training.model_copy(
        update={"seq_len": 1024})}), fmt)
    assert again.data == original.data
    assert all(isinstance(n, str) and n for n in notes)


ACCELERATE_FSDP1 = """\
compute_environment: LOCAL_MACHINE
debug: false
distributed_type: FSDP
downcast_bf16: 'no'
enable_cpu_affinity: false
fsdp_config:
  fsdp_activation_checkpointing: false
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_backward_prefetch: BACKWARD_PRE
  fsdp_cpu_ram_efficient_loading: true
  fsdp_forward_prefetch: false
  fsdp_offload_params: false
  fsdp_sharding_strategy: SHARD_GRAD_OP   # a comment
  fsdp_state_dict_type: SHARDED_STATE_DICT
  fsdp_sync_module_states: true
  fsdp_use_orig_params: true
machine_rank: 0
main_training_function: main
mixed_precision: bf16
num_machines: 1
num_processes: 4
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: false
"""


def test_accelerate_config_as_accelerate_writes_it() -> None:
    """The file `accelerate config` writes for FSDP1 (fsdp_version absent means 1)."""
    s, notes = import_config(ACCELERATE_FSDP1, "accelerate-fsdp", model="llama-3.1-8b")
    assert (s.parallelism.dp, s.parallelism.zero) == (4, 2)
    assert (s.training.precision, s.training.mixed_precision) == ("bf16", "amp")
    assert any("FSDP1" in n for n in notes)
    assert any("fsdp_config.fsdp_use_orig_params" in n for n in notes)  # listed, not dropped


def test_accelerate_deepspeed_plugin_config() -> None:
    s, _ = import_config("distributed_type: DEEPSPEED\nmixed_precision: bf16\nnum_processes: 8\n"
                         "deepspeed_config:\n  zero_stage: 3\n  offload_optimizer_device: cpu\n"
                         "  offload_param_device: none\n  gradient_accumulation_steps: 2\n",
                         "accelerate-fsdp", model="llama-3.1-8b")
    assert (s.parallelism.zero, s.parallelism.offload_optimizer, s.parallelism.dp) == (3, True, 8)
    assert (s.training.mixed_precision, s.training.gradient_accumulation_steps) == ("master", 2)


def test_yaml_subset() -> None:
    assert parse_yaml("a: 'no'\nb: no\nc: {x: 1, y: z}\nd:\n  - p\n  - 'q r'\n---\n") == {
        "a": "no", "b": False, "c": {"x": 1, "y": "z"}, "d": ["p", "q r"]}
    for bad in ("a: &x 1\n", "a:\n  b: 1\n c: 2\n", "a: 1\na: 2\n", "a: [1,\n"):
        with pytest.raises(ConfigImportError):
            parse_yaml(bad)


def test_deepspeed_train_batch_size_gives_dp() -> None:
    cfg = {"train_batch_size": 256, "train_micro_batch_size_per_gpu": 4,
           "gradient_accumulation_steps": 2, "fp16": {"enabled": True},
           "zero_optimization": {"stage": 2, "overlap_comm": True}, "some_new_key": 1}
    s, notes = import_config(cfg, "deepspeed", model="llama-3.1-8b")
    assert (s.parallelism.dp, s.training.precision, s.training.mixed_precision) == (
        32, "fp16", "master")
    assert any("zero_optimization.overlap_comm" in n for n in notes)
    assert any("some_new_key" in n for n in notes)
    s, _ = import_config({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2}, "deepspeed",
                         model="gpt2", dp=8)
    assert s.training.gradient_accumulation_steps == 4


@pytest.mark.parametrize(("fmt", "cfg", "field"), [
    ("deepspeed", {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2,
                   "gradient_accumulation_steps": 4}, "train_batch_size"),  # with dp=4
    ("deepspeed", {"bf16": {"enabled": True}, "fp16": {"enabled": True}}, "fp16.enabled"),
    ("deepspeed", {"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}},
     "zero_optimization.offload_param"),
    ("hf-trainer", {"bf16": True, "fp16": True}, "bf16"),
    ("hf-trainer", {"fsdp": "full_shard", "deepspeed": {"zero_optimization": {"stage": 3}}},
     "deepspeed"),
    ("hf-trainer", {"per_device_train_batch_size": 2,
                    "deepspeed": {"train_micro_batch_size_per_gpu": 4}},
     "deepspeed.train_micro_batch_size_per_gpu"),
    ("hf-trainer", {"bf16": True, "deepspeed": {"bf16": {"enabled": False}}},
     "deepspeed.bf16.enabled"),
    ("accelerate-fsdp", "distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n"
     "  fsdp_reshard_after_forward: false\n  fsdp_sharding_strategy: FULL_SHARD\n",
     "fsdp_config.fsdp_sharding_strategy"),
    ("accelerate-fsdp", "distributed_type: MEGATRON_LM\n", "distributed_type"),
    ("hf-trainer", {"fsdp": 3}, "fsdp"),  # not a TrainingArguments.fsdp value
    ("hf-trainer", {"fsdp": "full_shard sideways"}, "fsdp"),
])
def test_contradictions_are_errors_naming_the_setting(fmt, cfg, field) -> None:
    with pytest.raises(ConfigImportError) as exc:
        import_config(cfg, fmt, model="llama-3.1-8b", dp=4)
    assert exc.value.field == field and exc.value.message


@pytest.mark.parametrize(("optim", "optimizer", "impl"), [
    ("adamw_torch", "adamw", "foreach"), ("adamw_torch_fused", "adamw", "fused"),
    ("adamw_bnb_8bit", "adamw_8bit", None), ("adafactor", "adafactor", None),
    ("sgd", "sgd", None), ("lion_32bit", "lion", None), ("adamw_hf", "adamw", "for_loop"),
])
def test_hf_optim_names(optim, optimizer, impl) -> None:
    s, _ = import_config({"optim": optim, "per_device_train_batch_size": 1}, "hf-trainer",
                         model="gpt2")
    assert s.training.optimizer == optimizer
    if impl:
        assert s.training.optimizer_impl == impl


def test_hf_trainer_fills_deepspeed_auto_values_from_its_arguments() -> None:
    """As the Trainer does: "auto" takes the TrainingArguments value."""
    args = {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 8, "bf16": True,
            "gradient_checkpointing": True, "optim": "adamw_torch_fused", "learning_rate": 2e-5,
            "max_length": 2048,
            "deepspeed": {"train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto",
                          "gradient_accumulation_steps": "auto", "bf16": {"enabled": "auto"},
                          "zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"},
                                                "offload_optimizer": {"device": "cpu"}}}}
    s, notes = import_config(json.dumps(args), "hf-trainer", model="qwen2.5-7b", dp=16)
    t, p = s.training, s.parallelism
    assert (t.micro_batch_size, t.gradient_accumulation_steps, t.seq_len) == (4, 8, 2048)
    assert (t.precision, t.mixed_precision, t.activation_checkpointing) == ("bf16", "master",
                                                                            "full")
    assert (p.dp, p.zero, p.offload_params, p.offload_optimizer) == (16, 3, True, True)
    assert any("learning_rate" in n for n in notes)


def test_missing_defaults_are_noted() -> None:
    s, notes = import_config("{}", "hf-trainer", model="gpt2")
    assert s.training.micro_batch_size == 8  # TrainingArguments' default
    assert any("per_device_train_batch_size" in n for n in notes)
    assert any(n.startswith("dp:") for n in notes)


def test_cli_import_pipes_into_estimate(tmp_path, capsys, monkeypatch) -> None:
    path = tmp_path / "accelerate.yaml"
    path.write_text(ACCELERATE_FSDP1)
    assert main(["import", "--format", "accelerate-fsdp", str(path), "--model", "llama-3.1-8b",
                 "--gpu", "a100-80gb", "--json"]) == 0
    out = capsys.readouterr()
    scenario = json.loads(out.out)
    assert scenario["parallelism"]["zero"] == 2 and scenario["gpu"] == "a100-80gb"
    assert "note:" in out.err
    assert estimate(scenario).device_bytes > 0
    monkeypatch.setattr("sys.stdin", __import__("io").StringIO(out.out))
    assert main(["estimate", "-", "--json"]) == 0


def test_cli_import_error_names_the_setting(tmp_path, capsys) -> None:
    path = tmp_path / "ds.json"
    path.write_text('{"bf16": {"enabled": true}, "fp16": {"enabled": true}}')
    assert main(["import", "--format", "deepspeed", str(path), "--model", "gpt2"]) == 2
    assert capsys.readouterr().err.startswith("calc: error: fp16.enabled:")


@pytest.mark.parametrize(("args", "ckpt", "layers"), [
    ({"activation_checkpointing": True}, "full", None),  # transformers 5's name
    ({"gradient_checkpointing": True}, "full", None),  # its deprecated alias
    ({"activation_checkpointing": False, "gradient_checkpointing": True}, "none", None),
    ({"activation_checkpointing": True, "activation_checkpointing_kwargs": {"every_n_layers": 3}},
     "full", 11),  # layers 0, 3, ..., 30 of llama-3.1-8b's 32
    ({"gradient_checkpointing": True, "gradient_checkpointing_kwargs": {"use_reentrant": False}},
     "full", None),
])
def test_hf_trainer_activation_checkpointing_by_either_name(args, ckpt, layers) -> None:
    s, _ = import_config(args, "hf-trainer", model="llama-3.1-8b")
    assert (s.training.activation_checkpointing, s.training.recompute_layers) == (ckpt, layers)


def test_hf_trainer_every_n_layers_must_be_a_positive_integer() -> None:
    with pytest.raises(ConfigImportError) as exc:
        import_config({"activation_checkpointing": True,
                       "activation_checkpointing_kwargs": {"every_n_layers": 0}},
                      "hf-trainer", model="gpt2")
    assert exc.value.field == "activation_checkpointing_kwargs.every_n_layers"


@pytest.mark.parametrize(("extra", "padded"), [
    ({}, True),  # TRL's collator pads a batch of several to its longest: an attention mask
    ({"packing": True}, False),
    ({"padding_free": True}, False),
    ({"per_device_train_batch_size": 1}, False),  # one sequence: nothing to pad to
])
def test_trl_sft_batches_read_as_padded_unless_packed(extra, padded) -> None:
    args = {"per_device_train_batch_size": 4, "max_length": 1024, "bf16": True, **extra}
    s, notes = import_config(args, "hf-trainer", model="llama-3.2-1b")
    assert s.training.padded is padded
    assert any("read as padded" in n for n in notes) == padded
