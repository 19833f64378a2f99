"""Comparison: several scenarios side by side, each against the first (the baseline).

Global batch = micro_batch_size x gradient_accumulation_steps x dp, in sequences: tensor,
pipeline and context parallel ranks work on the same sequences, so they do not multiply it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field

from ..estimate import COMPONENTS, Estimate, FitStatus, estimate, fit_status
from ..formatting import FIT_WORDS
from ..operations import SCENARIO_HELP, Cli, Operation, Request
from ..presets import gpus
from ..scenario import ScenarioError, parse_scenario
from ._common import PlanError, ScenarioInput, gib


@dataclass(frozen=True, slots=True)
class Column:
    """One scenario's figures, with its differences from the baseline."""

    label: str
    report: Estimate

    @property
    def global_batch_size(self) -> int:
        t, p = self.report.scenario.training, self.report.scenario.parallelism
        return t.micro_batch_size * t.gradient_accumulation_steps * p.dp

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch_size * self.report.scenario.training.seq_len

    def as_dict(self, baseline: Column) -> dict[str, Any]:
        r, b = self.report, baseline.report
        t, p = r.scenario.training, r.scenario.parallelism
        comps, base_comps = r.components, b.components
        return {
            "label": self.label,
            "model": r.scenario.model if isinstance(r.scenario.model, str) else "custom",
            "gpu": r.resolved.gpu.id,
            "gpus": p.world_size,
            "peak_bytes": r.peak_bytes,
            "device_bytes": r.device_bytes,
            "usable_bytes": r.usable_bytes,
            "utilization": round(r.utilization, 6),
            "fits": r.fits,
            "status": r.status,
            "peak_phase": r.peak_phase,
            "micro_batch_size": t.micro_batch_size,
            "gradient_accumulation_steps": t.gradient_accumulation_steps,
            "dp": p.dp,
            "global_batch_size": self.global_batch_size,
            "seq_len": t.seq_len,
            "tokens_per_step": self.tokens_per_step,
            "components": comps,
            "difference": {
                "device_bytes": r.device_bytes - b.device_bytes,
                "peak_bytes": r.peak_bytes - b.peak_bytes,
                "components": {c: comps[c] - base_comps[c] for c in COMPONENTS},
            },
        }


@dataclass(frozen=True, slots=True)
class Comparison:
    columns: tuple[Column, ...]

    def as_dict(self) -> dict[str, Any]:
        base = self.columns[0]
        return {"baseline": base.label, "scenarios": [c.as_dict(base) for c in self.columns]}


def compare(scenarios: Sequence[ScenarioInput], labels: Sequence[str] | None = None) -> Comparison:
    """Estimate each scenario; differences are against the first.

        >>> c = compare([{"model": "gpt2", "training": {"seq_len": 1024}},
        ...              {"model": "gpt2", "training": {"seq_len": 1024, "micro_batch_size": 2}}])
        >>> c.as_dict()["scenarios"][1]["difference"]["device_bytes"] > 0
        True
    """
    if not scenarios:
        raise PlanError("scenarios", "give at least one scenario")
    if labels is not None and len(labels) != len(scenarios):
        raise PlanError("labels", f"{len(labels)} labels for {len(scenarios)} scenarios")
    names = list(labels) if labels is not None else [str(i + 1) for i in range(len(scenarios))]
    columns = []
    for name, scenario in zip(names, scenarios, strict=True):
        try:
            columns.append(Column(name, estimate(scenario)))
        except ScenarioError as exc:  # say which scenario is wrong
            raise ScenarioError(f"{name}: {exc.field}", exc.message) from None
    return Comparison(tuple(columns))


__all__ = ["Column", "CompareRequest", "Comparison", "compare", "compare_gpus"]


