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


def explain(scenario_json: str) -> str:
    """The formula reference's worked formulas for a scenario: calc.explain's JSON."""
    from calc.explain import explain as calc_explain  # only the formula page needs it

    try:
        explanation = calc_explain(json.loads(scenario_json))
    except ScenarioError as exc:
        return _error(exc.field, exc.message)
    return json.dumps({"ok": True, "explanation": explanation.as_dict()})


# ---- planning panels (advisor, import, cheapest, RL): calc.plan imported on first use ----

def _whole(request: dict[str, Any], name: str, *, required: bool = False) -> int | None:
    """An integer the page sends as typed (null: left empty, so calc's default applies)."""
    from calc.plan import PlanError

    value = request.get(name)
    if value is None:
        if required:
            raise PlanError(name, "is required: enter a whole number")
        return None
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise PlanError(name, f"must be a whole number, got {value!r}")
    return value


def _number(request: dict[str, Any], name: str) -> float | None:
    from calc.plan import PlanError

    value = request.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise PlanError(name, f"must be a number, got {value!r}")
    return float(value)


def _given(**kwargs: Any) -> dict[str, Any]:
    """The keyword arguments the page gave a value: calc's own defaults for the rest."""
    return {k: v for k, v in kwargs.items() if v is not None}


def advise(request_json: str) -> str:
    """The parallelism advisor on the scenario's model, GPU, sequence length and training
    settings (its parallelism, micro-batch, accumulation and checkpointing are searched):
    {"scenario", "gpus", "gpus_per_node"?, "global_batch"?, "inter_node_gbps"?, "top"?}
    -> calc.plan.advise's JSON. Left out, the global batch is the scenario's micro-batch x
    accumulation x dp, as `calc advise` takes it."""
    from calc import parse_scenario
    from calc.plan import PlanError
    from calc.plan import advise as plan_advise

    try:
        request = json.loads(request_json)
        scenario = parse_scenario(request["scenario"])
        t, p = scenario.training, scenario.parallelism
        batch = _whole(request, "global_batch")
        if batch is None:
            batch = t.micro_batch_size * t.gradient_accumulation_steps * p.dp
        result = plan_advise(
            request["scenario"]["model"], scenario.gpu, _whole(request, "gpus"), t.seq_len,
            batch, base_training=t, **_given(
                gpus_per_node=_whole(request, "gpus_per_node"),
                inter_node_gbps=_number(request, "inter_node_gbps"), top=_whole(request, "top")))
    except (ScenarioError, PlanError) as exc:
        return _error(exc.field, exc.message)
    return json.dumps({"ok": True, **result.as_dict()})


def import_config(request_json: str) -> str:
    """A framework config as a scenario on the page's model and GPU:
    {"text", "format", "model", "gpu", "dp"?, "seq_len"?} -> {"ok", "scenario", "notes"}.
    `field` of an error is the setting inside the config (`zero_optimization.stage`), `config`
    or `yaml` for text that does not parse, or the request's own `format`, `dp`, `seq_len`."""
    from calc.errors import FieldError
    from calc.plan import import_config as plan_import

    try:
        request = json.loads(request_json)
        imported = plan_import(request["text"], request["format"], model=request["model"],
                               gpu=request.get("gpu"), dp=_whole(request, "dp"),
                               seq_len=_whole(request, "seq_len"))
    except FieldError as exc:
        return _error(exc.field, exc.message)
    except Exception as exc:  # pasted text: whatever the importer trips on, say so, no traceback
        return _error("config", f"could not be read ({type(exc).__name__}: {exc})")
    return json.dumps({"ok": True, **imported.as_dict()})


def cheapest(request_json: str) -> str:
    """The cheapest GPU type and count for the scenario:
    {"scenario", "tokens", "deadline_hours"?, "max_gpus"?} -> calc.plan.cheapest's JSON, each
    option with its `price_source` (calc.plan.training_cost's), without `all_options`."""
    from calc.plan import PlanError
    from calc.plan import cheapest as plan_cheapest

    try:
        request = json.loads(request_json)
        result = plan_cheapest(request["scenario"], _whole(request, "tokens", required=True),
                               deadline_hours=_number(request, "deadline_hours"),
                               **_given(max_gpus=_whole(request, "max_gpus")))
    except (ScenarioError, PlanError) as exc:
        return _error(exc.field, exc.message)
    answer = result.as_dict()
    del answer["all_options"]  # every qualifying count: not shown, and the bulk of the JSON
    for key in ("options", "unpriced"):
        for shown, option in zip(answer[key], getattr(result, key), strict=True):
            shown["price_source"] = option.cost.price_source
    return json.dumps({"ok": True, **answer})


def rl_memory(request_json: str) -> str:
    """RL fine-tuning memory per GPU: {"scenario", "prompts", "samples_per_prompt",
    "prompt_len", "response_len", "kv_dtype_bytes"?, "colocated"?, "engines"?} ->
    calc.plan.rl_memory's JSON, with `scenario_device_bytes`: the scenario's own estimate, as
    set (at its own seq_len), for comparison."""
    from calc.plan import PlanError
    from calc.plan import rl_memory as plan_rl

    try:
        request = json.loads(request_json)
        m = plan_rl(request["scenario"], **{name: _whole(request, name, required=True) for name in (
                        "prompts", "samples_per_prompt", "prompt_len", "response_len")},
                    **_given(kv_dtype_bytes=_whole(request, "kv_dtype_bytes"),
                             colocated=request.get("colocated"), engines=_whole(request, "engines")))
        alone = estimate(request["scenario"]).device_bytes
    except (ScenarioError, PlanError) as exc:
        return _error(exc.field, exc.message)
    return json.dumps({"ok": True, **m.as_dict(), "scenario_device_bytes": alone})


__export__ = ["run", "architecture", "recommend", "plan", "compare", "export", "explain",
              "advise", "import_config", "cheapest", "rl_memory"]
