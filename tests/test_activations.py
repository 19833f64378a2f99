"""Activation formulas against their published sources."""

from typing import Any

import pytest
from traced import traced_case  # tests/ is on sys.path (rootdir conftest)

from calc import estimate
from calc.activations import (
    DEQUANT_RECOMPUTE,
    decoder_layer,
    down_adapter_forward,
    ring_attention_backward,
)
from calc.architecture import Architecture
from calc.megatron import megatron_layer
from calc.peak import layers
from calc.scenario import parse_scenario, resolve
from calc.setup import Setup, setup

# GPT-3 style: 4h GeLU MLP, multi-head attention, dropout everywhere (Korthikanti et al.'s setup)
GPT = Architecture(model_type="gpt2", hidden_size=2048, num_hidden_layers=4,
                   num_attention_heads=16, intermediate_size=8192, vocab_size=50257,
                   max_position_embeddings=4096, attention_dropout=0.1, resid_pdrop=0.1)


def _setup(arch: Architecture, training: dict[str, Any], parallelism: dict[str, Any]) -> Setup:
    return setup(resolve(parse_scenario({"model": arch.model_dump(), "training": training,
                                         "parallelism": parallelism})))


def _megatron_layer_bytes(tp: int, sp: bool, s: int = 2048, b: int = 4) -> int:
    x = _setup(GPT, {"implementation": "megatron", "attention": "eager", "seq_len": s,
                     "micro_batch_size": b, "mixed_precision": "master"},
               {"tp": tp, "sequence_parallel": sp})
    return megatron_layer(x, x.counts.dense_layer).total


@pytest.mark.parametrize(("tp", "sp"), [(1, False), (2, False), (8, False), (8, True)])
def test_megatron_layer_matches_korthikanti_table2(tp: int, sp: bool) -> None:
    """Korthikanti et al. 2022, Table 2: sbh(10 + 24/t + 5as/(ht)); with SP sbh/t (34 + 5as/h)."""
    s, b, h, a = 2048, 4, GPT.hidden_size, GPT.num_attention_heads
    if sp:
        expected = s * b * h / tp * (34 + 5 * a * s / h)
    else:
        expected = s * b * h * (10 + 24 / tp + 5 * a * s / (h * tp))
    assert _megatron_layer_bytes(tp, sp) == pytest.approx(expected, rel=1e-9)


def test_flash_attention_removes_quadratic_term() -> None:
    arch = Architecture(hidden_size=1024, num_hidden_layers=2, num_attention_heads=8,
                        intermediate_size=2816, vocab_size=1000, max_position_embeddings=1 << 16)
    per_token, weights = [], []
    for s in (1024, 4096):
        x = _setup(arch, {"seq_len": s}, {})
        act = decoder_layer(x, x.counts.dense_layer)
        per_token.append(act.total / s)
        weights.append(sum(t.bytes for t in act.weight_copies))
    # only the (sequence-independent) weight copies differ in per-token terms
    assert per_token[0] > per_token[1]
    assert weights[0] == weights[1]
    assert per_token[0] - weights[0] / 1024 == pytest.approx(per_token[1] - weights[1] / 4096)


LLAMA_2L = Architecture(model_type="llama", hidden_size=2048, num_hidden_layers=2,
                        num_attention_heads=32, num_key_value_heads=8, intermediate_size=8192,
                        vocab_size=128256, max_position_embeddings=1 << 17)


def test_lora_s_first_layer_keeps_nothing_ahead_of_its_adapters() -> None:
    """Under peft the frozen embedding's output needs no gradient, so the first layer's input
    norm and its q/k/v base projections build no autograd node: they keep neither the norm's
    fp32 input and rsqrt nor autocast's copies of the base weights, and lora_A not its weight
    copy (lora_B does). Counted by hand from the tensors autograd saved on the traced
    llama-3.2-1b-2L case (saved_tensors_hooks: 20,647,936 bytes fewer in layer 0 than in layer
    1, the shared rotary cos/sin, 524,288, booked on layer 0 there)."""
    x = _setup(LLAMA_2L, {"seq_len": 1024, "mixed_precision": "amp", "finetuning": "lora",
                          "lora_rank": 16}, {})
    layer = x.counts.dense_layer
    T, h, kv, r = 1024, 2048, 512, 16
    by_hand = T * h * 4 + T * 4 + (h * h + 2 * h * kv) * 2 + 3 * h * r * 2
    assert by_hand == 20_647_936 + 524_288
    assert decoder_layer(x, layer).total - decoder_layer(x, layer, True).total == by_hand
    assert x.frozen_input_layer(x.stages[0])
    full = _setup(LLAMA_2L, {"seq_len": 1024, "mixed_precision": "amp"}, {})
    checkpointed = _setup(LLAMA_2L, {"seq_len": 1024, "mixed_precision": "amp",
                                     "finetuning": "lora", "activation_checkpointing": "full"},
                          {})
    # full training trains the embedding; transformers' checkpointing makes its output
    # require grad (enable_input_require_grads)
    assert not full.frozen_input_layer(full.stages[0])
    assert not checkpointed.frozen_input_layer(checkpointed.stages[0])


