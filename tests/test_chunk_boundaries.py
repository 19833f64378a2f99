"""Ranks of several chunks (interleaved 1F1B, ZBV, DualPipeV): the orders torch runs, which
chunks' micro-batches a rank holds in each state, and what crosses each chunk's boundary (its
input received or kept, its output kept in fwd_cache or passed to a neighbour on the rank)."""

from __future__ import annotations

import pytest
from traced import traced_case  # tests/ is on sys.path (rootdir conftest)

from calc import estimate
from calc.activations import head_output_grads
from calc.peak import _chunk_units, layers, stage_peak
from calc.scenario import parse_scenario, resolve
from calc.schedule_order import (
    chunk_mixes,
    dualpipev_order,
    interleaved_order,
    zero_bubble_held,
    zero_bubble_order,
)
from calc.setup import Setup

MiB = 2**20


@pytest.mark.parametrize(("pp", "v", "m"), [(2, 2, 4), (4, 2, 8), (4, 2, 6), (4, 3, 12),
                                            (8, 4, 32), (4, 2, 3)])
def test_the_interleaved_order_runs_each_chunk_micro_batch_forward_then_backward(
        pp: int, v: int, m: int) -> None:
    """Every chunk runs each of its m micro-batches' forward once, then its backward; the
    warm-up is torch's `_get_warmup_ops`, in rounds of m // max(1, m // pp) micro-batches."""
    per_round = m // max(1, m // pp)
    for rank in range(pp):
        order = interleaved_order(pp, v, m, rank)
        seen: dict[tuple[int, str], int] = {}
        for chunk, kind in order:
            if kind == "B":
                assert seen.get((chunk, "F"), 0) > seen.get((chunk, "B"), 0)
            seen[chunk, kind] = seen.get((chunk, kind), 0) + 1
        assert seen == {(c, k): m for c in range(v) for k in "FB"}
        warm = next(k for k, (_, kind) in enumerate(order) if kind == "B")
        assert warm == min((v - 1) * per_round + 2 * (pp - 1 - rank) + 1, m * v)


@pytest.mark.parametrize(("pp", "v", "m"), [(2, 2, 4), (4, 2, 8), (4, 3, 12), (8, 4, 32)])
def test_the_interleaved_walk_holds_megatron_s_warm_up(pp: int, v: int, m: int) -> None:
    """Where pp divides the micro-batches (the scenario requires it), the walked order holds
    Megatron-LM's count at its fullest, min(2 (pp - i - 1) + (v - 1) pp + 1, m v)."""
    x = Setup(resolve(parse_scenario({
        "model": "llama-3.1-8b", "training": {"gradient_accumulation_steps": m},
        "parallelism": {"pp": pp, "pipeline_schedule": "interleaved_1f1b",
                        "virtual_stages": v}})))
    for st in x.stages:
        mixes = chunk_mixes("interleaved_1f1b", pp, v, m, st.index)
        assert max(sum(mix.alive) for mix in mixes) == x.flight(st).held


@pytest.mark.parametrize(("pp", "m"), [(2, 4), (4, 8), (2, 8), (4, 16), (3, 7)])
def test_the_dualpipev_order_backs_every_forward_once(pp: int, m: int) -> None:
    """Each chunk-micro-batch runs its forward, then one whole backward or an input backward
    and later its weight backward; DualPipeV's steady phase holds 2 pp + 1 on every rank."""
    for rank in range(pp):
        seen: dict[tuple[int, str], int] = {}
        for chunk, kind in dualpipev_order(pp, m, rank):
            seen[chunk, kind] = seen.get((chunk, kind), 0) + 1
        for chunk in (0, 1):
            assert seen[chunk, "F"] == m
            assert seen.get((chunk, "B"), 0) + seen.get((chunk, "I"), 0) == m
            assert seen.get((chunk, "I"), 0) == seen.get((chunk, "W"), 0)
        top = max(sum(mix.alive) for mix in chunk_mixes("dualpipev", pp, 1, m, rank))
        assert top == 2 * pp + 1


def test_interleaved_first_rank_keeps_its_outputs_and_the_embedding_chunk_s_input() -> None:
    """llama-3-8b, 8 layers, interleaved 1F1B over 4 ranks x 2 chunks, 8 micro-batches, amp:
    rank 0 holds stage 0 (the embedding's) and stage 4. At its backward's peak it holds 11
    chunk-micro-batches, 8 of stage 0; each keeps its output (fwd_cache, T h fp32 = 64 MiB),
    and stage 4's input is its receive buffer, not a second copy. The estimate had neither:
    -1.80% (365 MiB under, about 6 outputs); traced within 0.5% now."""
    scenario, traced = traced_case("llama-3-8b-8L-v1k_b1_s4096_amp_flash_gas8_pp4-interleaved-v2")
    x = Setup(resolve(parse_scenario(scenario)))
    assert max(sum(mix.alive) for mix in chunk_mixes("interleaved_1f1b", 4, 2, 8, 0)) == 11
    first = stage_peak(x, x.stages[0], True)
    peak = first.peak
    assert peak.breakdown["activations/stage_output"] == 11 * 64 * MiB  # 10 kept + the running
    assert peak.bytes == pytest.approx(traced["pipeline_stages"]["first"]["peak_bytes"],
                                       rel=0.005)
    last = stage_peak(x, x.stages[-1], True).peak  # stage 7 keeps the head's, sends nothing
    assert last.bytes == pytest.approx(traced["pipeline_stages"]["last"]["peak_bytes"], rel=0.015)


