"""The calculator's Python side: JSON in, JSON out, no DOM.

It runs in a PyScript worker in the browser (`__export__` below) and, at build time, in CPython
(tools/site_hooks.py renders the default scenario with it), so the page shows the same payload
either way. The page asks by operation name (calc.operations: `estimate`, `recommend`,
`advise`, ...) with that operation's request as JSON, and gets

    {"ok": true, ...the operation's answer}   or   {"ok": false, "field": "gpus", "message": "..."}

What each answer holds, and every default, is the library's (calc.operations and the module
declaring the operation); nothing is decided here. calc.operations loads a planning tool's
module the first time the page asks for it.
"""

from __future__ import annotations

import os
import sys

if sys.platform == "emscripten":
    # No pydantic plugins exist in the browser, and looking for them makes pydantic read the
    # metadata of every installed distribution when it builds its first model.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

from calc.operations import answer


def call(name: str, request_json: str) -> str:
    """Operation `name` on a JSON request: its JSON answer (see the module docstring)."""
    return answer(name, request_json)


__export__ = ["call"]
