"""The calculator's Python side: JSON in, JSON out, no DOM.

It runs in a PyScript worker in the browser (`__export__` below) and, at build time, in CPython
(tools/site_hooks.py renders the default scenario with it), so the page shows the same payload
either way. The page asks by operation name (calc.operations: `estimate`, `recommend`,
`advise`, ...) with that operation's request as JSON, and gets

    {"ok": true, ...the operation's answer}   or   {"ok": false, "field": "gpus", "message": "..."}

What each answer holds, and every default, is the library's (calc.operations and the module
declaring the operation); nothing is decided here. calc.operations loads a planning tool's
module the first time the page asks for it.

A scenario from outside the page (a share link, an opened file) comes as the text it was, through
`call_scenario_text`: calc reads it as the command line reads a scenario file (UTF-8, size,
nesting, no repeated keys; `calc.scenario.scenario_dict`), so a link gets the CLI's contract.
"""

from __future__ import annotations

import os
import sys

if sys.platform == "emscripten":
    # No pydantic plugins exist in the browser, and looking for them makes pydantic read the
    # metadata of every installed distribution when it builds its first model.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

import json

from calc.errors import FieldError
from calc.operations import answer
from calc.scenario import scenario_dict


def call(name: str, request_json: str) -> str:
    """Operation `name` on a JSON request: its JSON answer (see the module docstring)."""
    return answer(name, request_json)


def call_scenario_text(name: str, request_json: str, scenario_text: str) -> str:
    """`call`, with the request's `scenario` given as JSON text and read as the CLI reads it."""
    try:
        scenario = scenario_dict(scenario_text)
    except FieldError as exc:
        return json.dumps({"ok": False, "field": exc.field, "message": exc.message})
    return answer(name, json.dumps({**json.loads(request_json), "scenario": scenario}))


__export__ = ["call", "call_scenario_text"]
