r"""Parallelism advisor: the TP x PP x DP (x CP, x EP) x ZeRO x checkpointing x micro-batch
layouts of N GPUs that fit, ranked by an estimated step time.

    >>> a = advise("llama-3-8b", "h100-sxm-80gb", 8, 4096, 64)
    >>> p = a.plans[0].scenario.parallelism
    >>> p.tp * p.pp * p.dp * p.cp
    8

**Fit** is :func:`calc.plan.fits_target`: `device_bytes <= target x usable_bytes`.

**Step time**: :mod:`calc.plan.step_time` (compute, recompute, each parallelism's
communication and the pipeline bubble, from the FLOPs of :mod:`calc.plan.cost` and the links'
bandwidths).

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
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import Field

from ..estimate import Estimate, estimate
from ..numerics import numerics
from ..operations import Cli, Operation, Request
from ..overhead import overhead
from ..scenario import (
    Checkpointing,
    ModelSpec,
    Parallelism,
    Scenario,
    ScenarioError,
    Training,
    parse_scenario,
    resolve,
)
from ..setup import Setup, setup
from ..states import local, model_states
from ._common import MFU, PlanError, bounded, changed, gib
from .cost import _PEAK_KEY, DEFAULT_MFU, Flops, flops_per_token
from .fit import DEFAULT_TARGET, _check_target, _largest, fits_target
from .step_time import StepTime, _Ctx, _Layout, _step_time

MAX_GPUS = 4096
DEFAULT_GPUS_PER_NODE = 8  # DGX/HGX nodes
DEFAULT_INTER_NODE_GBPS = 50.0  # GB/s per GPU one way: a 400 Gb/s InfiniBand NDR port per GPU
CP_MIN_TOKENS = 4096  # judgement: shorter shards leave too little attention to hide the ring
CHECKPOINTING: tuple[Checkpointing, ...] = ("none", "selective", "full")
DEFAULT_OVERLAP = 0.0  # pessimistic: no communication hidden behind compute
DEFAULT_TOP = 10


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
        return setup(self._resolved, self.parallelism(lay))

    def params(self, lay: _Layout) -> tuple[int, int]:
        """(parameters, trainable parameters) on one GPU of the largest stage, before ZeRO."""
        x = self.setup(lay)
        held = [local(x, st) for st in x.stages]
        return max(p.total for p in held), max(p.trainable for p in held)

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
    bounded("inter_node_gbps", inter_node_gbps, 0, 100_000, low_open=True)
    bounded("mfu", mfu, *MFU)
    bounded("overlap", overlap, 0, 0.99)


def advise(
    model: ModelSpec | dict[str, Any], gpu: str, gpus: int, seq_len: int, global_batch: int, *,
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
    inter_node_gbps: float = DEFAULT_INTER_NODE_GBPS, mfu: float = DEFAULT_MFU,
    target: float = DEFAULT_TARGET, overlap: float = DEFAULT_OVERLAP,
    base_training: Training | dict[str, Any] | None = None, tp_across_nodes: bool = False,
    top: int = DEFAULT_TOP,
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
                n = numerics(t.precision, t.mixed_precision, zero >= 2)
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


# ---------------------------------------------------------------------------------------------
# The operation: calc advise
# ---------------------------------------------------------------------------------------------

class AdviseRequest(Request):
    """The scenario's model, GPU, sequence length and training settings are the base; its
    parallelism, micro-batch, accumulation and checkpointing are searched."""

    scenario: dict[str, Any] | None = Field(None, description=(
        "the base scenario; on the command line a file, or - for stdin (default: none, "
        "`model` and `training` alone)"))
    model: str | dict[str, Any] | None = Field(None, description="the model, over the "
                                               "scenario's (the command line's --model)")
    gpu: str | None = Field(None, description="the GPU preset, over the scenario's")
    training: dict[str, Any] = Field(default_factory=dict, description="training settings "
                                     "over the scenario's (the command line's training flags)")
    parallelism: dict[str, Any] = Field(default_factory=dict, description="none: the "
                                        "parallelism is what is searched")
    gpus: int = Field(title="GPU count", description=f"GPUs to lay out (1 to {MAX_GPUS})",
                      examples=[DEFAULT_GPUS_PER_NODE],
                      json_schema_extra={"minimum": 1, "maximum": MAX_GPUS})
    gpus_per_node: int = Field(DEFAULT_GPUS_PER_NODE, title="GPUs per node",
                               description="GPUs per node")
    global_batch: int | None = Field(None, title="Global batch (sequences per step)", description=(
        "sequences per step (default: the scenario's micro-batch × accumulation × dp; with no "
        "scenario, the GPU count)"))
    inter_node_gbps: float = Field(
        DEFAULT_INTER_NODE_GBPS, title="Inter-node bandwidth (GB/s per GPU, one way)",
        description="GB/s per GPU between nodes, one way (50: 400 Gb/s InfiniBand NDR)")
    mfu: float = Field(DEFAULT_MFU, description="efficiency of the compute")
    target: float = Field(DEFAULT_TARGET, description="fraction of the GPU's usable memory")
    overlap: float = Field(DEFAULT_OVERLAP, description="fraction of communication hidden "
                                                        "behind compute")
    tp_across_nodes: Annotated[bool, Cli(flag="--allow-cross-node-tp")] = Field(
        False, description="let tensor parallelism span nodes")
    top: int = Field(DEFAULT_TOP, description="plans to list")

    def base(self) -> dict[str, Any]:
        """The scenario advised on: `scenario` with `model`, `gpu` and `training` over it."""
        if self.parallelism:
            raise PlanError(f"parallelism.{next(iter(self.parallelism))}",
                            "is searched by advise; leave it out")
        data = dict(self.scenario or {})
        training = data.get("training") or {}
        if not isinstance(training, dict):
            raise ScenarioError("training", "must be a JSON object")
        data["training"] = {**training, **self.training}
        if self.model is not None:
            data["model"] = self.model
        if self.gpu is not None:
            data["gpu"] = self.gpu
        return data

    def batch(self, scenario: Scenario) -> int:
        """`global_batch`, or its default (see its description)."""
        if self.global_batch is not None:
            return self.global_batch
        if self.scenario is None:
            return self.gpus
        t, p = scenario.training, scenario.parallelism
        return t.micro_batch_size * t.gradient_accumulation_steps * p.dp


def _run(q: AdviseRequest) -> AdviceResult:
    data = q.base()
    s = parse_scenario(data)
    return advise(data["model"], s.gpu, q.gpus, s.training.seq_len, q.batch(s),
                  gpus_per_node=q.gpus_per_node, inter_node_gbps=q.inter_node_gbps, mfu=q.mfu,
                  target=q.target, overlap=q.overlap, base_training=data["training"],
                  tp_across_nodes=q.tp_across_nodes, top=q.top)


def _text(result: AdviceResult, request: AdviseRequest) -> str:
    d = result.as_dict()
    a = d["assumptions"]
    lines = [f"{a['gpus']} GPUs, {a['global_batch']} sequences of {a['seq_len']} tokens per "
             f"step: {d['estimates']} estimates over {d['searched']} combinations"]
    for p in d["plans"]:
        lay, est = p["layout"], p["estimate"]
        lines.append(
            f"{p['rank']:>3}. tp {lay['tp']} pp {lay['pp']} dp {lay['dp']} cp {lay['cp']} "
            f"ep {lay['ep']} zero {lay['zero']} ckpt {lay['activation_checkpointing']} "
            f"micro-batch {lay['micro_batch_size']} x {lay['gradient_accumulation_steps']}: "
            f"{p['step_time_s']:.3f} s/step, {p['tokens_per_s']:,.0f} tokens/s, "
            f"{gib(est['device_bytes'])}")
        lines.append(f"     {p['why']}")
    if not d["plans"]:
        lines.append("nothing fits: " + ", ".join(f"{k} {v}" for k, v in d["rejected"].items()))
    return "\n".join(lines)


OPERATIONS: tuple[Operation[AdviseRequest, AdviceResult], ...] = (
    Operation("advise", "parallelism layouts of N GPUs that fit, fastest first", AdviseRequest,
              run=_run, text=_text),
)

__all__ = ["DEFAULT_INTER_NODE_GBPS", "AdviceResult", "AdviseRequest", "Plan", "StepTime",
           "advise"]
