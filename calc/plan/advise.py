r"""Parallelism advisor: the TP x PP x DP (x CP, x EP) x ZeRO x checkpointing x micro-batch
layouts of N GPUs that fit, ranked by an estimated step time.

    >>> a = advise("llama-3-8b", "h100-sxm-80gb", 8, 4096, 64)
    >>> p = a.plans[0].scenario.parallelism
    >>> p.tp * p.pp * p.dp * p.cp
    8

**Fit** is :func:`calc.plan.fits_target`: `device_bytes <= target x usable_bytes`.

**Step time** (seconds; :math:`G` sequences of :math:`s` tokens per step, :math:`N` GPUs)
is the sum of the parts below. Nothing overlaps with compute unless `overlap` > 0, which hides
that fraction of every communication term (an assumption: Megatron-LM and FSDP overlap much of
the DP and some of the TP traffic, so the default 0 is pessimistic).

- `compute`, `recompute`: :math:`F G s / (N \cdot P \cdot mfu)` with :math:`F` the model and
  the recomputed FLOPs per token of :mod:`calc.plan.cost` (Kaplan et al. 2020; PaLM appendix
  B; Korthikanti et al. 2022 for recomputation), :math:`P` the GPU's dense TFLOPS in the
  training precision. Here `mfu` is the efficiency of the compute alone (cost.py's `mfu` also
  absorbs communication and bubbles), so the default 0.4 leaves these times conservative.
  Per-GPU efficiency is assumed not to depend on the layout or the micro-batch.
- `tp_comm`: Megatron-LM's tensor parallelism all-reduces the layer's output twice in forward
  and twice in backward (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training
  on GPU Clusters Using Megatron-LM", section 3.2; sequence parallelism swaps each for an
  all-gather plus a reduce-scatter of the same volume, Korthikanti et al. 2022), two more with
  full recomputation: :math:`4 L_{st} \cdot (G/d) \cdot (s/c) h a \cdot 2(t-1)/t / B_{tp}`
  (:math:`L_{st}` layers per stage, :math:`d` = dp, :math:`c` = cp, :math:`t` = tp,
  :math:`a` bytes per activation element, :math:`2(t-1)/t` the ring all-reduce's cost).
- `cp_comm`: context parallelism all-gathers K and V in forward and again in backward and
  reduce-scatters their gradients (Megatron-LM's context parallelism; Liu et al. 2023, "Ring
  Attention"), one more gather with full recomputation:
  :math:`3 L_{st} (G/d) \cdot (c-1)/c \cdot s \cdot w_{kv}/t \cdot a / B_{cp}`
  (:math:`w_{kv}` = K plus V width per token: 2 x kv heads x head size; MLA: heads x
  (qk_nope + qk_rope + v)).
- `ep_comm`: two all-to-alls (dispatch, combine) per MoE layer in forward and two in backward
  (Lepikhin et al. 2020, "GShard"), two more with full recomputation, each moving :math:`k`
  copies of the GPU's tokens: :math:`4 L^{moe}_{st} (G/d)(s/c') k h a \cdot (e-1)/e / B_{ep}`
  (:math:`c'` = cp, times tp with sequence parallelism; :math:`k` experts per token).
- `dp_comm`: gradients over the :math:`D = d \cdot c` ranks ZeRO shards over, ring cost
  :math:`(D-1)/D` per pass of the GPU's :math:`\Psi` parameters (Rajbhandari et al. 2020,
  "ZeRO", section 7): ZeRO 0/1 reduce-scatter + all-gather once per step
  (:math:`2\Psi`, gradients accumulated locally); ZeRO-2 keeps only a gradient shard, so it
  reduce-scatters every micro-batch plus one parameter all-gather (:math:`(m+1)\Psi`); ZeRO-3
  (FSDP2, reshard after forward) also all-gathers the parameters in forward and backward of
  every micro-batch (:math:`3m\Psi`, the 3x of the ZeRO paper at :math:`m = 1`). Each pass
  moves elements of the width the memory model gives them (:mod:`calc.numerics`: gradients as
  stored, parameters as stored, or as gathered with ZeRO-3); :math:`\Psi` is the largest
  stage's trainable parameters (all of them for the ZeRO-3 gathers), expert weights included
  as if reduced over the whole :math:`D` (a simplification: they are reduced over D / ep).
- `bubble`: 1F1B pipeline bubble, a fraction :math:`(p-1)/(m+p-1)` of the step (Narayanan et
  al. 2021, section 2.2), i.e. :math:`(p-1)/m` times the pipelined work (everything above but
  `dp_comm`); :math:`m` = gradient_accumulation_steps. Point-to-point traffic is not counted.

Links (Megatron-LM's rank order: tp innermost, then cp, dp, pp): a group that stays inside a
node uses the GPU's `interconnect.bandwidth_gbps` **halved** (presets give NVLink's
bidirectional marketing figure; a ring sends one way), one that spans nodes uses
`inter_node_gbps` (GB/s per GPU, one way; default 50 = one 400 Gb/s InfiniBand NDR port per
GPU, as in DGX H100). Latency, hierarchical collectives and congestion are not modelled.

**Search** (each estimate ~100 us, so pruned): layouts that break a rule (tp must divide the
heads and a node, pp <= layers, dp must divide the global batch, cp only for shards of at least
`CP_MIN_TOKENS`) are counted and dropped; with tp > 1 sequence parallelism is on (where seq_len
allows), ZeRO-0 is skipped where dp x cp > 1 (ZeRO-1 has its traffic and less memory);
combinations are visited in order of a lower bound of their step time and the search stops
once `top` plans beat every bound left (`slower_than_top`). Then: model states alone above the
target reject every micro-batch and checkpointing of a layout without estimating activations;
the largest fitting micro-batch among the divisors of G/dp is found by the monotone search
(memory grows with the micro-batch at fixed G/dp; gradient_accumulation_steps 1, which keeps no
gradients between micro-batches, is checked apart); checkpointing is not tried where less
recomputation already fits at its best micro-batch, and plans of one layout that are slower and
not smaller than another are dropped (`dominated`). Each combination reports the fitting
micro-batch with the shortest step time (ties: the larger one).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field, replace
from typing import Any

from ..architecture import Architecture
from ..estimate import Estimate, estimate
from ..numerics import numerics
from ..overhead import overhead
from ..scenario import (
    Checkpointing,
    ModelSpec,
    Parallelism,
    Scenario,
    Training,
    parse_scenario,
    resolve,
)
from ..setup import Setup, setup
from ..states import model_states
from ._common import PlanError, changed
from .cost import _PEAK_KEY, DEFAULT_MFU, Flops, flops_per_token
from .fit import DEFAULT_TARGET, _check_target, _largest, fits_target

MAX_GPUS = 4096
DEFAULT_GPUS_PER_NODE = 8  # DGX/HGX nodes
DEFAULT_INTER_NODE_GBPS = 50.0  # GB/s per GPU one way: a 400 Gb/s InfiniBand NDR port per GPU
CP_MIN_TOKENS = 4096  # judgement: shorter shards leave too little attention to hide the ring
CHECKPOINTING: tuple[Checkpointing, ...] = ("none", "selective", "full")
TIME_PARTS = ("compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "dp_comm", "bubble")


@dataclass(frozen=True, slots=True)
class StepTime:
    """Seconds per optimizer step, by part (see the module docstring)."""

    compute: float
    recompute: float
    tp_comm: float
    cp_comm: float
    ep_comm: float
    dp_comm: float
    bubble: float

    @property
    def total(self) -> float:
        return (self.compute + self.recompute + self.tp_comm + self.cp_comm + self.ep_comm
                + self.dp_comm + self.bubble)

    def as_dict(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in TIME_PARTS}


@dataclass(frozen=True, slots=True)
class Plan:
    """One layout that fits, its estimate and its step time."""

    rank: int
    scenario: Scenario
    estimate: Estimate
    target: float
    step_time: StepTime
    tokens_per_step: int
    why: str

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_time.total

    def as_dict(self) -> dict[str, Any]:
        t, p, e = self.scenario.training, self.scenario.parallelism, self.estimate
        return {
            "rank": self.rank,
            "layout": {"tp": p.tp, "pp": p.pp, "dp": p.dp, "cp": p.cp, "ep": p.ep,
                       "zero": p.zero, "sequence_parallel": p.sequence_parallel,
                       "activation_checkpointing": t.activation_checkpointing,
                       "micro_batch_size": t.micro_batch_size,
                       "gradient_accumulation_steps": t.gradient_accumulation_steps},
            "scenario": self.scenario.model_dump(mode="json"),
            "estimate": {"device_bytes": e.device_bytes, "usable_bytes": e.usable_bytes,
                         "limit_bytes": int(self.target * e.usable_bytes),
                         "utilization": round(e.utilization, 6), "peak_phase": e.peak_phase,
                         "fits": fits_target(e, self.target)},
            "step_time_s": self.step_time.total,
            "tokens_per_s": self.tokens_per_s,
            "time_s": self.step_time.as_dict(),
            "why": self.why,
        }


@dataclass(frozen=True, slots=True)
class AdviceResult:
    """The ranked plans and what the search did. In `rejected`, the rule reasons
    (`tp_not_dividing_heads`, `tp_crosses_node`, `pp_exceeds_layers`, `cp_short_sequence`,
    `dp_not_dividing_global_batch`) count (tp, pp, dp, cp) factorisations; the others
    (`model_states_exceed_target`, `no_micro_batch_fits`, `dominated`, `slower_than_top`)
    count the combinations of `searched`."""

    plans: tuple[Plan, ...]
    searched: int  # (tp, pp, dp, cp, ep, zero, checkpointing) combinations considered
    estimates: int  # calls of calc.estimate
    rejected: dict[str, int]  # reason -> count
    fitting: int  # non-dominated plans found (the search stops once `top` are certain)
    assumptions: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"plans": [p.as_dict() for p in self.plans], "searched": self.searched,
                "estimates": self.estimates, "rejected": dict(sorted(self.rejected.items())),
                "fitting": self.fitting, "assumptions": self.assumptions}


# ---------------------------------------------------------------------------------------------
# The step-time model
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class _Ctx:
    """What every layout shares: the model, the GPU, the batch, the links."""

    arch: Architecture
    moe_layers: int
    gpus: int
    node: int  # GPUs per node (capped at the GPU count)
    seq_len: int
    global_batch: int
    act_bytes: int  # bytes per activation element on the wire
    flops: dict[str, Flops]  # per checkpointing mode
    flops_per_s: float  # all GPUs: N x peak x mfu
    intra_bps: float  # bytes/s one way
    inter_bps: float
    exposed: float  # 1 - overlap
    tp_across_nodes: bool


@dataclass(frozen=True, slots=True)
class _Layout:
    tp: int
    pp: int
    dp: int
    cp: int
    ep: int
    zero: int

    @property
    def key(self) -> tuple[int, int, int, int, int]:
        return self.tp, self.pp, self.dp, self.cp, self.ep


def _bps(c: _Ctx, span: int) -> float:
    """One-way bandwidth of a group of consecutive ranks `span` wide."""
    inside = span <= c.node and c.node % span == 0
    return c.intra_bps if inside else c.inter_bps


def _step_time(c: _Ctx, lay: _Layout, ckpt: str, mb: int, params: tuple[int, int],
               weight_bytes: int, grad_bytes: int) -> StepTime:
    """Step time of one layout at micro-batch `mb` (formulas: the module docstring)."""
    a, h, s = c.arch, c.arch.hidden_size, c.seq_len
    t, p, d, cp, e = lay.tp, lay.pp, lay.dp, lay.cp, lay.ep
    seqs = c.global_batch // d  # sequences per replica per step
    m = seqs // mb  # micro-batches (gradient_accumulation_steps)
    f = c.flops[ckpt]
    compute = f.model * c.global_batch * s / c.flops_per_s
    recompute = f.recompute * c.global_batch * s / c.flops_per_s
    layers = -(-a.num_hidden_layers // p)
    full = ckpt == "full"
    tp_comm = cp_comm = ep_comm = 0.0
    if t > 1:
        bytes_ = (4 + 2 * full) * layers * seqs * (s // cp) * h * c.act_bytes * 2 * (t - 1) / t
        tp_comm = bytes_ / _bps(c, t)
    if cp > 1:
        if a.is_mla:
            kv_width = a.num_attention_heads * ((a.qk_nope_head_dim or 0)
                                                + (a.qk_rope_head_dim or 0) + (a.v_head_dim or 0))
        else:
            kv_width = 2 * a.kv_heads * a.head_size
        bytes_ = ((3 + full) * layers * seqs * (cp - 1) / cp * s * kv_width / t * c.act_bytes)
        cp_comm = bytes_ / _bps(c, t * cp)
    if e > 1:
        moe_layers = -(-c.moe_layers // p)
        tokens = s // cp // (t if s % (t * cp) == 0 else 1)  # sequence parallel splits over tp
        bytes_ = ((4 + 2 * full) * moe_layers * seqs * tokens * a.num_experts_per_tok * h
                  * c.act_bytes * (e - 1) / e)
        ep_comm = bytes_ / _bps(c, t * e)
    dp_comm = 0.0
    D = d * cp
    if D > 1:
        total, trainable = params
        ring = (D - 1) / D
        if lay.zero <= 1:
            passes = 2 * trainable * grad_bytes
        elif lay.zero == 2:
            passes = m * trainable * grad_bytes + trainable * weight_bytes
        else:
            passes = m * (2 * total * weight_bytes + trainable * grad_bytes)
        dp_comm = ring * passes / _bps(c, t * cp * d)
    x = c.exposed
    pipelined = compute + recompute + x * (tp_comm + cp_comm + ep_comm)
    bubble = pipelined * (p - 1) / m
    return StepTime(compute, recompute, x * tp_comm, x * cp_comm, x * ep_comm, x * dp_comm,
                    bubble)


# ---------------------------------------------------------------------------------------------
# The search
# ---------------------------------------------------------------------------------------------

def _divisors(n: int) -> list[int]:
    small = [k for k in range(1, math.isqrt(n) + 1) if n % k == 0]
    return sorted({*small, *(n // k for k in small)})


def _layouts(c: _Ctx, rejected: dict[str, int]) -> list[tuple[int, int, int, int]]:
    """(tp, pp, dp, cp) factorisations of the GPU count that break no rule."""
    a = c.arch
    out = []
    for tp in _divisors(c.gpus):
        for pp in _divisors(c.gpus // tp):
            for cp in _divisors(c.gpus // tp // pp):
                dp = c.gpus // tp // pp // cp
                reason = None
                if a.num_attention_heads % tp or (not a.is_mla and a.kv_heads % tp):
                    reason = "tp_not_dividing_heads"
                elif not c.tp_across_nodes and c.node % tp:
                    reason = "tp_crosses_node"
                elif pp > a.num_hidden_layers:
                    reason = "pp_exceeds_layers"
                elif c.seq_len % cp or (cp > 1 and c.seq_len // cp < CP_MIN_TOKENS):
                    reason = "cp_short_sequence"
                elif c.global_batch % dp:
                    reason = "dp_not_dividing_global_batch"
                if reason:
                    rejected[reason] = rejected.get(reason, 0) + 1
                else:
                    out.append((tp, pp, dp, cp))
    return out


class _Search:
    """Estimates with a counter; model-state floors; the micro-batch search."""

    def __init__(self, base: Scenario, ctx: _Ctx, target: float) -> None:
        self.base, self.ctx, self.target = base, ctx, target
        self.estimates = 0
        self._cache: dict[tuple[_Layout, str, int], Estimate] = {}
        self._resolved = r = resolve(base)
        self.limit = target * r.gpu.usable_bytes

    def parallelism(self, lay: _Layout) -> Parallelism:
        sp = lay.tp > 1 and self.ctx.seq_len % (lay.tp * lay.cp) == 0
        return Parallelism(dp=lay.dp, tp=lay.tp, pp=lay.pp, cp=lay.cp, ep=lay.ep, zero=lay.zero,
                           sequence_parallel=sp)

    def setup(self, lay: _Layout) -> Setup:
        """The symbols of the base scenario laid out as `lay` (no estimate)."""
        r = self._resolved
        scenario = r.scenario.model_copy(update={"parallelism": self.parallelism(lay)})
        return setup(replace(r, scenario=scenario))

    def params(self, lay: _Layout) -> tuple[int, int]:
        """(parameters, trainable parameters) on one GPU of the largest stage, before ZeRO."""
        x = self.setup(lay)
        local = [model_states(x, st).local for st in x.stages]
        return max(p.total for p in local), max(p.trainable for p in local)

    def states_fit(self, lay: _Layout) -> bool:
        """Whether parameters + gradients + optimizer states (a floor of the optimizer step's
        memory, batch-independent) plus the overheads they imply leave room under the target."""
        x = self.setup(lay)
        floor = 0
        for st in x.stages:
            ms = model_states(x, st)
            floor = max(floor, sum(t.bytes for t in (*ms.parameters, ms.gradients,
                                                     *ms.optimizer_states)))
        return floor + sum(t.bytes for t in overhead(floor, x)) <= self.limit

    def at(self, lay: _Layout, ckpt: str, mb: int) -> Estimate:
        key = (lay, ckpt, mb)
        if key not in self._cache:
            seqs = self.ctx.global_batch // lay.dp
            s = changed(self.base, training={
                "micro_batch_size": mb, "gradient_accumulation_steps": seqs // mb,
                "activation_checkpointing": ckpt}, parallelism=self.parallelism(lay).model_dump())
            self.estimates += 1
            self._cache[key] = estimate(s)
        return self._cache[key]

    def fitting(self, lay: _Layout, ckpt: str) -> list[int]:
        """The micro-batches (divisors of G/dp) that fit."""
        sizes = _divisors(self.ctx.global_batch // lay.dp)
        accum, single = sizes[:-1], sizes[-1]  # gradient accumulation > 1, and = 1

        def fits(k: int) -> bool:
            return fits_target(self.at(lay, ckpt, accum[k - 1]), self.target)

        out = accum[:_largest(fits, len(accum))] if accum and fits(1) else []
        if fits_target(self.at(lay, ckpt, single), self.target):
            out.append(single)
        return out


def _check(gpus: int, seq_len: int, global_batch: int, gpus_per_node: int,
           inter_node_gbps: float, mfu: float, overlap: float, top: int) -> None:
    for name, value, lo, hi in (("gpus", gpus, 1, MAX_GPUS), ("seq_len", seq_len, 1, 1 << 24),
                                ("global_batch", global_batch, 1, 1 << 30),
                                ("gpus_per_node", gpus_per_node, 1, MAX_GPUS),
                                ("top", top, 1, 10_000)):
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise PlanError(name, f"must be an integer in [{lo}, {hi}], got {value!r}")
    if not inter_node_gbps > 0:
        raise PlanError("inter_node_gbps", f"must be positive, got {inter_node_gbps}")
    if not 0 < mfu <= 1:
        raise PlanError("mfu", f"must be in (0, 1], got {mfu}")
    if not 0 <= overlap < 1:
        raise PlanError("overlap", f"must be in [0, 1), got {overlap}")


def advise(
    model: ModelSpec | dict[str, Any], gpu: str, gpus: int, seq_len: int, global_batch: int, *,
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
    inter_node_gbps: float = DEFAULT_INTER_NODE_GBPS, mfu: float = DEFAULT_MFU,
    target: float = DEFAULT_TARGET, overlap: float = 0.0,
    base_training: Training | dict[str, Any] | None = None, tp_across_nodes: bool = False,
    top: int = 10,
) -> AdviceResult:
    """The `top` fastest layouts of `gpus` GPUs that fit, for `global_batch` sequences of
    `seq_len` tokens per step. `base_training` gives the other training settings (precision,
    optimizer, LoRA...); micro-batch, accumulation and checkpointing are searched."""
    _check(gpus, seq_len, global_batch, gpus_per_node, inter_node_gbps, mfu, overlap, top)
    _check_target(target)
    training = (base_training.model_dump() if isinstance(base_training, Training)
                else dict(base_training or {}))
    training.update(seq_len=seq_len, micro_batch_size=1, gradient_accumulation_steps=1,
                    activation_checkpointing="none", recompute_layers=None)
    base = parse_scenario({"model": model, "gpu": gpu, "training": training})
    r = resolve(base)  # a bad model, GPU or precision is reported as itself
    t = base.training
    peak = r.gpu.dense_tflops.get(_PEAK_KEY[t.precision])
    if peak is None:
        raise PlanError("gpu", f"the {r.gpu.id} preset lists no dense {t.precision} TFLOPS")
    estimates = 0
    adapters = 0
    if t.finetuning != "full":
        adapters, estimates = estimate(base).trainable_param_count, 1
    flops: dict[str, Flops] = {ck: flops_per_token(r.arch, t.model_copy(update={"activation_checkpointing": ck}),
                                 adapters) for ck in CHECKPOINTING}
    ctx = _Ctx(r.arch, r.arch.moe_layer_count, gpus, min(gpus_per_node, gpus), seq_len, global_batch,
               numerics(t.precision, t.mixed_precision, False).compute, flops, gpus * peak * 1e12 * mfu,
               r.gpu.interconnect.bandwidth_gbps / 2 * 1e9, inter_node_gbps * 1e9, 1 - overlap,
               tp_across_nodes)
    rejected: dict[str, int] = {}
    search = _Search(base, ctx, target)
    search.estimates = estimates

    # Every combination with a lower bound of its step time (its best micro-batch, ignoring
    # memory), visited fastest first.
    heap: list[tuple[float, int, int, _Layout, Checkpointing, tuple[int, int], int, int]] = []
    searched = 0
    for tp, pp, dp, cp in _layouts(ctx, rejected):
        eps = [e for e in _divisors(r.arch.num_local_experts) if (dp * cp) % e == 0] \
            if r.arch.is_moe else [1]
        for ep in eps:
            zeros = [1, 2, 3] if dp * cp > 1 else [0]
            if dp * cp > 1:
                rejected["dominated"] = rejected.get("dominated", 0) + len(CHECKPOINTING)
            for zero in zeros:
                lay = _Layout(tp, pp, dp, cp, ep, zero)
                params = search.params(lay)
                n = numerics(t.precision, t.mixed_precision, zero == 3)
                wb, gb = n.gathered_weight if zero == 3 else n.weight, n.grad
                for i, ck in enumerate(CHECKPOINTING):
                    searched += 1
                    bound = min(_step_time(ctx, lay, ck, mb, params, wb, gb).total
                                for mb in _divisors(global_batch // dp))
                    heap.append((bound, i, searched, lay, ck, params, wb, gb))
    searched += rejected.get("dominated", 0)
    heapq.heapify(heap)

    found: list[_Found] = []
    kept: list[_Found] = []
    states_ok: dict[_Layout, bool] = {}
    no_need: set[tuple[_Layout, str]] = set()  # less recompute already fits at its best
    while heap:
        bound, i, _, lay, ck, params, wb, gb = heapq.heappop(heap)
        if len(kept) >= top and bound > sorted(x.time.total for x in kept)[top - 1]:
            rejected["slower_than_top"] = rejected.get("slower_than_top", 0) + 1 + len(heap)
            break
        reason = None
        if (lay, ck) in no_need:
            reason = "dominated"
        else:
            if lay not in states_ok:
                states_ok[lay] = search.states_fit(lay)
            if not states_ok[lay]:
                reason = "model_states_exceed_target"
        mbs = [] if reason else search.fitting(lay, ck)
        if not mbs:
            reason = reason or "no_micro_batch_fits"
            rejected[reason] = rejected.get(reason, 0) + 1
            continue
        time, mb = min(((_step_time(ctx, lay, ck, mb, params, wb, gb), mb) for mb in mbs),
                       key=lambda x: (x[0].total, -x[1]))
        found.append(_Found(time, lay, ck, mb, search.at(lay, ck, mb).device_bytes))
        kept = _non_dominated(found)
        if time.total <= bound * (1 + 1e-12):  # the unconstrained best fits: no need for more
            no_need.update((lay, more) for more in CHECKPOINTING[i + 1:])
    kept.sort(key=lambda x: (x.time.total, x.device_bytes, x.layout.key, x.layout.zero))
    rejected["dominated"] = rejected.get("dominated", 0) + len(found) - len(kept)
    plans = _plans(kept[:top], search, target, global_batch * seq_len)
    assumptions = {
        "gpus": gpus, "gpus_per_node": ctx.node, "gpu": r.gpu.id, "seq_len": seq_len,
        "global_batch": global_batch, "target": target, "mfu": mfu, "overlap": overlap,
        "peak_tflops_per_gpu": peak, "intra_node_gbps_one_way": ctx.intra_bps / 1e9,
        "inter_node_gbps": inter_node_gbps, "tp_across_nodes": tp_across_nodes}
    return AdviceResult(tuple(plans), searched, search.estimates, rejected, len(kept),
                        assumptions)


@dataclass(frozen=True, slots=True)
class _Found:
    time: StepTime
    layout: _Layout
    ckpt: str
    micro_batch: int
    device_bytes: int


def _non_dominated(found: list[_Found]) -> list[_Found]:
    """Plans no other plan of the same (tp, pp, dp, cp, ep) beats in time and memory both."""
    groups: dict[tuple[int, ...], list[_Found]] = {}
    for x in found:
        groups.setdefault(x.layout.key, []).append(x)
    out = []
    for group in groups.values():
        for x in group:
            tx, mx = x.time.total, x.device_bytes
            if not any(y.time.total <= tx and y.device_bytes <= mx
                       and (y.time.total < tx or y.device_bytes < mx) for y in group):
                out.append(x)
    return out


_WHY = {"recompute": "recomputation", "tp_comm": "tensor-parallel all-reduces",
        "cp_comm": "context-parallel K/V exchange", "ep_comm": "expert all-to-alls",
        "dp_comm": "gradient and parameter traffic", "bubble": "pipeline bubble"}


def _why(rank: int, time: StepTime, first: StepTime, e: Estimate, lay: _Layout,
         m: int, target: float) -> str:
    parts = time.as_dict()
    room = f"{e.utilization:.0%} of memory (target {target:.0%})"
    if rank == 1:
        worst = max(_WHY, key=lambda k: parts[k])
        if parts[worst] <= 0:
            return f"fastest: pure compute, no communication or recompute; {room}"
        return (f"fastest; largest overhead {_WHY[worst]} "
                f"({parts[worst] / time.total:.0%} of the step); {room}")
    ref = first.as_dict()
    worst = max(_WHY, key=lambda k: parts[k] - ref[k])
    detail = {"bubble": f"pp {lay.pp} over {m} micro-batches",
              "tp_comm": f"tp {lay.tp}", "cp_comm": f"cp {lay.cp}", "ep_comm": f"ep {lay.ep}",
              "dp_comm": f"ZeRO-{lay.zero} over {lay.dp * lay.cp} ranks",
              "recompute": "activation checkpointing"}[worst]
    slower = time.total / first.total - 1
    return (f"{slower:.1%} slower than #1, mostly {_WHY[worst]} ({detail}, "
            f"+{parts[worst] - ref[worst]:.3g} s); {room}")


def _plans(kept: list[_Found], search: _Search, target: float, tokens: int) -> list[Plan]:
    out = []
    for rank, x in enumerate(kept, 1):
        e = search.at(x.layout, x.ckpt, x.micro_batch)
        m = search.ctx.global_batch // x.layout.dp // x.micro_batch
        why = _why(rank, x.time, kept[0].time, e, x.layout, m, target)
        out.append(Plan(rank, e.scenario, e, target, x.time, tokens, why))
    return out


__all__ = ["DEFAULT_INTER_NODE_GBPS", "AdviceResult", "Plan", "StepTime", "advise"]
