"""Recommendations: single changes, what each saves in device memory and what it costs in
throughput.

Each lever builds a changed scenario and re-runs the estimator, so every claimed saving is the
estimator's own difference (`saving_bytes = before.device_bytes - after.device_bytes`, checked
by a property test), and the advisor's step-time model (`calc.plan.step_time.step_time_of`:
compute, recomputation, communication, offload traffic and the CPU optimizer step, the pipeline
bubble) gives its cost: `slowdown` = tokens/s per GPU before / after - 1 (negative: faster;
per GPU, so a lever that adds GPUs is not "faster" for spending them).
Levers that are invalid for the scenario (the estimator raises a `calc.ScenarioError`)
are left out.

**Ranking** (`rank_rule` in the answer):

- the scenario does not fit (its status is not "fits", `calc.estimate.fit_status`):
  first the levers after which it fits, least slowdown first, those that change what is
  trained (`CHANGES_TRAINING`: sequence length, LoRA/QLoRA, optimizer) after the others; then
  the others, most memory saved first;
- it fits: first the levers that buy throughput and still fit (a larger micro-batch at the
  same global batch, less recomputation, fewer shards, no offload), largest speedup first;
  then the memory levers, least slowdown first (those that change what is trained last).

Larger GPUs are listed apart, only those where the scenario fits, most headroom first.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from ..coordinator import MAX_LIVE_PARAMETERS
from ..estimate import Estimate, FitStatus, estimate
from ..formatting import FIT_WORDS
from ..operations import SCENARIO_HELP, Operation, Request
from ..presets import gpus
from ..scenario import Scenario, ScenarioError, parse_scenario
from ._common import ScenarioInput, changed, gib
from .step_time import StepTime, step_time_of

Lever = Literal[
    "zero", "activation_checkpointing", "sequence_parallel", "tp", "pp", "micro_batch",
    "seq_len", "chunked_loss", "optimizer", "offload", "lora", "precision", "gpu",
    "zero3_limits",
]
# Levers that change what is trained (the task, the method or the optimizer) rank after those
# that only change how it runs, whatever their speed.
CHANGES_TRAINING: frozenset[str] = frozenset({"seq_len", "lora", "optimizer"})
# Levers whose cost the step-time model does not see (how much of ZeRO-3's all-gathers compute
# hides): no slowdown given, ranked after the levers with one.
UNTIMED: frozenset[str] = frozenset({"zero3_limits"})
RANK_RULES = {
    "does_not_fit": "levers after which it fits, least slowdown first (those that change what "
                    "is trained: seq_len, LoRA, optimizer, after the others); then the rest, "
                    "most memory saved first",
    "fits": "levers that buy throughput and still fit, largest speedup first; then memory "
            "levers, least slowdown first (those that change what is trained last)",
}


@dataclass(frozen=True, slots=True)
class Recommendation:
    """One change, its effect on device memory as re-estimated, and what it costs besides."""

    lever: Lever
    title: str
    scenario: Scenario
    device_bytes: int  # after the change
    saving_bytes: int  # before minus after (may be negative for a larger GPU)
    saving_percent: float  # of the device memory before
    fits: bool  # after the change: within the GPU
    headroom_bytes: int  # usable minus device bytes, after the change
    cost: str
    status: FitStatus = "fits"  # after the change (calc.estimate.fit_status)
    step_time_s: float | None = None  # after, by the advisor's model (None: no dense rate)
    slowdown: float | None = None  # tokens/s before / after - 1 (negative: faster)

    def as_dict(self) -> dict[str, Any]:
        return {
            "lever": self.lever, "title": self.title,
            "scenario": self.scenario.model_dump(mode="json"),
            "device_bytes": self.device_bytes, "saving_bytes": self.saving_bytes,
            "saving_percent": round(self.saving_percent, 2), "fits": self.fits,
            "status": self.status, "headroom_bytes": self.headroom_bytes,
            "step_time_s": self.step_time_s,
            "slowdown_percent": None if self.slowdown is None else round(100 * self.slowdown, 2),
            "cost": self.cost,
        }


@dataclass(frozen=True, slots=True)
class Recommendations:
    """Memory levers ranked by saving; larger GPUs ranked by headroom."""

    base: Estimate
    levers: tuple[Recommendation, ...]
    larger_gpus: tuple[Recommendation, ...]
    step_time_s: float | None = None  # the scenario's, by the advisor's model

    @property
    def rank_rule(self) -> str:
        return RANK_RULES["fits" if self.base.status == "fits" else "does_not_fit"]

    def as_dict(self) -> dict[str, Any]:
        return {
            "device_bytes": self.base.device_bytes, "usable_bytes": self.base.usable_bytes,
            "fits": self.base.fits, "status": self.base.status,
            "step_time_s": self.step_time_s, "rank_rule": self.rank_rule,
            "recommendations": [r.as_dict() for r in self.levers],
            "larger_gpus": [r.as_dict() for r in self.larger_gpus],
        }


# DeepSpeed ZeRO-3's coordinator limits the lever proposes, in elements (its default is 1e9)
ZERO3_LIMIT = 10**8

# (lever, title, changes, cost): candidates before validation; `changes` are keyword arguments
# of `changed()`.
_Candidate = tuple[Lever, str, dict[str, Any], str]


def _candidates(s: Scenario) -> Iterator[_Candidate]:
    t, p = s.training, s.parallelism
    group = p.dp * p.cp
    if group > 1:
        for stage, what in ((1, "optimizer states"), (2, "optimizer states and gradients"),
                            (3, "optimizer states, gradients and parameters")):
            if stage > p.zero:
                yield ("zero", f"ZeRO stage {stage} (shard {what} over {group} ranks)",
                       {"parallelism": {"zero": stage}},
                       "communication: " + ("none beyond data parallelism's" if stage < 3 else
                                            "parameters all-gathered in forward and backward, "
                                            "about 1.5x data parallelism's traffic"))
    live = p.stage3_max_live_parameters or MAX_LIVE_PARAMETERS
    if p.engine(t.mixed_precision) == "deepspeed" and p.zero == 3 and group > 1 and \
            live > ZERO3_LIMIT:
        yield ("zero3_limits", f"DeepSpeed ZeRO-3's stage3_max_live_parameters and "
               f"stage3_max_reuse_distance at {ZERO3_LIMIT:,} elements (from {live:,})",
               {"parallelism": {"stage3_max_live_parameters": ZERO3_LIMIT,
                                "stage3_max_reuse_distance": ZERO3_LIMIT}},
               "speed: less prefetched ahead and the top layers gathered again for their "
               "backward: more all-gathers, less of them hidden behind compute")
    if t.activation_checkpointing == "none":
        yield ("activation_checkpointing", "selective activation checkpointing",
               {"training": {"activation_checkpointing": "selective"}},
               "recompute: the attention core in backward, a few percent of step time")
    if t.activation_checkpointing != "full" or t.recompute_layers is not None:
        yield ("activation_checkpointing", "full activation checkpointing on every layer",
               {"training": {"activation_checkpointing": "full", "recompute_layers": None}},
               "recompute: one extra forward of every layer, about 30% more step time")
    if p.tp > 1 and not p.sequence_parallel:
        yield ("sequence_parallel", "sequence parallelism over the tp ranks",
               {"parallelism": {"sequence_parallel": True}},
               "communication: all-gather/reduce-scatter replace the all-reduce, about the "
               "same traffic; needs seq_len divisible by tp x cp")
    same_gpus = p.dp % 2 == 0
    splits: tuple[tuple[Lever, str], ...] = (("tp", "tensor"), ("pp", "pipeline"))
    for lever, name in splits:
        size = getattr(p, lever) * 2
        gpus_text = ("keeping the GPU count (dp halved)" if same_gpus
                     else f"on {p.world_size * 2} GPUs instead of {p.world_size}")
        par: dict[str, Any] = {lever: size}
        if same_gpus:
            par["dp"] = p.dp // 2
        training: dict[str, Any] = {}
        if same_gpus:
            training["gradient_accumulation_steps"] = t.gradient_accumulation_steps * 2
        cost = ("communication: activations all-reduced twice per layer in forward and in "
                "backward; keep tp within one NVLink node" if lever == "tp" else
                "speed: pipeline bubble of (pp-1)/(micro-batches+pp-1) of the step; needs "
                "gradient_accumulation_steps >= pp to hide it")
        if same_gpus:
            cost += "; gradient accumulation doubled to keep the global batch"
        else:
            cost += "; more GPUs"
        yield (lever, f"{name} parallelism {size} {gpus_text}",
               {"parallelism": par, **({"training": training} if training else {})}, cost)
    if t.micro_batch_size % 2 == 0:
        yield ("micro_batch", f"micro_batch_size {t.micro_batch_size // 2} with "
               f"gradient_accumulation_steps {t.gradient_accumulation_steps * 2} "
               "(same global batch)",
               {"training": {"micro_batch_size": t.micro_batch_size // 2,
                             "gradient_accumulation_steps": t.gradient_accumulation_steps * 2}},
               "speed: smaller matmuls use the GPU less well; convergence unchanged")
    if t.seq_len % 2 == 0:
        yield ("seq_len", f"seq_len {t.seq_len // 2}",
               {"training": {"seq_len": t.seq_len // 2}},
               "convergence: the model learns a shorter context; half the tokens per step "
               "unless the batch is doubled")
    if t.loss == "standard":
        yield ("chunked_loss", "chunked cross-entropy (logits never materialised at once)",
               {"training": {"loss": "chunked"}},
               "speed: a small slowdown; needs a chunked loss (e.g. Liger kernels)")
    if t.optimizer in ("adamw", "adam"):
        yield ("optimizer", "8-bit AdamW (bitsandbytes)",
               {"training": {"optimizer": "adamw_8bit"}},
               "convergence: small risk, block-wise quantised states; needs bitsandbytes")
    if t.optimizer not in ("adafactor", "sgd"):
        yield ("optimizer", "Adafactor (factored second moment, no first moment)",
               {"training": {"optimizer": "adafactor"}},
               "convergence: may need retuning of the learning rate; less stable than AdamW "
               "for some models")
    if not p.offload_optimizer:
        zero = max(p.zero, 1)
        yield ("offload", "optimizer offload to CPU (ZeRO-Offload)" +
               (f", with ZeRO stage {zero}" if zero != p.zero else ""),
               {"parallelism": {"offload_optimizer": True, "zero": zero}},
               "speed: the optimizer step runs on the CPU and gradients cross PCIe every "
               "step; needs host memory")
    if not (p.offload_params and p.zero == 3):
        yield ("offload", "parameter and optimizer offload to CPU with ZeRO-3 (ZeRO-Infinity)",
               {"parallelism": {"offload_optimizer": True, "offload_params": True, "zero": 3}},
               "speed: parameters cross PCIe in every forward and backward; often several "
               "times slower; needs host memory")
    low = "bf16" if t.precision == "fp32" else t.precision
    base16 = {"precision": low, "mixed_precision": "autocast"}
    if t.finetuning != "full" and (t.precision == "fp32" or t.mixed_precision != "autocast"):
        yield ("precision", f"load the {t.finetuning} base in {low} (autocast, as PEFT does)",
               {"training": base16},
               "numerics: the frozen base in half precision, as PEFT users train it; the "
               "adapters keep their dtype")
    if t.finetuning == "full":
        yield ("lora", f"LoRA rank {t.lora_rank} on a {low} base instead of full fine-tuning",
               {"training": {"finetuning": "lora", **base16}},
               "convergence: trains low-rank adapters only; quality below full fine-tuning "
               "for some tasks")
    if t.finetuning != "qlora":
        yield ("lora", f"QLoRA rank {t.lora_rank} (4-bit frozen base)",
               {"training": {"finetuning": "qlora", **base16}},
               "convergence: adapters on a 4-bit quantised base; speed: the base dequantised "
               "in forward and backward of every micro-batch (memory-bound, counted at the "
               "GPU's bandwidth: a lower bound)")


def _faster(s: Scenario) -> Iterator[_Candidate]:
    """Levers that buy throughput (for a scenario that fits)."""
    t, p = s.training, s.parallelism
    if t.gradient_accumulation_steps % 2 == 0:
        yield ("micro_batch", f"micro_batch_size {t.micro_batch_size * 2} with "
               f"gradient_accumulation_steps {t.gradient_accumulation_steps // 2} "
               "(same global batch)",
               {"training": {"micro_batch_size": t.micro_batch_size * 2,
                             "gradient_accumulation_steps": t.gradient_accumulation_steps // 2}},
               "memory: more activations; speed: larger matmuls, fewer ZeRO-2/3 passes")
    less = {"full": "selective", "selective": "none"}.get(t.activation_checkpointing)
    if less is not None:
        yield ("activation_checkpointing", f"{less} activation checkpointing (less recompute)",
               {"training": {"activation_checkpointing": less, "recompute_layers": None,
                             "checkpoint_every": None, "selective_policy": None}},
               "memory: more activations kept")
    if p.offload_optimizer or p.offload_params:
        yield ("offload", "no CPU offload", {"parallelism": {"offload_optimizer": False,
                                                              "offload_params": False}},
               "memory: the optimizer states (and parameters) back on the GPU")
    elif p.zero >= 2:
        yield ("zero", f"ZeRO stage {p.zero - 1} (fewer shards)",
               {"parallelism": {"zero": p.zero - 1}},
               "memory: " + ("parameters" if p.zero == 3 else "gradients") + " unsharded")


def recommend(scenario: ScenarioInput) -> Recommendations:
    """Rank the single changes (see the module docstring for the rule), re-estimating each.

        >>> recs = recommend({"model": "llama-3.2-1b", "training": {"seq_len": 4096}})
        >>> first = recs.levers[0]
        >>> estimate(first.scenario).device_bytes == recs.base.device_bytes - first.saving_bytes
        True
    """
    base_scenario = parse_scenario(scenario)
    base = estimate(base_scenario)
    base_time = step_time_of(base)
    fits_now = base.status == "fits"
    faster: list[Recommendation] = []
    if fits_now:
        for lever, title, changes, cost in _faster(base_scenario):
            rec = _apply(base, base_time, lever, title, changes, cost)
            if rec is not None and rec.status == "fits" and (rec.slowdown or 0) < 0:
                faster.append(rec)
        faster.sort(key=lambda r: r.slowdown or 0)
    memory: list[Recommendation] = []
    for lever, title, changes, cost in _candidates(base_scenario):
        rec = _apply(base, base_time, lever, title, changes, cost)
        if rec is not None and rec.saving_bytes > 0:
            memory.append(rec)

    def slow(r: Recommendation) -> float:
        return math.inf if r.slowdown is None else r.slowdown

    def order(r: Recommendation) -> tuple[bool, float, int]:
        return r.lever in CHANGES_TRAINING, slow(r), -r.saving_bytes

    if fits_now:
        memory.sort(key=order)
        levers = faster + memory
    else:
        fit = sorted((r for r in memory if r.status == "fits"), key=order)
        rest = sorted((r for r in memory if r.status != "fits"), key=lambda r: -r.saving_bytes)
        levers = fit + rest
    larger: list[Recommendation] = []
    for gpu in gpus().values():
        if gpu.usable_bytes <= base.usable_bytes:
            continue
        rec = _apply(base, base_time, "gpu", f"a larger GPU: {gpu.name}", {"gpu": gpu.id},
                     "money: a larger GPU; memory bandwidth and speed differ too")
        if rec is not None and rec.status == "fits":
            larger.append(rec)
    larger.sort(key=lambda r: -r.headroom_bytes)
    return Recommendations(base, tuple(levers), tuple(larger),
                           None if base_time is None else base_time.total)


def _apply(base: Estimate, base_time: StepTime | None, lever: Lever, title: str,
           changes: dict[str, Any], cost: str) -> Recommendation | None:
    try:
        after = estimate(changed(base.scenario, **changes))
    except ScenarioError:
        return None
    saving = base.device_bytes - after.device_bytes
    time = step_time_of(after)
    slowdown = None
    if time is not None and base_time is not None and lever not in UNTIMED:
        before_rate = _tokens(base) / base_time.total / base.scenario.parallelism.world_size
        after_rate = _tokens(after) / time.total / after.scenario.parallelism.world_size
        slowdown = before_rate / after_rate - 1
    return Recommendation(
        lever, title, after.scenario, after.device_bytes, saving,
        100 * saving / base.device_bytes, after.fits, after.usable_bytes - after.device_bytes,
        cost, after.status, None if time is None else time.total, slowdown)


def _tokens(e: Estimate) -> int:
    t, p = e.scenario.training, e.scenario.parallelism
    return t.micro_batch_size * t.gradient_accumulation_steps * p.dp * t.seq_len


# ---------------------------------------------------------------------------------------------
# The operation: calc recommend
# ---------------------------------------------------------------------------------------------

class RecommendRequest(Request):
    scenario: dict[str, Any] = Field(description=SCENARIO_HELP)


def _text(recs: Recommendations, request: RecommendRequest) -> str:
    b = recs.base
    lines = [f"now {gib(b.device_bytes)} of {gib(b.usable_bytes)} ({b.utilization:.0%}, "
             f"{FIT_WORDS[b.status]})" + ("" if recs.step_time_s is None else
                                          f", {recs.step_time_s:.3f} s/step"),
             f"ranked: {recs.rank_rule}"]
    for i, r in enumerate(recs.levers, 1):
        speed = ("" if r.slowdown is None else
                 f", {abs(r.slowdown):.1%} {'slower' if r.slowdown >= 0 else 'faster'}")
        saved = (f"saves {gib(r.saving_bytes)} ({r.saving_percent:.0f}%)" if r.saving_bytes >= 0
                 else f"uses {gib(-r.saving_bytes)} more")
        lines.append(f"{i:>3}. {r.title}: {saved}{speed}; {FIT_WORDS[r.status]}")
        lines.append(f"     cost: {r.cost}")
    lines.append("larger GPUs where it fits (by headroom):")
    lines += [f"     {r.title}: {gib(r.headroom_bytes)} headroom" for r in recs.larger_gpus]
    if not recs.larger_gpus:
        lines.append("     none")
    return "\n".join(lines)


OPERATIONS: tuple[Operation[RecommendRequest, Recommendations], ...] = (
    Operation("recommend", "changes that save device memory, ranked", RecommendRequest,
              run=lambda q: recommend(q.scenario), text=_text),
)

__all__ = ["RecommendRequest", "Recommendation", "Recommendations", "recommend"]