def test_deepspeed_zero3_linear_keeps_a_frozen_projection_s_input() -> None:
    """DeepSpeed's ZeRO-3 replaces F.linear by LinearFunctionForZeroStage3, which saves input,
    weight and bias whatever needs a gradient: with adapters on the attention only, the frozen
    MLP keeps its input and down_proj's (traced: the held-out llama-3.1-8b-4L case, -3.71%
    before, these two T h and T f tensors a layer)."""
    training = {"seq_len": 2048, "mixed_precision": "master", "finetuning": "lora",
                "lora_targets": "attention"}
    z3 = _setup(LLAMA_2L, training, {"dp": 4, "zero": 3})
    z2 = _setup(LLAMA_2L, training, {"dp": 4, "zero": 2})
    layer = z3.counts.dense_layer
    assert z3.frozen_linear_inputs and not z2.frozen_linear_inputs
    T, h, f = 2048, 2048, 8192
    assert decoder_layer(z3, layer).total - decoder_layer(z2, layer).total == T * (h + f) * 2


def test_a_frozen_head_s_norm_backward_holds_the_gradients_full_training_frees() -> None:
    """The final norm's backward: four T h fp32 tensors over every saved activation. Full
    training has by then freed the head's saved input and the norm's normalised output; LoRA
    never kept them, and the head's input gradient and the norm's output gradient take their
    place (traced op by op, QLoRA on llama-3-8b-4L-v1k: 5 T h fp32 above the saved baseline
    at the peak, 0.06% from the estimate)."""
    from calc.activations import head_norm_backward
    training = {"seq_len": 4096, "mixed_precision": "autocast"}
    full = _setup(LLAMA_2L, training, {})
    lora = _setup(LLAMA_2L, {**training, "finetuning": "qlora"}, {})
    T, h = 4096, 2048
    a, b = head_norm_backward(full), head_norm_backward(lora)
    assert a is not None and b is not None
    assert (a.bytes, b.bytes) == (T * h * 16, T * h * (16 + 2 + 2))


def test_qlora_over_an_fp32_base_keeps_fp32_mlp_activations() -> None:
    """bitsandbytes' 4-bit layer casts its output back to its input's dtype: under amp the
    norms' outputs are fp32, so the frozen MLP's three saved tensors are too, and each adapter
    on q, k and v keeps autocast's own bf16 cast of its input (traced op by op on a
    llama-3-8b-shaped QLoRA layer: 579.2 MiB a layer, the estimate's to the byte; counted as
    under autocast, -27% at the step's peak)."""
    training = {"seq_len": 2048, "finetuning": "qlora"}
    amp = _setup(LLAMA_2L, {**training, "mixed_precision": "amp"}, {})
    low = _setup(LLAMA_2L, {**training, "mixed_precision": "autocast"}, {})
    T, h, f = 2048, 2048, 8192

    def terms(x: Setup, id: str) -> list[int]:
        return [t.bytes for t in decoder_layer(x, x.counts.dense_layer).saved if t.id == id]

    assert terms(amp, "act.mlp_gated") == [3 * T * f * 4]
    assert terms(low, "act.mlp_gated") == [3 * T * f * 2]
    assert terms(amp, "act.adapter_input") == [T * h * 2] * 3  # q, k, v: a cast each
    assert terms(low, "act.adapter_input") == [T * h * 2]  # bf16: x itself, once


def test_qlora_s_layer_moments_hold_the_dequantised_down_projection() -> None:
    """In forward and in backward bitsandbytes dequantises the whole 4-bit down projection to
    the compute dtype beside the gradients (traced: the forward's peak of an attention-only
    QLoRA in bf16, -3.1% without it)."""
    x = _setup(LLAMA_2L, {"seq_len": 512, "finetuning": "qlora", "lora_targets": "attention",
                          "mixed_precision": "autocast"}, {})
    act = decoder_layer(x, x.counts.dense_layer)
    T, h, f = 512, 2048, 8192
    assert act.forward_transient.id == "act.dequant_forward"
    # the product down_proj reads, the weight, the output, the layer's input, the residual
    # after attention and the MLP's input (no adapter keeps it)
    assert act.forward_transient.bytes == T * f * 2 + h * f * 2 + T * h * 2 + 3 * T * h * 2
    assert act.backward_transient.bytes >= h * f * 2


def test_the_last_layer_s_forward_holds_no_head_tensors_but_the_embedding_output() -> None:
    """The layers' forward runs before the head: the frozen fp32 head's autocast copy (LoRA
    under amp, V h 2 bytes) is not alive yet, while the model's forward holds the embedding's
    output (`inputs_embeds`), which LoRA's first layer does not keep (traced: a 405B-wide
    LoRA, +8.4% with the head's copy counted there; 70B- and 72B-wide held out, -0.00%)."""
    from calc.peak import stage_peak
    x = _setup(LLAMA_2L, {"seq_len": 512, "finetuning": "lora", "mixed_precision": "amp"}, {})
    moments = {m.name: m for m in stage_peak(x, x.stages[0], detail=True).moments}

    def ids(part: Any) -> set[str]:
        found = {getattr(getattr(part, "formula", None), "id", "")}
        for item, count in getattr(part, "items", ()) or ():
            if count > 0:
                found |= ids(item)
            else:
                found.discard(item.formula.id)
        return found

    forward = set().union(*(ids(p) for p in moments["forward.last_layer"].parts if p))
    loss = set().union(*(ids(p) for p in moments["forward.loss"].parts if p))
    assert "act.head_weight_copy" in loss and "act.head_weight_copy" not in forward
    assert "act.embedding_held" in forward and "act.embedding_held" not in loss


