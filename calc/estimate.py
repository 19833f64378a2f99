"""The estimate: per-GPU memory phase by phase, the peak and what it is made of (the report).

The step, its moments and their parts are `calc.peak`'s; this module evaluates every pipeline
stage that can set the peak, adds the overheads outside PyTorch's tensors (`calc.overhead`) and
writes the report whose `as_dict()` is the JSON contract of `calc estimate --json`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ._version import __version__
from .confidence import confidence
from .formula import Term
from .overhead import beyond
from .params import lora_parameters
from .peak import COMPONENTS, PHASES, Moment, StagePeak, components, stage_peak
from .placement import Stage
from .scenario import Resolved, Scenario, parse_scenario, resolve
from .setup import Setup, setup

FIT_TARGET = 0.85  # of the GPU's usable memory; the rest is headroom for the unmodelled
FitStatus = Literal["fits", "tight", "does_not_fit"]  # in words: calc.formatting.FIT_WORDS


def fit_status(device_bytes: int, usable_bytes: int, target: float = FIT_TARGET) -> FitStatus:
    """The one fit rule of every tool and page: `fits` within `target` of the GPU's usable
    memory, `tight` above it but within the GPU (fragmentation spikes, other processes or a
    longer batch can tip it over), `does_not_fit` beyond the GPU.

        >>> [fit_status(b, 100) for b in (85, 86, 100, 101)]
        ['fits', 'tight', 'tight', 'does_not_fit']
    """
    if device_bytes > usable_bytes:
        return "does_not_fit"
    return "fits" if device_bytes <= target * usable_bytes else "tight"


@dataclass(frozen=True, slots=True)
class Estimate:
    """The report. `as_dict()` is the JSON contract of `calc estimate --json`."""

    scenario: Scenario
    resolved: Resolved
    setup: Setup
    stage: StagePeak  # the pipeline stage with the highest peak
    stage_count: int
    overhead: dict[str, int]  # overhead/allocator, overhead/cuda_context, overhead/nccl
    reserved_bytes: int  # comparable to torch.cuda.max_memory_reserved()
    device_bytes: int  # comparable to nvidia-smi
    trainable: Term  # LoRA's adapter parameters, or the model's
    warnings: tuple[dict[str, str], ...] = field(default=())

    @property
    def beyond(self) -> tuple[tuple[Term, Term, Term], Term, Term]:
        """The terms behind `overhead`, `reserved_bytes` and `device_bytes` (calc.overhead;
        the report keeps only their bytes)."""
        return beyond(self.peak_bytes, self.setup)

    @property
    def confidence(self) -> dict[str, Any]:
        return confidence(self.resolved)

    @property
    def peak(self) -> Moment:
        return self.stage.peak

    @property
    def peak_bytes(self) -> int:
        return self.stage.peak.bytes

    @property
    def peak_phase(self) -> str:
        return self.stage.peak.phase

    @property
    def peak_moment(self) -> str:
        """The named moment (`calc.peak.MOMENTS`) that sets `peak_bytes`."""
        return self.stage.peak.name

    @property
    def components(self) -> dict[str, int]:
        """Bytes at the peak by component (they sum to `peak_bytes`)."""
        return self.stage.peak.components

    @property
    def host_bytes(self) -> int:
        return sum(self.stage.host.values())

    @property
    def param_count(self) -> int:
        return self.setup.counts.total

    @property
    def trainable_param_count(self) -> int:
        return self.trainable.bytes

    @property
    def usable_bytes(self) -> int:
        return self.resolved.gpu.usable_bytes

    @property
    def utilization(self) -> float:
        return self.device_bytes / self.usable_bytes

    @property
    def fits(self) -> bool:
        """Within the GPU's usable memory (`status` says whether within the fit target too)."""
        return self.device_bytes <= self.usable_bytes

    @property
    def status(self) -> FitStatus:
        """`fit_status` at the default target."""
        return fit_status(self.device_bytes, self.usable_bytes)

    def as_dict(self) -> dict[str, Any]:
        peak = self.stage.peak
        stage = self.stage.stage
        breakdown = peak.breakdown
        return {
            "calc_version": __version__,
            "scenario": self.scenario.model_dump(mode="json"),
            "gpu": self.resolved.gpu.id,
            "peak_bytes": self.peak_bytes,
            "reserved_bytes": self.reserved_bytes,
            "device_bytes": self.device_bytes,
            "usable_bytes": self.usable_bytes,
            "utilization": round(self.utilization, 6),
            "fits": self.fits,
            "status": self.status,
            "peak_phase": peak.phase,
            "peak_moment": peak.name,
            "peak_rank": {
                "pipeline_stage": stage.index,
                "pipeline_stages": self.stage_count,
                "why": _why(self.setup, stage) if self.stage_count > 1 else
                "all ranks are alike",
            },
            "components": components(breakdown),
            "breakdown": dict(sorted(breakdown.items())),
            "phases": {
                name: {"peak_bytes": ph.bytes,
                       "components": components(breakdown if ph is peak else ph.breakdown)}
                for name, ph in self.stage.phases.items()
            },
            "overhead": self.overhead,
            "host_bytes": self.host_bytes,
            "host_breakdown": self.stage.host,
            "param_count": self.param_count,
            "trainable_param_count": self.trainable_param_count,
            "warnings": list(self.warnings),
            "confidence": self.confidence,
        }


