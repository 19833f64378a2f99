"""Fit search: the largest micro-batch or sequence length that fits a memory target.

Memory never decreases with the batch or the sequence length (asserted for every scenario by
`tests/test_properties.py::test_memory_grows_with_batch_and_sequence`), so the boundary is
found by doubling until a value no longer fits, then bisecting between the last value that fits
and the first that does not: about 2 log2(answer) estimates of ~100 us each.

"Fits" means `device_bytes <= target * usable_bytes` of the scenario's GPU: `target` leaves
headroom for what the estimate does not model (fragmentation spikes, other processes).
The answer is exact on the estimator's own terms: the value fits and the next valid value does
not (valid: `seq_len` divisible by cp, and by tp x cp with sequence parallelism).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from ..estimate import FIT_TARGET, Estimate, estimate
from ..operations import SCENARIO_HELP, Operation, Request
from ..scenario import Scenario, parse_scenario, resolve
from ._common import PlanError, ScenarioInput, changed, gib

FitField = Literal["training.micro_batch_size", "training.seq_len"]

DEFAULT_TARGET = FIT_TARGET  # calc.estimate.fit_status's: "fits" means the same everywhere
MAX_MICRO_BATCH = 1 << 22  # the scenario's own bound on micro_batch_size


@dataclass(frozen=True, slots=True)
class FitResult:
    """The largest value of `field` that fits, or None with the `reason`."""

    field: FitField
    value: int | None
    target: float
    limit_bytes: int  # target x usable_bytes, rounded down
    device_bytes: int | None  # at `value`
    next_value: int | None  # the next valid value (None where `value` is a cap)
    next_device_bytes: int | None
    scenario: Scenario | None  # the input with `value` applied
    reason: str | None = None
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        key = self.field.split(".", 1)[1]
        return {
            key: self.value,
            "target": self.target,
            "limit_bytes": self.limit_bytes,
            "device_bytes": self.device_bytes,
            "next_value": self.next_value,
            "next_device_bytes": self.next_device_bytes,
            "reason": self.reason,
            "notes": list(self.notes),
            "scenario": None if self.scenario is None else self.scenario.model_dump(mode="json"),
        }


def fits_target(report: Estimate, target: float) -> bool:
    """The fit rule of this module: device memory within `target` of the usable memory."""
    return report.device_bytes <= target * report.usable_bytes


def _check_target(target: float) -> float:
    if not 0 < target <= 1:
        raise PlanError("target", f"must be in (0, 1], got {target}")
    return target


def _largest(fits: Callable[[int], bool], cap: int) -> int:
    """The largest k in [1, cap] with fits(k), given fits(1) and monotonicity."""
    lo, hi = 1, 2
    while hi <= cap and fits(hi):
        lo, hi = hi, hi * 2
    hi = min(hi, cap + 1)  # invariant: fits(lo), not fits(hi) (or hi beyond the cap)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


def _search(
    base: Scenario, fit_field: FitField, target: float, step: int, cap_steps: int,
    notes: list[str], cap_note: str,
) -> FitResult:
    name = fit_field.split(".")[1]
    cache: dict[int, Estimate] = {}

    def at(k: int) -> Estimate:
        if k not in cache:
            cache[k] = estimate(changed(base, training={name: k * step}))
        return cache[k]

    def fits(k: int) -> bool:
        return fits_target(at(k), target)

    first = at(1)
    limit = int(target * first.usable_bytes)
    if not fits(1):
        return FitResult(
            fit_field, None, target, limit, None, step, first.device_bytes, None,
            reason=f"even {name} {step} needs {gib(first.device_bytes)}, above {target:.0%} of "
                   f"{first.resolved.gpu.name}'s {gib(first.usable_bytes)} ({gib(limit)})",
            notes=tuple(notes))
    k = _largest(fits, cap_steps)
    best = at(k)
    if k == cap_steps:
        notes.append(cap_note)
        nxt, nxt_bytes = None, None
    else:
        nxt, nxt_bytes = (k + 1) * step, at(k + 1).device_bytes
    return FitResult(fit_field, k * step, target, limit, best.device_bytes, nxt, nxt_bytes,
                     best.scenario, notes=tuple(notes))


def max_micro_batch(scenario: ScenarioInput, target: float = DEFAULT_TARGET) -> FitResult:
    """The largest `micro_batch_size` whose estimate fits `target` of the GPU's memory.

        >>> r = max_micro_batch({"model": "gpt2", "training": {"seq_len": 1024}})
        >>> r.value is not None and r.next_device_bytes > r.target * 85520809984
        True
    """
    base = parse_scenario(scenario)
    _check_target(target)
    resolve(base)  # report a bad scenario as itself, not as "nothing fits"
    return _search(base, "training.micro_batch_size", target, 1, MAX_MICRO_BATCH, [],
                   f"capped at the scenario's largest micro_batch_size ({MAX_MICRO_BATCH})")


def max_seq_len(scenario: ScenarioInput, target: float = DEFAULT_TARGET) -> FitResult:
    """The largest `seq_len` whose estimate fits `target` of the GPU's memory.

    Valid lengths are multiples of cp (of tp x cp with sequence parallelism); the search stops
    at the model's `max_position_embeddings`, with a note, since longer sequences need a
    position-scaling recipe the estimate cannot judge.
    """
    base = parse_scenario(scenario)
    _check_target(target)
    p = base.parallelism
    step = p.tp * p.cp if p.sequence_parallel else p.cp
    resolved = resolve(changed(base, training={"seq_len": step}))  # the input's own is replaced
    max_pos = resolved.arch.max_position_embeddings
    notes: list[str] = []
    if step > 1:
        notes.append(f"seq_len searched in multiples of {step} "
                     f"({'tp x cp' if p.sequence_parallel else 'cp'})")
    cap_steps = max_pos // step
    if cap_steps == 0:
        raise PlanError("training.seq_len", f"no multiple of {step} is within "
                        f"max_position_embeddings ({max_pos})")
    cap_note = (f"capped at max_position_embeddings ({max_pos}): longer sequences may fit in "
                "memory but the model was not trained for them")
    return _search(base, "training.seq_len", target, step, cap_steps, notes, cap_note)


# ---------------------------------------------------------------------------------------------
# The operations: calc max-batch, calc max-seq
# ---------------------------------------------------------------------------------------------

class FitRequest(Request):
    scenario: dict[str, Any] = Field(description=SCENARIO_HELP)
    target: float = Field(DEFAULT_TARGET, title="Memory target",
                          description="fraction of the GPU's usable memory")


def fit_text(r: FitResult, request: Any = None) -> str:
    """A fit search's answer as `calc max-batch` prints it."""
    name = r.field.split(".")[1]
    if r.value is None:
        return f"{name}: nothing fits: {r.reason}"
    assert r.device_bytes is not None
    line = (f"{name} {r.value}: {gib(r.device_bytes)} of {gib(r.limit_bytes)} "
            f"({r.target:.0%} of the GPU)")
    if r.next_value is not None and r.next_device_bytes is not None:
        line += f"; {r.next_value} would need {gib(r.next_device_bytes)}"
    return "\n".join([line, *(f"  note: {n}" for n in r.notes)])


OPERATIONS: tuple[Operation[FitRequest, FitResult], ...] = (
    Operation("max-batch", "largest micro_batch_size that fits the memory target", FitRequest,
              run=lambda q: max_micro_batch(q.scenario, q.target), text=fit_text),
    Operation("max-seq", "largest seq_len that fits the memory target", FitRequest,
              run=lambda q: max_seq_len(q.scenario, q.target), text=fit_text),
)

__all__ = ["DEFAULT_TARGET", "FitRequest", "FitResult", "fits_target", "max_micro_batch",
           "max_seq_len"]
