"""DeepSpeed ZeRO-3: what its parameter coordinator holds gathered, and the step's casts, each
checked against a count by hand or what the traced engine held."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from traced import traced_case  # tests/ is on sys.path (rootdir conftest)

from calc import coordinator, estimate
from calc.coordinator import MAX_LIVE_PARAMETERS, gathered, sub_group
from calc.frameworks.common import ConfigImportError
from calc.frameworks.registry import import_config
from calc.plan import export
from calc.scenario import ScenarioError, parse_scenario, resolve
from calc.setup import Setup
from calc.states import model_states, replay_widths, replayed

COORDINATOR = Path(__file__).resolve().parent.parent / "validation" / "results" / "coordinator.json"
H, F, V = 4096, 11008, 32000  # Llama 2 7B
LAYER = 4 * H * H + 3 * H * F  # its partitioned tensors (the norms persist)
MIXTRAL_LORA = "mixtral-8x7b-2L_b1_s1024_master_flash_lora16{}_deepspeed-zero3x4"


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


def _lora(checkpointing: str = "none") -> tuple[coordinator._Model, Setup]:
    x = _setup("llama-3.2-1b", dp=4, finetuning="lora", lora_rank=16,
               activation_checkpointing=checkpointing)
    return coordinator._model(x.counts, x.stages[0], (x.lora_rank, x.lora_targets)), x


def _named(m: coordinator._Model, path: str) -> coordinator.Module:
    mod = m.body
    for name in path.split("/"):
        mod = next(c for c in mod.children if c.name == name)
    return mod


def test_lora_s_frozen_modules_ahead_of_the_first_adapter_fire_no_backward_hook() -> None:
    """Under peft the embedding is frozen: nothing ahead of the first adapter needs a gradient,
    so DeepSpeed's backward hooks never fetch the first layer's base projections nor the
    embedding, and the tied head's backward releases the embedding (traced: 262.7M elements
    freed at lm_head's release, the replay equal to the engine call by call)."""
    m, x = _lora()
    events = coordinator._step(m, x.checkpointed(x.stages[0]))
    q = _named(m, "layers.0/self_attn/q_proj")
    base, dropout, lora_a, lora_b = q.children
    assert ("B", m.embedding) not in events
    assert ("B", base) not in events and ("B", dropout) not in events
    assert ("B", lora_b) in events and ("B", lora_a) in events and ("b", lora_a) not in events
    top = _named(m, f"layers.{len(m.layers) - 1}/self_attn/q_proj").children[0]
    assert ("B", top) in events and ("b", top) in events  # the residual needs a gradient
    memory = {}
    for kind, mod, replay in coordinator.played(m, x.checkpointed(x.stages[0])):
        memory[kind, id(mod)] = replay.gathered
    assert memory["B", id(m.head)] - memory["b", id(m.head)] == 128256 * 2048


def test_lora_s_lora_a_is_released_with_its_lora_linear() -> None:
    """peft's lora.Linear reads lora_A's weight (its dtype) before calling lora_A: ZeRO-3's
    parameter dict registers it as an external parameter of the lora.Linear, which holds it
    from its own fetch to its own release (traced: 32,768 elements of q_proj's lora_A freed at
    q_proj's release, not lora_A's)."""
    m, x = _lora()
    q = _named(m, "layers.0/self_attn/q_proj")
    key = q.children[2].own[0]
    assert q.own == (key,)
    after = {}
    for kind, mod, replay in coordinator.played(m, x.checkpointed(x.stages[0])):
        if kind == "f" and mod in (q, q.children[2]):
            after.setdefault(mod.name, replay.status[key])
    assert after == {"lora_A": 2, "q_proj": 0}