def _why(x: Setup, stage: Stage) -> str:
    """What the pipeline rank with the peak holds, in words."""
    held = [f"{n} {kind} layer{'s' if n != 1 else ''}" for kind, n in (
        ("dense", stage.dense_layers), ("MoE", stage.moe_layers)) if n]
    held += [part for part, has in (("the embedding", stage.embedding),
                                    ("the head and the loss", stage.head)) if has]
    flight = x.in_flight(stage)
    unit = {"interleaved_1f1b": " chunk", "zbv": " chunk", "dualpipev": " chunk",
            "dualpipe": " stage"}.get(x.schedule, "") \
        if stage.unit else ""
    return (f"rank {stage.index} of {x.pp} ({x.schedule}): holds {', '.join(held)}; "
            f"{flight}{unit} micro-batch{'es' if flight != 1 else ''} in flight")


def estimate(scenario: Scenario | dict[str, Any] | str) -> Estimate:
    """Estimate per-GPU training memory for a scenario (a `Scenario`, dict or JSON)."""
    resolved = resolve(parse_scenario(scenario))
    x = setup(resolved)
    return _estimate(resolved, x, [stage_peak(x, st) for st in x.stages])


def estimate_within(scenario: Scenario | dict[str, Any] | str, device_limit: float
                    ) -> Estimate | None:
    """`estimate(scenario)`, or None as soon as one pipeline rank's device memory passes
    `device_limit` bytes, the other ranks not evaluated: what a search that rejects most of what
    it tries needs (the advisor's; about nine tries in ten do not fit). The device memory grows
    with the peak, so a rank over the limit puts the estimate over it."""
    resolved = resolve(parse_scenario(scenario))
    x = setup(resolved)
    peaks = []
    for st in x.stages:
        peaks.append(stage_peak(x, st))
        if beyond(peaks[-1].peak.bytes, x)[2].bytes > device_limit:
            return None
    return _estimate(resolved, x, peaks)


def _estimate(resolved: Resolved, x: Setup, peaks: list[StagePeak]) -> Estimate:
    worst = max(peaks, key=lambda e: e.peak.bytes)
    terms, reserved, device = beyond(worst.peak.bytes, x)
    trainable = lora_parameters(x.arch, x.lora_rank, x.lora_targets) if x.lora else x.counts.model
    return Estimate(
        scenario=resolved.scenario, resolved=resolved, setup=x, stage=worst, stage_count=x.pp,
        overhead={t.key: t.bytes for t in terms}, reserved_bytes=reserved.bytes,
        device_bytes=device.bytes, trainable=trainable,
        warnings=tuple(w.as_dict() for w in resolved.warnings),
    )


__all__ = ["COMPONENTS", "FIT_TARGET", "PHASES", "Estimate", "FitStatus", "Moment",
           "estimate", "estimate_within", "fit_status"]