@pytest.mark.parametrize(("mp", "moment"), [("amp", "backward.fsdp_root"),
                                             ("pure", "backward.embedding")])
def test_fsdp2_s_root_on_two_ranks(mp: str, moment: str) -> None:
    """FSDP2's root post-backward on two ranks: its unsharded gradients released once copied
    into the reduce-scatter input, one still referenced beside the output shard (amp: -3.8%
    at the copy alone); in bf16 the copy is no wider, and the embedding's backward, beside the
    head's unsharded gradient in the same unit, is the peak (traced on whole 7-8B models)."""
    from calc.peak import stage_peak
    x = _setup(LLAMA_2L, {"seq_len": 256, "mixed_precision": mp}, {"dp": 2, "zero": 3})
    moments = {m.name: m for m in stage_peak(x, x.stages[0], detail=True).moments}
    assert max(moments.values(), key=lambda m: m.bytes).name == moment
    E = 128256 * 2048
    root = moments["backward.fsdp_root"].parts[-1]
    w_g, g = (2, 4) if mp == "amp" else (2, 2)
    R = 2 * E + 2048  # the embedding, the head, the final norm
    assert root.bytes == R * g + max(R * w_g, E * w_g + -(-R // 2) * g)


def test_a_recomputed_eager_layer_s_softmax_backward_follows_its_mlp_s() -> None:
    """Under full checkpointing too, eager attention's softmax backward runs after the MLP's
    backward freed the MLP's activations (traced: Phi-3 with LoRA +6.1% when counted beside
    them)."""
    x = _setup(LLAMA_2L, {"seq_len": 2048, "attention": "eager", "finetuning": "lora",
                          "mixed_precision": "autocast", "activation_checkpointing": "full"}, {})
    act = decoder_layer(x, x.counts.dense_layer)
    assert act.backward_transient.id == "act.attention_backward_layer"
    b, a, s = 1, 32, 2048
    assert act.backward_transient.bytes < b * a * s**2 * 6  # less what the MLP freed


def test_the_fused_loss_input_is_alive_through_its_forward() -> None:
    """Liger's fused linear cross-entropy takes the final norm's output and fills its gradient
    beside it during the forward: both T H wide (traced: the five chunked cases from -0.13% to
    -0.01% at their forward peak once the input is counted)."""
    from calc.logits import logits_memory
    x = _setup(LLAMA_2L, {"seq_len": 2048, "mixed_precision": "amp", "loss": "chunked"}, {})
    forward, kept = logits_memory(x)
    T, H, V = 2048, 2048, 128256
    chunk = 64  # tokens: next_power_of_2(ceil(T / ceil(V / H)))
    # beside what it keeps: its input (fp32 under amp), a chunk of bf16 logits, autocast's
    # two casts of the fp32 head weight, the per-token loss
    assert forward.bytes - kept.bytes == T * H * 4 + chunk * V * 2 + 2 * V * H * 2 + 4 * T


def _gemma3(**training: Any) -> Setup:
    return setup(resolve(parse_scenario({"model": "gemma-3-4b", "training": training})))


def test_gemma3_s_layer_types_follow_its_pattern_or_the_config() -> None:
    """transformers' Gemma3TextConfig: every sliding_window_pattern-th layer global (6 by
    default), the others within sliding_window; an explicit layer_types list wins, and a list
    of the wrong length names the field."""
    from calc.architecture import ConfigError, from_hf_config
    from calc.presets import models
    arch = models()["gemma-3-4b"].architecture()
    assert arch.sliding_window == 1024
    assert [i for i in range(34) if not arch.is_sliding_layer(i)] == [5, 11, 17, 23, 29]
    cfg = dict(models()["gemma-3-1b"].hf_config, num_hidden_layers=3)
    types = ["full_attention", "sliding_attention", "full_attention"]
    explicit = from_hf_config({**cfg, "layer_types": types})
    explicit = explicit[0] if isinstance(explicit, tuple) else explicit
    assert explicit.sliding_layers == (1,)
    with pytest.raises(ConfigError) as err:
        from_hf_config({**cfg, "layer_types": types[:2]})
    assert err.value.field == "hf_config.layer_types"


def test_a_sliding_layer_under_sdpa_keeps_the_mask_as_a_bias_and_k_v_repeated() -> None:
    """Once the sequence reaches the window transformers masks the sliding layers: SDPA's
    memory-efficient kernel keeps the mask as a bias in the compute dtype (b s s c) and K and
    V repeated to every query head (traced: Gemma 3 4B on 6 layers, 4K tokens, +48 MiB a
    sliding layer). Below the window no layer is masked."""
    x = _gemma3(seq_len=4096, finetuning="lora", mixed_precision="autocast")
    full, sliding = (decoder_layer(x, x.counts.dense_layer, sliding=s) for s in (False, True))
    T, a, k, d = 4096, 8, 4, 256
    assert sliding.total - full.total == T * T * 2 + 2 * T * (a - k) * d * 2 == 48 * 2**20
    assert x.sliding_sdpa and not _gemma3(seq_len=1000).sliding_sdpa


def _oss(**training: Any) -> Setup:
    from calc.presets import models
    arch = models()["gpt-oss-20b"].architecture()
    return _setup(arch, {"attention": "eager", **training}, {})


def test_gpt_oss_eager_softmax_keeps_the_sink_column_in_the_mask_s_dtype() -> None:
    """GPT-OSS softmaxes the scores and the sink column in the scores' dtype, which the added
    mask makes fp32 under amp (then cast to bf16 for the values: a second copy) and leaves bf16
    in pure bf16; max keeps its int64 indices (traced per layer, gpt-oss-20b, 2K tokens:
    1,024.5 MiB fp32 + 512 MiB bf16 + 1 MiB under amp)."""
    b, a, s = 1, 64, 2048
    for training, kept in (({}, b * a * s * ((s + 1) * 4 + s * 2 + 8)),
                           ({"mixed_precision": "pure"}, b * a * s * ((s + 1) * 2 + 8))):
        x = _oss(seq_len=s, **training)
        act = decoder_layer(x, x.counts.moe_layer)
        softmax = [t for t in act.saved if t.id == "act.sink_softmax"]
        assert [t.bytes for t in softmax] == [kept]
        assert not any(t.id == "act.softmax" for t in act.saved)


def test_gpt_oss_experts_keep_the_clamped_swiglu() -> None:
    """The clamped SwiGLU keeps the fused gate-up output (two wide) and the clamped gate, the
    sigmoid, their product and up + 1, and down_proj its input where it trains: seven
    intermediate-wide tensors per routed row (traced: 630 MiB at 2K tokens, top-4, fp32 under
    amp), six with the experts frozen; the router keeps topk's indices and the top-4 softmax."""
    x = _oss(seq_len=2048)
    act = decoder_layer(x, x.counts.moe_layer)
    by_id = {t.id: t.bytes for t in act.saved}
    assert by_id["act.clamped_glu"] == 7 * 2048 * 4 * 2880 * 4 == 630 * 2**20
    assert by_id["act.router_top_k"] == 2048 * 4 * (8 + 2)
    lora = _oss(seq_len=2048, finetuning="lora", mixed_precision="autocast")
    frozen = {t.id: t.bytes for t in decoder_layer(lora, lora.counts.moe_layer).saved}
    assert frozen["act.clamped_glu"] == 6 * 2048 * 4 * 2880 * 2  # (the bf16 base)


def test_gpt_oss_first_layer_softmax_backward_follows_its_experts_gradients() -> None:
    """The first layer's eager softmax backward runs after its experts have written their
    gradients (3 GiB a gpt-oss-20b layer) and freed their activations: the step's peak in the
    traced amp case, which the first layer's widest (MLP) moment missed by 1.4%."""
    from calc import estimate
    from tests.traced import traced_case
    scenario, traced = traced_case("gpt-oss-20b-4L_b1_s2048_amp_eager")
    report = estimate(scenario)
    assert report.peak_moment == "backward.first_layer_late"
    assert report.peak_bytes == pytest.approx(traced["peak_bytes"], rel=0.002)


def test_gpt_oss_flash_is_the_hub_kernel_and_says_so() -> None:
    """transformers refuses SDPA for the sinks: `flash` is the Hub kernel (computed as flash
    attention, no masks), with a warning naming the field and the eager alternative, and no
    confidence beyond the traced eager path."""
    from calc import estimate
    report = estimate({"model": "gpt-oss-20b", "training": {"seq_len": 4096}})
    assert [w["field"] for w in report.as_dict()["warnings"]] == ["training.attention"]
    assert "vllm-flash-attn3" in report.as_dict()["warnings"][0]["message"]
    assert any("'flash'" in m for m in report.confidence["missing"])
    assert not report.setup.sliding_sdpa and not report.setup.math_attention


def test_before_sm80_a_gqa_model_runs_sdpa_s_math_kernel() -> None:
    """Volta and Turing GPUs have no SDPA flash kernel, and torch's memory-efficient kernel
    takes no grouped K/V heads: transformers' SDPA (no mask, enable_gqa) runs the math kernel,
    which upcasts to fp32 and keeps the S x S probabilities (traced: Llama 3.2 1B LoRA on a
    T4 at 2K tokens, 17.39 GiB where an H100 takes 8.96). A warning names the field; an MHA
    model takes the memory-efficient kernel (flash's tensors), and an A100 flash."""
    from calc import estimate
    from tests.traced import traced_case
    scenario, traced = traced_case("llama-3.2-1b_b1_s2048_autocast-fp16_flash_lora16_t4")
    report = estimate(scenario)
    assert report.setup.math_attention and not report.setup.sdpa_flash
    assert report.peak_bytes == pytest.approx(traced["peak_bytes"], rel=0.001)
    assert [w["code"] for w in report.as_dict()["warnings"]] == ["sdpa_math"]
    h100 = estimate({**scenario, "gpu": "h100-sxm-80gb"})
    assert not h100.setup.math_attention and h100.peak_bytes < 0.55 * report.peak_bytes
    mha = estimate({**scenario, "model": "llama-2-7b"})
    assert not mha.setup.math_attention and not mha.as_dict()["warnings"]


def test_the_math_kernel_s_backward_runs_after_the_mlp_s() -> None:
    """The math kernel's backward keeps the fp32 scores' gradient beside the probabilities'
    (8 bytes an element beside the saved probabilities) after the MLP's and its norm's
    backward freed their activations (traced: a checkpointed Mistral 7B on a V100, -4.58%
    with 4 bytes and the MLP's counted). The top layer's moment is the step's peak, 33 MB
    above the first layer's (the other layers' inputs freed, their adapters' gradients
    written): so is the estimate's, the first layer's 2 MB from its traced 4,001 MB."""
    from calc import estimate
    from tests.traced import traced_case
    scenario, traced = traced_case(
        "mistral-7b-4L_b1_s2048_autocast-fp16_flash_acfull_lora16_v100")
    report = estimate(scenario)
    assert report.peak_bytes == pytest.approx(traced["peak_bytes"], rel=0.002)
    assert report.peak_moment == "backward.last_layer"
    from calc.peak import stage_peak
    late = next(m for m in stage_peak(report.setup, report.setup.stages[0], True).moments
                if m.name == "backward.first_layer_late")
    assert late.bytes == pytest.approx(4000.8 * 2**20, rel=0.002)
    assert late.bytes < report.peak_bytes


def test_a_padded_batch_masks_every_layer_under_sdpa() -> None:
    """A padding mask rules SDPA's flash kernel out: every layer runs the memory-efficient
    kernel, which keeps the mask as a bias in the compute dtype and K/V repeated to every head
    (transformers repeats them under a mask), and the boolean (b, 1, s, s) mask lives through
    the forward (traced: Llama 3.2 1B, 4 x 1K tokens, -0.00%). Under a mask the grouped heads
    are repeated, so a T4 runs the memory-efficient kernel too, not math."""
    from calc import estimate
    from calc.activations import forward_mask
    from tests.traced import traced_case
    scenario, traced = traced_case("llama-3.2-1b_b4_s1024_amp_flash_padded")
    report = estimate(scenario)
    assert report.peak_bytes == pytest.approx(traced["peak_bytes"], rel=0.001)
    x = report.setup
    ids = {t.id for t in decoder_layer(x, x.counts.dense_layer).saved}
    assert {"act.sliding_bias", "act.sliding_kv"} <= ids
    mask = forward_mask(x)
    assert mask is not None and mask.bytes == 4 * 1024 * 1024
    plain = estimate({**scenario, "training": {**scenario["training"], "padded": False}})
    assert plain.peak_bytes < report.peak_bytes
    t4 = estimate({"model": "llama-3.2-1b", "gpu": "t4-16gb", "training": {
        "precision": "fp16", "seq_len": 2048, "padded": True}})
    assert not t4.setup.math_attention and t4.setup.padded_sdpa


def _scenario_setup(scenario: dict[str, Any]) -> Setup:
    return setup(resolve(parse_scenario(scenario)))


def _saved_ids(x: Setup) -> list[str]:
    return [t.formula.id for t in decoder_layer(x, x.counts.dense_layer).saved]


def test_qlora_s_4bit_projections_keep_no_input_under_deepspeed_zero3() -> None:
    """DeepSpeed's ZeRO-3 swaps F.linear for its own, which keeps every input; bitsandbytes'
    4-bit projections run F.linear inside their own autograd function, so nothing of theirs
    is kept (traced: a Gemma 3 width, +9.6% with every projection's input counted). LoRA's
    frozen nn.Linear projections do keep theirs."""
    base = {"model": "llama-3.2-1b", "parallelism": {"dp": 2, "zero": 3,
                                                      "framework": "deepspeed"},
            "training": {"finetuning": "qlora", "lora_rank": 16, "seq_len": 1024,
                         "mixed_precision": "amp"}}
    qlora = _saved_ids(_scenario_setup(base))
    lora = _saved_ids(_scenario_setup({**base, "training": {**base["training"],
                                                             "finetuning": "lora"}}))
    assert not {"act.input", "act.input@activations/mlp"} & set(qlora)
    assert {"act.input", "act.input@activations/mlp"} <= set(lora)


def test_lora_a_keeps_the_dropout_s_output_as_given_under_deepspeed_zero3() -> None:
    """lora_A is DeepSpeed's ZeRO-3 linear too: it keeps the dropout's output (fp32 under
    torch_autocast), not autocast's bf16 cast of it (traced: -9.0% on a Mistral width); without
    dropout, peft's cast of x to the fp32 adapters (held out: +2.44% with a bf16 cast)."""
    from calc.activations import lora_a_kept
    zero3 = _scenario_setup({"model": "llama-3.2-1b",
                             "parallelism": {"dp": 2, "zero": 3, "framework": "deepspeed"},
                             "training": {"finetuning": "lora", "lora_dropout": 0.1,
                                          "mixed_precision": "amp"}})
    fsdp = _scenario_setup({"model": "llama-3.2-1b", "parallelism": {"dp": 2, "zero": 3},
                            "training": {"finetuning": "lora", "lora_dropout": 0.1,
                                         "mixed_precision": "amp"}})
    assert lora_a_kept(zero3, 4, 0.1) == 4
    assert lora_a_kept(zero3, 2, 0.0) == zero3.n.adapter == 4
    assert lora_a_kept(fsdp, 4, 0.1) == fsdp.n.adapter_compute


@pytest.mark.parametrize("case", [
    "llama-3.1-8b-4L-v1k-dropout_b1_s4096_autocast_flash_lora16_fsdp2",
    "mistral-7b-4L-v1k-dropout_b1_s4096_autocast_flash_acfull_lora16_fsdp4"])
def test_lora_a_s_kept_dropout_output_is_no_forward_transient(case: str) -> None:
    """Under FSDP2's mixed precision the adapters are gathered in bf16: peft casts nothing,
    lora_dropout's output is in the compute dtype, autocast makes no cast for lora_A, which
    keeps that output, saved with the layer. Counted again beside it as the widest adapter's
    forward transient it was one MLP-wide tensor over, in the forward and in a checkpointed
    layer's recomputation (held out: +1.58% and +4.10%); under per-op selective checkpointing,
    which does not keep it, it stays a transient."""
    scenario, traced = traced_case(case)
    x = _scenario_setup(scenario)
    layer = decoder_layer(x, x.counts.dense_layer)
    f = x.arch.intermediate_size
    kept = [t for t in layer.saved if t.key == "activations/mlp" and t.values == (x.T, f, 2)]
    assert kept  # the dropout's output over the down projection's input, saved
    d_i, q_c, q_d = (layer.forward_transient.values[i] for i in (1, 3, 4))
    assert (d_i, q_c, q_d) == (f, 0, 0)
    assert estimate(scenario).peak_bytes == pytest.approx(traced["peak_bytes"], rel=0.004)
    selective = _scenario_setup({**scenario, "training": {
        **scenario["training"], "activation_checkpointing": "selective"}})
    assert decoder_layer(selective, selective.counts.dense_layer).forward_transient.values[4] == 2


def test_a_checkpointed_moe_layer_s_forward_holds_its_combine_not_its_saved() -> None:
    """A checkpointed MoE layer saves nothing in forward: at its combine it holds the weighted
    outputs, their gather back, the experts' gathered inputs and outputs, the MLP's input and
    the residual, well under every activation it would save beside them (traced: DeepSeek-V3
    QLoRA under per-op selective checkpointing, +7.5% counted as a bound)."""
    x = _scenario_setup({"model": "deepseek-v3", "training": {"seq_len": 2048,
                                                             "activation_checkpointing": "full"},
                         "parallelism": {"dp": 8, "zero": 3}})
    assert x.counts.moe_layer is not None
    moe = decoder_layer(x, x.counts.moe_layer)
    held = moe.checkpointed_forward
    assert held is not None and held.formula.id == "act.checkpointed_moe"
    assert moe.forward_transient.bytes <= held.bytes < moe.forward_transient.bytes + moe.total


def test_qlora_s_frozen_down_projection_runs_its_backward_before_the_recomputation() -> None:
    """A checkpointed QLoRA layer whose down projection has no adapter computes that
    projection's input gradient before anything unpacks a saved tensor (bitsandbytes keeps its
    4-bit weight out of autograd's), so it sits beside the recomputation, under per-op
    selective checkpointing and full alike (fully checkpointed, the recomputation stops before
    that projection: `DEQUANT_RECOMPUTE`); an adapted down projection saves for its adapter
    and recomputes first."""
    base = {"model": "llama-3.2-1b", "training": {
        "finetuning": "qlora", "lora_rank": 8, "lora_targets": "attention", "seq_len": 1024,
        "activation_checkpointing": "selective", "mixed_precision": "autocast"}}
    x = _scenario_setup(base)
    layer = decoder_layer(x, x.counts.dense_layer)
    f = x.counts.dense_layer.linears[-1].in_features
    assert layer.before_recompute == x.T * f * x.n.compute
    every = _scenario_setup({**base, "training": {**base["training"],
                                                  "lora_targets": "all_linear"}})
    assert decoder_layer(every, every.counts.dense_layer).before_recompute == 0
    full = _scenario_setup({**base, "training": {**base["training"],
                                                 "activation_checkpointing": "full"}})
    whole = decoder_layer(full, full.counts.dense_layer)
    assert whole.before_recompute == x.T * f * x.n.compute
    assert whole.recompute_forward is not None
    assert whole.recompute_forward.formula is DEQUANT_RECOMPUTE
    assert layer.recompute_forward is None  # (per-op selective: recomputed apart)


def test_gemma3_s_sliding_layers_keep_no_math_kernel_outputs_under_per_op_selective() -> None:
    """Before sm80 Gemma 3's global layers run SDPA's math kernel, whose two bmm outputs (the
    scores and the weighted values, fp32) per-op selective checkpointing saves; its masked
    sliding layers run the memory-efficient kernel, which saves its output and log-sum-exp
    (traced: +15.3% with the math kernel's counted in every layer, random runs)."""
    x = _scenario_setup({"model": "gemma-3-1b", "gpu": "t4-16gb", "training": {
        "precision": "fp16", "activation_checkpointing": "selective", "seq_len": 2048}})
    assert x.math_attention and x.sliding_sdpa
    sliding = decoder_layer(x, x.counts.dense_layer, sliding=True).checkpoint_input.bytes
    global_ = decoder_layer(x, x.counts.dense_layer).checkpoint_input.bytes
    scores = x.b * x.a * x.s**2 * 4 + x.T * x.a * x.d * 4
    flash = x.T * x.a * x.d * x.n.compute + x.T * x.a * 4
    assert global_ - sliding == scores - flash


@pytest.mark.parametrize("case", [
    "qwen2.5-7b-4L_b1_s8192_pure_flash_cp2",
    "mistral-7b-4L-v1k_b2_s4096_autocast_flash_fsdp2_cp2",
    "llama-3.2-1b_b1_s16384_amp_flash_cp4"])
def test_ring_attention_s_output_is_copied_for_o_proj(case: str) -> None:
    """Context parallelism's ring attention merges its output in the kernel's (b, a, s, d)
    layout, so transformers' transpose(1, 2).contiguous() copies it for o_proj: each layer
    keeps both (held out: -0.60 .. -1.68% with one; without CP the flash kernel's output is
    laid out as (b, s, a, d) already and the copy is a view)."""
    scenario, traced = traced_case(case)
    x = _scenario_setup(scenario)
    assert x.counts.dense_layer is not None
    ids = [t.id for t in decoder_layer(x, x.counts.dense_layer).saved]
    assert ids.count("act.transposed_output") == 1 and "act.attention_output" in ids
    one = _scenario_setup({**scenario, "parallelism": {**scenario["parallelism"], "cp": 1}})
    assert "act.transposed_output" not in [t.id for t in decoder_layer(
        one, one.counts.dense_layer).saved]
    assert estimate(scenario).peak_bytes == pytest.approx(traced["peak_bytes"], rel=0.001)


def test_ring_attention_backward_holds_its_accumulators_buffers_and_two_steps() -> None:
    """Context parallelism's ring backward (torch's _templated_ring_attention_backward) with
    MLA, at its second step's kernel on rank 0: fp32 accumulators for dq, dk, dv, three dk/dv
    buffers (the initial accumulators, the send buffer and the all-to-all's output), the K/V
    all-gather and the K/V sent, and two steps' gradients (traced at cp = 2: 3,144 MiB at 3K
    tokens, 128 heads of 192 and 128; at cp = 4, 1K tokens: 1,216 MiB, the formula 1,208)."""
    import json
    from pathlib import Path

    from calc.activations import ring_attention_backward
    presets = Path(__file__).resolve().parent.parent / "presets" / "models"
    cut = {**json.loads((presets / "deepseek-v3.json").read_text())["hf_config"],
           "first_k_dense_replace": 1, "n_routed_experts": 32, "num_hidden_layers": 2,
           "vocab_size": 32768}
    for cp, batch, seq, mib in ((2, 3, 2048, 3144), (4, 1, 4096, 1208)):
        x = _scenario_setup({"model": {"hf_config": cut}, "parallelism": {"cp": cp, "zero": 3},
                             "training": {"micro_batch_size": batch, "seq_len": seq,
                                          "mixed_precision": "autocast"}})
        ring = ring_attention_backward(x)
        assert ring is not None and ring.bytes == mib * 2**20
    # GQA (Llama 3.2 1B: 32 heads, 8 key/value heads of 64): the key/value heads unrepeated,
    # as transformers passes them to SDPA (enable_gqa) where no mask is given
    dense = _scenario_setup({"model": "llama-3.2-1b", "parallelism": {"cp": 2, "zero": 3}})
    ring = ring_attention_backward(dense)
    assert ring is not None and ring.values[:2] == (dense.T * 32 * 64, dense.T * 8 * (64 + 64))


def _phases(case_id: str) -> tuple[dict[str, int], dict[str, int]]:
    """calc's worst moment of each phase on the case's one stage, and the trace's."""
    from traced import traced_case  # tests/ is on sys.path (rootdir conftest)

    from calc.peak import stage_peak
    scenario, traced = traced_case(case_id)
    x = setup(resolve(parse_scenario(scenario)))
    phases = stage_peak(x, x.stages[0]).phases
    return {k: m.bytes for k, m in phases.items()}, traced["phases"]


def test_eager_softmax_copies_bf16_scores_to_fp32_beside_its_output() -> None:
    """softmax(dtype=float32) converts bf16 scores first (ATen's half-to-float kernel takes fp16
    only), the copy beside the output until the kernel returns: under per-op selective
    checkpointing the forward peaks there (traced: Mistral's width, -13.8% at the forward
    without it)."""
    calc, traced = _phases("mistral-7b-4L_b1_s4096_autocast_eager_acselective_lora16_zero2-fsdp2")
    assert calc["forward"] == pytest.approx(traced["forward"], rel=0.01)
    assert max(calc.values()) == pytest.approx(max(traced.values()), rel=0.01)


def test_fp16_softmax_runs_half_to_float_its_input_gradient_in_fp16() -> None:
    """In fp16 no copy is made, and the softmax's backward returns its input's gradient in fp16;
    the masked scores stay referenced as the output is cast to the queries' dtype (traced:
    Mistral's width on a V100, +4.9% at the backward and -21% at the forward before)."""
    calc, traced = _phases("mistral-7b-4L_b2_s2048_autocast-fp16_eager_acselective_lora16_v100")
    for phase in ("forward", "backward"):  # (the forward +1.3%: the layer's other transients)
        assert calc[phase] == pytest.approx(traced[phase], rel=0.02)


@pytest.mark.parametrize("case", [
    "mistral-7b-4L-v1k_b1_s2048_autocast_flash_acfull_qlora8qv",
    "qwen3-8b-4L-v1k_b1_s2048_autocast_flash_acfull_qlora16attn_fsdp2"])
def test_a_checkpointed_qlora_layer_recomputes_up_to_its_gating_product(case: str) -> None:
    """bitsandbytes keeps a 4-bit weight out of autograd's saved tensors: a bare down
    projection's input gradient is computed before the recomputation, which stops once the
    gating product has saved its inputs, at the up projection's dequantised weight (traced: the
    step's peak; counted at the down projection's moment, +3.03% and +3.17%)."""
    scenario, traced = traced_case(case)
    x = setup(resolve(parse_scenario(scenario)))
    act = layers(x, x.stages[0], False).widest
    assert act.recompute_forward is not None
    assert act.recompute_forward.formula is DEQUANT_RECOMPUTE
    assert estimate(scenario).peak_bytes == pytest.approx(traced["peak_bytes"], rel=0.003)


@pytest.mark.parametrize(("finetuning", "kept"), [("lora", True), ("qlora", False)])
def test_a_fused_qkv_output_is_kept_only_where_sdpa_takes_v_as_it_is(finetuning: str,
                                                                     kept: bool) -> None:
    """Phi-3's fused qkv_proj under amp: LoRA's base projection runs under autocast and returns
    bf16, v is a view of that output and SDPA saves it, so the output stays; QLoRA's 4-bit
    projection returns its fp32 input's width, autocast casts q, k and v for SDPA, and the
    fp32 output is freed at the attention's end (traced op by op: 72 MiB at a 4-layer cut, 2K
    tokens). Counted kept under QLoRA: +5.07% on a random run (DDP, 8 layers)."""
    scenario, traced = traced_case("phi-3-mini-8L_b3_s1536_amp_flash_adamw-foreach_qlora8qv_ddp2")
    scenario = {**scenario, "training": {**scenario["training"], "finetuning": finetuning}}
    x = Setup(resolve(parse_scenario(scenario)))
    saved = decoder_layer(x, x.counts.dense_layer).saved
    assert any(t.id == "act.fused_qkv_output" for t in saved) is kept
    if finetuning == "qlora":
        assert estimate(scenario).peak_bytes == pytest.approx(traced["peak_bytes"], rel=0.005)


def test_ring_attention_s_backward_is_counted_over_every_head_s_keys_and_values() -> None:
    """Phi-3 (MHA: 32 key/value heads of 96) under FSDP2 x CP2 at 1536 tokens (768 a rank),
    autocast, checkpointed: torch's ring backward at its second step holds the fp32
    accumulators of dq, dk and dv, the K/V all-gather and the send and receive buffers; the
    trace's kernel adds 120,373,248 bytes to what its layer held, the formula 120,324,096 (the
    rest: the log-sum-exp). It was counted for MLA's keys only: -3.79% on a random run."""
    scenario, traced = traced_case("phi-3-mini-2L_b1_s1536_autocast_flash_acfull_fsdp2_cp2")
    x = Setup(resolve(parse_scenario(scenario)))
    ring = ring_attention_backward(x)
    q, kv = 768 * 32 * 96, 768 * 32 * (96 + 96)
    assert ring is not None
    assert ring.bytes == 4 * q + 12 * kv + 2 * (kv * (2 + 3) + 3 * q // 2) == 120_324_096
    r = estimate(scenario)
    assert r.peak_moment == "backward.first_layer_late"
    assert r.peak_bytes == pytest.approx(traced["peak_bytes"], rel=0.015)


@pytest.mark.parametrize(("finetuning", "dropout", "adapter", "by_hand"), [
    ("qlora", 0.0, True, 4 * 1024 * 4096),  # the frozen output (fp32, as its input) alone
    ("qlora", 0.1, True, 4 * 1024 * 4096 + 4 * 1024 * 14336),  # and the gating product,
    # which nothing keeps as it is
    ("qlora", 0.1, False, -1 * 1024 * 14336),  # before the base layer: the product in place
    # of the adapter's fp32 copy, the dropout's one-byte mask not made yet
    ("lora", 0.1, True, 2 * 1024 * 4096 + 4 * 1024 * 14336),  # the bf16 output, peft's fp32
    # cast of the product (which the base layer keeps)
    ("lora", 0.1, False, -(4 + 1) * 1024 * 14336),  # the cast's dropped copy and its mask
])
def test_a_down_projection_at_its_adapter(finetuning, dropout, adapter, by_hand) -> None:
    """LoRA under DeepSpeed's ZeRO-3 and amp, its frozen linear keeping its input as given:
    bitsandbytes' 4-bit layer (QLoRA) saves none of its input and casts nothing, lora_A keeps
    the dropout's output (or, without dropout, the input itself)."""
    x = Setup(resolve(parse_scenario({
        "model": "llama-3.1-8b", "parallelism": {"dp": 2, "zero": 3, "framework": "deepspeed"},
        "training": {"seq_len": 1024, "finetuning": finetuning, "lora_dropout": dropout,
                     "mixed_precision": "amp"}})))
    assert down_adapter_forward(x, x.counts.dense_layer, adapter).bytes == by_hand
