"""Bad input is a field error naming the field and the rule: never a traceback, a silent
coercion, NaN or a wrong number. Each case here was found by fuzzing (issue 9)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from calc import ScenarioError, estimate
from calc.architecture import ConfigError, from_hf_config
from calc.errors import FieldError

LLAMA = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100}
QWEN_MOE = {**LLAMA, "model_type": "qwen3_moe", "num_experts": 4, "num_experts_per_tok": 2,
            "moe_intermediate_size": 32}
DEEPSEEK = {**LLAMA, "model_type": "deepseek_v3", "n_routed_experts": 4, "num_experts_per_tok": 2,
            "moe_intermediate_size": 32, "n_shared_experts": 2, "kv_lora_rank": 16,
            "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 8}
GPT2 = {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 100}


@pytest.mark.parametrize(("config", "field"), [
    ({**QWEN_MOE, "mlp_only_layers": 5}, "hf_config.mlp_only_layers"),
    ({**QWEN_MOE, "mlp_only_layers": True}, "hf_config.mlp_only_layers"),
    ({**QWEN_MOE, "mlp_only_layers": [True]}, "hf_config.mlp_only_layers"),
    ({**DEEPSEEK, "n_shared_experts": "x"}, "hf_config.n_shared_experts"),
    ({**DEEPSEEK, "n_shared_experts": [1]}, "hf_config.n_shared_experts"),
    ({**DEEPSEEK, "n_shared_experts": 1.5}, "hf_config.n_shared_experts"),
    ({**DEEPSEEK, "moe_intermediate_size": {}}, "hf_config.moe_intermediate_size"),
    ({**DEEPSEEK, "moe_intermediate_size": "32"}, "hf_config.moe_intermediate_size"),
    ({**GPT2, "n_embd": {}}, "hf_config.n_embd"),
    ({**GPT2, "n_embd": "8"}, "hf_config.n_embd"),
    ({**LLAMA, "num_hidden_layers": True}, "hf_config.num_hidden_layers"),
    ({**LLAMA, "tie_word_embeddings": "yes"}, "hf_config.tie_word_embeddings"),
    ({**LLAMA, "attention_dropout": "0.1"}, "hf_config.attention_dropout"),
    ({**LLAMA, "hidden_act": 3}, "hf_config.hidden_act"),
])
def test_config_json_fields_are_read_strictly(config: dict[str, Any], field: str) -> None:
    """A number given as a string is never multiplied as a string ("32" * 2 shared experts
    gave 3232), a fraction never truncated, a flag never read from a non-boolean."""
    with pytest.raises(ConfigError) as info:
        from_hf_config(config)
    assert info.value.field == field
    assert "must be" in info.value.message


def test_an_integral_float_in_config_json_is_an_integer() -> None:
    arch, _ = from_hf_config({**LLAMA, "hidden_size": 64.0})
    assert arch.hidden_size == 64 and isinstance(arch.hidden_size, int)


@pytest.mark.parametrize(("scenario", "field"), [
    ({"parallelism": {"tp": True}}, "parallelism.tp"),
    ({"parallelism": {"zero": True}}, "parallelism.zero"),
    ({"parallelism": {"sequence_parallel": "yes"}}, "parallelism.sequence_parallel"),
    ({"parallelism": {"offload_optimizer": 1}}, "parallelism.offload_optimizer"),
    ({"training": {"micro_batch_size": " 8 "}}, "training.micro_batch_size"),
    ({"training": {"seq_len": 4096.5}}, "training.seq_len"),
    ({"training": {"lora_dropout": float("nan")}}, "training.lora_dropout"),
    ({"model": {**LLAMA, "num_hidden_layers": True}}, "model.num_hidden_layers"),
    ({"model": {**LLAMA, "hidden_size": "64"}}, "model.hidden_size"),
])
def test_scenario_fields_are_not_coerced(scenario: dict[str, Any], field: str) -> None:
    with pytest.raises(ScenarioError) as info:
        estimate({"model": "gpt2", **scenario})
    assert info.value.field == field
    assert "must be" in info.value.message and "got" in info.value.message


def test_error_lines_escape_control_characters() -> None:
    """A key with a newline or a terminal escape gives one printable line."""
    with pytest.raises(ScenarioError) as info:
        estimate({"model": "gpt2", "training": {"a\nb\x1b[31m": 1}})
    text = str(info.value)
    assert "\n" not in text and "\x1b" not in text
    assert "a\\nb\\x1b[31m" in info.value.field
    assert FieldError("x\ty", "bad\rrule").message == "bad\\rrule"


# --- framework configs (calc import) ----------------------------------------------------------

def _import(text: str | bytes, fmt: str) -> Any:
    from calc.plan import import_config

    return import_config(text, fmt, model="gpt2", seq_len=512)


@pytest.mark.parametrize(("fmt", "text", "field"), [
    ("hf-trainer", '{"optim": ["adamw_torch"]}', "optim"),
    ("hf-trainer", '{"optim": {"a": 1}}', "optim"),
    ("deepspeed", b"\xff{}", "config"),
    ("deepspeed", '{"bf16": {"enabled": "maybe"}}', "bf16.enabled"),
    ("deepspeed", '{"zero_optimization": {"stage": true}}', "zero_optimization.stage"),
    ("deepspeed", '{"zero_optimization": {"stage": 1.0}}', "zero_optimization.stage"),
    ("deepspeed", '{"zero_optimization": {"stage": 1}, "zero_optimization": {"stage": 2}}',
     "config"),
    ("deepspeed", "[" * 3000 + "]" * 3000, "config"),
    ("deepspeed", '{"a":' * 1000 + "1" + "}" * 1000, "config"),
    ("accelerate-fsdp", "distributed_type: FSDP\nfsdp_config:\n  fsdp_version: true\n",
     "fsdp_config.fsdp_version"),
    ("accelerate-fsdp", 'a: "\\q"\n', "yaml"),
    ("accelerate-fsdp", 'a: "x" y"\n', "yaml"),
    ("accelerate-fsdp", 'a: "\\u00"\n', "yaml"),
    ("accelerate-fsdp", "a: " + "[" * 500 + "]" * 500 + "\n", "yaml"),
    ("accelerate-fsdp", "".join(" " * i + f"k{i}:\n" for i in range(1000)), "yaml"),
    ("accelerate-fsdp", "a:\n- k: v\n", "yaml"),
])
def test_bad_configs_are_field_errors(fmt: str, text: str | bytes, field: str) -> None:
    from calc.plan import ConfigImportError

    with pytest.raises(ConfigImportError) as info:
        _import(text, fmt)
    assert info.value.field == field, info.value


def test_deepspeed_switches_are_read_as_deepspeed_reads_them() -> None:
    """DeepSpeed's pydantic config takes "true" and 1 for true: so does the import, where it
    used to read them as fp32 silently."""
    for on in ("true", 1, True):
        scenario, _ = _import(json.dumps({"bf16": {"enabled": on}}), "deepspeed")
        assert scenario.training.precision == "bf16"
    scenario, _ = _import('{"zero_optimization": {"stage": "3"}}', "deepspeed")
    assert scenario.parallelism.zero == 3


def test_yaml_flow_lists_keep_quoted_commas() -> None:
    from calc.plan import parse_yaml

    assert parse_yaml('a: ["x, y", z]\n') == {"a": ["x, y", "z"]}


# --- scenario text ------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "rule"), [
    (b"\xff\xfe{}", "not UTF-8"),
    ('{"model": "gpt2", "model": "gpt2"}', "repeats the key 'model'"),
    ("[" * 1000 + "]" * 1000, "nested more than"),
    ('{"model": {"hf_config": ' + "[" * 1000 + "]" * 1000 + "}}", "nested more than"),
])
def test_scenario_text_is_read_within_bounds(text: str | bytes, rule: str) -> None:
    with pytest.raises(ScenarioError) as info:
        estimate(text)
    assert info.value.field == "scenario" and rule in info.value.message


def test_a_deeply_nested_dict_is_refused_before_validation() -> None:
    deep: Any = 1
    for _ in range(2000):
        deep = [deep]
    with pytest.raises(ScenarioError, match="nested more than"):
        estimate({"model": {"hf_config": {"model_type": deep}}})


@pytest.mark.parametrize("where", ["seq_len", "training", "gpu"])
def test_a_deeply_nested_value_anywhere_is_a_field_error(where: str) -> None:
    """The error shows the bad value three levels deep; it never recurses into all of it."""
    deep: Any = 1
    for _ in range(5000):
        deep = [deep]
    scenario: dict[str, Any] = {"model": "gpt2"}
    if where == "seq_len":
        scenario["training"] = {"seq_len": deep}
    else:
        scenario[where] = deep
    with pytest.raises(ScenarioError) as info:
        estimate(scenario)
    assert "[[[[...]]]]" in info.value.message


# --- the command line ---------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["kv-cache", "llama-3-8b", "--seq-len", "8", "--quant-bits", "4", "--group-size", "0"],
    ["kv-cache", "llama-3-8b", "--seq-len", "8", "--quant-bits", "4", "--residual-length", "-1"],
    ["kv-cache", "llama-3-8b", "--seq-len", "8", "--tp", "3"],
    ["kv-cache", "llama-3-8b", "--seq-len", "8", "--tp", "1000000"],
    ["kv-cache", "llama-3-8b", "--seq-len", "8", "--group-size", "32"],
    ["cost", "--model", "gpt2", "--seq-len", "512", "--tokens", "1e9",
     "--price-per-gpu-hour", "nan"],
    ["cost", "--model", "gpt2", "--seq-len", "512", "--tokens", "1e9", "--mfu", "5e-324"],
    ["cheapest", "--model", "gpt2", "--seq-len", "512", "--tokens", "1e9", "--deadline-hours",
     "inf"],
    ["cheapest", "--model", "gpt2", "--seq-len", "512", "--tokens", "1e9", "--mfu", "2"],
    ["cheapest", "--model", "gpt2", "--seq-len", "512", "--tokens", "1e9", "--top", "-1"],
    ["advise", "--model", "gpt2", "--seq-len", "512", "--gpus", "8", "--mfu", "5e-324"],
    ["advise", "--model", "gpt2", "--seq-len", "512", "--gpus", "8", "--inter-node-gbps", "inf"],
    ["estimate", "--model", "gpt2", "--gpu", ""],
    ["estimate", "--model", "gpt2", "--seq-len", "512", "--finetuning", "lora",
     "--lora-rank", "4096"],
    ["estimate", "--bogus"],
    ["estimate", "--model", "gpt2", "--zero", "9"],
    ["estimate", "/nonexistent/scenario.json"],
])
def test_bad_command_lines_exit_2_with_one_line(argv: list[str], capsys: Any) -> None:
    from calc.cli import main

    try:
        code = main(argv)
    except SystemExit as exc:  # argparse
        code = exc.code
    out = capsys.readouterr()
    assert code == 2
    assert out.err.startswith("calc: error: ") and out.err.count("\n") == 1, out.err
    assert "Traceback" not in out.err and out.out == ""


def test_a_non_utf8_scenario_file_is_named(tmp_path: Any, capsys: Any) -> None:
    from calc.cli import main

    path = tmp_path / "latin1.json"
    path.write_bytes(b'{"model": "gpt2", "x": "caf\xe9"}')
    assert main(["estimate", str(path)]) == 2
    assert "is not UTF-8" in capsys.readouterr().err


def test_output_into_a_closed_pipe_is_quiet() -> None:
    """`calc presets --json | head -c 1`: no BrokenPipeError traceback."""
    import subprocess
    import sys

    code = ("import sys; from calc.cli import main; sys.exit(main(['advise', '--model', "
            "'llama-3-70b', '--gpus', '64', '--seq-len', '4096', '--json']))")
    run = subprocess.run(f"{sys.executable} -c \"{code}\" | head -c 1", shell=True,
                         capture_output=True, text=True, check=False)
    assert run.stderr == "" and run.returncode == 0


def test_an_unknown_moe_model_counts_its_routed_experts() -> None:
    """A model_type calc does not know is read as llama-like; its routed experts, under the
    names HF configs give them, are read too (as Mixtral's) rather than dropped, which would
    count a seventh of OLMoE 1B-7B (6.92B parameters; 6,919,161,856 in transformers with its
    q/k norms, which the llama-like reading lacks). Experts without a top-k name the field."""
    from calc.params import count_params
    olmoe = {"model_type": "olmoe", "hidden_size": 2048, "num_hidden_layers": 16,
             "num_attention_heads": 16, "intermediate_size": 1024, "num_experts": 64,
             "num_experts_per_tok": 8, "vocab_size": 50304}
    arch, notes = from_hf_config(olmoe)
    assert arch.num_local_experts == 64 and arch.num_experts_per_tok == 8
    assert count_params(arch).total == 6_919_161_856 - 16 * 2 * 2048  # less the q/k norms
    assert any("routed experts" in n for n in notes)
    with pytest.raises(ConfigError) as err:
        from_hf_config({**LLAMA, "model_type": "olmoe", "num_experts": 8})
    assert err.value.field == "hf_config.num_experts_per_tok"


def test_gpt_oss_config_is_read_as_itself() -> None:
    """GPT-OSS's config.json (as openai/gpt-oss-20b ships it: `experts_per_token` beside
    `num_experts_per_tok`, layer_types, the MXFP4 quantization_config) reads as gpt_oss: its
    sinks, router and expert biases counted (transformers: 20,914,757,184), every other layer
    sliding over 128 tokens, no note."""
    from calc.params import count_params
    oss = {"model_type": "gpt_oss", "hidden_size": 2880, "num_hidden_layers": 24,
           "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
           "intermediate_size": 2880, "num_local_experts": 32, "experts_per_token": 4,
           "vocab_size": 201088, "sliding_window": 128,
           "quantization_config": {"quant_method": "mxfp4"}}
    arch, notes = from_hf_config(oss)
    assert (arch.model_type, notes) == ("gpt_oss", [])
    assert count_params(arch).total == 20_914_757_184
    assert arch.sliding_layers == tuple(range(0, 24, 2)) and arch.sliding_window == 128
    with pytest.raises(ConfigError) as err:
        from_hf_config({**oss, "layer_types": ["full_attention"] * 3})
    assert err.value.field == "hf_config.layer_types"


def test_sliding_layers_on_a_moe_model_estimate() -> None:
    """An architecture given field by field may set sliding layers on a MoE model: the layer
    kinds (sliding, dense, MoE) are read per layer, never looked up by a kind absent from the
    stage (found by review: a KeyError under DeepSpeed's ZeRO-3)."""
    from calc.presets import models
    arch = models()["deepseek-v3"].architecture().model_dump()
    arch.update(num_hidden_layers=3, first_k_dense_replace=1, sliding_window=512,
                sliding_layers=[0])
    report = estimate({"model": arch, "training": {"seq_len": 1024, "mixed_precision": "master"},
                       "parallelism": {"dp": 4, "zero": 3}})
    assert report.peak_bytes > 0


def test_context_parallelism_over_a_sliding_window_says_torch_cannot_run_it() -> None:
    """Torch's ring attention runs is_causal and takes no mask; Gemma 3's sliding layers need
    one from their window on (512 tokens for the 1B): the estimate warns, naming the field,
    and only where the sequence reaches the window."""
    def codes(seq_len: int) -> list[tuple[str, str]]:
        r = estimate({"model": "gemma-3-1b", "training": {"seq_len": seq_len},
                      "parallelism": {"cp": 2, "dp": 1, "zero": 3}})
        return [(w["code"], w["field"]) for w in r.as_dict()["warnings"]]

    assert ("cp_sliding_window", "parallelism.cp") in codes(4096)
    assert ("cp_sliding_window", "parallelism.cp") not in codes(256)


def test_cp_over_a_sliding_window_says_whether_the_step_fails() -> None:
    """Each rank masks its own shard: where the shard reaches the window the step fails (Phi-3
    at 4K tokens under cp 2), where it does not the step runs as causal attention over the
    whole sequence (under cp 4, traced)."""
    def message(cp: int) -> str:
        r = estimate({"model": "phi-3-mini", "training": {"seq_len": 4096},
                      "parallelism": {"cp": cp}})
        return next(w["message"] for w in r.warnings if w["code"] == "cp_sliding_window")
    assert "the step fails" in message(2)
    assert "the step runs" in message(4)
