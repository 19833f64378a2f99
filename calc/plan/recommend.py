"""Recommendations: which single change saves the most device memory, and what it costs.

Each lever builds a changed scenario and re-runs the estimator, so every claimed saving is the
estimator's own difference (`saving_bytes = before.device_bytes - after.device_bytes`, checked
by a property test). Levers that are invalid for the scenario (the estimator raises a
:class:`~calc.ScenarioError`) or save nothing are left out. A larger GPU saves nothing; it is
listed apart, ranked by the headroom it leaves.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from ..estimate import Estimate, estimate
from ..operations import SCENARIO_HELP, Operation, Request
from ..presets import gpus
from ..scenario import Scenario, ScenarioError, parse_scenario
from ._common import ScenarioInput, changed, gib

Lever = Literal[
    "zero", "activation_checkpointing", "sequence_parallel", "tp", "pp", "micro_batch",
    "seq_len", "chunked_loss", "optimizer", "offload", "lora", "gpu",
]


@dataclass(frozen=True, slots=True)
class Recommendation:
    """One change, its effect on device memory as re-estimated, and what it costs besides."""

    lever: Lever
    title: str
    scenario: Scenario
    device_bytes: int  # after the change
    saving_bytes: int  # before minus after (may be negative for a larger GPU)
    saving_percent: float  # of the device memory before
    fits: bool  # after the change
    headroom_bytes: int  # usable minus device bytes, after the change
    cost: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "lever": self.lever, "title": self.title,
            "scenario": self.scenario.model_dump(mode="json"),
            "device_bytes": self.device_bytes, "saving_bytes": self.saving_bytes,
            "saving_percent": round(self.saving_percent, 2), "fits": self.fits,
            "headroom_bytes": self.headroom_bytes, "cost": self.cost,
        }


@dataclass(frozen=True, slots=True)
class Recommendations:
    """Memory levers ranked by saving; larger GPUs ranked by headroom."""

    base: Estimate
    levers: tuple[Recommendation, ...]
    larger_gpus: tuple[Recommendation, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "device_bytes": self.base.device_bytes, "usable_bytes": self.base.usable_bytes,
            "fits": self.base.fits,
            "recommendations": [r.as_dict() for r in self.levers],
            "larger_gpus": [r.as_dict() for r in self.larger_gpus],
        }


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
    if t.finetuning == "full":
        yield ("lora", f"LoRA rank {t.lora_rank} instead of full fine-tuning",
               {"training": {"finetuning": "lora"}},
               "convergence: trains low-rank adapters only; quality below full fine-tuning "
               "for some tasks; about a third less compute")
    if t.finetuning != "qlora":
        yield ("lora", f"QLoRA rank {t.lora_rank} (4-bit frozen base)",
               {"training": {"finetuning": "qlora"}},
               "convergence: adapters on a 4-bit quantised base; speed: dequantisation in "
               "every matmul, often 20-40% slower than LoRA")


def recommend(scenario: ScenarioInput) -> Recommendations:
    """Rank the single changes that reduce device memory, re-estimating each.

        >>> recs = recommend({"model": "llama-3.2-1b", "training": {"seq_len": 4096}})
        >>> first = recs.levers[0]
        >>> estimate(first.scenario).device_bytes == recs.base.device_bytes - first.saving_bytes
        True
    """
    base_scenario = parse_scenario(scenario)
    base = estimate(base_scenario)
    levers: list[Recommendation] = []
    for lever, title, changes, cost in _candidates(base_scenario):
        rec = _apply(base, lever, title, changes, cost)
        if rec is not None and rec.saving_bytes > 0:
            levers.append(rec)
    levers.sort(key=lambda r: -r.saving_bytes)
    larger: list[Recommendation] = []
    for gpu in gpus().values():
        if gpu.usable_bytes <= base.usable_bytes:
            continue
        rec = _apply(base, "gpu", f"a larger GPU: {gpu.name}", {"gpu": gpu.id},
                     "money: a larger GPU; memory bandwidth and speed differ too")
        if rec is not None:
            larger.append(rec)
    larger.sort(key=lambda r: -r.headroom_bytes)
    return Recommendations(base, tuple(levers), tuple(larger))


def _apply(base: Estimate, lever: Lever, title: str, changes: dict[str, Any],
           cost: str) -> Recommendation | None:
    try:
        after = estimate(changed(base.scenario, **changes))
    except ScenarioError:
        return None
    saving = base.device_bytes - after.device_bytes
    return Recommendation(
        lever, title, after.scenario, after.device_bytes, saving,
        100 * saving / base.device_bytes, after.fits, after.usable_bytes - after.device_bytes,
        cost)


# ---------------------------------------------------------------------------------------------
# The operation: calc recommend
# ---------------------------------------------------------------------------------------------

class RecommendRequest(Request):
    scenario: dict[str, Any] = Field(description=SCENARIO_HELP)


def _text(recs: Recommendations, request: RecommendRequest) -> str:
    lines = [f"now {gib(recs.base.device_bytes)} of {gib(recs.base.usable_bytes)}"]
    for i, r in enumerate(recs.levers, 1):
        lines.append(f"{i:>3}. {r.title}: saves {gib(r.saving_bytes)} "
                     f"({r.saving_percent:.0f}%){'' if r.fits else ', still does not fit'}")
        lines.append(f"     cost: {r.cost}")
    lines.append("larger GPUs (by headroom):")
    lines += [f"     {r.title}: {gib(r.headroom_bytes)} headroom" for r in recs.larger_gpus]
    return "\n".join(lines)


OPERATIONS: tuple[Operation[RecommendRequest, Recommendations], ...] = (
    Operation("recommend", "changes that save device memory, ranked", RecommendRequest,
              run=lambda q: recommend(q.scenario), text=_text),
)

__all__ = ["RecommendRequest", "Recommendation", "Recommendations", "recommend"]
