r"""Parallelism advisor: the layouts of N GPUs that fit, ranked by an estimated step time. It
searches what practitioners change: TP x PP x DP (x CP, x EP), the ZeRO stage, the precision
(pure / amp / master), offload (optimizer; optimizer and parameters), activation
checkpointing (none / selective / partial / full) and the micro-batch.

    >>> a = advise("llama-3-8b", "h100-sxm-80gb", 8, 4096, 64)
    >>> p = a.plans[0].scenario.parallelism
    >>> p.tp * p.pp * p.dp * p.cp
    8

**Fit** is `calc.estimate.fit_status` = "fits": `device_bytes <= target x usable_bytes`;
with offload, the host memory of a node (GPUs per node x the estimate's `host_bytes`) must
also stay within `host_memory_gib`.

**Global batch**: given, or the scenario's own where it sets micro-batch, accumulation or dp;
else `DEFAULT_TOKENS_PER_STEP` tokens as a power of two of sequences (common practice:
0.5-4M tokens per step, e.g. 4M for Llama 2 and GPT-3 175B's 3.2M), at least one sequence per
`SEQUENCES_PER_GPU_FLOOR` GPUs.

**Step time**: `calc.plan.step_time` (compute, recompute, each parallelism's
communication, offload traffic and the CPU optimizer step, the pipeline bubble).

**Precision** is searched unless the training settings name `mixed_precision` (LoRA/QLoRA keep
`autocast`, fp32 keeps `pure`): `amp` (fp32 weights, gradients and states), `master` (bf16
weights and gradients, fp32 master copy: DeepSpeed / Megatron-LM) and `pure` (everything in
bf16: half the model states, a convergence risk without stochastic rounding or Kahan
summation; it ranks last among ties).

**Ranking**: by step time; plans within `TIE_TOLERANCE` of the fastest plan of their
group are a tie (the step-time model is not more precise than that), listed simplest first:
fp32 master weights kept (amp or master before pure), no offload, fewer parallel dimensions,
less recomputation, amp before master, a lower ZeRO stage.

**Search** (each estimate ~100 us, so pruned): layouts that break a rule (tp must divide the
heads and a node, pp <= layers, dp must divide the global batch, cp only for shards of at least
`CP_MIN_TOKENS`) are counted and dropped; with tp > 1 sequence parallelism is on (where seq_len
allows); ZeRO-0 is skipped where dp x cp > 1 (ZeRO-1 has its traffic and less memory);
combinations are visited in order of a lower bound of their step time and the search stops
once `top` plans beat every bound left by more than the tie tolerance (`slower_than_top`).
Then: model states alone above the target (or offloaded states above the host limit) reject
every micro-batch and checkpointing of a layout without estimating activations; the largest
fitting micro-batch among the divisors of G/dp is found by the monotone search; checkpointing
and offload are not tried where less of them already fits at its best micro-batch, and plans
of one parallel layout that are slower and not smaller than another are dropped
(`dominated`).

**What is trained** is the scenario's own (full fine-tuning, LoRA or QLoRA). With `allow_lora`
a full fine-tuning scenario is also searched as LoRA and as QLoRA (its `lora_rank` and
`lora_targets`; their precision `autocast` unless `mixed_precision` is given), each on its
own, and their plans are listed after full fine-tuning's, each group ranked as above: they
change what is trained (the adapters only, the base frozen), so they are never ranked or tied
with full fine-tuning's, and each says so (`Plan.changes_training`, `AdviceResult.trains`).
Their step is cheaper by its terms, not by a factor (`calc.plan.step_time`): no weight
gradients for the frozen base, data-parallel and offload traffic of the adapters alone;
QLoRA pays the dequantisation of its 4-bit base in every micro-batch.

**Nothing fits**: the answer says the floor (the smallest model states per GPU of any layout
searched, the most sharded one) and the changes that make something fit, each found by the same
search, in this order, the first being the smallest change: offload (where forbidden), more
GPUs (doubling, up to 16x), a larger GPU (the smallest that fits), more host memory, LoRA,
QLoRA (not with `allow_lora`, which lists their plans). The first three keep the training as
asked; LoRA changes what is trained.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import Field

from ..estimate import Estimate, estimate, estimate_within
from ..formatting import params as param_text
from ..numerics import numerics, numerics_for
from ..operations import Cli, Operation, Request
from ..overhead import overhead
from ..params import count_params
from ..presets import gpus as gpu_presets
from ..presets import resolve_gpu
from ..scenario import (
    Framework,
    ModelSpec,
    Parallelism,
    Resolved,
    Scenario,
    ScenarioError,
    Training,
    cp_over_sliding_window,
    engine_of,
    framework_problem,
    parse_scenario,
    resolve,
)
from ..setup import Setup, setup
from ..states import model_states
from ._common import MFU, GiB, PlanError, bounded, changed, gib
from .cost import _PEAK_KEY, DEFAULT_MFU, Flops, flops_per_token
from .fit import DEFAULT_TARGET, _check_target, _largest, fits_target
from .step_time import (
    CPU_ADAM_PARAMS_PER_S,
    DEFAULT_PCIE_GBPS,
    RECOMPUTED,
    Held,
    StepTime,
    _Ctx,
    _Layout,
    _step_time,
    held_by,
)

MAX_GPUS = 4096
DEFAULT_GPUS_PER_NODE = 8  # DGX/HGX nodes
DEFAULT_INTER_NODE_GBPS = 50.0  # GB/s per GPU one way: a 400 Gb/s InfiniBand NDR port per GPU
DEFAULT_HOST_MEMORY_GIB = 1024.0  # per node: half a DGX H100's 2 TiB (data loader, OS, pinned)
DEFAULT_TOKENS_PER_STEP = 1 << 21  # 2M tokens: mid-range of the 0.5-4M that LLMs train with
SEQUENCES_PER_GPU_FLOOR = 8  # the default batch gives at least one sequence per 8 GPUs
CP_MIN_TOKENS = 4096  # judgement: shorter shards leave too little attention to hide the ring
CHECKPOINTING: tuple[str, ...] = ("none", "selective", "partial", "full")
PRECISIONS: tuple[str, ...] = ("amp", "master", "pure")  # searched, in the tie order
ADAPTERS = ("lora", "qlora")  # searched beside full fine-tuning with allow_lora, in this order
OFFLOADS = ("none", "optimizer", "optimizer and parameters")  # _Layout.offload 0, 1, 2
DEFAULT_OVERLAP = 0.0  # pessimistic: no communication hidden behind compute
DEFAULT_TOP = 10
TIE_TOLERANCE = 0.03  # judgement: the step-time model is not more precise than 3%


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
    tie_group: int = 1  # plans with the same number are tied (within TIE_TOLERANCE)
    changes_training: bool = False  # LoRA or QLoRA beside full fine-tuning (allow_lora)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_time.total

    def as_dict(self) -> dict[str, Any]:
        t, p, e = self.scenario.training, self.scenario.parallelism, self.estimate
        return {
            "rank": self.rank,
            "tie_group": self.tie_group,
            "finetuning": t.finetuning,
            "changes_training": self.changes_training,
            "layout": {"tp": p.tp, "pp": p.pp, "dp": p.dp, "cp": p.cp, "ep": p.ep,
                       "zero": p.zero, "sequence_parallel": p.sequence_parallel,
                       "mixed_precision": t.mixed_precision,
                       "offload_optimizer": p.offload_optimizer,
                       "offload_params": p.offload_params,
                       "activation_checkpointing": t.activation_checkpointing,
                       "recompute_layers": t.recompute_layers,
                       "micro_batch_size": t.micro_batch_size,
                       "gradient_accumulation_steps": t.gradient_accumulation_steps},
            "scenario": self.scenario.model_dump(mode="json"),
            "estimate": {"device_bytes": e.device_bytes, "usable_bytes": e.usable_bytes,
                         "limit_bytes": int(self.target * e.usable_bytes),
                         "utilization": round(e.utilization, 6), "peak_phase": e.peak_phase,
                         "host_bytes": e.host_bytes,
                         "fits": fits_target(e, self.target), "status": e.status},
            "step_time_s": self.step_time.total,
            "tokens_per_s": self.tokens_per_s,
            "time_s": self.step_time.as_dict(),
            "why": self.why,
        }


@dataclass(frozen=True, slots=True)
class Change:
    """A change to the request that makes something fit, and its fastest plan."""

    kind: str  # host_memory, offload, gpus, gpu, lora, qlora
    title: str
    step_time_s: float
    device_bytes: int

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "title": self.title, "step_time_s": self.step_time_s,
                "device_bytes": self.device_bytes}


@dataclass(frozen=True, slots=True)
class Trains:
    """What one group of plans trains: the scenario's own training, or (allow_lora) LoRA or
    QLoRA beside full fine-tuning, which changes what is trained."""

    finetuning: str  # full, lora, qlora
    title: str  # e.g. "LoRA rank 16 on all linear"
    changes_training: bool
    param_count: int
    trainable_param_count: int
    plans: int  # listed (at most `top`)
    fastest_step_time_s: float | None
    rejected: dict[str, int]  # this search's (AdviceResult.rejected adds them up)

    def as_dict(self) -> dict[str, Any]:
        return {"finetuning": self.finetuning, "title": self.title,
                "changes_training": self.changes_training, "param_count": self.param_count,
                "trainable_param_count": self.trainable_param_count, "plans": self.plans,
                "fastest_step_time_s": self.fastest_step_time_s,
                "rejected": dict(sorted(self.rejected.items()))}


@dataclass(frozen=True, slots=True)
class AdviceResult:
    """The ranked plans and what the search did. In `rejected`, the rule reasons
    (`tp_not_dividing_heads`, `tp_crosses_node`, `pp_exceeds_layers`, `cp_short_sequence`,
    `dp_not_dividing_global_batch`, `cp_padded`: context parallelism for padded batches, whose
    mask torch's ring attention does not take, `cp_sliding_window`: nor the mask of sliding-window
    layers the sequence reaches) count (tp, pp, dp, cp) factorisations; the others
    (`framework_cannot_train`: a precision or stage the scenario's parallelism.framework does
    not run, `model_states_exceed_target`, `host_memory_exceeds_limit`, `no_micro_batch_fits`,
    `dominated`, `slower_than_top`) count the combinations of `searched`. Where nothing fits,
    `floor` and `changes` say how far off it is and what would fit. With allow_lora, `plans`
    lists the full fine-tuning plans, then LoRA's, then QLoRA's (each group fastest first,
    numbered on), `trains` says what each group trains, and the counts add up the searches.
    `floor` and `changes` are about the scenario's own training."""

    plans: tuple[Plan, ...]
    searched: int  # (tp, pp, dp, cp, ep, zero, precision, offload, checkpointing) combinations
    estimates: int  # calls of calc.estimate (or estimate_within, cut short where over the limit)
    rejected: dict[str, int]  # reason -> count
    fitting: int  # non-dominated plans found (the search stops once `top` are certain)
    assumptions: dict[str, Any] = field(default_factory=dict)
    floor: dict[str, Any] | None = None
    changes: tuple[Change, ...] = ()
    trains: tuple[Trains, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {"plans": [p.as_dict() for p in self.plans], "searched": self.searched,
                "estimates": self.estimates, "rejected": dict(sorted(self.rejected.items())),
                "fitting": self.fitting, "assumptions": self.assumptions,
                "floor": self.floor, "changes": [c.as_dict() for c in self.changes],
                "trains": [x.as_dict() for x in self.trains]}


# ---------------------------------------------------------------------------------------------
# The search
# ---------------------------------------------------------------------------------------------

def _divisors(n: int) -> list[int]:
    small = [k for k in range(1, math.isqrt(n) + 1) if n % k == 0]
    return sorted({*small, *(n // k for k in small)})


def default_global_batch(gpus: int, seq_len: int) -> int:
    """Sequences per step when none is given: DEFAULT_TOKENS_PER_STEP tokens, rounded down to
    a power of two of sequences, at least one per SEQUENCES_PER_GPU_FLOOR GPUs.

        >>> default_global_batch(16, 8192), default_global_batch(4096, 8192)
        (256, 512)
    """
    batch = 1 << max(0, (DEFAULT_TOKENS_PER_STEP // seq_len).bit_length() - 1)
    floor = -(-gpus // SEQUENCES_PER_GPU_FLOOR)
    while batch < floor:
        batch *= 2
    return batch


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


def _shardings(dp: int, cp: int, offloads: tuple[int, ...], meshed: bool = False
               ) -> Iterator[tuple[int, int]]:
    """(zero, offload) pairs: ZeRO 1-3 over dp x cp > 1 ranks (0 on one rank); optimizer
    offload needs ZeRO >= 1 (DeepSpeed's ZeRO-Offload), parameter offload ZeRO-3, and beside
    tp or pp (`meshed`) more than one rank (FSDP shards, and offloads, only over ranks)."""
    for zero in ((1, 2, 3) if dp * cp > 1 else (0,)):
        for off in offloads:
            if off == 2 and meshed and dp * cp == 1:
                continue
            if off == 0:
                yield zero, 0
            elif off == 1:
                yield max(zero, 1), 1
            elif zero == 3 or dp * cp == 1:
                yield 3, 2


class _Search:
    """Estimates with a counter; model-state floors; the micro-batch search."""

    def __init__(self, base: Scenario, ctx: _Ctx, target: float,
                 host_limit: float = float("inf")) -> None:
        self.base, self.ctx, self.target = base, ctx, target
        self.estimates = 0
        self._cache: dict[tuple[_Layout, str, int], Estimate] = {}
        self._over: set[tuple[_Layout, str, int]] = set()  # found over the limit, cut short
        self._resolved: dict[str, Resolved] = {}
        r = resolve(base)
        self.limit = target * r.gpu.usable_bytes
        self.host_limit = host_limit
        # the smallest model states per GPU seen within the host limit, and the smallest host
        # memory per node of an offloading layout whose GPU states fit
        self.floor: tuple[int, _Layout] | None = None
        self.host_floor: tuple[int, _Layout] | None = None

    def resolved(self, mixed: str) -> Resolved:
        if mixed not in self._resolved:
            self._resolved[mixed] = resolve(self.scenario_for(mixed))
        return self._resolved[mixed]

    def scenario_for(self, mixed: str) -> Scenario:
        if mixed == self.base.training.mixed_precision:
            return self.base
        return changed(self.base, training={"mixed_precision": mixed})

    def parallelism(self, lay: _Layout) -> Parallelism:
        sp = lay.tp > 1 and self.ctx.seq_len % (lay.tp * lay.cp) == 0
        return Parallelism(dp=lay.dp, tp=lay.tp, pp=lay.pp, cp=lay.cp, ep=lay.ep, zero=lay.zero,
                           sequence_parallel=sp, offload_optimizer=lay.offload >= 1,
                           offload_params=lay.offload == 2,
                           framework=self.base.parallelism.framework)

    def setup(self, lay: _Layout) -> Setup:
        """The symbols of the base scenario laid out as `lay` (no estimate)."""
        return setup(self.resolved(lay.mixed), self.parallelism(lay))

    def held(self, lay: _Layout) -> Held:
        """What one GPU of the largest stage holds, before ZeRO (calc.plan.step_time)."""
        return held_by(self.setup(lay), self.ctx.act_bytes)

    def states_fit(self, lay: _Layout) -> str | None:
        """None, or why parameters + gradients + optimizer states (a floor of the optimizer
        step's memory, batch-independent) plus the overheads they imply leave no room under
        the target (`model_states_exceed_target`), or the offloaded states of a node exceed
        the host limit (`host_memory_exceeds_limit`)."""
        x = self.setup(lay)
        floor = host = 0
        for st in x.stages:
            ms = model_states(x, st)
            floor = max(floor, sum(t.bytes for t in (*ms.parameters, ms.gradients,
                                                     *ms.resident, *ms.optimizer_states)))
            host = max(host, sum(t.bytes for t in ms.host))
        floor += sum(t.bytes for t in overhead(floor, x))
        host *= self.ctx.node
        if host <= self.host_limit and (self.floor is None or floor <= self.floor[0]):
            self.floor = (floor, lay)
        if floor <= self.limit and host and (self.host_floor is None
                                             or host < self.host_floor[0]):
            self.host_floor = (host, lay)
        if floor > self.limit:
            return "model_states_exceed_target"
        if host > self.host_limit:
            return "host_memory_exceeds_limit"
        return None

    def training(self, lay: _Layout, ckpt: str, mb: int) -> dict[str, Any]:
        seqs = self.ctx.global_batch // lay.dp
        out: dict[str, Any] = {"micro_batch_size": mb, "gradient_accumulation_steps": seqs // mb,
                               "mixed_precision": lay.mixed, "activation_checkpointing": ckpt,
                               "recompute_layers": None}
        if ckpt == "partial":
            per_stage = -(-self.ctx.arch.num_hidden_layers // lay.pp)
            out.update(activation_checkpointing="full", recompute_layers=max(1, per_stage // 2))
        return out

    def scenario_at(self, lay: _Layout, ckpt: str, mb: int) -> Scenario:
        return changed(self.base, training=self.training(lay, ckpt, mb),
                       parallelism=self.parallelism(lay).model_dump())

    def at(self, lay: _Layout, ckpt: str, mb: int) -> Estimate:
        key = (lay, ckpt, mb)
        if key not in self._cache:
            self.estimates += 1
            self._cache[key] = estimate(self.scenario_at(lay, ckpt, mb))
        return self._cache[key]

    def fits(self, lay: _Layout, ckpt: str, mb: int) -> bool:
        """Whether it fits (`fits_target`); where it does not, the estimate stops at the first
        pipeline rank over the limit (`estimate_within`): most tries do not fit."""
        key = (lay, ckpt, mb)
        if key not in self._cache and key not in self._over:
            self.estimates += 1
            e = estimate_within(self.scenario_at(lay, ckpt, mb), self.limit)
            if e is None:
                self._over.add(key)
            else:
                self._cache[key] = e
        return key not in self._over and fits_target(self._cache[key], self.target)

    def fitting(self, lay: _Layout, ckpt: str) -> list[int]:
        """The micro-batches (divisors of G/dp) that fit."""
        sizes = _divisors(self.ctx.global_batch // lay.dp)
        accum, single = sizes[:-1], sizes[-1]  # gradient accumulation > 1, and = 1

        def fits(k: int) -> bool:
            return self.fits(lay, ckpt, accum[k - 1])

        out = accum[:_largest(fits, len(accum))] if accum and fits(1) else []
        if self.fits(lay, ckpt, single):
            out.append(single)
        return out


def _check(gpus: int, seq_len: int, global_batch: int | None, gpus_per_node: int,
           inter_node_gbps: float, mfu: float, overlap: float, top: int,
           host_memory_gib: float, pcie_gbps: float) -> None:
    for name, value, lo, hi in (("gpus", gpus, 1, MAX_GPUS), ("seq_len", seq_len, 1, 1 << 24),
                                ("global_batch", global_batch, 1, 1 << 30),
                                ("gpus_per_node", gpus_per_node, 1, MAX_GPUS),
                                ("top", top, 1, 10_000)):
        if value is None and name == "global_batch":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            raise PlanError(name, f"must be an integer in [{lo}, {hi}], got {value!r}")
    bounded("inter_node_gbps", inter_node_gbps, 0, 100_000, low_open=True)
    bounded("mfu", mfu, *MFU)
    bounded("overlap", overlap, 0, 0.99)
    bounded("host_memory_gib", host_memory_gib, 0, 1 << 20)
    bounded("pcie_gbps", pcie_gbps, 0, 10_000, low_open=True)


def _given(training: Training | dict[str, Any] | None, name: str) -> bool:
    if isinstance(training, Training):
        return name in training.model_fields_set
    return bool(training) and name in training  # type: ignore[operator]


_Entry = tuple[float, int, int, _Layout, str, Held, int, int]


@dataclass(frozen=True, slots=True)
class _Outcome:
    """One search: what one kind of training (full, LoRA or QLoRA) fits, ranked."""

    ranked: list[tuple[int, _Found]]
    search: _Search
    searched: int
    rejected: dict[str, int]
    fitting: int
    precisions: tuple[str, ...]
    trainable: int  # trainable parameters of the whole model


def _search_layouts(base: Scenario, r: Resolved, peak: float, keep_precision: bool,
                    offloads: tuple[int, ...], *, gpus: int, global_batch: int, target: float,
                    host_memory_gib: float, top: int, node: int, mfu: float,
                    inter_node_gbps: float, overlap: float, tp_across_nodes: bool,
                    pcie_gbps: float) -> _Outcome:
    """The search (the module docstring) for one base scenario: its training is kept, the
    layout, precision (unless kept), offload, checkpointing and micro-batch are searched."""
    t = base.training
    seq_len = t.seq_len
    if keep_precision or t.finetuning != "full" or t.precision == "fp32":
        precisions: tuple[str, ...] = (t.mixed_precision,)
    else:
        precisions = PRECISIONS
    estimates = 0
    adapters = 0
    if t.finetuning != "full":
        adapters, estimates = estimate(base).trainable_param_count, 1
    full_flops = flops_per_token(r.arch, t.model_copy(update={"activation_checkpointing": "full"}),
                                 adapters)
    flops: dict[str, Flops] = {
        ck: flops_per_token(r.arch, t.model_copy(update={"activation_checkpointing": ck}),
                            adapters) for ck in ("none", "selective")}
    flops["full"] = full_flops
    flops["partial"] = Flops(full_flops.matmul, full_flops.attention,
                             round(full_flops.recompute * RECOMPUTED["partial"]))
    ctx = _Ctx(r.arch, r.arch.moe_layer_count, gpus, node, seq_len,
               global_batch, numerics(t.precision, t.mixed_precision, False).compute, flops,
               gpus * peak * 1e12 * mfu, r.gpu.interconnect.bandwidth_gbps / 2 * 1e9,
               inter_node_gbps * 1e9, 1 - overlap, tp_across_nodes,
               r.gpu.memory_bandwidth_gbps * 1e9, pcie_gbps * 1e9, CPU_ADAM_PARAMS_PER_S / node)
    rejected: dict[str, int] = {}
    framework = base.parallelism.framework  # kept; None: by precision (engine_of)
    search = _Search(base, ctx, target, host_memory_gib * GiB)
    search.estimates = estimates

    # Every combination with a lower bound of its step time (its best micro-batch, ignoring
    # memory), visited fastest first.
    heap: list[_Entry] = []
    searched = 0
    for tp, pp, dp, cp in _layouts(ctx, rejected):
        if cp > 1 and t.padded and t.implementation == "hf":  # torch's context
            # parallelism takes no attention mask (Megatron-LM ignores the padding: a warning)
            rejected["cp_padded"] = rejected.get("cp_padded", 0) + 1
            continue
        if cp_over_sliding_window(r.arch, t, cp):  # nor a sliding window's
            rejected["cp_sliding_window"] = rejected.get("cp_sliding_window", 0) + 1
            continue
        eps = [e for e in _divisors(r.arch.num_local_experts) if (dp * cp) % e == 0] \
            if r.arch.is_moe else [1]
        mbs = _divisors(global_batch // dp)
        for ep in eps:
            if dp * cp > 1 and 0 in offloads:  # ZeRO-0: ZeRO-1 has its traffic, less memory
                rejected["dominated"] = rejected.get("dominated", 0) + len(CHECKPOINTING) \
                    * len(precisions)
            held: Held | None = None
            for zero, off in _shardings(dp, cp, offloads, tp * pp > 1):
                for mixed in precisions:
                    lay = _Layout(tp, pp, dp, cp, ep, zero, mixed, off)
                    if framework and framework_problem(t.precision, mixed, t.implementation,
                                                       search.parallelism(lay)):
                        rejected["framework_cannot_train"] = \
                            rejected.get("framework_cannot_train", 0) + len(CHECKPOINTING)
                        continue
                    if held is None:
                        held = search.held(lay)
                    n = numerics_for(t.precision, mixed, zero,
                                     engine_of(framework, mixed) == "deepspeed")
                    wb, gb = n.gathered_weight if zero == 3 else n.weight, n.grad
                    # Without a bubble (pp 1) the fewest micro-batches are the fastest; the
                    # bubble shrinks with their count m, unless per-micro-batch work
                    # (ZeRO-2/3, parameter offload, QLoRA's dequantisation) grows with it:
                    # then every size is tried.
                    per_micro_batch = zero >= 2 or off == 2 or held.dequant_bytes > 0
                    tried = mbs[-1:] if pp == 1 else mbs if per_micro_batch else mbs[:1]
                    for i, ck in enumerate(CHECKPOINTING):
                        searched += 1
                        bound = min(_step_time(ctx, lay, ck, mb, held, wb, gb).total
                                    for mb in tried)
                        heap.append((bound, i, searched, lay, ck, held, wb, gb))
    searched += rejected.get("dominated", 0) + rejected.get("framework_cannot_train", 0)
    heapq.heapify(heap)

    found: list[_Found] = []
    kept: list[_Found] = []
    states_ok: dict[_Layout, str | None] = {}
    no_need: set[tuple[_Layout, str]] = set()  # less recompute already fits at its best
    fitting_at_best: set[tuple[tuple[int, ...], int, str, str]] = set()
    while heap:
        bound, i, _, lay, ck, held, wb, gb = heapq.heappop(heap)
        if len(kept) >= top and bound > sorted(x.time.total for x in kept)[top - 1] \
                * (1 + TIE_TOLERANCE):
            rejected["slower_than_top"] = rejected.get("slower_than_top", 0) + 1 + len(heap)
            break
        reason = None
        if (lay, ck) in no_need or (lay.offload and (lay.key, lay.zero, lay.mixed, ck)
                                    in fitting_at_best):
            reason = "dominated"
        else:
            if lay not in states_ok:
                states_ok[lay] = search.states_fit(lay)
            reason = states_ok[lay]
        mbs = [] if reason else search.fitting(lay, ck)
        if not mbs:
            reason = reason or "no_micro_batch_fits"
            rejected[reason] = rejected.get(reason, 0) + 1
            continue
        time, mb = min(((_step_time(ctx, lay, ck, mb, held, wb, gb), mb) for mb in mbs),
                       key=lambda x: (x[0].total, -x[1]))
        found.append(_Found(time, lay, ck, mb, search.at(lay, ck, mb).device_bytes))
        kept = _non_dominated(found)
        if time.total <= bound * (1 + 1e-12):  # the unconstrained best fits: no need for more
            no_need.update((lay, more) for more in CHECKPOINTING[i + 1:])
            if not lay.offload:
                fitting_at_best.add((lay.key, lay.zero, lay.mixed, ck))
    rejected["dominated"] = rejected.get("dominated", 0) + len(found) - len(kept)
    trainable = adapters if t.finetuning != "full" else count_params(r.arch).total
    return _Outcome(_ranked(kept)[:top], search, searched, rejected, len(kept), precisions,
                    trainable)


def advise(
    model: ModelSpec | dict[str, Any], gpu: str, gpus: int, seq_len: int,
    global_batch: int | None = None, *,
    gpus_per_node: int = DEFAULT_GPUS_PER_NODE,
    inter_node_gbps: float = DEFAULT_INTER_NODE_GBPS, mfu: float = DEFAULT_MFU,
    target: float = DEFAULT_TARGET, overlap: float = DEFAULT_OVERLAP,
    base_training: Training | dict[str, Any] | None = None, tp_across_nodes: bool = False,
    top: int = DEFAULT_TOP, host_memory_gib: float = DEFAULT_HOST_MEMORY_GIB,
    offload_optimizer: bool | None = None, offload_params: bool | None = None,
    pcie_gbps: float = DEFAULT_PCIE_GBPS, suggest: bool = True, allow_lora: bool = False,
    framework: Framework | None = None,
) -> AdviceResult:
    """The `top` fastest layouts of `gpus` GPUs that fit, for `global_batch` sequences of
    `seq_len` tokens per step (default: `default_global_batch`). `base_training` gives
    the other training settings (optimizer, LoRA...; a `mixed_precision` there is kept, else
    it is searched); micro-batch, accumulation, checkpointing, ZeRO and offload are searched.
    `offload_optimizer` / `offload_params`: True requires, False forbids, None searches.
    `suggest`: where nothing fits, search the changes that would fit (`changes`).
    `allow_lora`: for full fine-tuning, also the `top` fastest LoRA and QLoRA plans (the
    training's lora_rank and lora_targets), listed after the full fine-tuning plans: they
    change what is trained (`Plan.changes_training`). `framework` (parallelism.framework) is
    kept in every plan; precisions and stages it does not run are skipped."""
    _check(gpus, seq_len, global_batch, gpus_per_node, inter_node_gbps, mfu, overlap, top,
           host_memory_gib, pcie_gbps)
    _check_target(target)
    if not isinstance(allow_lora, bool):
        raise PlanError("allow_lora", f"must be true or false, got {allow_lora!r}")
    batch_source = "given"
    if global_batch is None:
        global_batch, batch_source = default_global_batch(gpus, seq_len), "default"
    training = (base_training.model_dump() if isinstance(base_training, Training)
                else dict(base_training or {}))
    keep_precision = _given(base_training, "mixed_precision")
    training.update(seq_len=seq_len, micro_batch_size=1, gradient_accumulation_steps=1,
                    activation_checkpointing="none", recompute_layers=None,
                    checkpoint_every=None, selective_policy=None)
    base = parse_scenario({"model": model, "gpu": gpu, "training": training,
                           "parallelism": {"framework": framework}})
    r = resolve(base)  # a bad model, GPU or precision is reported as itself
    t = base.training
    peak = r.gpu.dense_tflops.get(_PEAK_KEY[t.precision])
    if peak is None:
        raise PlanError("gpu", f"the {r.gpu.id} preset lists no dense {t.precision} TFLOPS")
    if offload_params:
        offloads: tuple[int, ...] = (2,)
    elif offload_optimizer:
        offloads = (1,) if offload_params is False else (1, 2)
    elif offload_optimizer is False:
        offloads = (0,)
    else:
        offloads = (0, 1) if offload_params is False else (0, 1, 2)
    node = min(gpus_per_node, gpus)
    # What is trained: the scenario's own, and with allow_lora LoRA and QLoRA beside full
    # fine-tuning, each searched alone.
    if allow_lora and t.finetuning != "full":
        raise PlanError("allow_lora", f"adds LoRA and QLoRA beside full fine-tuning; the "
                        f"scenario already trains {t.finetuning} (training.finetuning), which "
                        "the advisor keeps: leave allow_lora out")
    if allow_lora and framework == "deepspeed":
        raise PlanError("allow_lora", "LoRA and QLoRA are modelled with torch's forms, not "
                        "parallelism.framework deepspeed: leave one of them out")
    bases = [base]
    if allow_lora:
        adapted = {k: v for k, v in training.items() if keep_precision or k != "mixed_precision"}
        for kind in ADAPTERS:
            bases.append(parse_scenario({"model": model, "gpu": gpu,
                                         "training": {**adapted, "finetuning": kind},
                                         "parallelism": {"framework": framework}}))
            resolve(bases[-1])  # a bad lora_rank or lora_targets is reported as itself
    outcomes = [_search_layouts(b, r if b is base else resolve(b), peak, keep_precision,
                                offloads, gpus=gpus, global_batch=global_batch, target=target,
                                host_memory_gib=host_memory_gib, top=top, node=node, mfu=mfu,
                                inter_node_gbps=inter_node_gbps, overlap=overlap,
                                tp_across_nodes=tp_across_nodes, pcie_gbps=pcie_gbps)
                for b in bases]
    tokens = global_batch * seq_len
    plans: list[Plan] = []
    trains: list[Trains] = []
    for b, o in zip(bases, outcomes, strict=True):
        listed = _plans(o.ranked, o.search, target, tokens, b is not base,
                        rank=len(plans), group=plans[-1].tie_group if plans else 0)
        trains.append(_trains(b, o, listed, b is not base))
        plans += listed
    own = outcomes[0]
    assumptions = {
        "gpus": gpus, "gpus_per_node": node, "gpu": r.gpu.id, "seq_len": seq_len,
        "global_batch": global_batch, "global_batch_source": batch_source,
        "tokens_per_step": tokens, "target": target, "mfu": mfu,
        "overlap": overlap, "peak_tflops_per_gpu": peak,
        "intra_node_gbps_one_way": own.search.ctx.intra_bps / 1e9,
        "inter_node_gbps": inter_node_gbps,
        "tp_across_nodes": tp_across_nodes, "host_memory_gib": host_memory_gib,
        "pcie_gbps": pcie_gbps, "precisions": list(own.precisions),
        "offloads": [OFFLOADS[o] for o in offloads], "checkpointing": list(CHECKPOINTING),
        "tie_tolerance": TIE_TOLERANCE,
        "finetuning": [b.training.finetuning for b in bases], "framework": framework}
    rejected: dict[str, int] = {}
    for o in outcomes:
        for reason, count in o.rejected.items():
            rejected[reason] = rejected.get(reason, 0) + count
    floor = changes = None
    if not own.ranked:
        floor = _floor(own.search, target, host_memory_gib)
    if not own.ranked and suggest:
        changes = tuple(_changes(
            model, gpu, gpus, seq_len, global_batch, base_training, own.rejected,
            dict(gpus_per_node=gpus_per_node, inter_node_gbps=inter_node_gbps, mfu=mfu,
                 target=target, overlap=overlap, tp_across_nodes=tp_across_nodes,
                 host_memory_gib=host_memory_gib, offload_optimizer=offload_optimizer,
                 offload_params=offload_params, pcie_gbps=pcie_gbps), lora=len(bases) == 1))
    return AdviceResult(tuple(plans), sum(o.searched for o in outcomes),
                        sum(o.search.estimates for o in outcomes), rejected,
                        sum(o.fitting for o in outcomes), assumptions, floor, changes or (),
                        tuple(trains))


def _floor(search: _Search, target: float, host_memory_gib: float) -> dict[str, Any]:
    """How far from fitting: the smallest model states per GPU (within the host limit), and
    the host memory an offloading layout whose GPU states fit would need."""
    out: dict[str, Any] = {"model_states_bytes": None, "layout": None,
                           "limit_bytes": int(search.limit), "host_bytes_per_node": None,
                           "host_layout": None, "host_limit_bytes": int(host_memory_gib * GiB)}
    text = []
    if search.floor is not None:
        floor, lay = search.floor
        out.update(model_states_bytes=floor, layout=_layout_text(lay))
        text.append(f"the model states alone need {gib(floor)} per GPU at the most sharded "
                    f"layout ({_layout_text(lay)})" + (
                        f", above {target:.0%} of the GPU ({gib(search.limit)})"
                        if floor > search.limit else
                        ", within the target: the activations of one micro-batch do not fit"))
    if search.host_floor is not None:
        host, lay = search.host_floor
        out.update(host_bytes_per_node=host, host_layout=_layout_text(lay))
        text.append(f"offloading ({_layout_text(lay)}) needs {gib(host)} of host memory per "
                    f"node, above the {host_memory_gib:g} GiB limit")
    out["text"] = "; ".join(text) or "no layout searched"
    return out


def _changes(model: Any, gpu: str, gpus: int, seq_len: int, global_batch: int,
             base_training: Training | dict[str, Any] | None, rejected: dict[str, int],
             kwargs: dict[str, Any], *, lora: bool) -> Iterator[Change]:
    """The changes that make something fit, smallest first (see the module docstring);
    LoRA and QLoRA only where `lora` (not where the plans already list them)."""
    training = (base_training.model_dump(exclude_unset=True)
                if isinstance(base_training, Training) else dict(base_training or {}))

    def first(**over: Any) -> Plan | None:
        args: dict[str, Any] = {"model": model, "gpu": gpu, "gpus": gpus, "seq_len": seq_len,
                                "global_batch": global_batch, "base_training": training,
                                **kwargs, **over, "top": 1, "suggest": False}
        try:
            found = advise(**args)
        except (PlanError, ScenarioError):
            return None
        return found.plans[0] if found.plans else None

    def change(kind: str, title: str, plan: Plan | None) -> Iterator[Change]:
        if plan is not None:
            yield Change(kind, title, plan.step_time.total, plan.estimate.device_bytes)

    if kwargs["offload_optimizer"] is False or kwargs["offload_params"] is False:
        yield from change("offload", "allow CPU offload",
                          first(offload_optimizer=None, offload_params=None))
    more = gpus * 2
    while more <= min(MAX_GPUS, gpus * 16):
        plan = first(gpus=more, global_batch=max(global_batch, more // SEQUENCES_PER_GPU_FLOOR))
        if plan is not None:
            yield Change("gpus", f"{more} GPUs instead of {gpus}", plan.step_time.total,
                         plan.estimate.device_bytes)
            break
        more *= 2
    usable = resolve_gpu(gpu).usable_bytes
    for preset in sorted(gpu_presets().values(), key=lambda g: g.usable_bytes):
        if preset.usable_bytes > usable:
            plan = first(gpu=preset.id)
            if plan is not None:
                yield Change("gpu", f"a larger GPU: {preset.name}", plan.step_time.total,
                             plan.estimate.device_bytes)
                break
    if rejected.get("host_memory_exceeds_limit"):
        yield from change("host_memory", "more host memory per node (no limit)",
                          first(host_memory_gib=float(1 << 20)))
    if lora and training.get("finetuning", "full") == "full":
        for kind, what in (("lora", "LoRA"), ("qlora", "QLoRA (4-bit base)")):
            tuned = {k: v for k, v in training.items() if k != "mixed_precision"}
            plan = first(base_training={**tuned, "finetuning": kind})
            if plan is not None:
                yield Change(kind, f"{what} instead of full fine-tuning", plan.step_time.total,
                             plan.estimate.device_bytes)
                break


@dataclass(frozen=True, slots=True)
class _Found:
    time: StepTime
    layout: _Layout
    ckpt: str
    micro_batch: int
    device_bytes: int

    @property
    def simplicity(self) -> tuple[int, ...]:
        """Smaller is simpler: fp32 master weights kept (not pure), no offload, fewer
        parallel dimensions, less recompute, amp before master, a lower ZeRO stage."""
        lay = self.layout
        dims = sum(d > 1 for d in (lay.tp, lay.pp, lay.cp, lay.ep))
        mixed = PRECISIONS.index(lay.mixed) if lay.mixed in PRECISIONS else 0
        return (lay.mixed == "pure", lay.offload, dims, CHECKPOINTING.index(self.ckpt), mixed,
                lay.zero)


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


def _ranked(kept: list[_Found]) -> list[tuple[int, _Found]]:
    """(tie group, plan) by step time; a group is every plan within TIE_TOLERANCE of its
    fastest, listed simplest first."""
    by_time = sorted(kept, key=lambda x: (x.time.total, x.device_bytes, x.layout.key))
    out: list[tuple[int, _Found]] = []
    group = 0
    i = 0
    while i < len(by_time):
        group += 1
        limit = by_time[i].time.total * (1 + TIE_TOLERANCE)
        j = i
        while j < len(by_time) and by_time[j].time.total <= limit:
            j += 1
        members = sorted(by_time[i:j], key=lambda x: (x.simplicity, x.time.total))
        out += [(group, x) for x in members]
        i = j
    return out


_WHY = {"recompute": "recomputation", "dequant": "QLoRA's dequantisation",
        "tp_comm": "tensor-parallel all-reduces",
        "cp_comm": "context-parallel K/V exchange", "ep_comm": "expert all-to-alls",
        "dp_comm": "gradient and parameter traffic", "offload": "CPU offload",
        "bubble": "pipeline bubble"}


def _layout_text(lay: _Layout) -> str:
    parts = [f"tp {lay.tp}", f"pp {lay.pp}", f"dp {lay.dp}"]
    parts += [f"cp {lay.cp}"] if lay.cp > 1 else []
    parts += [f"ep {lay.ep}"] if lay.ep > 1 else []
    parts += [f"ZeRO-{lay.zero}", lay.mixed]
    parts += [f"offload {OFFLOADS[lay.offload]}"] if lay.offload else []
    return ", ".join(parts)


def _why(time: StepTime, fastest: StepTime, tied: int, e: Estimate, lay: _Layout,
         m: int, target: float) -> str:
    """Why a plan is where it is: its largest overhead, or what it pays over the fastest plan;
    `tied`: how many plans share its tie group."""
    parts = time.as_dict()
    room = f"{e.utilization:.0%} of memory (target {target:.0%})"
    if lay.mixed == "pure":
        room += "; pure bf16 keeps no fp32 master weights (a convergence risk on long runs)"
    if lay.offload:
        room += f"; {gib(e.host_bytes)} of host memory per GPU"
    slower = time.total / fastest.total - 1
    tie = (f"one of {tied} tied within {TIE_TOLERANCE:.0%}, simplest first; " if tied > 1
           else "")
    if slower <= TIE_TOLERANCE:
        worst = max(_WHY, key=lambda k: parts[k])
        lead = "fastest" if slower <= 0 else f"{slower:.1%} slower than the fastest"
        if parts[worst] <= 0:
            return f"{tie}{lead}: pure compute, no communication or recompute; {room}"
        return (f"{tie}{lead}; largest overhead {_WHY[worst]} "
                f"({parts[worst] / time.total:.0%} of the step); {room}")
    ref = fastest.as_dict()
    worst = max(_WHY, key=lambda k: parts[k] - ref[k])
    extra = parts[worst] - ref[worst]
    if extra <= 0:
        return f"{tie}{slower:.1%} slower than the fastest; {room}"
    detail = {"bubble": f"pp {lay.pp} over {m} micro-batches",
              "tp_comm": f"tp {lay.tp}", "cp_comm": f"cp {lay.cp}", "ep_comm": f"ep {lay.ep}",
              "dp_comm": f"ZeRO-{lay.zero} over {lay.dp * lay.cp} ranks",
              "offload": f"offload of the {OFFLOADS[lay.offload]}",
              "recompute": "activation checkpointing",
              "dequant": f"the 4-bit base dequantised for each of {m} micro-batches"}[worst]
    return (f"{tie}{slower:.1%} slower than the fastest, mostly {_WHY[worst]} ({detail}, "
            f"+{extra:.3g} s); {room}")


def _plans(ranked: list[tuple[int, _Found]], search: _Search, target: float,
           tokens: int, changes_training: bool, *, rank: int, group: int) -> list[Plan]:
    """The plans of one search, numbered on from `rank` and tie group `group`."""
    if not ranked:
        return []
    fastest = min((x.time for _, x in ranked), key=lambda t: t.total)
    sizes: dict[int, int] = {}
    for g, _ in ranked:
        sizes[g] = sizes.get(g, 0) + 1
    t = search.base.training
    mark = f"{_trains_text(t)}, not full fine-tuning; " if changes_training else ""
    out = []
    for i, (g, x) in enumerate(ranked, rank + 1):
        e = search.at(x.layout, x.ckpt, x.micro_batch)
        m = search.ctx.global_batch // x.layout.dp // x.micro_batch
        why = mark + _why(x.time, fastest, sizes[g], e, x.layout, m, target)
        out.append(Plan(i, e.scenario, e, target, x.time, tokens, why, group + g,
                        changes_training))
    return out


def _trains_text(t: Training) -> str:
    """What a training trains, in words."""
    if t.finetuning == "full":
        return "full fine-tuning"
    kind = "QLoRA (4-bit base)" if t.finetuning == "qlora" else "LoRA"
    return f"{kind} rank {t.lora_rank} on {t.lora_targets.replace('_', ' ')}"


def _trains(base: Scenario, o: _Outcome, plans: list[Plan], changes_training: bool) -> Trains:
    t = base.training
    fastest = min((p.step_time.total for p in plans), default=None)
    return Trains(t.finetuning, _trains_text(t), changes_training,
                  count_params(o.search.ctx.arch).total, o.trainable, len(plans), fastest,
                  o.rejected)


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
    parallelism: dict[str, Any] = Field(default_factory=dict, description=(
        "only offload_optimizer / offload_params (true: every plan offloads it, false: none "
        "does; default: searched) and framework (kept, over the scenario's); the rest of the "
        "parallelism is what is searched"))
    gpus: int = Field(title="GPU count", description=f"GPUs to lay out (1 to {MAX_GPUS})",
                      examples=[DEFAULT_GPUS_PER_NODE],
                      json_schema_extra={"minimum": 1, "maximum": MAX_GPUS})
    gpus_per_node: int = Field(DEFAULT_GPUS_PER_NODE, title="GPUs per node",
                               description="GPUs per node")
    global_batch: int | None = Field(None, title="Global batch (sequences per step)", description=(
        "sequences per step (default: the scenario's micro-batch × accumulation × dp where it "
        f"sets one of them, else about {DEFAULT_TOKENS_PER_STEP / 1e6:.0f}M tokens: a power "
        "of two of sequences)"))
    inter_node_gbps: float = Field(
        DEFAULT_INTER_NODE_GBPS, title="Inter-node bandwidth (GB/s per GPU, one way)",
        description="GB/s per GPU between nodes, one way (50: 400 Gb/s InfiniBand NDR)")
    mfu: float = Field(DEFAULT_MFU, description="efficiency of the compute")
    target: float = Field(DEFAULT_TARGET, description="fraction of the GPU's usable memory")
    overlap: float = Field(DEFAULT_OVERLAP, description="fraction of communication hidden "
                                                        "behind compute")
    tp_across_nodes: Annotated[bool, Cli(flag="--allow-cross-node-tp")] = Field(
        False, description="let tensor parallelism span nodes")
    allow_lora: bool = Field(False, title="Also LoRA and QLoRA", description=(
        "for full fine-tuning, also search LoRA and QLoRA (the training's lora_rank and "
        "lora_targets), listed apart: they change what is trained"))
    top: int = Field(DEFAULT_TOP, description="plans to list")
    host_memory_gib: Annotated[float, Cli(flag="--host-memory")] = Field(
        DEFAULT_HOST_MEMORY_GIB, title="Host memory per node (GiB)",
        description="CPU memory per node that offloaded states may use, GiB (default: half "
                    "a DGX H100's 2 TiB)")
    pcie_gbps: float = Field(DEFAULT_PCIE_GBPS, title="PCIe bandwidth (GB/s per GPU, one way)",
                             description="host-GPU bandwidth for offload (25: PCIe 4.0 x16)")

    def base(self) -> dict[str, Any]:
        """The scenario advised on: `scenario` with `model`, `gpu` and `training` over it."""
        for name in self.parallelism:
            if name == "framework":
                continue  # checked with the scenario
            if name not in OFFLOAD_FIELDS:
                raise PlanError(f"parallelism.{name}", "advise searches tp, pp, dp, cp, ep, "
                                "zero and sequence_parallel; leave it out (offload_optimizer "
                                "and offload_params may be given: true requires, false "
                                "forbids; framework is kept)")
            if not isinstance(self.parallelism[name], bool):
                raise PlanError(f"parallelism.{name}", "must be true or false")
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

    def batch(self, scenario: Scenario) -> int | None:
        """`global_batch`; else the scenario's own where it sets micro-batch, accumulation or
        dp; else None (advise's default)."""
        if self.global_batch is not None:
            return self.global_batch
        raw = self.scenario or {}
        given = {**(raw.get("training") or {}), **self.training}
        if not any(k in given for k in ("micro_batch_size", "gradient_accumulation_steps")) \
                and "dp" not in (raw.get("parallelism") or {}):
            return None
        t, p = scenario.training, scenario.parallelism
        return t.micro_batch_size * t.gradient_accumulation_steps * p.dp


OFFLOAD_FIELDS = ("offload_optimizer", "offload_params")


def _run(q: AdviseRequest) -> AdviceResult:
    data = q.base()
    s = parse_scenario(data)  # as given: its own batch, its framework
    return advise(data["model"], s.gpu, q.gpus, s.training.seq_len, q.batch(s),
                  gpus_per_node=q.gpus_per_node, inter_node_gbps=q.inter_node_gbps, mfu=q.mfu,
                  target=q.target, overlap=q.overlap, base_training=data["training"],
                  tp_across_nodes=q.tp_across_nodes, top=q.top, host_memory_gib=q.host_memory_gib,
                  pcie_gbps=q.pcie_gbps, allow_lora=q.allow_lora,
                  offload_optimizer=q.parallelism.get("offload_optimizer"),
                  offload_params=q.parallelism.get("offload_params"),
                  framework=q.parallelism.get("framework", s.parallelism.framework))


def _plan_lines(p: dict[str, Any]) -> list[str]:
    lay, est = p["layout"], p["estimate"]
    off = [k.removeprefix("offload_") for k in OFFLOAD_FIELDS if lay[k]]
    ck = lay["activation_checkpointing"]
    if lay["recompute_layers"] is not None:
        ck = f"partial ({lay['recompute_layers']} layers per stage)"
    return [
        f"{p['rank']:>3}. [{p['tie_group']}] tp {lay['tp']} pp {lay['pp']} dp {lay['dp']} "
        f"cp {lay['cp']} ep {lay['ep']} zero {lay['zero']} {lay['mixed_precision']}"
        f"{' offload ' + '+'.join(off) if off else ''} ckpt {ck} "
        f"micro-batch {lay['micro_batch_size']} x {lay['gradient_accumulation_steps']}: "
        f"{p['step_time_s']:.3f} s/step, {p['tokens_per_s']:,.0f} tokens/s, "
        f"{gib(est['device_bytes'])}",
        f"     {p['why']}"]


def _nothing_fits(result: AdviceResult, rejected: dict[str, int]) -> list[str]:
    """Why the scenario's own training fits nowhere, and the changes that would fit."""
    floor = result.floor
    lines = ["nothing fits" + (f": {floor['text']}" if floor else "")]
    if result.changes:
        c = result.changes[0]
        lines.append(f"smallest change: {c.title} ({c.step_time_s:.3f} s/step, "
                     f"{gib(c.device_bytes)})")
        lines += [f"  or: {c.title} ({c.step_time_s:.3f} s/step, {gib(c.device_bytes)})"
                  for c in result.changes[1:]]
    else:
        lora = "" if len(result.trains) > 1 else ", LoRA, QLoRA"
        lines.append(f"no single change searched (offload, more GPUs, a larger GPU{lora}) "
                     "makes it fit")
    lines.append("  rejected: " + ", ".join(f"{k} {v}" for k, v in sorted(rejected.items())))
    return lines


def _group_head(g: Trains, full: Trains) -> str:
    """A group's heading: what it trains; for LoRA and QLoRA, that it is not full
    fine-tuning and how its fastest step compares."""
    if not g.changes_training:
        head = f"{g.title}: trains all {param_text(g.param_count)} parameters"
    else:
        head = (f"{g.title}: CHANGES WHAT IS TRAINED, not equivalent to full fine-tuning: "
                f"trains {param_text(g.trainable_param_count)} adapter parameters "
                f"({g.trainable_param_count / g.param_count:.2%} of "
                f"{param_text(g.param_count)}), the base frozen")
    if g.fastest_step_time_s is None:  # the scenario's own: _nothing_fits follows
        return head if g is full else f"{head}; nothing fits"
    head += f"; fastest {g.fastest_step_time_s:.3f} s/step"
    if g.changes_training:
        head += (" (full fine-tuning: nothing fits)" if full.fastest_step_time_s is None else
                 f" (full fine-tuning's: {full.fastest_step_time_s:.3f})")
    return head


def _text(result: AdviceResult, request: AdviseRequest) -> str:
    d = result.as_dict()
    a = d["assumptions"]
    source = {"given": "", "default": " (default: about "
              f"{DEFAULT_TOKENS_PER_STEP / 1e6:.0f}M tokens per step; --global-batch to set)"}
    lines = [f"{a['gpus']} GPUs, {a['global_batch']} sequences of {a['seq_len']} tokens per "
             f"step{source[a['global_batch_source']]}: {d['estimates']} estimates over "
             f"{d['searched']} combinations; plans within {a['tie_tolerance']:.0%} of each other "
             "are tied and listed simplest first"
             + (f"; every plan runs {a['framework']} (parallelism.framework)"
                if a["framework"] else "")]
    if len(result.trains) <= 1:  # the scenario's own training alone
        for p in d["plans"]:
            lines += _plan_lines(p)
        if not d["plans"]:
            lines += _nothing_fits(result, d["rejected"])
        return "\n".join(lines)
    for g in result.trains:  # allow_lora: one group per training, full fine-tuning first
        lines.append(_group_head(g, result.trains[0]))
        for p in d["plans"]:
            if p["finetuning"] == g.finetuning:
                lines += _plan_lines(p)
        if g is result.trains[0] and not g.plans:
            lines += _nothing_fits(result, g.rejected)
    return "\n".join(lines)


OPERATIONS: tuple[Operation[AdviseRequest, AdviceResult], ...] = (
    Operation("advise", "parallelism layouts of N GPUs that fit, fastest first", AdviseRequest,
              run=_run, text=_text),
)

__all__ = ["DEFAULT_HOST_MEMORY_GIB", "DEFAULT_INTER_NODE_GBPS", "DEFAULT_TOKENS_PER_STEP",
           "TIE_TOLERANCE", "AdviceResult", "AdviseRequest", "Change", "Plan", "StepTime",
           "advise", "default_global_batch"]
