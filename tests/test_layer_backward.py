"""A decoder layer's backward, op by op as the traces show it: the last projection runs first
and frees its input, its new weight gradient is added in place, the step's first backward has
written the head's and that projection's gradients, and under FSDP2 the first-layer moments
are the second layer's, the root's gradients unsharded beside them. Each is checked against
its traced case and a count by hand."""

from __future__ import annotations

import pytest
from traced import traced_case  # tests/ is on sys.path (rootdir conftest)

from calc.peak import Moment, layers, stage_peak
from calc.scenario import parse_scenario, resolve
from calc.setup import Setup
from calc.states import model_states


def _traced(case_id: str) -> tuple[Setup, dict]:
    scenario, traced = traced_case(case_id)
    return Setup(resolve(parse_scenario(scenario))), traced


def _moment(x: Setup, index: int, name: str) -> Moment:
    return next(m for m in stage_peak(x, x.stages[index], True).moments if m.name == name)


def test_the_last_projection_frees_its_input_before_the_gating_product_s_backward() -> None:
    """GPipe, pure bf16, full checkpointing, a middle rank: at the peak (the gating product's
    backward) down_proj's input is already freed; three MLP-wide gradients sit beside gate,
    silu and up. Counting the input too put the rank 3.3% over."""
    x, traced = _traced("qwen2.5-7b-8L_b1_s4096_pure_flash_acfull_gas4_pp4-gpipe")
    act = layers(x, x.stages[1], False).widest
    T, f = 4096, 18944
    assert act.last_input == T * f * 2
    peak = stage_peak(x, x.stages[1], False).peak
    assert peak.bytes == pytest.approx(traced["pipeline_stages"]["middle"]["peak_bytes"],
                                       rel=0.01)


def test_eager_attention_keeps_its_widest_moment_whole() -> None:
    """Eager attention's widest backward moment can be the softmax's, after the MLP's: the
    down projection's input is not taken off it."""
    x, _ = _traced("llama-3.1-8b-4L_b1_s8192_amp_eager")
    assert layers(x, x.stages[0], False).widest.last_input == 0


def test_a_later_micro_batch_adds_the_last_projection_s_new_gradient_in_place() -> None:
    """Pure bf16, FSDP2 x PP4 DualPipeV, the last rank: at down_proj's backward its input is
    alive beside its input's gradient and its new weight gradient, which autograd then adds
    in place. With h f > T f that is wider than the gating product's moment by h f - T f."""
    x, traced = _traced("qwen2.5-7b-8L_b1_s2048_pure_flash_gas8_fsdp2_pp4-dualpipev")
    T, f, h = 2048, 18944, 3584
    last = x.stages[-1]  # rank 3, its two neighbouring stages
    assert last.index == 3
    act = layers(x, last, False).widest
    moment = _moment(x, -1, "backward.first_layer")
    gating = act.backward_transient.bytes - T * f * 2  # three MLP-wide gradients, not four
    assert moment.breakdown["temporaries/layer_backward"] == gating + (h - T) * f * 2
    peak = stage_peak(x, last, False).peak
    assert peak.bytes == pytest.approx(traced["pipeline_stages"]["last"]["peak_bytes"], rel=0.01)


@pytest.mark.parametrize("case", [
    "qwen2.5-7b-4L-v1k_b2_s1024_autocast_flash_gas2",
    "mistral-7b-4L-v1k_b1_s2048_autocast_flash_gas4_pp2"])
