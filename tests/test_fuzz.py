"""Fuzzing every surface that reads input: the command line (in process), the framework
importers and the config.json readers. Whatever the input, the answer is a result or a field
error: no other exception, no NaN or infinity in the JSON, one stderr line with exit code 2.

Bounded by count (`CALC_FUZZ_EXAMPLES`, default 150 per surface) so `make test` stays quick;
set it higher to fuzz longer (the issue 9 campaign ran 10,000 per surface).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import sys
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from calc import ScenarioError, estimate
from calc.architecture import SUPPORTED_MODEL_TYPES, ConfigError, from_hf_config
from calc.cli import build_parser, main
from calc.errors import FieldError
from calc.plan import import_config
from calc.scenario import Parallelism, Training

EXAMPLES = int(os.environ.get("CALC_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# Values that broke something once, and ordinary ones, so that some commands get far.
WEIRD = ["", "0", "-1", "1", "2", "8", "3", "4096", "1e9", "1e400", "nan", "inf", "-inf", "5e-324",
         "1.5", "0.5", "true", "yes", " 8 ", "99999999999999999999", "\n", "\x1b[31m", "é", "-",
         "gpt2", "llama-3-8b", "qwen3-30b-a3b", "h100", "a100-40gb", "bf16", "amp", "full", "lora"]
SCENARIO_TEXT = st.one_of(
    st.sampled_from(['{"model": "gpt2", "training": {"seq_len": 512}}', "{}", "[]", "null",
                     '{"model": "gpt2", "model": "gpt2"}', "[" * 100 + "]" * 100, "",
                     '{"model": {"hf_config": {"model_type": "llama"}}}']),
    st.text(max_size=80))


_SUB = next(a for a in build_parser()._actions if a.dest == "command")
COMMANDS = list(_SUB.choices)  # type: ignore[attr-defined]
FLAGS = {name: [o for a in cmd._actions for o in a.option_strings  # every flag, from the parser
                if o.startswith("--") and o not in ("--help", "--json")]
         for name, cmd in _SUB.choices.items()}  # type: ignore[attr-defined]


@st.composite
def command_lines(draw: Any) -> tuple[list[str], str]:
    name = draw(st.sampled_from(COMMANDS))
    argv = [name]
    if name in ("estimate", "max-batch", "max-seq", "recommend", "cost", "export", "rl",
                "cheapest", "explain"):
        argv.append("-")
    elif name == "kv-cache":
        argv.append(draw(st.sampled_from(["llama-3-8b", "gpt2", "deepseek-v3", "x", ""])))
    flags = draw(st.lists(st.sampled_from(FLAGS[name]), max_size=4, unique=True)) \
        if FLAGS[name] else []
    for flag in flags:
        argv += [flag, draw(st.sampled_from(WEIRD))]
    if draw(st.booleans()):
        argv.append("--json")
    return argv, draw(SCENARIO_TEXT)


def _no_nan(text: str) -> None:
    def refuse(constant: str) -> None:
        raise AssertionError(f"{constant} in the JSON output")

    json.loads(text, parse_constant=refuse)


@FUZZ
@given(command_lines())
def test_any_command_line_answers_or_exits_2_with_one_line(case: tuple[list[str], str]) -> None:
    argv, stdin = case
    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse's usage errors
                code = exc.code
    finally:
        sys.stdin = saved
    assert code in (0, 2), (argv, err.getvalue())
    if code == 2:
        assert err.getvalue().startswith("calc: error: "), (argv, err.getvalue())
        assert err.getvalue().count("\n") == 1, (argv, err.getvalue())
    elif "--json" in argv:
        _no_nan(out.getvalue())


# --- framework configs --------------------------------------------------------------------------

KEYS = ["train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "train_batch_size",
        "bf16", "fp16", "enabled", "zero_optimization", "stage", "offload_optimizer", "device",
        "optimizer", "type", "params", "distributed_type", "fsdp_config", "fsdp_version",
        "fsdp_sharding_strategy", "mixed_precision", "num_processes", "optim",
        "per_device_train_batch_size", "deepspeed", "fsdp", "activation_checkpointing",
        "gradient_checkpointing_kwargs", "every_n_layers", "use_liger_kernel"]
leaf = st.one_of(st.none(), st.booleans(), st.integers(-5, 1 << 40), st.floats(allow_nan=True),
                 st.sampled_from(["auto", "true", "3", "cpu", "FULL_SHARD", "adamw_torch", "AdamW",
                                  "FSDP", "DEEPSPEED", "bf16", "no", "", "\x00"]))
configs = st.recursive(leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(KEYS), inner, max_size=5)),
    max_leaves=12)


@FUZZ
@given(st.sampled_from(["deepspeed", "accelerate-fsdp", "hf-trainer"]),
       st.one_of(configs.map(json.dumps), st.text(max_size=120),
                 st.binary(max_size=40)), st.booleans())
def test_any_config_imports_or_is_a_field_error(fmt: str, text: Any, as_yaml: bool) -> None:
    if as_yaml and isinstance(text, str) and text.startswith("{"):
        try:  # a generated config as YAML; free text starting with "{" stays as it is
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            text = "\n".join(f"{k}: {json.dumps(v)}" for k, v in parsed.items())
    try:
        imported = import_config(text, fmt, model="gpt2", seq_len=512)  # type: ignore[arg-type]
    except FieldError as exc:
        assert exc.field and exc.message and "\n" not in str(exc)
        return
    estimate(imported.scenario)


# --- config.json --------------------------------------------------------------------------------

HF_KEYS = ["hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
           "intermediate_size", "vocab_size", "head_dim", "max_position_embeddings",
           "tie_word_embeddings", "hidden_act", "num_experts", "num_local_experts",
           "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
           "n_shared_experts", "mlp_only_layers", "decoder_sparse_step", "first_k_dense_replace",
           "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
           "n_embd", "n_layer", "n_head", "attention_dropout", "text_config"]
hf_value = st.one_of(st.integers(-2, 1 << 30), st.sampled_from([8, 16, 64, 128, 1024, 32000]),
                     st.floats(allow_nan=True), st.booleans(), st.none(),
                     st.sampled_from(["32", "x", "silu", "gelu_new", ""]),
                     st.lists(st.integers(-1, 4), max_size=3), st.just({}))
hf_configs = st.fixed_dictionaries(
    {"model_type": st.sampled_from([*SUPPORTED_MODEL_TYPES, "qwen2_5_vl", "unknown", 3])},
    optional={k: hf_value for k in HF_KEYS})


@FUZZ
@given(hf_configs)
def test_any_config_json_reads_or_names_the_key(config: dict[str, Any]) -> None:
    try:
        from_hf_config(config)
    except ConfigError as exc:
        assert exc.field.startswith("hf_config") and "\n" not in str(exc)
        return
    try:
        report = estimate({"model": {"hf_config": config}, "training": {"seq_len": 128}})
    except ScenarioError:
        return
    for value in (report.peak_bytes, report.device_bytes, *report.components.values()):
        assert isinstance(value, int) and value >= 0


# --- scenarios with the wrong types -----------------------------------------------------------

wrong = st.one_of(st.booleans(), st.floats(allow_nan=True, allow_infinity=True),
                  st.sampled_from(["8", " 8 ", "yes", "", "bf16"]),
                  st.lists(st.integers(), max_size=2),
                  st.just({}), st.none(), st.integers(-(1 << 70), 1 << 70))


@FUZZ
@given(st.sampled_from([*(("training", f) for f in Training.model_fields),
                        *(("parallelism", f) for f in Parallelism.model_fields)]), wrong)
def test_any_wrong_value_in_a_scenario_is_a_field_error(where: tuple[str, str], value: Any) -> None:
    group, name = where
    scenario: dict[str, Any] = {"model": "gpt2", "training": {"seq_len": 512}, "parallelism": {}}
    scenario[group][name] = value
    try:
        report = estimate(scenario)
    except ScenarioError as exc:  # this field's rule, or a rule it breaks with another
        assert exc.field and "\n" not in str(exc)
        return
    assert all(math.isfinite(v) for v in report.as_dict()["components"].values())
