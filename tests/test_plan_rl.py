"""RL fine-tuning memory: training step + rollout KV cache + the engine's bf16 weights, per
GPU, against a hand-computed case."""

import json

import pytest

from calc import estimate
from calc.cli import main
from calc.operations import answer
from calc.params import count_params
from calc.plan import PlanError, inference_memory, kv_cache_bytes, rl_memory
from calc.plan.rl import scorer
from calc.presets import models

GiB = 1024**3
QWEN_TP4 = {"model": "qwen2.5-7b", "training": {"activation_checkpointing": "full"},
            "parallelism": {"tp": 4}}
ROLLOUT = {"prompts": 32, "samples_per_prompt": 8, "prompt_len": 1024, "response_len": 7168}


def test_qwen25_7b_tp4_golden() -> None:
    """Qwen2.5-7B config.json: 28 layers, 4 KV heads of 128; 7,615,616,512 parameters (HF).

    KV per GPU: 4 KV heads over tp 4 = 1 head; 28 layers x 2 (K, V) x 1 x 128 x 8192 tokens
    x 256 sequences (32 x 8, one engine: world 4 / tp 4) x 2 B = 28 GiB exactly.
    Weights per GPU: 7,615,616,512 x 2 B / 4 = 3,807,808,256 B (3.55 GiB)."""
    m = rl_memory(QWEN_TP4, **ROLLOUT, reference_model=False)
    assert m.kv_cache_bytes == 28 * GiB == 30_064_771_072
    assert m.inference_weight_bytes == 3_807_808_256
    training = estimate({**QWEN_TP4, "training": {"activation_checkpointing": "full",
                                                  "seq_len": 8192}}).device_bytes
    assert m.training_bytes == training
    engine = inference_memory("qwen2.5-7b", tp=4, max_model_len=8192, max_num_seqs=256)
    assert m.engine_workspace_bytes == engine.activation_bytes
    assert m.total_bytes == training + 30_064_771_072 + 3_807_808_256 + engine.activation_bytes
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
    assert m.total_bytes == max(m.training_bytes + m.reference_bytes, m.rollout_bytes)
    assert m.total_bytes < rl_memory(QWEN_TP4, **ROLLOUT).total_bytes


