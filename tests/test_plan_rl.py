"""RL fine-tuning memory: training step + rollout KV cache + the engine's bf16 weights, per
GPU, against a hand-computed case."""

import json

import pytest

from calc import estimate
from calc.cli import main
from calc.plan import PlanError, kv_cache_bytes, rl_memory

GiB = 1024**3
QWEN_TP4 = {"model": "qwen2.5-7b", "training": {"activation_checkpointing": "full"},
            "parallelism": {"tp": 4}}
ROLLOUT = {"prompts": 32, "samples_per_prompt": 8, "prompt_len": 1024, "response_len": 7168}


def test_qwen25_7b_tp4_golden() -> None:
    """Qwen2.5-7B config.json: 28 layers, 4 KV heads of 128; 7,615,616,512 parameters (HF).

    KV per GPU: 4 KV heads over tp 4 = 1 head; 28 layers x 2 (K, V) x 1 x 128 x 8192 tokens
    x 256 sequences (32 x 8, one engine: world 4 / tp 4) x 2 B = 28 GiB exactly.
    Weights per GPU: 7,615,616,512 x 2 B / 4 = 3,807,808,256 B (3.55 GiB)."""
    m = rl_memory(QWEN_TP4, **ROLLOUT)
    assert m.kv_cache_bytes == 28 * GiB == 30_064_771_072
    assert m.inference_weight_bytes == 3_807_808_256
    training = estimate({**QWEN_TP4, "training": {"activation_checkpointing": "full",
                                                  "seq_len": 8192}}).device_bytes
    assert m.training_bytes == training
    assert m.total_bytes == training + 30_064_771_072 + 3_807_808_256
    assert (m.sequences, m.engines, m.sequences_per_engine, m.seq_len) == (256, 1, 256, 8192)
    assert m.dominant == "training" and m.fits == (m.total_bytes <= m.usable_bytes)
    assert m.kv_cache_bytes == kv_cache_bytes("qwen2.5-7b", 256, 8192, tp=4)


def test_kv_cache_dominates_long_rollouts_of_lora() -> None:
    m = rl_memory({**QWEN_TP4, "training": {"finetuning": "lora",
                                            "activation_checkpointing": "full"}},
                  prompts=64, samples_per_prompt=16, prompt_len=512, response_len=16384)
    assert m.dominant == "kv_cache" and not m.fits
    assert any("lora" in n for n in m.notes)


def test_rollout_sequences_are_spread_over_engines() -> None:
    """dp 2 x tp 4 colocated: two engines, each with half the sequences."""
    one = rl_memory(QWEN_TP4, **ROLLOUT)
    two = rl_memory({**QWEN_TP4, "parallelism": {"tp": 4, "dp": 2}}, **ROLLOUT)
    assert two.engines == 2 and two.kv_cache_bytes * 2 == one.kv_cache_bytes
    fp8 = rl_memory(QWEN_TP4, **ROLLOUT, kv_dtype_bytes=1)
    assert fp8.kv_cache_bytes * 2 == one.kv_cache_bytes


def test_separate_engine_takes_the_larger_pool() -> None:
    m = rl_memory(QWEN_TP4, **ROLLOUT, colocated=False)
    assert m.total_bytes == max(m.training_bytes, m.kv_cache_bytes + m.inference_weight_bytes)
    assert m.total_bytes < rl_memory(QWEN_TP4, **ROLLOUT).total_bytes


@pytest.mark.parametrize(("change", "field"), [
    ({"prompts": 0}, "prompts"), ({"response_len": 0}, "response_len"),
    ({"prompt_len": -1}, "prompt_len"), ({"engines": 0}, "engines"),
])
def test_bad_arguments_name_the_field(change, field) -> None:
    with pytest.raises(PlanError) as exc:
        rl_memory(QWEN_TP4, **{**ROLLOUT, **change})
    assert exc.value.field == field


def test_cli_matches_library(capsys) -> None:
    argv = ["rl", "--model", "qwen2.5-7b", "--tp", "4", "--activation-checkpointing", "full",
            "--prompts", "32", "--samples-per-prompt", "8", "--prompt-len", "1024",
            "--response-len", "7168"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == rl_memory(QWEN_TP4, **ROLLOUT).as_dict()
    assert main(argv) == 0
    assert "<- dominates" in capsys.readouterr().out