def test_checkpointed_lora_recomputes_and_releases_the_frozen_base_with_the_adapter() -> None:
    """transformers' checkpointing makes the embedding's output require grad
    (enable_input_require_grads): every module's backward hook fires. The recomputation's
    frozen parameters are attributed to the backward module then running (lora_B of
    down_proj, whose saved input set it off) and released at its backward's end, whatever
    the reuse distance: the top layer's base weights are partitioned again there and
    gathered anew by their own backward (traced: 1,246.8M gathered during the recomputation,
    1,185.9M after lora_B's release)."""
    m, x = _lora("full")
    ckpt = x.checkpointed(x.stages[0])
    events = coordinator._step(m, ckpt)
    assert ("B", m.embedding) in events
    down = _named(m, f"layers.{len(m.layers) - 1}/mlp/down_proj")
    lora_b = down.children[3]
    gate = _named(m, f"layers.{len(m.layers) - 1}/mlp/gate_proj").children[0]
    key = gate.own[0]
    seen = [(kind, mod.name, replay.status[key]) for kind, mod, replay in
            coordinator.played(m, ckpt) if mod in (lora_b, gate)]
    # the forward keeps the weight for the recomputation within the reuse distance; the
    # recomputation runs up to lora_B's forward; lora_B's backward releases the weight, which
    # gate_proj's own backward gathers anew
    assert seen == [("F", "base_layer", 2), ("f", "base_layer", 2), ("F", "lora_B", 2),
                    ("f", "lora_B", 2), ("B", "lora_B", 2), ("F", "base_layer", 2),
                    ("f", "base_layer", 2), ("F", "lora_B", 2), ("b", "lora_B", 0),
                    ("B", "base_layer", 2), ("b", "base_layer", 0)]


@pytest.mark.parametrize("case", [
    "llama-3.2-1b_b2_s2048_master_flash_lora16_deepspeed-zero3x4",
    "llama-3.2-1b_b2_s2048_master_flash_acfull_lora16_deepspeed-zero3x4",
    "llama-3.2-1b_b2_s2048_master_flash_lora16_deepspeed-zero2x4",
    MIXTRAL_LORA.format(""),
    "qwen3-30b-a3b-4L-v32k_b1_s1024_master_flash_lora16_deepspeed-zero3x2",
    "qwen3-30b-a3b-4L-v32k_b1_s1024_master_flash_qlora16_deepspeed-zero2x2",
])
def test_deepspeed_lora_matches_the_engine(case: str) -> None:
    """Each phase of the traced step within 0.5%: the adapters cast to bf16 with fp32 masters
    (before: fp32 adapters, +25%), the frozen base gathered module by module at ZeRO-3."""
    scenario, traced = traced_case(case)
    r = estimate(scenario).as_dict()
    for phase, measured in traced["phases"].items():
        assert r["phases"][phase]["peak_bytes"] == pytest.approx(measured, rel=0.005), phase


def _replay_model(case: str) -> tuple[coordinator._Model, Setup]:
    scenario, _ = traced_case(case)
    x = Setup(resolve(parse_scenario(scenario)))
    lora, packed = replayed(x)
    return coordinator._model(x.counts, x.stages[0], lora, None, packed), x


def test_peft_s_expert_adapters_are_gathered_with_the_leaf_block() -> None:
    """peft adapts Mixtral's stacked experts and router by parameter (ParamWrapper): A and B
    are parameters of the leaf MoE block, fetched with it (traced: 10,813,440 elements beyond
    the experts and router at each MoE fetch; the router's 8 x 16 B persists). The grouped GEMM
    then multiplies the folded copy, so a released expert weight is not kept by its view; with
    the experts frozen (adapters on the attention) it is, as in full training."""
    m, _ = _replay_model(MIXTRAL_LORA.format(""))
    block = _named(m, "layers.0/mlp")
    adapters = sum(m.numel[k] for k in block.fetched if k[-1] in "AB" and k not in m.persistent)
    assert adapters == 10_813_440
    assert block.leaf and not any(k[-1] == "w" for k in m.viewed)
    frozen, _ = _replay_model(MIXTRAL_LORA.format("attn"))
    experts = _named(frozen, "layers.0/mlp/experts")
    assert set(experts.own) <= frozen.viewed and len(frozen.viewed) == 2 * 2  # 2 layers' 2
    # (experts.own: the stacked gate/up and down weights; no adapter on them)