@pytest.mark.parametrize(("change", "field"), [
    ({"prompts": 0}, "prompts"), ({"response_len": 0}, "response_len"),
    ({"prompt_len": -1}, "prompt_len"), ({"engines": 0}, "engines"),
    ({"algorithm": "reinforce"}, "algorithm"), ({"prompts": None}, "prompts"),
    ({"algorithm": "dpo"}, "prompts"),  # dpo has no rollout batch
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


DPO = {"algorithm": "dpo", "prompt_len": 512, "response_len": 1536}


def test_dpo_with_precomputed_reference_is_below_dpo_with_a_reference_model() -> None:
    """The reference model's bf16 weights, sharded as the policy's, are the difference."""
    with_ref = rl_memory(QWEN_TP4, **DPO)
    precomputed = rl_memory(QWEN_TP4, **DPO, reference_model=False)
    assert precomputed.total_bytes < with_ref.total_bytes
    assert with_ref.total_bytes - precomputed.total_bytes == 7_615_616_512 * 2 // 4
    assert with_ref.rollout_bytes == 0 and list(with_ref.phases) == ["training"]


def test_dpo_trains_chosen_and_rejected_together() -> None:
    m = rl_memory(QWEN_TP4, **DPO, reference_model=False)
    pairs = estimate({**QWEN_TP4, "training": {"activation_checkpointing": "full",
                                               "seq_len": 2048, "micro_batch_size": 2}})
    assert m.training_bytes == pairs.device_bytes


def test_ppo_colocated_is_at_least_policy_only_training() -> None:
    ppo = rl_memory(QWEN_TP4, **ROLLOUT, algorithm="ppo")
    policy = estimate({**QWEN_TP4, "training": {"activation_checkpointing": "full",
                                                "seq_len": 8192}}).device_bytes
    assert ppo.total_bytes >= policy
    assert ppo.critic_bytes > 0 and ppo.reference_bytes == 7_615_616_512 * 2 // 4
    # the reward model: the policy's model as a sequence classifier, its LM head (152,064 x
    # 3,584, untied) replaced by a 3,584 x 1 score head
    assert ppo.reward_model_bytes == (7_615_616_512 - 152_064 * 3584 + 3584) * 2 // 4
    assert ppo.total_bytes > rl_memory(QWEN_TP4, **ROLLOUT).total_bytes  # grpo: no critic


def test_ppo_separate_pools_are_below_colocated() -> None:
    ppo = rl_memory(QWEN_TP4, **ROLLOUT, algorithm="ppo")
    apart = rl_memory(QWEN_TP4, **ROLLOUT, algorithm="ppo", colocated=False)
    assert apart.total_bytes < ppo.total_bytes


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_sleep_mode_never_increases_memory(algorithm) -> None:
    awake = rl_memory(QWEN_TP4, **ROLLOUT, algorithm=algorithm)
    asleep = rl_memory(QWEN_TP4, **ROLLOUT, algorithm=algorithm, sleep_mode=True)
    assert asleep.total_bytes <= awake.total_bytes
    assert asleep.phases["training"] == awake.phases["training"] - awake.rollout_bytes
    assert asleep.phases["rollout"] == awake.phases["rollout"]


def test_dpo_refuses_rollout_settings() -> None:
    with pytest.raises(PlanError) as exc:
        rl_memory(QWEN_TP4, **DPO, sleep_mode=True)
    assert exc.value.field == "sleep_mode"


def test_cli_dpo_and_bad_algorithm(capsys) -> None:
    argv = ["rl", "--model", "qwen2.5-7b", "--tp", "4", "--algorithm", "dpo",
            "--response-len", "1536", "--no-reference-model", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["algorithm"] == "dpo" and out["components"]["reference"] == 0
    assert main(["rl", "--model", "qwen2.5-7b", "--response-len", "64"]) == 2
    assert "prompts" in capsys.readouterr().err


FSDP8 = {"model": "qwen2.5-7b", "training": {"activation_checkpointing": "full"},
         "parallelism": {"dp": 8, "zero": 3}}  # verl's layout: FSDP over 8 GPUs, no tp


def test_critic_is_its_own_model_with_the_policys_settings() -> None:
    """A 7B policy with a 1.5B critic: the critic's component is calc's estimate of the 1.5B
    model with the policy's training settings and parallelism, smaller than a 7B critic's."""
    same = rl_memory(FSDP8, **ROLLOUT, algorithm="ppo")
    small = rl_memory(FSDP8, **ROLLOUT, algorithm="ppo", critic_model="qwen2.5-1.5b")
    critic = scorer(models()["qwen2.5-1.5b"].architecture()).model_dump(mode="json")
    alone = estimate({**FSDP8, "model": critic,
                      "training": {"activation_checkpointing": "full", "seq_len": 8192}})
    assert small.critic_bytes == alone.device_bytes < same.critic_bytes
    # Qwen2.5-1.5B (HF count, tied embeddings) and its 1,536 x 1 value head
    assert small.param_counts["critic"] == 1_543_714_304 + 1536
    assert small.training_bytes == same.training_bytes  # the policy is untouched
    assert small.critic_resident_bytes < same.critic_resident_bytes
    assert small.total_bytes <= same.total_bytes
    assert any("qwen2.5-1.5b" in n and "value head" in n for n in small.notes)


def test_the_critics_value_head_outputs_one_value_a_token_not_logits() -> None:
    """The critic's head is hidden_size x 1: its output is T values, not T x vocab logits, so a
    1.5B critic at 8K tokens is not dominated by 128K-wide logits as a language model is."""
    lm = estimate({**FSDP8, "model": "qwen2.5-1.5b",
                   "training": {"activation_checkpointing": "full", "seq_len": 8192}})
    m = rl_memory(FSDP8, **ROLLOUT, algorithm="ppo", critic_model="qwen2.5-1.5b")
    assert lm.components["logits"] > 10 * 2**30
    assert m.critic_bytes < lm.device_bytes - lm.components["logits"] / 2
    critic = estimate({**FSDP8, "model": scorer(models()["qwen2.5-1.5b"].architecture())
                       .model_dump(mode="json"),
                       "training": {"activation_checkpointing": "full", "seq_len": 8192}})
    assert critic.components["logits"] < 2**20  # 8,192 fp32 values and their gradient


def test_critic_from_a_config_json() -> None:
    """An HF config.json is accepted as the scenario's model is: the same as its preset."""
    arch = models()["qwen2.5-1.5b"].architecture().model_dump(mode="json")
    by_arch = rl_memory(FSDP8, **ROLLOUT, algorithm="ppo", critic_model=arch)
    by_id = rl_memory(FSDP8, **ROLLOUT, algorithm="ppo", critic_model="qwen2.5-1.5b")
    assert by_arch.critic_bytes == by_id.critic_bytes


LLAMA70_TP8 = {"model": "llama-3.1-70b", "training": {"activation_checkpointing": "full"},
               "parallelism": {"tp": 8, "dp": 2, "zero": 3}}
ROLLOUT_70 = {"prompts": 32, "samples_per_prompt": 8, "prompt_len": 1024, "response_len": 4096}


def test_an_8b_reward_model_beside_a_70b_policy_golden() -> None:
    """Llama-3.1-8B as a sequence classifier: 8,030,261,248 parameters (HF) less its LM head
    (128,256 x 4,096) plus a 4,096 x 1 score head, in bf16, sharded over tp 8 x dp 2 (ZeRO-3)."""
    small = rl_memory(LLAMA70_TP8, **ROLLOUT_70, reward_model="llama-3.1-8b")
    rm = 8_030_261_248 - 128_256 * 4096 + 4096
    assert count_params(scorer(models()["llama-3.1-8b"].architecture())).total == rm
    assert small.reward_model_bytes == -(-rm * 2 // 16)
    assert small.param_counts["reward_model"] == rm
    as_policy = rl_memory(LLAMA70_TP8, **ROLLOUT_70, reward="model")
    assert as_policy.reward_model_bytes > 8 * small.reward_model_bytes
    assert as_policy.total_bytes - small.total_bytes == (
        as_policy.reward_model_bytes - small.reward_model_bytes)
    assert small.reference_bytes == as_policy.reference_bytes  # the reference is the policy's
    assert rl_memory(LLAMA70_TP8, **ROLLOUT_70).reward_model_bytes == 0  # grpo: a rule


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
@pytest.mark.parametrize("sleep", [False, True])
def test_offload_between_phases_lowers_rollout_by_the_resident_bytes(algorithm, sleep) -> None:
    """Offloaded, the rollout phase holds the engine alone: exactly the trainers' parameters
    and optimizer states and the frozen models less; they move to host memory."""
    kw = {**ROLLOUT_70, "algorithm": algorithm, "sleep_mode": sleep, "reward": "model"}
    kept = rl_memory(LLAMA70_TP8, **kw)
    off = rl_memory(LLAMA70_TP8, **kw, offload_between_phases=True)
    resident = kept.policy_resident_bytes + kept.critic_resident_bytes + kept.frozen_bytes
    assert resident > 0 and (kept.critic_resident_bytes > 0) == (algorithm == "ppo")
    assert off.phases["rollout"] == kept.phases["rollout"] - resident == off.rollout_bytes
    assert off.host_bytes - kept.host_bytes == resident
    engine = 0 if sleep else kept.rollout_bytes
    assert off.phases["training"] == max(kept.training_bytes, kept.critic_bytes,
                                         kept.reference_bytes, kept.reward_model_bytes) + engine
    assert off.phases["training"] <= kept.phases["training"]
    assert off.total_bytes <= kept.total_bytes


def test_host_memory_counts_the_sleeping_engine_and_the_scenarios_offload() -> None:
    asleep = rl_memory(QWEN_TP4, **ROLLOUT, sleep_mode=True)
    assert asleep.host_bytes == asleep.inference_weight_bytes
    offloaded = {**QWEN_TP4, "parallelism": {"tp": 4, "zero": 1, "offload_optimizer": True}}
    m = rl_memory(offloaded, **ROLLOUT)
    assert m.host_bytes == estimate({**offloaded, "training": {
        "activation_checkpointing": "full", "seq_len": 8192}}).host_bytes > 0


@pytest.mark.parametrize(("change", "field"), [
    ({"critic_model": "qwen2.5-1.5b"}, "critic_model"),  # grpo trains no critic
    ({"algorithm": "ppo", "critic_model": "nope"}, "critic_model"),
    ({"algorithm": "ppo", "critic_model": 7}, "critic_model"),
    ({"algorithm": "ppo", "critic_model": {"hf_config": {"hidden_size": 64}}},
     "critic_model.hf_config.num_hidden_layers"),
    ({"algorithm": "ppo", "critic_model": "qwen2.5-1.5b"}, "critic_model"),  # tp 4, 2 kv heads
    ({"reward_model": "nope"}, "reward_model"),
    ({"reward": "rule", "reward_model": "llama-3.1-8b"}, "reward_model"),
    ({"reward": "human"}, "reward"),
    ({"colocated": False, "offload_between_phases": True}, "offload_between_phases"),
])
def test_bad_models_and_offload_name_the_field(change, field) -> None:
    with pytest.raises(PlanError) as exc:
        rl_memory(QWEN_TP4, **{**ROLLOUT, **change})
    assert exc.value.field == field


def test_dpo_refuses_offload_between_phases() -> None:
    with pytest.raises(PlanError) as exc:
        rl_memory(QWEN_TP4, **DPO, offload_between_phases=True)
    assert exc.value.field == "offload_between_phases"


def test_cli_and_json_request_take_the_models_and_offload(capsys) -> None:
    argv = ["rl", "--model", "llama-3.1-70b", "--tp", "8", "--dp", "2", "--zero", "3",
            "--activation-checkpointing", "full", "--prompts", "32", "--samples-per-prompt", "8",
            "--prompt-len", "1024", "--response-len", "4096", "--algorithm", "ppo",
            "--critic-model", "llama-3.1-8b", "--reward-model", "llama-3.1-8b",
            "--offload-between-phases", "--json"]
    assert main(argv) == 0
    want = rl_memory(LLAMA70_TP8, **ROLLOUT_70, algorithm="ppo", critic_model="llama-3.1-8b",
                     reward_model="llama-3.1-8b", offload_between_phases=True)
    assert json.loads(capsys.readouterr().out) == want.as_dict()
    assert main(argv[:-1]) == 0
    assert "host memory" in capsys.readouterr().out
    got = json.loads(answer("rl", json.dumps({"scenario": LLAMA70_TP8, **ROLLOUT_70,
                                              "algorithm": "ppo",
                                              "critic_model": {"hf_config": {}}})))
    assert got["ok"] is False and got["field"].startswith("critic_model.hf_config")


def test_the_engine_has_its_own_tensor_parallelism() -> None:
    """verl trains with FSDP (tp 1) and generates with vLLM at rollout tp 2, 4...: the engine's
    weights and KV cache split over rollout_tp, and its engines are GPUs / rollout_tp."""
    one = rl_memory(FSDP8, **ROLLOUT)
    four = rl_memory(FSDP8, **ROLLOUT, rollout_tp=4)
    assert (one.tp, one.engines, four.tp, four.engines) == (1, 8, 4, 2)
    assert four.inference_weight_bytes == pytest.approx(one.inference_weight_bytes / 4, rel=0.01)
    assert four.sequences_per_engine == 4 * one.sequences_per_engine
    assert four.kv_cache_bytes == kv_cache_bytes(
        estimate(FSDP8).resolved.arch, four.sequences_per_engine, four.seq_len, 2, tp=4)
    assert four.training_bytes == one.training_bytes  # the trainer is untouched
    for bad in (3, 28):  # 3 does not split the 28 heads; 28 does, but not the 8 GPUs
        with pytest.raises(PlanError) as exc:
            rl_memory(FSDP8, **ROLLOUT, rollout_tp=bad)
        assert exc.value.field == "rollout_tp"
