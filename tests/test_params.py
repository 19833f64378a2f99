"""Parameter counts must equal what the Hugging Face implementation instantiates."""

import pytest

from calc.architecture import Architecture, from_hf_config
from calc.params import count_params
from calc.presets import models

PRESETS = sorted(models())


@pytest.mark.parametrize("model_id", PRESETS)
def test_preset_param_count_matches_transformers(model_id: str) -> None:
    """hf_param_count is computed by validation/param_counts.py with transformers on meta."""
    preset = models()[model_id]
    assert preset.hf_param_count is not None, f"{model_id}: run validation/param_counts.py --write"
    assert count_params(preset.architecture()).total == preset.hf_param_count


def test_llama3_8b_param_count_is_published_figure() -> None:
    """Meta's model card: 8,030,261,248 parameters."""
    assert count_params(models()["llama-3-8b"].architecture()).total == 8_030_261_248


def test_tied_embeddings_are_counted_once() -> None:
    base = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=128, vocab_size=1000)
    untied = count_params(Architecture(**base)).total
    tied = count_params(Architecture(**base, tie_word_embeddings=True)).total
    assert untied - tied == 1000 * 64


def test_gqa_shrinks_only_key_value_projections() -> None:
    base = dict(hidden_size=64, num_hidden_layers=1, num_attention_heads=8,
                intermediate_size=128, vocab_size=10)
    mha = count_params(Architecture(**base)).total
    gqa = count_params(Architecture(**base, num_key_value_heads=2)).total
    assert mha - gqa == 2 * 64 * (64 - 16)


def test_moe_active_params_count_top_k_experts() -> None:
    arch = models()["mixtral-8x7b"].architecture()
    counts = count_params(arch)
    # Mixtral: ~46.7B total, ~12.9B active (2 of 8 experts)
    assert 46.5e9 < counts.total < 46.9e9
    assert 12.8e9 < counts.active < 13.0e9


def test_gpt2_config_field_names_are_read() -> None:
    arch, notes = from_hf_config({"model_type": "gpt2", "n_embd": 768, "n_layer": 12,
                                  "n_head": 12, "vocab_size": 50257, "n_positions": 1024})
    assert notes == []
    assert (arch.hidden_size, arch.num_hidden_layers, arch.intermediate_size) == (768, 12, 3072)
    assert count_params(arch).total == 124_439_808  # GPT2LMHeadModel, tied head


def test_unknown_model_type_is_read_as_llama_with_a_note() -> None:
    arch, notes = from_hf_config({"model_type": "olmo2", "hidden_size": 64,
                                  "num_hidden_layers": 2, "num_attention_heads": 4,
                                  "intermediate_size": 128, "vocab_size": 100})
    assert arch.model_type == "llama"
    assert "olmo2" in notes[0]


# Small configs of the model types no preset exercises; expected counts are
# sum(p.numel()) of transformers 5.23's model built from the same config on the meta device.
SMALL_CONFIGS = [
    ({"model_type": "gemma", "hidden_size": 256, "intermediate_size": 1024,
      "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 1,
      "head_dim": 128, "vocab_size": 1000, "hidden_activation": "gelu_pytorch_tanh"}, 3_600_128),
    ({"model_type": "gemma3_text", "hidden_size": 256, "intermediate_size": 1024,
      "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
      "head_dim": 64, "vocab_size": 1000}, 3_208_832),
    ({"model_type": "qwen2_moe", "hidden_size": 256, "intermediate_size": 1024,
      "moe_intermediate_size": 128, "shared_expert_intermediate_size": 512, "num_experts": 8,
      "num_experts_per_tok": 2, "num_hidden_layers": 3, "num_attention_heads": 4,
      "num_key_value_heads": 2, "vocab_size": 1000, "decoder_sparse_step": 1,
      "mlp_only_layers": [1]}, 4_255_488),
    ({"model_type": "gpt_oss", "hidden_size": 256, "intermediate_size": 128,
      "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
      "head_dim": 64, "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 1000},
     3_483_684),
    ({"model_type": "mistral", "hidden_size": 256, "intermediate_size": 1024,
      "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
      "head_dim": 64, "vocab_size": 1000}, 2_741_504),
    ({"model_type": "llama", "hidden_size": 256, "intermediate_size": 1024,
      "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2,
      "vocab_size": 1000, "attention_bias": True, "mlp_bias": True}, 2_419_712),
]


@pytest.mark.parametrize(("config", "expected"), SMALL_CONFIGS,
                         ids=[c["model_type"] + ("_bias" if c.get("mlp_bias") else "")
                              for c, _ in SMALL_CONFIGS])
def test_hf_config_model_types_count_like_transformers(config, expected) -> None:
    arch, notes = from_hf_config(config)
    assert notes == []
    assert count_params(arch).total == expected
