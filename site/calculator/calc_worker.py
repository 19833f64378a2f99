"""The calculator's Python side: JSON in, JSON out, no DOM.

It runs in a PyScript worker in the browser (`__export__` below) and, at build time, in CPython
(tools/site_hooks.py renders the default scenario with it), so the page shows the same payload
either way. Every call returns a JSON string:

    {"ok": true, "report": <calc estimate --json>, "report_text": <the same, as the CLI prints it>,
     "gpus": [<one card per GPU preset>]}
    {"ok": false, "field": "training.seq_len", "message": "..."}

The planning calls (`plan`, `compare`, `export`) answer the same way, with calc.plan's JSON.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

if sys.platform == "emscripten":
    # No pydantic plugins exist in the browser, and looking for them makes pydantic read the
    # metadata of every installed distribution when it builds its first model.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

from calc import ConfigError, ScenarioError, estimate, from_hf_config
from calc.plan import (
    DEFAULT_MFU,
    DEFAULT_TARGET,
    ExportError,
    PlanError,
    compare_gpus,
    max_micro_batch,
    training_cost,
)
from calc.plan import compare as plan_compare
from calc.plan import export as plan_export
from calc.plan import recommend as plan_recommend

COST_TOKENS = 10**9  # training_cost needs a token count; step time and tokens/s do not depend on it


def _error(field: str, message: str) -> str:
    return json.dumps({"ok": False, "field": field, "message": message})


def run(scenario_json: str) -> str:
    """The report for one scenario, and the same scenario on every GPU preset."""
    try:
        scenario: dict[str, Any] = json.loads(scenario_json)
        report = estimate(scenario)
    except ScenarioError as exc:
        return _error(exc.field, exc.message)
    cards = [fit.as_dict() for fit in compare_gpus(scenario)]
    report_dict = report.as_dict()
    # report_text: byte for byte what `calc estimate --json` prints, for #estimate-json.
    return json.dumps({"ok": True, "report": report_dict, "gpus": cards,
                       "report_text": json.dumps(report_dict, indent=2)})


def architecture(hf_config_json: str) -> str:
    """The architecture fields calc reads from a pasted config.json."""
    try:
        arch, notes = from_hf_config(json.loads(hf_config_json))
    except json.JSONDecodeError as exc:
        return _error("model.hf_config", f"is not valid JSON ({exc.msg} at line {exc.lineno})")
    except ConfigError as exc:
        return _error(f"model.{exc.field}", exc.message)
    return json.dumps({"ok": True, "architecture": arch.model_dump(mode="json"), "notes": notes})


def recommend(scenario_json: str) -> str:
    """Single changes ranked by the device memory they save, each with its changed scenario."""
    try:
        recs = plan_recommend(json.loads(scenario_json))
    except ScenarioError as exc:
        return _error(exc.field, exc.message)
    return json.dumps({"ok": True, **recs.as_dict()})


def plan(scenario_json: str) -> str:
    """The largest micro-batch within the default target, and the estimated step time.

    Each part answers on its own: `max_micro_batch` and `cost` are calc.plan's JSON, or
    {"error": {"field", "message"}} where that tool cannot answer for this scenario."""
    try:
        scenario: dict[str, Any] = json.loads(scenario_json)
        fit = max_micro_batch(scenario, DEFAULT_TARGET).as_dict()
    except (ScenarioError, PlanError) as exc:
        return _error(exc.field, exc.message)
    try:
        cost: dict[str, Any] = training_cost(scenario, COST_TOKENS, mfu=DEFAULT_MFU).as_dict()
    except PlanError as exc:
        cost = {"error": {"field": exc.field, "message": exc.message}}
    return json.dumps({"ok": True, "max_micro_batch": fit, "cost": cost})


def compare(request_json: str) -> str:
    """Scenarios side by side: {"scenarios": [...], "labels": [...]} -> calc.plan.compare's JSON."""
    try:
        request = json.loads(request_json)
        comparison = plan_compare(request["scenarios"], request.get("labels"))
    except (ScenarioError, PlanError) as exc:
        return _error(exc.field, exc.message)
    return json.dumps({"ok": True, **comparison.as_dict()})


def export(request_json: str) -> str:
    """{"scenario": ..., "format": ...} -> calc.plan.export's JSON, or the setting it cannot express."""
    try:
        request = json.loads(request_json)
        result = plan_export(request["scenario"], request["format"])
    except (ScenarioError, ExportError) as exc:
        return _error(exc.field, exc.message)
    return json.dumps({"ok": True, **result.as_dict()})


__export__ = ["run", "architecture", "recommend", "plan", "compare", "export"]
