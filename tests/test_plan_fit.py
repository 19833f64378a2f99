"""Fit search: the answer fits, the next valid value does not, on the estimator's own terms."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calc import estimate
from calc.plan import PlanError, fits_target, max_micro_batch, max_seq_len


def _with(scenario: dict, **training: int) -> dict:
    return {**scenario, "training": {**scenario.get("training", {}), **training}}


scenarios = st.fixed_dictionaries({
    "model": st.sampled_from(["gpt2", "llama-3.2-1b", "qwen3-0.6b", "qwen2.5-7b"]),
    "training": st.fixed_dictionaries({
        "seq_len": st.sampled_from([256, 1024]),
        "activation_checkpointing": st.sampled_from(["none", "full"]),
        "finetuning": st.sampled_from(["full", "lora"]),
    }),
    "parallelism": st.fixed_dictionaries({"dp": st.sampled_from([1, 8]),
                                          "zero": st.integers(0, 3)}),
    "gpu": st.sampled_from(["h100-sxm-80gb", "a100-40gb", "l4-24gb"]),
})


@settings(max_examples=30, deadline=None)
@given(scenarios, st.sampled_from([0.5, 0.85, 1.0]))
def test_max_micro_batch_fits_and_the_next_does_not(scenario, target) -> None:
    r = max_micro_batch(scenario, target)
    if r.value is None:
        assert not fits_target(estimate(_with(scenario, micro_batch_size=1)), target)
        assert r.reason
        return
    assert fits_target(estimate(_with(scenario, micro_batch_size=r.value)), target)
    assert not fits_target(estimate(_with(scenario, micro_batch_size=r.value + 1)), target)
    assert r.next_value == r.value + 1
    assert r.device_bytes is not None and r.device_bytes <= target * estimate(scenario).usable_bytes


@settings(max_examples=30, deadline=None)
@given(scenarios, st.sampled_from([1, 2]))
def test_max_seq_len_fits_and_the_next_valid_length_does_not(scenario, batch) -> None:
    scenario = _with(scenario, micro_batch_size=batch)
    r = max_seq_len(scenario)
    if r.value is None:
        assert r.reason
        return
    assert fits_target(estimate(_with(scenario, seq_len=r.value)), 0.85)
    max_pos = estimate(scenario).resolved.arch.max_position_embeddings
    if r.value == max_pos:
        assert any("max_position_embeddings" in n for n in r.notes)
    else:
        assert not fits_target(estimate(_with(scenario, seq_len=r.value + 1)), 0.85)


def test_seq_len_respects_tp_times_cp_with_sequence_parallel() -> None:
    scenario = {"model": "llama-3.1-8b", "training": {"activation_checkpointing": "full"},
                "parallelism": {"tp": 2, "cp": 2, "sequence_parallel": True, "dp": 2,
                                "zero": 3}}
    r = max_seq_len(scenario)
    assert r.value is not None and r.value % 4 == 0
    assert r.next_value == r.value + 4
    assert not fits_target(estimate(_with(scenario, seq_len=r.value + 4)), 0.85)


def test_gpt2_sequence_is_capped_at_its_position_table() -> None:
    r = max_seq_len({"model": "gpt2", "training": {"seq_len": 512}})
    assert r.value == 1024 and r.next_value is None
    assert "max_position_embeddings (1024)" in r.notes[0]


def test_nothing_fits_gives_none_and_the_reason() -> None:
    """Llama-3-70B full fine-tuning needs over 1 TiB on one GPU at any batch."""
    r = max_micro_batch({"model": "llama-3-70b", "training": {"seq_len": 1024}})
    assert r.value is None and r.scenario is None
    assert "even micro_batch_size 1 needs" in (r.reason or "")
    assert r.as_dict()["micro_batch_size"] is None


def test_as_dict_names_the_field() -> None:
    r = max_micro_batch({"model": "gpt2", "training": {"seq_len": 1024}})
    assert r.as_dict()["micro_batch_size"] == r.value
    assert max_seq_len({"model": "gpt2"}).as_dict().keys() >= {"seq_len", "notes"}


@pytest.mark.parametrize("target", [0, -0.1, 1.5])
def test_bad_target_is_an_error_naming_target(target) -> None:
    with pytest.raises(PlanError) as exc:
        max_micro_batch({"model": "gpt2", "training": {"seq_len": 512}}, target)
    assert exc.value.field == "target"