def test_zero3_waits_for_a_coalesced_prefetch_of_the_experts_before_them() -> None:
    """With LoRA on the attention only, the last adapter's fetch (o_proj's lora_B) waits on a
    prefetch that gathered the top layer's experts with it: they are copied out of its flat
    buffer, which lives until the experts' own fetch (traced: +1.75 GiB from o_proj's lora_B
    to the MoE block, the forward's peak; the estimate within 0.5%)."""
    case = MIXTRAL_LORA.format("attn")
    scenario, traced = traced_case(case)
    r = estimate(scenario).as_dict()
    assert r["peak_moment"] == "forward.experts_router"
    assert r["phases"]["forward"]["peak_bytes"] == pytest.approx(traced["phases"]["forward"],
                                                                 rel=0.005)


def test_a_fetch_all_gathers_before_it_waits_out_a_prefetch_s_flat_buffer() -> None:
    """fetch_sub_module all-gathers what is neither gathered nor in flight, then waits for the
    rest. GPT-OSS 120B's stacked gate/up weights (2.1e9 elements) pass
    stage3_max_live_parameters, so the experts' own fetch all-gathers the down projections
    while the gate/up weights, copied out of a prefetch, and that prefetch's flat buffer, which
    the fetch's wait frees, are both alive (traced: +4.0 GiB at the experts' fetch, the
    forward's peak, which the router's moment missed by 9.96%)."""
    scenario, traced = traced_case(
        "gpt-oss-120b-4L-v32k_b2_s512_amp_eager_acfull_qlora8qv_chunked_deepspeed-zero3x2")
    x = Setup(resolve(parse_scenario(scenario)))
    lora, packed = replayed(x)
    m = coordinator._model(x.counts, x.stages[0], lora, None, packed, replay_widths(x))
    top = m.layers[-1]
    experts = next(c for c in next(c for c in top.children if c.name == "mlp").children
                   if c.name == "experts")
    gate_up, _, down, _ = experts.own
    live = coordinator.gathered(x.counts, x.stages[0], x.checkpointed(x.stages[0]), lora,
                                x.zero_sizes, packed, replay_widths(x))
    # (elements of the stored width: the gate/up weights twice, the down projections' buffer)
    assert live.forward_router >= 2 * m.numel[gate_up] + m.numel[down]
    r = estimate(scenario).as_dict()
    assert r["peak_moment"] == "forward.experts_router"
    assert r["phases"]["forward"]["peak_bytes"] == pytest.approx(traced["phases"]["forward"],
                                                                 rel=0.015)


def test_a_lower_moe_layer_s_backward_holds_a_coalesced_prefetch() -> None:
    """Checkpointed, with frozen experts: a lower MoE layer's recomputation waits on a
    prefetch that gathered its experts with the weights before them, so its backward holds the
    flat buffer beside their copies (traced: +0.75 GiB in layer 2's backward, the step's peak,
    which the top layer's moment missed by 9.9%)."""
    scenario, traced = traced_case(
        "qwen3-30b-a3b-4L-v32k_b1_s1024_master_flash_acfull_lora16attn_deepspeed-zero3x4")
    r = estimate(scenario).as_dict()
    assert r["peak_moment"] == "backward.experts_partitioned"
    assert r["phases"]["backward"]["peak_bytes"] == pytest.approx(traced["phases"]["backward"],
                                                                  rel=0.005)