def test_a_v_s_last_rank_passes_its_first_stage_s_output_to_its_second() -> None:
    """DualPipeV over 4 ranks: rank 3 holds stages 3 and 4, neighbours. torch passes stage 3's
    output to stage 4 on the rank (set_local_fwd_input): it becomes stage 4's receive buffer,
    not a tensor beside it, so only stage 4's outputs (sent to rank 2's stage 5) are kept.
    Rank 1 (stages 1 and 6) keeps both and is evaluated apart (traced: rank 1 -0.1%, rank 3
    +0.2%; with rank 3 counted like rank 1, +1.1%)."""
    scenario, traced = traced_case("qwen2.5-7b-8L_b1_s2048_pure_flash_gas8_fsdp2_pp4-dualpipev")
    x = Setup(resolve(parse_scenario(scenario)))
    assert [st.index for st in x.stages] == [0, 1, 3]
    unit = 2048 * 3584 * 2  # T h bf16
    middle, last = (stage_peak(x, st, True) for st in x.stages[1:])
    moments = {m.name: m for m in last.moments}
    kept = moments["backward.first_layer"].breakdown["activations/stage_output"]
    assert 0 < kept < middle.phases["backward"].breakdown["activations/stage_output"]
    assert kept % unit == 0
    for name, st in (("middle", middle), ("last", last)):
        assert st.peak.bytes == pytest.approx(traced["pipeline_stages"][name]["peak_bytes"],
                                              rel=0.005)


def test_the_head_s_chunk_runs_no_embedding_backward() -> None:
    """ZBV's rank 0 holds the embedding's stage and the head's: a state whose running backward
    is the head chunk's has no embedding backward moment (its logits would otherwise be
    counted beside the embedding's gradient: +1.6% on the traced qwen2.5 ZBV rank)."""
    scenario, traced = traced_case("qwen2.5-7b-8L_b1_s4096_pure_flash_acfull_gas4_pp2-zbv")
    x = Setup(resolve(parse_scenario(scenario)))
    first = stage_peak(x, x.stages[0], True)
    embedding = {m.name: m for m in first.moments}["backward.embedding"]
    assert "logits/loss" not in embedding.breakdown
    assert first.peak.bytes == pytest.approx(traced["pipeline_stages"]["first"]["peak_bytes"],
                                             rel=0.01)


@pytest.mark.parametrize(("pp", "m"), [(2, 4), (4, 8), (4, 4), (4, 2), (8, 16)])
def test_the_zero_bubble_order_runs_weights_rank_input_backwards_late(pp: int, m: int) -> None:
    """torch's zero bubble, one stage a rank: each micro-batch's forward, input backward and
    weight backward in that order; at the steady input backwards rank i holds min(pp, m), i of
    them waiting for their weight backward (the first rank: 1F1B's pp). With fewer
    micro-batches than ranks every weight backward waits for the end (pp 4, m 2: rank 1's second
    input backward has the first's waiting)."""
    for rank in range(pp):
        order = [kind for _, kind in zero_bubble_order(pp, m, rank)]
        assert order.count("F") == order.count("I") == order.count("W") == m
        done = {"F": 0, "I": 0, "W": 0}
        for kind in order:
            done[kind] += 1
            assert done["F"] >= done["I"] >= done["W"]
        top = zero_bubble_held(pp, m, rank)[0]
        assert top.alive == min(pp, m)
        assert top.waiting == (min(pp, m) - min(pp - rank, m) if m >= pp else min(rank, m - 1))


def test_a_split_backward_leaves_every_input_gradient_in_its_input_s_grad() -> None:
    """torch's stage_backward_input sets the stage input's .grad to its gradient and keeps it
    (the whole backward clears it), so zero bubble's last rank over 4 ranks and 8
    micro-batches holds 7 input gradients (T h bf16, 32 MiB) at its last steady input
    backward: traced 7, and the rank within 0.5% (it was -1.2% with one)."""
    scenario, traced = traced_case("llama-3-8b-8L-v1k_b1_s4096_pure_flash_gas8_pp4-zb")
    x = Setup(resolve(parse_scenario(scenario)))
    last = x.stages[-1]
    assert last.index == 3 and x.flight(last).inputs == 7
    peak = stage_peak(x, last, True).peak
    assert peak.breakdown["temporaries/stage_input_grad"] == 7 * 32 * MiB
    assert peak.bytes == pytest.approx(traced["pipeline_stages"]["last"]["peak_bytes"], rel=0.005)


