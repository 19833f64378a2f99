"""DeepSpeed's ZeRO-Offload: what stays on the GPU when the optimizer steps on the host, each
claim checked by hand and against the traced engine (DeepSpeed 0.19.8)."""

from __future__ import annotations

import pytest
from traced import traced_case  # tests/ is on sys.path (rootdir conftest)

from calc import estimate
from calc.peak import stage_peak
from calc.scenario import parse_scenario, resolve
from calc.setup import Setup
from calc.states import model_states, partition_tensors


def _setup(zero: int, gas: int = 1, dp: int = 2, model: str = "mistral-7b") -> Setup:
    return Setup(resolve(parse_scenario({
        "model": model, "training": {"mixed_precision": "master", "seq_len": 2048,
                                     "gradient_accumulation_steps": gas},
        "parallelism": {"dp": dp, "zero": zero, "offload_optimizer": True}})))


@pytest.mark.parametrize("zero", [1, 2])
def test_stages_1_2_keep_a_largest_parameter_buffer_all_step(zero: int) -> None:
    """stage_1_and_2.py allocates temp_grad_buffer_for_gpu_offload, the size of the largest
    parameter, with the optimizer: it is on the GPU in the first forward and at the step,
    where nothing else of the optimizer is."""
    x = _setup(zero)
    ms = model_states(x, x.stages[0])
    largest = 32768 * 4096  # Mistral 7B's embedding
    assert [t.bytes for t in ms.resident] == [2 * largest]
    assert not ms.optimizer_states and ms.step_gradients.bytes == 0
    r = estimate({"model": "mistral-7b", "training": {"mixed_precision": "master"},
                  "parallelism": {"dp": 2, "zero": zero, "offload_optimizer": True}})
    for phase in ("forward", "optimizer_step"):
        assert r.as_dict()["phases"][phase]["components"]["gradients"] == 2 * largest


def test_stage_2_accumulating_keeps_the_partition_s_big_gradients_through_a_backward() -> None:
    """Under gradient accumulation a backward before the last keeps the whole gradients of the
    tensors its rank's share touches that are larger than the reduce bucket (h^2), until its
    end, cloning the last of them (the embedding's) as its hook runs; the last backward keeps
    none, nor does any forward (traced: Mistral 7B, dp 2, two micro-batches: 19.53 GiB)."""
    x = _setup(2, gas=2)
    ms = model_states(x, x.stages[0])
    big = sum(t for t in partition_tensors(ms.local.ordered, 2)[1] if t > 4096**2)
    assert ms.gradients.bytes == 2 * big and ms.per_backward
    sp = stage_peak(x, x.stages[0], detail=True)
    end = next(m for m in sp.moments if m.name == "backward.embedding")
    assert end.breakdown["gradients/offload_accumulating"] == 2 * big
    assert end.breakdown["temporaries/offload_clone"] == 2 * 32768 * 4096
    forward = next(m for m in sp.moments if m.name == "forward.loss")
    assert not any(k.startswith("gradients/offload_acc") for k in forward.breakdown)
    scenario, traced = traced_case(
        "mistral-7b_b1_s2048_master_flash_acfull_gas2_deepspeed-zero2x2_offload-optimizer")
    assert estimate(scenario).peak_bytes == pytest.approx(traced["peak_bytes"], rel=0.005)


def test_stage_1_keeps_every_gradient_across_micro_batches() -> None:
    """ZeRO-1 keeps every gradient whole on the GPU until the last backward, offload or not:
    a later micro-batch's forward starts beside all of them (traced: Qwen2.5 1.5B, two
    micro-batches, 2.875 GiB of gradients in the second forward)."""
    x = _setup(1, gas=2, model="qwen2.5-1.5b", dp=4)
    ms = model_states(x, x.stages[0])
    assert ms.gradients.bytes == 2 * x.counts.total and not ms.per_backward
    scenario, traced = traced_case(
        "qwen2.5-1.5b_b2_s1024_master_flash_acfull_gas2_deepspeed-zero1x4_offload-optimizer")
    r = estimate(scenario).as_dict()
    assert r["phases"]["forward"]["components"]["gradients"] >= 2 * x.counts.total
    assert r["phases"]["forward"]["peak_bytes"] == pytest.approx(
        traced["phases"]["forward"], rel=0.005)


def test_stage_3_offload_norms_the_top_layer_s_first_reduced_partition_in_fp64() -> None:
    """ZeRO-Offload at stage 3: the top layer's down projection's gradient fills the reduce
    bucket (h^2 elements) alone; when up's arrives the bucket is reduced, its partition copied
    back to the GPU and normed in fp64, beside both gradients and every activation (traced: a
    random run on Llama 3.2 1B's width, eager, one rank, -5.1% without the moment)."""
    scenario, traced = traced_case(
        "llama-3.2-1b-v1k_b1_s512_master_eager_padded_deepspeed-zero3x1_offload-optimizer")
    r = estimate(scenario)
    assert r.stage.peak.name == "backward.offload_reduce"
    down = 2048 * 8192
    assert r.as_dict()["breakdown"]["temporaries/offload_reduce"] == down * 2 + 8 * down
    assert r.peak_bytes == pytest.approx(traced["peak_bytes"], rel=0.01)


