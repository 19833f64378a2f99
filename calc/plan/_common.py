"""Helpers shared by the planning tools: changed copies of a scenario, the plan error (defined
in :mod:`calc.errors`, below the framework import that raises it too)."""

from __future__ import annotations

from typing import Any

from ..errors import PlanError as PlanError  # re-exported: calc.plan's modules import it here
from ..operations import GiB, gib
from ..scenario import Scenario, parse_scenario

ScenarioInput = Scenario | dict[str, Any] | str


def changed(
    scenario: Scenario, *, training: dict[str, Any] | None = None,
    parallelism: dict[str, Any] | None = None, gpu: str | None = None,
) -> Scenario:
    """A validated copy of `scenario` with some fields of `training` / `parallelism` replaced.

        >>> s = parse_scenario({"model": "gpt2"})
        >>> changed(s, training={"seq_len": 512}).training.seq_len
        512
    """
    data = scenario.model_dump(mode="json")
    data["training"] = {**data["training"], **(training or {})}
    data["parallelism"] = {**data["parallelism"], **(parallelism or {})}
    if gpu is not None:
        data["gpu"] = gpu
    return parse_scenario(data)


__all__ = ["GiB", "PlanError", "ScenarioInput", "changed", "gib"]