def test_a_sending_stage_s_top_output_gradient_is_its_receive_buffer() -> None:
    """Zero bubble over 4 ranks, a middle rank: a micro-batch waiting for its weight backward
    keeps each projection's output gradient, but its top layer's down_proj output gradient is
    the gradient the stage received (the residual add passes it on as it is), already counted
    as the receive buffer: one T h less a micro-batch (traced: +1.04% with it, +0.30% without;
    the last rank, whose top gradient comes from the final norm, keeps it)."""
    scenario, traced = traced_case("llama-3-8b-8L-v1k_b1_s4096_pure_flash_gas8_pp4-zb")
    x = Setup(resolve(parse_scenario(scenario)))
    middle, last = x.stages[1:]
    assert middle.index == 2
    T, h, f, kv = 4096, 4096, 14336, 1024
    per_layer = (h + 2 * kv + h + 2 * f + h + 2 * h) * T * 2  # 7 projections and 2 norms, bf16
    waiting = x.flight(middle).waiting + 1  # and the running input backward's own
    peak = stage_peak(x, middle, True).peak
    assert peak.breakdown["temporaries/output_grads"] == waiting * (2 * per_layer - T * h * 2)
    assert peak.bytes == pytest.approx(traced["pipeline_stages"]["middle"]["peak_bytes"],
                                       rel=0.005)
    kept = stage_peak(x, last, True).peak.breakdown["temporaries/output_grads"]
    head = head_output_grads(x).bytes
    assert kept == (x.flight(last).waiting + 1) * (2 * per_layer + head)


def test_a_v_s_second_chunk_has_written_its_gradients_before_its_first() -> None:
    """DualPipeV's rank 0 holds the first stage and the last (the head's). Its second chunk's
    backward runs first, so at a later micro-batch's loss that chunk's gradients are written
    and the first chunk's are not: Qwen3 0.6B (28 layers, 7 a stage), pure bf16, the seven
    layers' and the tied head's, counted by hand from the model's shapes (h 1024, q 2048, kv
    1024, MLP 3072, vocabulary 151936). Counted with none written: -2.97% against its trace."""
    scenario, traced = traced_case("qwen3-0.6b_b1_s1536_pure_eager_adam-fused_gas4_pp2-dualpipev")
    layer = 1024 * 2048 * 2 + 1024 * 1024 * 2 + 2 * 128 + 3 * 1024 * 3072 + 2 * 1024
    head = 151936 * 1024 + 1024  # the tied matrix and the final norm
    r = estimate(scenario)
    backward = r.as_dict()["phases"]["backward"]
    assert r.peak_moment == "backward.loss_grad"
    assert backward["components"]["gradients"] == (7 * layer + head) * 2
    assert r.peak_bytes == pytest.approx(traced["peak_bytes"], rel=0.005)


def test_a_weight_pass_is_read_at_its_own_action_with_what_is_alive_then() -> None:
    """DualPipeV's rank 1 ends ... I(1), I(0), W(1), W(0): its second chunk's weight pass runs
    before its first's and frees that micro-batch, so the first chunk's weight pass runs beside
    none of the second chunk's (read at the input pass before it, it had one beside it)."""
    weights = {m.running: m for m in chunk_mixes("dualpipev", 2, 1, 4, 1) if m.weight}
    assert weights[1].alive == (1, 1) and weights[0].alive == (1, 0)
    assert weights[0].waiting == 0 and weights[1].waiting == 1


def test_each_of_a_v_s_chunks_keeps_what_its_own_layers_save() -> None:
    """ZBV over four one-layer stages with every second layer checkpointed: rank 1 holds layer
    1 (plain) and layer 2 (checkpointed); a micro-batch of the first keeps the whole layer, of
    the second its input only (traced: 309 and 101 MiB a forward). Counted as the first
    chunk's, and the weight pass beside micro-batches its order had freed: +13.83%."""
    scenario, traced = traced_case("qwen2.5-1.5b-4L-v1k_b1_s1536_pure_flash_acfull-every2_gas4_pp2-zbv")
    x = Setup(resolve(parse_scenario(scenario)))
    stage = x.stages[-1]
    unit = (layers(x, stage.unit, False), layers(x, stage.unit, False, receives=True))
    plain, checkpointed = _chunk_units(x, stage, unit, False)
    assert plain is unit and checkpointed[0].flags == (True,)
    assert checkpointed[1].saved.bytes < plain[1].saved.bytes / 10
    r = estimate(scenario)
    assert r.peak_moment == "backward.weight_pass"
    assert r.peak_bytes == pytest.approx(traced["peak_bytes"], rel=0.005)