def test_zero3_has_released_the_mlp_s_weights_by_the_top_layer_s_eager_softmax() -> None:
    """DeepSpeed's ZeRO-3 releases a module's gathered weights once its backward ran: by the top
    layer's eager softmax backward (its widest moment) the output projection's and the MLP's
    are gone; the MLP's own moment, earlier, still has them (traced: Mistral's width over four
    ranks, +2.8% counting them at the softmax)."""
    scenario, traced = traced_case("mistral-7b-4L-v1k_b1_s2048_master_eager_deepspeed-zero3x4")
    x = Setup(resolve(parse_scenario(scenario)))
    peak = stage_peak(x, x.stages[0], detail=True)
    last = {m.name: m for m in peak.moments}["backward.last_layer"]
    # the softmax's moment, 368 MiB of weights released (gate, up, down, o_proj in bf16), is
    # below the MLP's: the top layer's widest is its MLP's backward, beside them all
    assert peak.layers is not None and peak.layers.widest.mlp_backward is not None
    assert last.parts[4].values[0] == peak.layers.widest.mlp_backward.bytes
    assert last.breakdown["temporaries/gathered_params"] == \
        model_states(x, x.stages[0]).live.backward_top * 2
    assert estimate(scenario).peak_bytes == pytest.approx(traced["peak_bytes"], rel=0.005)


def test_stage_2_under_accumulation_norms_the_embedding_s_piece_at_the_last_backward() -> None:
    """ZeRO-Offload at stage 2 with two micro-batches: the step's last backward ends with the
    untied embedding's gradient whole and its piece of rank 0's share (the first tensor) normed
    in fp64 on the GPU, as at stage 1 (traced: a random run, Llama 3.1 8B's width on two
    ranks, -4.2% `validated` without it)."""
    scenario, traced = traced_case(
        "llama-3.1-8b-4L_b1_s1024_amp_eager_acfull_gas2_deepspeed-zero2x2_offload-optimizer_a100")
    r = estimate(scenario)
    assert r.stage.peak.name == "backward.offload_embedding_norm"
    embedding = 128256 * 4096
    assert r.as_dict()["breakdown"]["temporaries/offload_reduce"] == 8 * embedding
    assert r.peak_bytes == pytest.approx(traced["peak_bytes"], rel=0.001)


@pytest.mark.parametrize("case", [
    "qwen2.5-7b-4L-v1k_b2_s512_amp-fp16_flash_deepspeed-zero1x4_offload-optimizer",
    "llama-3.1-8b-4L-v1k_b1_s1024_master_flash_deepspeed-zero1x2_offload-optimizer"])
def test_stage_1_norms_the_widest_piece_of_rank_0_s_share(case: str) -> None:
    """Stage 1 norms each tensor's piece of rank 0's share in fp64 in order after the
    backward, each gradient sent to the host once normed: with a 1K vocabulary the first MLP
    weight's piece outweighs the embedding's, less the gradients gone before it (traced: the
    step's peak; counted at the embedding, -4.6% and -7.8%)."""
    scenario, traced = traced_case(case)
    r = estimate(scenario).as_dict()
    assert r["peak_moment"] == "backward.offload_embedding_norm"
    assert r["peak_bytes"] == pytest.approx(traced["peak_bytes"], rel=0.001)


def test_zero3_offload_s_first_reduce_at_the_up_projection_under_amp() -> None:
    """ZeRO-Offload at stage 3 under amp on one rank: the down projection's gradient, over the
    reduce bucket, is reduced as the up projection's arrives. Its bucket travelled in bf16, so
    the reduced partition is cast to the fp32 accumulation dtype beside its copy on the GPU and
    the fp64 norm (16 bytes an element); the MLP's backward has freed the down projection's
    input and the product's two factors, the activated gate's gradient waiting (traced: a
    Mistral width, -2.71% with one fp32 copy and every activation)."""
    from calc.peak import OFFLOAD_AT_REDUCE, OFFLOAD_REDUCE
    scenario, traced = traced_case(
        "mistral-7b-4L-v1k_b1_s2048_amp_flash_deepspeed-zero3x1_offload-optimizer")
    x = Setup(resolve(parse_scenario(scenario)))
    peak = max(stage_peak(x, x.stages[0], True).moments, key=lambda m: m.bytes)
    assert peak.name == "backward.offload_reduce"
    terms = {t.formula: t for p in peak.parts if p is not None
             for t, _ in getattr(p, "items", ((p, 1),))}
    down = 4096 * 14336
    assert terms[OFFLOAD_REDUCE].bytes == down * (4 + 4 + 8)
    assert terms[OFFLOAD_AT_REDUCE].bytes == 2048 * 4096 * (4 + 4) - 2 * 2048 * 14336 * 2
    assert estimate(scenario).peak_bytes == pytest.approx(traced["peak_bytes"], rel=0.002)


@pytest.mark.parametrize("case", [
    "qwen3-8b-4L_b1_s1024_amp_flash_deepspeed-zero3x2_offload-optimizer",
    "llama-3.1-8b-4L_b1_s1024_amp_flash_acfull_deepspeed-zero3x2_offload-optimizer",
])
def test_zero3_offload_reduces_an_untied_head_s_gradient_at_the_top_layer(case) -> None:
    """ZeRO-Offload at stage 3: an untied head's gradient enters the reduce bucket first, over
    it alone; the top layer's down projection's, arriving next, overflows it, so the head's
    partition is reduced, copied back, cast and normed in fp64 beside both gradients whole and
    every activation, the top layer's recomputed where it is checkpointed (traced: -9.2% and
    -27.5% with only the layer's own reduces)."""
    scenario, traced = traced_case(case)
    r = estimate(scenario)
    assert r.peak.name == "backward.offload_reduce"
    assert r.peak_bytes == pytest.approx(traced["peak_bytes"], rel=0.005)
