"""Serving memory: vLLM's startup arithmetic (budget - weights - activations - outside
PyTorch = KV cache, in blocks), checked against vLLM's own log lines."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calc.cli import main
from calc.errors import FieldError
from calc.operations import answer
from calc.plan import PlanError, inference_memory

GiB = 1024**3


def test_qwen25_15b_bytes_per_token_and_weights_match_vllm_logs() -> None:
    """vLLM 0.20.1 serving Qwen/Qwen2.5-1.5B-Instruct (gyliu513/langX101,
    llm-d/llm-d-gpu-demo README, "Verified live"): "Model loading took 2.89 GiB",
    "Available KV cache memory: 0.56 GiB", "GPU KV cache size: 20,992 tokens". Its tokens times
    calc's bytes per token (28 layers x 2 x 2 KV heads x 128 x 2 bytes = 28,672) must round to
    the printed 0.56 GiB (two decimals: the log's own precision), and calc's bf16 weights be
    within 1% of 2.89 GiB (vLLM also holds the rotary cache and a few buffers)."""
    m = inference_memory("qwen2.5-1.5b", gpu="h100-sxm-80gb", max_model_len=4096)
    assert m.kv_bytes_per_token == 28 * 2 * 2 * 128 * 2
    assert round(20_992 * m.kv_bytes_per_token / GiB, 2) == 0.56
    assert m.weight_bytes / GiB == pytest.approx(2.89, rel=0.01)


def test_qwen3_235b_tp4_kv_tokens_match_vllm_log_within_rounding() -> None:
    """vLLM issue #21348: Qwen3-235B-A22B on 4 x H100 (tp 4), "Available KV cache memory:
    8.11 GiB", "GPU KV cache size: 178,880 tokens". With 94 layers, 4 KV heads of 128 (one per
    GPU at tp 4), a token costs 94 x 2 x 1 x 128 x 2 = 48,128 bytes; 8.11 GiB holds 180,935
    such tokens; the log's 178,880 is 1.1% fewer (vLLM's FP8 checkpoint keeps some layers'
    scales in the cache budget). Checked through calc's formula on the config."""
    arch = {"hidden_size": 4096, "num_hidden_layers": 94, "num_attention_heads": 64,
            "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 12288,
            "vocab_size": 151936, "max_position_embeddings": 40960}
    m = inference_memory(arch, gpu="h100-sxm-80gb", tp=4, max_model_len=8192)
    assert m.kv_bytes_per_token == 48_128
    assert 8.11 * GiB / m.kv_bytes_per_token == pytest.approx(178_880, rel=0.015)


def test_llama31_8b_on_h100_serves_about_54_sequences_of_8k() -> None:
    """By hand: 0.9 x 79.65 GiB = 71.68 GiB; minus 14.96 GiB of bf16 weights, ~1.1 GiB of
    profiling activations and ~1 GiB outside PyTorch leaves ~54.6 GiB = ~447k tokens of
    128 KiB, 54 sequences of 8,192."""
    m = inference_memory("llama-3.1-8b", max_model_len=8192)
    assert m.weight_bytes == 8_030_261_248 * 2
    assert 50 <= m.max_concurrent_sequences <= 56
    assert m.status == "fits"


@settings(max_examples=25, deadline=None)
@given(st.sampled_from(["llama-3.1-8b", "llama-3.2-1b", "llama-3-70b", "mixtral-8x7b"]),
       st.sampled_from([1, 2, 4, 8]), st.sampled_from([1024, 8192, 32768]),
       st.sampled_from([0.5, 0.9, 0.95]), st.sampled_from(["auto", "fp8"]))
def test_kv_tokens_are_whole_blocks_of_what_is_left(model, tp, length, util, kv) -> None:
    m = inference_memory(model, tp=tp, max_model_len=length, gpu_memory_utilization=util,
                         kv_cache_dtype=kv)
    block = m.request.block_size
    assert m.kv_cache_tokens % block == 0
    left = max(0, m.kv_cache_bytes)
    assert m.kv_cache_tokens * m.kv_bytes_per_token <= left
    assert (m.kv_cache_tokens + block) * m.kv_bytes_per_token > left
    assert m.max_concurrent_sequences == min(m.kv_cache_tokens // length, 256)
    assert (m.status == "fits") == (m.kv_cache_tokens >= length)
    half = inference_memory(model, tp=tp, max_model_len=length, gpu_memory_utilization=util,
                            kv_cache_dtype="fp8")
    assert half.kv_cache_tokens >= m.kv_cache_tokens  # an fp8 cache never holds fewer


def test_more_tp_never_serves_fewer_sequences() -> None:
    seqs = [inference_memory("llama-3-70b", tp=tp, max_model_len=8192).max_concurrent_sequences
            for tp in (2, 4, 8)]
    assert seqs == sorted(seqs) and seqs[0] < seqs[-1]


def test_a_model_that_does_not_fit_says_so() -> None:
    m = inference_memory("llama-3-70b", gpu="h100-sxm-80gb", max_model_len=8192)
    assert m.status == "does_not_fit" and m.max_concurrent_sequences == 0
    assert any("refuse" in n for n in m.notes)


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"tp": 0}, "tp"), ({"tp": 3}, "tp"), ({"gpu_memory_utilization": 1.5},
                                           "gpu_memory_utilization"),
    ({"max_model_len": 0}, "max_model_len"), ({"gpu": "nope"}, "gpu"),
    ({"kv_cache_dtype": "int3"}, "kv_cache_dtype"), ({"max_num_seqs": 0}, "max_num_seqs"),
    ({"kv_cache_dtype": "fp32"}, "kv_cache_dtype"), ({"tp": True}, "tp"),
])
def test_bad_inputs_name_the_field(kwargs, field) -> None:
    with pytest.raises(FieldError) as err:
        inference_memory("llama-3-8b", **kwargs)
    assert err.value.field == field


def test_unknown_model_names_the_model_field() -> None:
    with pytest.raises(FieldError) as err:
        inference_memory("nope")
    assert err.value.field == "model"


def test_cli_json_and_browser_answer_agree(capsys) -> None:
    assert main(["inference", "--model", "llama-3.1-8b", "--max-model-len", "8192",
                 "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert isinstance(cli["max_concurrent_sequences"], int)
    page = json.loads(answer("inference", json.dumps({"model": "llama-3.1-8b",
                                                       "max_model_len": 8192})))
    assert page["ok"] and page["max_concurrent_sequences"] == cli["max_concurrent_sequences"]
    assert main(["inference", "--model", "llama-3.1-8b", "--tp", "3"]) == 2
    assert "tp" in capsys.readouterr().err


def test_plan_error_is_a_field_error() -> None:
    assert issubclass(PlanError, FieldError)
