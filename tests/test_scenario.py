"""Bad input gets an error naming the field and the rule; pointless input gets a warning."""

import json

import pytest

from calc import estimate
from calc.scenario import ScenarioError, parse_scenario, resolve

BASE = {"model": "llama-3-8b"}


def _with(**groups):
    data = json.loads(json.dumps(BASE))
    for group, values in groups.items():
        if isinstance(values, dict) and group in ("training", "parallelism"):
            data.setdefault(group, {}).update(values)
        else:
            data[group] = values
    return data


@pytest.mark.parametrize(("scenario", "field", "rule"), [
    (_with(training={"micro_batch_size": 0}), "training.micro_batch_size", "greater than"),
    (_with(training={"seq_len": -5}), "training.seq_len", "greater than"),
    (_with(training={"precision": "int3"}), "training.precision", "must be 'fp32'"),
    (_with(parallelism={"tp": 3}), "parallelism.tp", "must divide num_attention_heads"),
    (_with(parallelism={"tp": 16}), "parallelism.tp", "must divide num_key_value_heads"),
    (_with(parallelism={"pp": 64}), "parallelism.pp", "cannot exceed num_hidden_layers"),
    (_with(model="llama-9b"), "model", "unknown model preset"),
    (_with(gpu="tpu-v5"), "gpu", "unknown gpu preset"),
    (_with(gpu="v100-32gb"), "training.precision", "does not support bf16"),
    (_with(gpu="a100-80gb", training={"precision": "fp8"}), "training.precision",
     "does not support fp8"),
    (_with(training={"recompute_layers": 4}), "training.recompute_layers", "needs"),
    (_with(model={"hidden_size": 100, "num_hidden_layers": 2, "num_attention_heads": 3,
                  "intermediate_size": 10, "vocab_size": 10}), "model",
     "must be divisible by num_attention_heads"),
    (_with(model={"hidden_size": 64}), "model.num_hidden_layers", "is required"),
    (_with(model={"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                  "num_key_value_heads": 3, "intermediate_size": 10, "vocab_size": 10}),
     "model.num_key_value_heads", "must divide num_attention_heads"),
    (_with(model={"hf_config": {"model_type": "llama", "hidden_size": 64,
                                "num_hidden_layers": 2, "num_attention_heads": 4,
                                "num_key_value_heads": 3, "intermediate_size": 10,
                                "vocab_size": 10}}),
     "model.hf_config.num_key_value_heads", "must divide num_attention_heads"),
    (_with(model={"hf_config": {"model_type": "llama"}}), "model.hf_config.hidden_size",
     "is required"),
    (_with(model={"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                  "intermediate_size": 10, "vocab_size": 10, "colour": "red"}),
     "model.colour", "not a known field"),
    (_with(training={"seq_len": 2048}, model="gpt2"), "training.seq_len",
     "exceeds max_position_embeddings"),
    (_with(extra=1), "extra", "not a known field"),
    (_with(schema_version=2), "schema_version", "newer"),
    (_with(parallelism={"offload_optimizer": True}), "parallelism.offload_optimizer", "zero"),
    (_with(parallelism={"zero": 3, "pp": 2, "offload_optimizer": True, "offload_params": True}),
     "parallelism.offload_params", "dp x cp > 1 beside tp or pp"),
    (_with(model="mixtral-8x7b", parallelism={"ep": 3, "dp": 3}), "parallelism.ep",
     "must divide the number of experts"),
])
def test_bad_input_names_field_and_rule(scenario, field, rule) -> None:
    with pytest.raises(ScenarioError) as info:
        estimate(scenario)
    assert info.value.field == field
    assert rule in info.value.message


@pytest.mark.parametrize(("scenario", "code"), [
    (_with(parallelism={"zero": 2}), "zero_without_dp"),
    (_with(parallelism={"sequence_parallel": True}), "sequence_parallel_without_tp"),
    (_with(parallelism={"offload_params": True, "zero": 2, "dp": 2}),
     "offload_params_below_zero3"),
    (_with(parallelism={"ep": 2, "dp": 2}), "ep_without_experts"),
])
def test_pointless_settings_warn(scenario, code) -> None:
    report = estimate(scenario).as_dict()
    assert code in [w["code"] for w in report["warnings"]]


def test_defaults_are_the_documented_ones() -> None:
    s = parse_scenario({"model": "gpt2"})
    assert s.model_dump(mode="json") == {
        "schema_version": 1, "model": "gpt2", "gpu": "h100-sxm-80gb",
        "training": {
            "micro_batch_size": 1, "seq_len": 4096, "gradient_accumulation_steps": 1,
            "precision": "bf16", "mixed_precision": "amp", "optimizer": "adamw",
            "optimizer_impl": "fused", "activation_checkpointing": "none",
            "selective_policy": None, "recompute_layers": None, "checkpoint_every": None,
            "attention": "flash", "loss": "standard",
            "finetuning": "full", "lora_rank": 16, "lora_targets": "all_linear",
            "lora_dropout": 0.0, "implementation": "hf", "padded": False,
            "moe_capacity_factor": None, "moe_load_imbalance": 1.0},
        "parallelism": {"dp": 1, "tp": 1, "pp": 1, "cp": 1, "ep": 1, "zero": 0,
                        "sequence_parallel": False, "offload_optimizer": False,
                        "offload_params": False, "pipeline_schedule": "1f1b",
                        "virtual_stages": 1, "framework": None,
                        "reduce_bucket_size": None, "stage3_prefetch_bucket_size": None,
                        "stage3_param_persistence_threshold": None,
                        "stage3_max_live_parameters": None, "stage3_max_reuse_distance": None,
                        "sub_group_size": None},
    }


def test_lora_and_qlora_default_to_a_low_precision_base_under_autocast() -> None:
    """PEFT users load the base in bf16 and train with Trainer(bf16=True); a given
    mixed_precision is kept."""
    for finetuning in ("lora", "qlora"):
        t = parse_scenario({"model": "gpt2", "training": {"finetuning": finetuning}}).training
        assert t.mixed_precision == "autocast"
    t = parse_scenario({"model": "gpt2", "training": {"finetuning": "lora",
                                                      "mixed_precision": "amp"}}).training
    assert t.mixed_precision == "amp"
    assert parse_scenario({"model": "gpt2"}).training.mixed_precision == "amp"


def test_invalid_json_text_is_a_clear_error() -> None:
    with pytest.raises(ScenarioError, match="not valid JSON"):
        parse_scenario("{model: ")


def test_aliases_resolve_case_insensitively() -> None:
    assert estimate({"model": "Meta-Llama/Meta-Llama-3-8B", "gpu": "H100"}).as_dict()["gpu"] == \
        "h100-sxm-80gb"


@pytest.mark.parametrize(("parallelism", "training", "field"), [
    ({"pipeline_schedule": "gpipe"}, {}, "parallelism.pipeline_schedule"),
    ({"pp": 2, "virtual_stages": 2}, {}, "parallelism.virtual_stages"),
    ({"pp": 2, "pipeline_schedule": "interleaved_1f1b"}, {}, "parallelism.virtual_stages"),
    ({"pp": 4, "pipeline_schedule": "interleaved_1f1b", "virtual_stages": 2},
     {"gradient_accumulation_steps": 6}, "training.gradient_accumulation_steps"),
    ({"pp": 3, "pipeline_schedule": "dualpipe"}, {}, "parallelism.pp"),
    ({"pp": 8, "pipeline_schedule": "interleaved_1f1b", "virtual_stages": 8}, {},
     "parallelism.virtual_stages"),
    # llama-3.2-1b has 16 layers: a V cuts them in 2 pp chunks; DualPipeV needs m >= 2 pp
    ({"pp": 16, "pipeline_schedule": "zbv"}, {}, "parallelism.pp"),
    ({"pp": 4, "pipeline_schedule": "dualpipev"}, {"gradient_accumulation_steps": 7},
     "training.gradient_accumulation_steps"),
])
def test_pipeline_schedules_are_checked(parallelism: dict, training: dict, field: str) -> None:
    with pytest.raises(ScenarioError) as err:
        resolve(parse_scenario({"model": "llama-3.2-1b", "parallelism": parallelism,
                                "training": training}))
    assert err.value.field == field


def test_moe_load_fields_are_checked() -> None:
    with pytest.raises(ScenarioError) as err:
        resolve(parse_scenario({"model": "mixtral-8x7b",
                                "training": {"moe_capacity_factor": 1.25}}))
    assert err.value.field == "training.moe_capacity_factor"
    with pytest.raises(ScenarioError) as err:
        resolve(parse_scenario({"model": "mixtral-8x7b", "parallelism": {"dp": 4, "ep": 2},
                                "training": {"moe_load_imbalance": 3.0}}))
    assert err.value.field == "training.moe_load_imbalance"


@pytest.mark.parametrize(("training", "parallelism", "rule"), [
    ({"mixed_precision": "master"}, {"framework": "torch"}, "no separate fp32 master copy"),
    ({"mixed_precision": "pure"}, {"framework": "deepspeed"}, "not pure"),
    ({"finetuning": "lora"}, {"framework": "deepspeed"}, "not autocast"),
    ({"implementation": "megatron", "mixed_precision": "master"}, {"framework": "deepspeed"},
     "Megatron-LM's own"),
])
def test_framework_combinations_calc_does_not_model_name_the_field(
        training: dict, parallelism: dict, rule: str) -> None:
    with pytest.raises(ScenarioError, match=rule) as err:
        resolve(parse_scenario({"model": "llama-3-8b", "training": training,
                                "parallelism": {"dp": 8, **parallelism}}))
    assert err.value.field == "parallelism.framework"


def test_framework_defaults_to_deepspeed_for_master_weights_else_torch() -> None:
    for mixed, engine in (("master", "deepspeed"), ("amp", "torch"), ("pure", "torch")):
        s = parse_scenario({"model": "gpt2", "training": {"mixed_precision": mixed}})
        assert s.parallelism.engine(s.training.mixed_precision) == engine
    named = {"model": "gpt2", "training": {"mixed_precision": "master", "seq_len": 1024},
             "parallelism": {"dp": 4, "zero": 2}}
    explicit = {**named, "parallelism": {"dp": 4, "zero": 2, "framework": "deepspeed"}}
    assert estimate(named).peak_bytes == estimate(explicit).peak_bytes


def test_a_classification_config_has_a_head_of_num_labels_in_place_of_the_lm_head() -> None:
    """A reward model's config.json (architectures *ForSequenceClassification, num_labels 1):
    a hidden_size x 1 score head instead of the vocabulary-wide LM head, its output one value a
    token; no traced case has one, so the estimate says so."""
    config = {"model_type": "llama", "architectures": ["LlamaForSequenceClassification"],
              "num_labels": 1, "hidden_size": 512, "num_hidden_layers": 2,
              "num_attention_heads": 8, "intermediate_size": 1024, "vocab_size": 32000}
    lm_config = {k: v for k, v in config.items() if k not in ("architectures", "num_labels")}
    scored = estimate({"model": {"hf_config": config}, "training": {"seq_len": 512}})
    lm = estimate({"model": {"hf_config": lm_config}, "training": {"seq_len": 512}})
    assert scored.resolved.arch.num_labels == 1
    assert lm.param_count - scored.param_count == 32000 * 512 - 512
    assert scored.components["logits"] < lm.components["logits"] / 1000
    assert any("classification head" in m for m in scored.confidence["missing"])
    # id2label alone sizes the head too (transformers writes it with num_labels)
    two = estimate({"model": {"hf_config": {**lm_config, "architectures": [
        "LlamaForTokenClassification"], "id2label": {"0": "A", "1": "B", "2": "C"}}},
        "training": {"seq_len": 512}})
    assert two.resolved.arch.num_labels == 3


def test_padded_batches_refuse_context_parallelism_by_name() -> None:
    """torch's ring attention runs is_causal and takes no mask: a padded batch under cp is
    refused naming the field; the advisor skips cp layouts for it and says why."""
    from calc.plan.advise import advise
    with pytest.raises(ScenarioError) as err:
        estimate({"model": "llama-3.2-1b", "training": {"padded": True},
                  "parallelism": {"cp": 2, "dp": 2, "zero": 3}})
    assert err.value.field == "training.padded"
    result = advise("llama-3.2-1b", "h100-sxm-80gb", 8, 16384, 16,
                    base_training={"padded": True})
    assert result.rejected["cp_padded"] > 0
    assert all(p.as_dict()["layout"]["cp"] == 1 for p in result.plans)
