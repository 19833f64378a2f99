"""The one shape of a bad-input error: `field` names the input, `message` states the rule.

Each stage subclasses it (a config.json key, a scenario field, a planning request, an export
setting), so the library, the CLI (`calc: error: field: message`, exit code 2) and the page
(the message beside the field) report all of them the same way. Both parts are printable on
one line: a key with a newline or a terminal escape in it is shown escaped, never obeyed.
`PlanError` lives here rather than in `calc.plan` because the framework import
(`calc.frameworks`), a layer below the planning tools, raises it too.
"""

from __future__ import annotations

import reprlib
from typing import Any

from pydantic_core import ErrorDetails


def printable(text: str, limit: int = 200) -> str:
    """`text` with control characters escaped (as Python writes them), cut at `limit`."""
    out = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return out if len(out) <= limit else out[: limit - 3] + "..."


class FieldError(ValueError):
    """Bad input: `field` is the dotted path (`training.seq_len`), `message` the rule broken."""

    def __init__(self, field: str, message: str) -> None:
        field, message = printable(field, 120), printable(message, 400)
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class PlanError(FieldError):
    """A planning request that cannot be answered: `field` names the input, `message` the rule."""


_REPR = reprlib.Repr()  # keyword arguments only from Python 3.12
_REPR.maxlevel, _REPR.maxlist, _REPR.maxdict, _REPR.maxstring, _REPR.maxother = 3, 4, 4, 40, 40


def shown(value: Any) -> str:
    """A short, one-line rendering of a bad value for an error message (bounded: a list nested
    thousands deep is shown three levels deep, never recursed into)."""
    text = str(value).lower() if isinstance(value, bool) else _REPR.repr(value)
    return printable(text, 60)


_RULES = {  # pydantic error type -> the rule, in calc's words
    "int_type": "must be an integer", "int_parsing": "must be an integer",
    "int_from_float": "must be a whole number", "bool_type": "must be true or false",
    "bool_parsing": "must be true or false", "float_type": "must be a number",
    "float_parsing": "must be a number", "finite_number": "must be a finite number",
    "string_type": "must be a string", "tuple_type": "must be a list",
    "list_type": "must be a list", "dict_type": "must be an object",
    "model_type": "must be an object", "model_attributes_type": "must be an object",
    "extra_forbidden": "is not a known field", "missing": "is required",
}


def rule(err: ErrorDetails) -> str:
    """One pydantic validation error as a rule with the value that broke it."""
    kind = err["type"]
    if kind in ("extra_forbidden", "missing"):
        return _RULES[kind]
    message = _RULES.get(kind) or err["msg"].removeprefix("Value error, ").replace(
        "Input should be", "must be")
    if "input" in err and kind != "value_error":
        message += f", got {shown(err['input'])}"
    return message
