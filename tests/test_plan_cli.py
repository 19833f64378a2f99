"""Planning subcommands: JSON matching the library, errors as one line with exit code 2."""

import json

import pytest

from calc.cli import main
from calc.plan import max_micro_batch

EXAMPLE = "examples/llama-3.1-8b-8k-4xa100.json"


def _json(capsys, argv: list[str]) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_max_batch_json_matches_library(capsys) -> None:
    out = _json(capsys, ["max-batch", "--model", "gpt2", "--seq-len", "1024", "--json"])
    lib = max_micro_batch({"model": "gpt2", "training": {"seq_len": 1024}})
    assert out["micro_batch_size"] == lib.value
    out = _json(capsys, ["max-batch", "--model", "gpt2", "--seq-len", "1024", "--target", "0.5",
                         "--json"])
    assert out["micro_batch_size"] < lib.value  # type: ignore[operator]


def test_max_seq_prints_seq_len(capsys) -> None:
    out = _json(capsys, ["max-seq", EXAMPLE, "--json"])
    assert "seq_len" in out


@pytest.mark.parametrize("argv", [
    ["recommend", EXAMPLE], ["compare", EXAMPLE, "examples/qwen2.5-7b-lora-h100.json"],
    ["cost", EXAMPLE, "--tokens", "1e10"], ["export", "--format", "torchtitan", EXAMPLE],
    ["kv-cache", "llama-3.1-8b", "--seq-len", "8192"], ["max-batch", EXAMPLE],
])
def test_text_output(argv, capsys) -> None:
    assert main(argv) == 0
    assert capsys.readouterr().out.strip()


def test_recommend_and_cost_json(capsys) -> None:
    assert "recommendations" in _json(capsys, ["recommend", EXAMPLE, "--json"])
    cost = _json(capsys, ["cost", EXAMPLE, "--tokens", "1e9", "--price-per-gpu-hour", "2",
                          "--json"])
    assert cost["tokens"] == 10**9 and cost["price_per_gpu_hour"] == 2


@pytest.mark.parametrize(("argv", "field"), [
    (["export", "--format", "megatron", EXAMPLE], "training.mixed_precision"),
    (["max-batch", EXAMPLE, "--target", "2"], "target"),
    (["cost", EXAMPLE, "--tokens", "0"], "tokens"),
])
def test_errors_exit_2_naming_the_field(argv, field, capsys) -> None:
    assert main(argv) == 2
    assert capsys.readouterr().err.startswith(f"calc: error: {field}:")
