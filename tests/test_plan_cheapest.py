"""Cheapest plan: every listed layout fits and meets the deadline, the ranking is by cost,
ZeRO-3 is tried only when the scenario as given does not fit, and GPUs without a price are
listed apart."""

import json

import pytest

from calc import estimate, gpus
from calc.cli import main
from calc.plan import PlanError, cheapest, fits_target, training_cost

LLAMA_8K = {"model": "llama-3.1-8b",
            "training": {"seq_len": 8192, "activation_checkpointing": "full"}}


def test_every_option_fits_meets_the_deadline_and_is_ranked_by_cost() -> None:
    r = cheapest(LLAMA_8K, 10**10, deadline_hours=48, max_gpus=64)
    assert r.options and len({o.gpu for o in r.options}) == len(r.options)  # one per GPU type
    costs = [o.cost.cost_usd for o in r.options]
    assert costs == sorted(costs)  # type: ignore[type-var]
    for o in r.all_options:
        report = estimate(o.scenario)
        assert fits_target(report, 0.85)
        assert o.cost.train_seconds <= 48 * 3600
        assert o.gpus == o.scenario.parallelism.world_size
        assert o.cost.cost_usd == pytest.approx(training_cost(o.scenario, 10**10).cost_usd)
    assert r.best is r.options[0]
    assert all(gpus()[o.gpu].price is not None for o in r.options)


def test_the_deadline_needs_more_gpus_and_cost_does_not_fall() -> None:
    """Under training_cost the GPU-hours of a type do not depend on the count."""
    loose = cheapest(LLAMA_8K, 10**10, gpus=["h100-sxm-80gb"], max_gpus=64)
    tight = cheapest(LLAMA_8K, 10**10, gpus=["h100-sxm-80gb"], max_gpus=64, deadline_hours=10)
    assert tight.best is not None and loose.best is not None
    assert tight.best.gpus > loose.best.gpus
    assert tight.best.cost.cost_usd == pytest.approx(loose.best.cost.cost_usd, rel=0.01)
    assert tight.best.cost.train_seconds <= 10 * 3600
    impossible = cheapest(LLAMA_8K, 10**12, gpus=["h100-sxm-80gb"], max_gpus=8,
                          deadline_hours=1)
    assert not impossible.options and "deadline" in impossible.rejected["h100-sxm-80gb"]


def test_zero3_only_when_the_scenario_as_given_does_not_fit() -> None:
    r = cheapest(LLAMA_8K, 10**9, gpus=["a100-80gb"], max_gpus=16)
    for o in r.all_options:
        as_given = estimate(o.scenario.model_copy(update={"parallelism": o.scenario.parallelism
                                                          .model_copy(update={"zero": 0})}))
        assert (o.changes == ("zero 3",)) == (not fits_target(as_given, 0.85))
    assert r.best is not None and r.best.changes == ("zero 3",)  # 8B AdamW needs sharding


def test_deepspeed_under_torch_autocast_falls_back_to_its_zero3() -> None:
    """DeepSpeed's ZeRO-3 under torch_autocast is modelled (traced with its engine): where
    stage 2 does not fit, the fallback is its stage 3, estimated as such."""
    ds = {**LLAMA_8K, "parallelism": {"zero": 2, "framework": "deepspeed"}}
    r = cheapest(ds, 10**9, gpus=["a100-80gb"], max_gpus=8)
    fallback = [o for o in r.all_options if o.changes == ("zero 3",)]
    assert fallback and all(o.scenario.parallelism.zero == 3 for o in fallback)
    assert all(estimate(o.scenario).setup.deepspeed for o in fallback)


def test_model_parallel_degree_divides_the_count() -> None:
    r = cheapest({**LLAMA_8K, "parallelism": {"tp": 4, "pp": 2}}, 10**9,
                 gpus=["h100-sxm-80gb"], max_gpus=64)
    assert r.all_options and all(o.gpus % 8 == 0 for o in r.all_options)
    assert all(o.scenario.parallelism.dp == o.gpus // 8 for o in r.all_options)
    with pytest.raises(PlanError) as exc:
        cheapest({**LLAMA_8K, "parallelism": {"tp": 4}}, 10**9, max_gpus=2)
    assert exc.value.field == "max_gpus"


def test_gpus_without_a_price_are_listed_apart() -> None:
    r = cheapest(LLAMA_8K, 10**9, gpus=["h200-141gb", "h100-sxm-80gb"], max_gpus=8)
    assert [o.gpu for o in r.unpriced] == ["h200-141gb"]
    assert r.unpriced[0].cost.cost_usd is None
    assert [o.gpu for o in r.options] == ["h100-sxm-80gb"]


def test_unsupported_precision_is_a_rejection_reason() -> None:
    r = cheapest(LLAMA_8K, 10**9, gpus=["v100-32gb"], max_gpus=8)
    assert not r.options and "bf16" in r.rejected["v100-32gb"]


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"deadline_hours": 0}, "deadline_hours"), ({"gpus": ["nope"]}, "gpus"),
    ({"max_gpus": 0}, "max_gpus"), ({"target": 2}, "target"),
])
def test_bad_arguments_name_the_field(kwargs, field) -> None:
    with pytest.raises(PlanError) as exc:
        cheapest(LLAMA_8K, 10**9, **kwargs)
    assert exc.value.field == field


def test_cli(capsys) -> None:
    argv = ["cheapest", "--model", "llama-3.1-8b", "--seq-len", "8192", "--activation-"
            "checkpointing", "full", "--tokens", "1e10", "--deadline-hours", "48",
            "--max-gpus", "64"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    lib = cheapest(LLAMA_8K, 10**10, deadline_hours=48, max_gpus=64)
    assert [(o["gpu"], o["gpus"]) for o in out["options"]] == [(o.gpu, o.gpus)
                                                               for o in lib.options]
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith("10,000,000,000 tokens within 48 h")
    assert main(["cheapest", "--model", "gpt2", "--tokens", "1e9", "--gpu", "nope"]) == 2


def test_every_option_trains_the_same_global_batch() -> None:
    """Options are compared at equal optimisation settings: micro-batch x accumulation x dp
    is the same global batch at every GPU count (issue 12)."""
    r = cheapest({"model": "llama-3.2-1b", "training": {"seq_len": 2048, "micro_batch_size": 4,
                  "gradient_accumulation_steps": 4}, "parallelism": {"dp": 2}}, 10**9,
                 gpus=["h100-sxm-80gb"], max_gpus=16)
    batches = {o.scenario.training.micro_batch_size * o.scenario.training.gradient_accumulation_steps
               * o.scenario.parallelism.dp for o in r.all_options}
    assert batches == {32} and len(r.all_options) > 1
    default = cheapest({"model": "llama-3.2-1b", "training": {"seq_len": 2048}}, 10**9,
                       gpus=["h100-sxm-80gb"], max_gpus=8)
    assert {o.cost.tokens_per_step for o in default.all_options} == {2**21}