def test_the_fold_s_saved_factors_keep_their_gathered_storage() -> None:
    """At ZeRO-3 peft's fold W + B A saves both gathered factors for their gradients: released
    after the block's forward, they stay on the GPU until its backward, as the grouped GEMM's
    view of a frozen expert weight does."""
    m, _ = _replay_model(MIXTRAL_LORA.format(""))
    adapters = {k for k in _named(m, "layers.0/mlp").fetched if k[-1] in "AB"}
    assert adapters <= m.viewed
    held = max(sum(m.numel[k] for k in replay.held & adapters)
               for _, _, replay in coordinator.played(m, (False, False)))
    assert held == sum(m.numel[k] for k in adapters - m.persistent)


def test_qlora_s_packed_weights_are_partitioned_parameters() -> None:
    """Under ZeRO-3 a 4-bit weight is a parameter like the others, stored as transformers'
    recipe sets bnb_4bit_quant_storage (bf16): n / 4 elements, gathered and released module by
    module; the head stays bf16 (traced: the estimate within 0.1%, was -5.7% without the
    coordinator)."""
    case = "llama-3.1-8b-4L_b1_s2048_master_flash_acfull_qlora16_deepspeed-zero3x4"
    m, _ = _replay_model(case)
    q = _named(m, "layers.0/self_attn/q_proj/base_layer")
    assert [m.numel[k] for k in q.own] == [4096 * 4096 // 4]
    assert m.numel["head"] == 128256 * 4096
    scenario, traced = traced_case(case)
    assert estimate(scenario).peak_bytes == pytest.approx(traced["peak_bytes"], rel=0.001)


def test_a_config_s_zero3_sizes_are_the_estimate_s() -> None:
    """calc's export round-trips through the import with nothing set beyond the defaults; a
    config that lowers stage3_max_live_parameters and stage3_max_reuse_distance (the usual fix
    for a ZeRO-3 out-of-memory) imports them into the scenario, and the estimate is the
    coordinator's at those limits: Llama 2 7B keeps about 3e8 elements gathered at the loss
    instead of 1e9 (one 11008 x 4096 tensor over at most), 1.4 GB less."""
    scenario = {"model": "llama-2-7b", "training": {"mixed_precision": "master"},
                "parallelism": {"dp": 8, "zero": 3}}
    cfg = export(scenario, "deepspeed").data
    assert isinstance(cfg, dict)
    imported, notes = import_config(cfg, "deepspeed", model="llama-2-7b")
    assert not any("zero_optimization." in n for n in notes)
    assert imported.parallelism.stage3_max_live_parameters == MAX_LIVE_PARAMETERS
    cfg["zero_optimization"].update(stage3_max_live_parameters=3e8,
                                    stage3_max_reuse_distance="300000000",
                                    reduce_bucket_size="auto")
    imported, _ = import_config(cfg, "deepspeed", model="llama-2-7b")
    p = imported.parallelism
    assert (p.stage3_max_live_parameters, p.stage3_max_reuse_distance,
            p.reduce_bucket_size) == (3 * 10**8, 3 * 10**8, None)
    x = Setup(resolve(imported))
    live = gathered(x.counts, x.stages[0], None, None, x.zero_sizes)
    assert 3 * 10**8 <= live.forward_head + live.persistent < 3 * 10**8 + H * F
    before = estimate(scenario).as_dict()["phases"]["backward"]["peak_bytes"]
    after = estimate(imported).as_dict()["phases"]["backward"]["peak_bytes"]
    assert 1.2e9 < before - after < 1.6e9
    with pytest.raises(ConfigImportError, match="stage3_max_live_parameters"):
        import_config({**cfg, "zero_optimization": {**cfg["zero_optimization"],
                                                    "stage3_max_live_parameters": -1}},
                      "deepspeed", model="llama-2-7b")


def test_zero_sizes_need_deepspeed_s_engine_and_their_stage() -> None:
    """A ZeRO size is DeepSpeed's: with torch's FSDP2 (amp) or below stage 3 for the
    coordinator's, the scenario is refused naming the field and the rule."""
    for parallelism, field in (({"dp": 8, "zero": 3, "stage3_max_live_parameters": 10**8},
                                "amp"),
                               ({"dp": 8, "zero": 2, "stage3_max_live_parameters": 10**8},
                                "master")):
        with pytest.raises(ScenarioError) as err:
            resolve(parse_scenario({"model": "llama-2-7b", "parallelism": parallelism,
                                    "training": {"mixed_precision": field}}))
        assert err.value.field == "parallelism.stage3_max_live_parameters"
    resolve(parse_scenario({"model": "llama-2-7b", "training": {"mixed_precision": "master"},
                            "parallelism": {"dp": 8, "zero": 2, "reduce_bucket_size": 10**8}}))


def _replayed(scenario: dict) -> list[tuple[str, int]]:
    """calc.coordinator's fetches over the scenario's step: (F or B, elements gathered)."""
    x = Setup(resolve(parse_scenario(scenario)))
    stage = x.stages[0]
    lora, packed = replayed(x)
    m = coordinator._model(x.counts, stage, lora, None, packed, autocast=x.n.autocast)
    return [(kind, replay.gathered) for kind, _, replay in
            coordinator.played(m, x.checkpointed(stage)) if kind in "FB"]


@pytest.mark.parametrize("case", sorted(json.loads(COORDINATOR.read_text())))
def test_the_replay_matches_deepspeed_s_own_coordinator(case: str) -> None:
    """Every fetch of the traced step (validation/coordinator_log.py: DeepSpeed 0.19.8's
    coordinator wrapped), with what it leaves gathered or in flight, is the replay's: the same
    modules in the same order, the same prefetches, the same releases kept for reuse (dense,
    checkpointed, a model under the limit, Mixtral's leaf MoE block, DeepSeek-V3's experts,
    QLoRA's 4-bit layers under autocast, whose lora_A is fetched at its own call)."""
    scenario, _ = traced_case(case)
    recorded = [(kind, n) for kind, _, n in json.loads(COORDINATOR.read_text())[case]
                if kind in "FB"]
    assert _replayed(scenario) == recorded


def test_zero3_under_torch_autocast_keeps_fp32_inputs_and_no_weight_copy() -> None:
    """DeepSpeed's stage 3 under its torch_autocast gathers fp32 parameters (the coordinator's
    elements at 4 bytes) and its linear casts inside autocast: it keeps the fp32 normed input
    it is given, and autocast caches no weight copy (traced: +15% with stage 1-2's terms, now
    within 0.5%)."""
    case = "llama-3.1-8b-4L_b1_s2048_amp_flash_deepspeed-zero3x4"
    scenario, traced = traced_case(case)
    x = Setup(resolve(parse_scenario(scenario)))
    assert x.deepspeed and x.n.autocast and x.n.weight == 4 and not x.n.weight_copies
    assert x.frozen_linear_inputs
    assert estimate(scenario).peak_bytes == pytest.approx(traced["peak_bytes"], rel=0.005)


def test_gpt_oss_s_released_experts_leave_no_gathered_copy() -> None:
    """GPT-OSS multiplies its stacked experts as stored ((experts, in, out), no transpose):
    the grouped GEMM saves the parameter itself, whose data DeepSpeed's release empties, so no
    gathered expert weight outlives its module (Mixtral's transposed view keeps its storage).
    Counted as Mixtral's, the step was +21.5% over the engine's; each phase now within 0.1%."""
    scenario, traced = traced_case("gpt-oss-20b-4L_b1_s2048_master_eager_deepspeed-zero3x4")
    x = Setup(resolve(parse_scenario(scenario)))
    lora, packed = replayed(x)
    assert not coordinator._model(x.counts, x.stages[0], lora, None, packed).viewed
    r = estimate(scenario).as_dict()
    for phase, measured in traced["phases"].items():
        assert r["phases"][phase]["peak_bytes"] == pytest.approx(measured, rel=0.001), phase


def test_torch_autocast_gathers_each_tensor_at_its_own_width() -> None:
    """Under torch_autocast the parameters are fp32, QLoRA's 4-bit weights are stored in bf16
    (transformers' recipe: bnb_4bit_quant_storage the compute dtype, so four values an element
    for the prefetch bucket's counts), and nn.Linear weights are all-gathered in bf16 and cast
    at the wait; the embedding and the norms travel in fp32 (traced: a Mistral width with
    QLoRA on q and v, +2.87% with every gathered byte in fp32). Master weights gather alike."""
    amp = Setup(resolve(parse_scenario({
        "model": "llama-3.2-1b", "parallelism": {"dp": 4, "zero": 3, "framework": "deepspeed"},
        "training": {"mixed_precision": "amp", "finetuning": "qlora", "lora_rank": 16}})))
    widths = replay_widths(amp)
    assert widths == coordinator.Widths(4, 2, 2)
    assert replayed(amp)[1] == 4
    m = coordinator._model(amp.counts, amp.stages[0], replayed(amp)[0], None, 4, widths)
    packed = (0, 0, "w")  # the first layer's first projection, quantised
    assert m.size[packed] == m.comm[packed] == 2 * m.numel[packed]
    assert m.comm["embedding"] == m.size["embedding"] == 4 * m.numel["embedding"]
    adapter = next(k for k in m.numel if isinstance(k, tuple) and k[-1] == "A")
    assert m.size[adapter] == 2 * m.comm[adapter]  # fp32 stored, all-gathered in bf16
    assert replay_widths(_setup("llama-3.2-1b")) is None


def test_the_head_s_coalesced_prefetch_is_copied_out_in_the_top_layer_s_forward() -> None:
    """The head is prefetched in one coalesced all-gather with the top layer's down
    projection's last pieces; the first wait on the group, in the top layer's forward, copies
    the head out of the flat buffer: torch.cat of its pieces in bf16, then cast to its fp32
    beside that concatenation and the buffer (AllGatherCoalescedHandle.wait). By hand: the
    head whole in fp32, its bf16 concatenation and its bf16 flat buffer, 8 bytes an element
    (traced: QLoRA on a 32B width, the forward's peak, -12.9% without the moment)."""
    scenario, traced = traced_case(
        "qwen2.5-32b-2L_b1_s1024_amp_flash_qlora16_deepspeed-zero3x4")
    x = Setup(resolve(parse_scenario(scenario)))
    lora, packed = replayed(x)
    live = coordinator.gathered(x.counts, x.stages[0], x.checkpointed(x.stages[0]), lora,
                                x.zero_sizes, packed, replay_widths(x))
    head = x.counts.lm_head
    # (elements of the stored fp32 width: the head's copy, its concatenation and buffer)
    assert live.forward_copy >= head + head // 2 + head // 2
    assert live.forward_copy < live.forward_mlp + 2 * head
    r = estimate(scenario).as_dict()
    assert r["peak_moment"] == "forward.prefetch_copy"
    assert r["peak_bytes"] == pytest.approx(traced["peak_bytes"], rel=0.005)


def test_the_head_s_copy_and_its_buffer_stay_through_the_final_norm() -> None:
    """Without a cast (bf16 weights) the copy adds no concatenation, but it and the flat buffer
    stay until the head's own fetch waits the group out: the final norm's forward, every
    layer's activations saved, is the forward's peak (traced: LoRA on a 70B width over four
    ranks, -1.41% at the down projection's moment)."""
    scenario, traced = traced_case("llama-3.1-70b-2L_b1_s1024_master_flash_lora16_deepspeed-zero3x4")
    x = Setup(resolve(parse_scenario(scenario)))
    lora, packed = replayed(x)
    live = coordinator.gathered(x.counts, x.stages[0], x.checkpointed(x.stages[0]), lora,
                                x.zero_sizes, packed, replay_widths(x))
    assert live.forward_norm >= 2 * x.counts.lm_head  # the copy and the buffer, in bf16
    r = estimate(scenario).as_dict()
    assert r["peak_moment"] == "forward.final_norm"
    assert r["peak_bytes"] == pytest.approx(traced["peak_bytes"], rel=0.002)


def test_zero3_s_linear_casts_the_head_s_fp32_weight_at_its_matmul() -> None:
    """Under torch_autocast DeepSpeed's ZeRO-3 linear casts the head's fp32 weight to bf16
    inside its function, for the forward's matmul and again for the backward's, caching it
    nowhere: V H c beside the logits (or their gradient) and the input's cast (or its
    gradient). With a 70B width and 1K tokens that outweighs the loss (traced: -6.50% with the
    loss's moments alone)."""
    from calc.logits import head_matmul
    scenario, traced = traced_case("llama-3.1-70b-2L_b1_s1024_amp_flash_qlora16attn_deepspeed-zero3x2")
    x = Setup(resolve(parse_scenario(scenario)))
    T, V, H = 1024, 128256, 8192
    assert head_matmul(x, False).bytes == V * H * 2 + T * V * 2 + T * H * 2  # (fp32 input)
    assert head_matmul(x, True).bytes == V * H * 2 + T * V * 2 + T * H * 2
    r = estimate(scenario).as_dict()
    assert r["peak_moment"] == "forward.head_matmul"
    assert r["peak_bytes"] == pytest.approx(traced["peak_bytes"], rel=0.002)
    master = _setup("llama-3.2-1b", dp=2)  # bf16 weights: no cast
    assert head_matmul(master, False) is None


def test_the_fused_loss_under_zero3_amp_keeps_two_weight_casts_alive() -> None:
    """Liger's fused linear cross-entropy runs its own matmuls under autocast: under DeepSpeed's
    ZeRO-3, whose linear caches no cast, two casts of the head's fp32 weight are still alive at
    once in a chunk (traced: Llama 3.2 1B over four ranks, -8.4% with none)."""
    from calc.logits import logits_memory
    scenario, traced = traced_case("llama-3.2-1b_b2_s1024_amp_flash_acfull_chunked_deepspeed-zero3x4")
    x = Setup(resolve(parse_scenario(scenario)))
    forward = logits_memory(x)[0]
    assert forward.values[7] == 2  # u_w
    assert estimate(scenario).peak_bytes == pytest.approx(traced["peak_bytes"], rel=0.002)


def test_a_fused_loss_makes_the_head_an_external_parameter_of_the_causal_lm() -> None:
    """Liger's fused loss reads lm_head.weight in the causal LM's forward, not through
    lm_head's: DeepSpeed registers it as an external parameter of that module, gathered as the
    step's forward starts and released with it at the end of backward, so it is gathered at
    every layer's moments (traced: ZeRO-Offload over two ranks, +6.2% with it fetched at
    lm_head's call, which never comes, and so released)."""
    scenario, traced = traced_case(
        "qwen2.5-7b-4L_b1_s1024_amp_flash_acfull_chunked_deepspeed-zero3x2_offload-optimizer")
    x = Setup(resolve(parse_scenario(scenario)))
    lora, packed = replayed(x)
    fused = coordinator._model(x.counts, x.stages[0], lora, None, packed, replay_widths(x),
                               fused_head=True)
    assert fused.root.own == ("head",) and fused.head.own == ()
    live = coordinator.gathered(x.counts, x.stages[0], x.checkpointed(x.stages[0]), lora,
                                x.zero_sizes, packed, replay_widths(x), True, True)
    assert live.backward_first >= x.counts.lm_head  # (fp32 elements: the head, still)
    assert estimate(scenario).peak_bytes == pytest.approx(traced["peak_bytes"], rel=0.005)
