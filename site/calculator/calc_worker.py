"""The calculator's Python side: JSON in, JSON out, no DOM.

It runs in a PyScript worker in the browser (`__export__` below) and, at build time, in CPython
(tools/site_hooks.py renders the default scenario with it), so the page shows the same payload
either way. Every call returns a JSON string:

    {"ok": true, "report": <calc estimate --json>, "report_text": <the same, as the CLI prints it>,
     "gpus": [<one card per GPU preset>]}
    {"ok": false, "field": "training.seq_len", "message": "..."}
"""

from __future__ import annotations

import json
from typing import Any

from calc import ConfigError, ScenarioError, estimate, from_hf_config
from calc.plan import compare_gpus
from calc.plan import recommend as plan_recommend


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


__export__ = ["run", "architecture", "recommend"]
