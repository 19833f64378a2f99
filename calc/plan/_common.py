"""Helpers shared by the planning tools: changed copies of a scenario, the plan error (defined
in `calc.errors`, below the framework import that raises it too)."""

from __future__ import annotations

from typing import Any

from ..errors import PlanError as PlanError  # re-exported: calc.plan's modules import it here
from ..errors import shown
from ..operations import GiB, gib
from ..scenario import Scenario, parse_scenario

ScenarioInput = Scenario | dict[str, Any] | str

# Bounds of planning inputs that catch typos and absurd values without limiting real runs.
MFU = (0.01, 1.0)  # below 1% of peak nothing trains; above 100% is impossible
MAX_COUNT = 1 << 22  # sequences, prompts, samples, engines
MAX_TOKENS = 10**16  # training tokens: a thousand times today's largest runs
MAX_SEQ = 1 << 24


def bounded(name: str, value: Any, lo: float, hi: float, *, integer: bool = False,
            low_open: bool = False) -> None:
    """Raise a `PlanError` naming `name` unless `value` is a finite number (an integer
    where `integer`) in [lo, hi] ((lo, hi] where `low_open`)."""
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, int if integer else int | float) \
            or value != value or value in (float("inf"), float("-inf")):
        raise PlanError(name, f"must be {kind}, got {shown(value)}")
    if not (lo < value if low_open else lo <= value) or value > hi:
        span = f"({lo:g}, {hi:g}]" if low_open else f"[{lo:g}, {hi:g}]"
        raise PlanError(name, f"must be {kind} in {span}, got {shown(value)}")


def changed(
    scenario: Scenario, *, training: dict[str, Any] | None = None,
    parallelism: dict[str, Any] | None = None, gpu: str | None = None, model: Any = None,
) -> Scenario:
    """A validated copy of `scenario` with some fields of `training` / `parallelism` replaced
    (and its `gpu` or `model`, where given).

        >>> s = parse_scenario({"model": "gpt2"})
        >>> changed(s, training={"seq_len": 512}).training.seq_len
        512
    """
    data = scenario.model_dump(mode="json")
    data["training"] = {**data["training"], **(training or {})}
    data["parallelism"] = {**data["parallelism"], **(parallelism or {})}
    if gpu is not None:
        data["gpu"] = gpu
    if model is not None:
        data["model"] = model
    return parse_scenario(data)


__all__ = ["MAX_COUNT", "MAX_SEQ", "MAX_TOKENS", "MFU", "GiB", "PlanError", "ScenarioInput",
           "bounded", "changed", "gib"]
