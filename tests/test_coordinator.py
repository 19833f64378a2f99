"""DeepSpeed ZeRO-3: what its parameter coordinator holds gathered, and the step's casts, each
checked against a count by hand or what the traced engine held."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from traced import traced_case  # tests/ is on sys.path (rootdir conftest)

from calc import coordinator, estimate
from calc.coordinator import MAX_LIVE_PARAMETERS, gathered, sub_group
from calc.frameworks.registry import import_config
from calc.plan import export
from calc.scenario import parse_scenario, resolve
from calc.setup import Setup
from calc.states import model_states

COORDINATOR = Path(__file__).resolve().parent.parent / "validation" / "results" / "coordinator.json"
H, F, V = 4096, 11008, 32000  # Llama 2 7B
LAYER = 4 * H * H + 3 * H * F  # its partitioned tensors (the norms persist)


def _setup(model: str, dp: int = 8, **training: object) -> Setup:
    return Setup(resolve(parse_scenario({
        "model": model, "training": {"mixed_precision": "master", **training},
        "parallelism": {"dp": dp, "zero": 3}})))


def test_the_coordinator_fills_up_to_max_live_parameters_with_the_next_modules() -> None:
    """Llama 2 7B (32 layers of 202M): at the loss the head and the top layers, whose
    backward comes next, until 1e9 elements are live; the tensor crossing the limit is whole
    (traced: 1,002.7M gathered or in flight at the head, the norms included; the engine tops
    its prefetch up by a bucket at a time, so it can stop one tensor earlier)."""
    x = _setup("llama-2-7b")
    live = gathered(x.counts, x.stages[0])
    assert live.persistent == 65 * 2 * H // 2  # 32 layers' two norms and the final one
    for elements in (live.forward_head, live.backward_head, live.backward_top):
        total = elements + live.persistent
        assert MAX_LIVE_PARAMETERS <= total < MAX_LIVE_PARAMETERS + H * F
    assert live.forward_head + live.persistent == pytest.approx(1_002.7e6, abs=H * F)


def test_the_first_layer_s_backward_holds_what_is_left_the_embedding_whole() -> None:
    """Near the end of backward fewer than 1e9 elements are left to gather: the first layer and
    the embedding (traced: 333.4M at layer 0's backward), then the embedding alone. Where the
    embedding is wider than what is left of the limit it is still gathered whole: Llama 3.1
    70B's first layer and its 1.05B embedding, 1.9B elements (traced)."""
    x = _setup("llama-2-7b")
    live = gathered(x.counts, x.stages[0])
    assert live.backward_first == LAYER + V * H
    assert live.embedding == V * H
    scenario, _ = traced_case("llama-3.1-8b-4L_b1_s1024_master_flash_deepspeed-zero2x8")
    big = dict(scenario["model"]["hf_config"], hidden_size=8192, intermediate_size=28672,
               num_attention_heads=64, num_key_value_heads=8, num_hidden_layers=2)
    y = Setup(resolve(parse_scenario({"model": {"hf_config": big},
                                      "training": {"mixed_precision": "master"},
                                      "parallelism": {"dp": 8, "zero": 3}})))
    live = gathered(y.counts, y.stages[0])
    layer = 2 * 8192 * 8192 + 2 * 8192 * 1024 + 3 * 8192 * 28672
    assert live.backward_first == layer + 128256 * 8192 > MAX_LIVE_PARAMETERS


def test_a_model_under_the_limit_stays_gathered_whole() -> None:
    """Qwen2.5 0.5B (494M, tied embeddings) is smaller than 1e9: after the first step every
    parameter stays gathered through forward and backward (traced: the dev case's parameters
    at 0.9 GiB, whole, at every layer)."""
    x = _setup("qwen2.5-0.5b", dp=4)
    live = gathered(x.counts, x.stages[0])
    assert live.forward_head + live.persistent == x.counts.total
    assert live.backward_first == live.embedding + x.counts.dense_layer.linear_weight_count


def test_the_step_casts_one_sub_group_at_a_time() -> None:
    """stage3.py's step flattens a sub-group's bf16 gradient partitions and casts them to fp32
    (both alive): 6 bytes an element of the largest sub-group, which closes once it holds
    sub_group_size (1e9) elements. Llama 2 7B over 8 ranks is one group of P / 8; over 2 ranks
    (3.4B each) four, the largest just over 1e9."""
    x = _setup("llama-2-7b")
    ms = model_states(x, x.stages[0])
    assert sub_group(ms.local.ordered, 8) == pytest.approx(x.counts.total / 8, rel=1e-4)
    assert ms.step_temporary is not None
    assert ms.step_temporary.bytes == 6 * sub_group(ms.local.ordered, 8)
    two = sub_group(ms.local.ordered, 2)
    assert 10**9 <= two < 10**9 + F * H // 2


def test_zero3_partitions_and_bucket_live_all_step() -> None:
    """DeepSpeed allocates the gradient partitions (bf16, P / N) and its reduce bucket with the
    optimizer: they are there in the first forward and at the step, not only in backward."""
    r = estimate({"model": "llama-2-7b", "training": {"mixed_precision": "master"},
                  "parallelism": {"dp": 8, "zero": 3}})
    for phase in ("forward", "backward", "optimizer_step"):
        parts = r.as_dict()["phases"][phase]["components"]
        assert parts["gradients"] == pytest.approx(2 * r.setup.counts.total / 8, rel=1e-4)


@pytest.mark.parametrize("case", [
    "qwen2.5-0.5b_b2_s1024_master_flash_deepspeed-zero3x4",
    "llama-3.2-1b_b1_s2048_master_flash_acfull_deepspeed-zero3x8",
    "qwen2.5-1.5b_b1_s2048_master_flash_deepspeed-zero3x2",
])
def test_zero3_matches_deepspeed_s_engine(case: str) -> None:
    """Each phase of the traced DeepSpeed 0.19.8 step within 1% (the FSDP2 stand-in that traced
    these cases before was 11-28% under the engine)."""
    scenario, traced = traced_case(case)
    r = estimate(scenario).as_dict()
    for phase, measured in traced["phases"].items():
        assert r["phases"][phase]["peak_bytes"] == pytest.approx(measured, rel=0.01), phase


def test_import_notes_only_the_zero3_sizes_the_estimate_does_not_count() -> None:
    """calc's own export imports without a note on its sizes; a config that lowers
    stage3_max_live_parameters (the usual fix for a ZeRO-3 out-of-memory) is told that the
    estimate counts DeepSpeed's default."""
    scenario = {"model": "llama-2-7b", "training": {"mixed_precision": "master"},
                "parallelism": {"dp": 8, "zero": 3}}
    cfg = export(scenario, "deepspeed").data
    assert isinstance(cfg, dict)
    _, notes = import_config(cfg, "deepspeed", model="llama-2-7b")
    assert not any("zero_optimization." in n for n in notes)
    cfg["zero_optimization"]["stage3_max_live_parameters"] = 3 * 10**8
    _, notes = import_config(cfg, "deepspeed", model="llama-2-7b")
    said = [n for n in notes if "stage3_max_live_parameters" in n]
    assert len(said) == 1 and "1,000,000,000" in said[0]


def _replayed(scenario: dict) -> list[tuple[str, int]]:
    """calc.coordinator's fetches over the scenario's step: (F or B, elements gathered)."""
    x = Setup(resolve(parse_scenario(scenario)))
    stage = x.stages[0]
    m = coordinator._model(x.counts, stage)
    events = coordinator._step(m, x.checkpointed(stage))
    replay = coordinator._Replay(m, events, MAX_LIVE_PARAMETERS, coordinator.MAX_REUSE_DISTANCE,
                                 coordinator.prefetch_bucket(x.counts.arch.hidden_size))
    out = []
    for kind, mod in events:
        if kind in "FB":
            replay.fetch(mod)
            out.append((kind, replay.gathered))
        else:
            replay.release(mod, forward=kind == "f")
    return out


@pytest.mark.parametrize("case", sorted(json.loads(COORDINATOR.read_text())))
def test_the_replay_matches_deepspeed_s_own_coordinator(case: str) -> None:
    """Every fetch of the traced step (validation/coordinator_log.py: DeepSpeed 0.19.8's
    coordinator wrapped), with what it leaves gathered or in flight, is the replay's: the same
    modules in the same order, the same prefetches, the same releases kept for reuse (dense,
    checkpointed, a model under the limit, Mixtral's leaf MoE block, DeepSeek-V3's experts)."""
    scenario, _ = traced_case(case)
    recorded = [(kind, n) for kind, _, n in json.loads(COORDINATOR.read_text())[case]
                if kind in "FB"]
    assert _replayed(scenario) == recorded