@dataclass(frozen=True, slots=True)
class GpuFit:
    """One scenario on one GPU preset: its device memory, or why it cannot run there."""

    gpu: str
    name: str
    usable_bytes: int
    device_bytes: int | None
    utilization: float | None
    fits: bool
    error: str | None  # e.g. "training.precision: ... does not support bf16"

    @property
    def status(self) -> FitStatus:
        """calc.estimate.fit_status; a GPU the scenario cannot run on does not fit."""
        if self.device_bytes is None:
            return "does_not_fit"
        return fit_status(self.device_bytes, self.usable_bytes)

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.gpu, "name": self.name, "usable_bytes": self.usable_bytes,
                "device_bytes": self.device_bytes, "utilization": self.utilization,
                "fits": self.fits, "status": self.status, "error": self.error}


def compare_gpus(scenario: ScenarioInput) -> list[GpuFit]:
    """The same scenario on every GPU preset, in preset order.

    >>> fits = compare_gpus({"model": "gpt2", "training": {"seq_len": 1024}})
    >>> next(f for f in fits if f.gpu == "v100-16gb").error.startswith("training.precision")
    True
    """
    data = parse_scenario(scenario).model_dump(mode="json")
    out = []
    for gpu in gpus().values():
        try:
            report = estimate({**data, "gpu": gpu.id})
        except ScenarioError as exc:
            out.append(GpuFit(gpu.id, gpu.name, gpu.usable_bytes, None, None, False,
                              f"{exc.field}: {exc.message}"))
            continue
        out.append(GpuFit(gpu.id, gpu.name, gpu.usable_bytes, report.device_bytes,
                          report.utilization, report.fits, None))
    return out


class GpusRequest(Request):
    scenario: dict[str, Any] = Field(description=SCENARIO_HELP)


def _gpu_comparison(request: GpusRequest) -> dict[str, Any]:
    """The GPU comparison page's answer: the scenario on every GPU preset, with the largest
    micro-batch within the fit target where it runs (calc.plan.fit)."""
    from .fit import max_micro_batch

    scenario = parse_scenario(request.scenario).model_dump(mode="json")
    rows = []
    for fit in compare_gpus(scenario):
        row = fit.as_dict()
        if fit.error is None:
            row["max_micro_batch"] = max_micro_batch({**scenario, "gpu": fit.gpu}).value
        rows.append(row)
    return {"scenario": scenario, "gpus": rows}


# ---------------------------------------------------------------------------------------------
# The operations: calc compare, and the GPU comparison page's
# ---------------------------------------------------------------------------------------------

class CompareRequest(Request):
    scenarios: Annotated[list[dict[str, Any] | str], Cli(argument="scenarios", file=True,
                                                         labels="labels")] = Field(
        description="the scenarios (objects or JSON text); on the command line, files")
    labels: list[str] | None = Field(
        None, description="one name per scenario (default: 1, 2, ...; on the command line, "
                          "the files' names)")


def _text(comparison: Comparison, request: CompareRequest) -> str:
    d = comparison.as_dict()
    cols = d["scenarios"]
    rows = [f"{'':<28}" + "".join(f"{col['label'][:16]:>18}" for col in cols)]
    for key in ("device_bytes", "peak_bytes"):
        rows.append(f"{key:<28}" + "".join(f"{gib(col[key]):>18}" for col in cols))
    for key in ("utilization", "status", "micro_batch_size", "gradient_accumulation_steps",
                "dp", "global_batch_size", "gpus"):
        rows.append(f"{key:<28}" + "".join(
            f"{col[key]:>18.0%}" if key == "utilization" else
            f"{FIT_WORDS[col[key]]:>18}" if key == "status" else f"{col[key]!s:>18}"
            for col in cols))
    rows.append(f"difference vs {d['baseline']}:")
    for comp in COMPONENTS:
        rows.append(f"  {comp:<26}" + "".join(
            f"{gib(col['difference']['components'][comp]):>18}" for col in cols))
    return "\n".join(rows)


OPERATIONS: tuple[Operation[Any, Any], ...] = (
    Operation("compare", "scenarios side by side", CompareRequest,
              run=lambda q: compare(q.scenarios, q.labels), text=_text),
    Operation("gpus", "one scenario on every GPU preset, with its largest micro-batch",
              GpusRequest, run=_gpu_comparison, data=lambda r, q: r, cli=False),
)