def test_bf16_weights_under_autocast_add_the_new_gradient_in_place_too(case: str) -> None:
    """Low-precision weights under autocast have no autocast copy whose gradient is cast
    after: a later micro-batch's down_proj computes its new weight gradient in bf16 and adds
    it in place, beside the accumulated one (held out: -0.55% and -1.12% without it; read off
    random runs under TP x PP and pipelining, -1.95 .. -0.10%)."""
    x, traced = _traced(case)
    assert x.n.autocast and not x.n.weight_copies
    stage = x.stages[0]
    act = layers(x, stage, False).widest
    moment = _moment(x, 0, "backward.last_layer")
    new = model_states(x, stage).local.per_layer_last * x.n.grad
    term = next(t for p in moment.parts if p is not None
                for t, _ in (p.items if hasattr(p, "items") else [(p, 1)])
                if t.id == "peak.layer_backward")
    X_l, _, D_l, W_n = term.values  # (g_i: the receive buffer, where the stage sends)
    assert (X_l, D_l, W_n) == (act.backward_transient.bytes, act.last_input, new) and new
    assert x.n.grad == 2  # (the weights' bf16)
    peak = max(stage_peak(x, st, False).peak.bytes for st in x.stages)
    assert peak == pytest.approx(traced["peak_bytes"], rel=0.001)


def test_the_first_backward_has_written_the_head_s_and_the_last_projection_s_gradients() -> None:
    """GPipe's last rank under amp: at its top layer's gating product in the first backward the
    head's fp32 gradient and down_proj's are written; the other micro-batches' head
    activations stay, this one's are freed (it was -0.5% with the one and +0.5% with both)."""
    x, traced = _traced("llama-3-8b-8L-v1k_b1_s4096_amp_flash_gas8_pp4-gpipe")
    last = x.stages[-1]
    moment = _moment(x, -1, "backward.last_layer")
    local = model_states(x, last).local
    assert moment.breakdown["gradients/weights"] == (1024 * 4096 + 4096 + 4096 * 14336) * 4
    ly = layers(x, last, False)
    head = ly.saved.bytes - ly.body.bytes
    held = x.flight(last).held
    assert moment.breakdown["activations/head"] == (held - 1) * head
    assert local.head_trainable == 1024 * 4096 + 4096
    assert stage_peak(x, last, False).peak.bytes == pytest.approx(
        traced["pipeline_stages"]["last"]["peak_bytes"], rel=0.005)


def test_fsdp2_peaks_at_the_second_layer_with_the_root_s_gradients_unsharded() -> None:
    """Mistral-7B, FSDP2 x 8, pure bf16, full checkpointing: the peak is the second layer's
    backward, the first prefetched beside it and keeping its input; the root unit (the whole
    model's fully_shard) keeps the head's gradient unsharded until its post-backward at the
    end, and writes none of its shard before (it was -2.1%)."""
    x, traced = _traced("mistral-7b_b1_s2048_pure_flash_acfull_fsdp8")
    ms = model_states(x, x.stages[0])
    V, H, T = 32768, 4096, 2048
    assert ms.root_grads is not None and ms.root_grads.bytes == (V * H + H) * 2
    late = _moment(x, 0, "backward.first_layer_late")
    assert late.breakdown["temporaries/root_grads"] == (V * H + H) * 2
    assert late.breakdown["activations/layer_below"] == T * H * 2
    root_shard = -(-ms.local.root_trainable // 8)
    layer_shard = -(-ms.local.per_layer_trainable // 8)
    assert late.breakdown["gradients/weights"] == \
        ms.gradients.bytes - (root_shard + 2 * layer_shard) * 2
    assert stage_peak(x, x.stages[0], False).peak.bytes == pytest.approx(traced["peak_bytes"],
                                                                          rel=0.005)


@pytest.mark.parametrize("change", [
    {"finetuning": "lora"},  # a frozen root has no gradients
    {"gradient_accumulation_steps": 4, "pp": 2},  # counted with every unsharded gradient
])
def test_the_root_s_unsharded_gradients_only_where_fsdp2_reduces_them_last(change: dict) -> None:
    scenario = {"model": "llama-3.1-8b", "training": {"mixed_precision": "pure"},
                "parallelism": {"dp": 8, "zero": 3}}
    pp = change.pop("pp", 1)
    scenario["training"].update(change)
    scenario["parallelism"]["pp"] = pp
    x = Setup(resolve(parse_scenario(scenario)))
    assert model_states(x, x.stages[0]).root_grads is None
