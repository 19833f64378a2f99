"""KV cache: L x 2 x kv_heads x head_dim x seq x batch x bytes (MLA: the latent), by hand."""

import pytest

from calc import models
from calc.plan import KVQuant, PlanError, kv_cache_bytes


def test_llama3_8b_gqa_cache_by_hand() -> None:
    """32 layers x 2 x 8 KV heads x 128 x 8192 tokens x 2 bytes = 1 GiB per sequence."""
    assert kv_cache_bytes("llama-3-8b", batch=1, seq=8192) == 32 * 2 * 8 * 128 * 8192 * 2
    assert kv_cache_bytes("llama-3-8b", batch=3, seq=8192, dtype_bytes=1) == 3 * 2**29


def test_deepseek_v3_caches_the_latent_only() -> None:
    """61 layers x (kv_lora_rank 512 + qk_rope_head_dim 64) per token, replicated over tp."""
    expected = 61 * (512 + 64) * 4096 * 2
    assert kv_cache_bytes("deepseek-v3", batch=1, seq=4096) == expected
    assert kv_cache_bytes("deepseek-v3", batch=1, seq=4096, tp=8) == expected


def test_tensor_parallel_splits_kv_heads_but_never_below_one() -> None:
    full = kv_cache_bytes("llama-3-8b", 1, 1024)
    assert kv_cache_bytes("llama-3-8b", 1, 1024, tp=4) == full // 4
    assert kv_cache_bytes("llama-3-8b", 1, 1024, tp=16) == full // 8  # 8 heads: one each


def test_quantised_cache_by_hand() -> None:
    """4 bits per element plus an fp16 scale and zero point per 64 elements, and the newest
    128 tokens kept in bf16."""
    arch = models()["llama-3-8b"].architecture()
    per_token = 32 * 2 * 8 * 128
    q = KVQuant(bits=4, group_size=64, residual_length=128)
    quantised = per_token * (1024 - 128)
    expected = quantised // 2 + quantised // 64 * 4 + per_token * 128 * 2
    assert kv_cache_bytes(arch, 1, 1024, quant=q) == expected


@pytest.mark.parametrize("field", ["batch", "seq", "dtype_bytes", "tp"])
def test_bad_sizes_name_the_field(field) -> None:
    args = {"batch": 1, "seq": 1, "dtype_bytes": 2, "tp": 1, field: 0}
    with pytest.raises(PlanError) as exc:
        kv_cache_bytes("gpt2", args["batch"], args["seq"], args["dtype_bytes"], tp=args["tp"])
    assert exc.value.field == field


def test_unknown_model_names_model() -> None:
    with pytest.raises(PlanError) as exc:
        kv_cache_bytes("no-such-model", 1, 1)
    assert exc.value.field == "model"
