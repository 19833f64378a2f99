"""Reading untrusted text: UTF-8, a size bound, a nesting bound, JSON without repeated keys.

A scenario file, a pasted config or a share link can be anything. Before a parser recurses into
it, its nesting is measured (JSON `[[[...` thousands deep would exhaust Python's recursion, and
in the browser kill the interpreter), and errors name the rule: never a UnicodeDecodeError,
RecursionError or JSONDecodeError.

    >>> read_json('{"a": 1, "a": 2}')
    Traceback (most recent call last):
    ...
    calc.reading.InputError: text: repeats the key 'a'
"""

from __future__ import annotations

import json
from typing import Any

from .errors import FieldError, shown

MAX_DEPTH = 32  # scenarios and framework configs nest 4-6 levels; this bound is generous
MAX_TEXT_BYTES = 1 << 20  # a scenario: even a pasted config.json is a few KiB
MAX_CONFIG_BYTES = 1 << 20


class InputError(FieldError):
    """Text that cannot be read: `field` is `text` unless the caller names its own input."""


def decode(data: str | bytes, limit: int = MAX_TEXT_BYTES) -> str:
    """`data` as text: bytes must be UTF-8, and either at most `limit` bytes long."""
    size = len(data.encode("utf-8", "surrogatepass")) if isinstance(data, str) else len(data)
    if size > limit:
        raise InputError("text", f"is {size:,} bytes; at most {limit:,} are read")
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError("text", f"is not UTF-8 (byte {shown(data[exc.start:exc.start + 1])} at "
                         f"offset {exc.start})") from None


def nesting(text: str) -> int:
    """The deepest nesting of JSON brackets (or YAML flow collections) outside strings."""
    depth = deepest = 0
    quote = ""
    escaped = False
    for ch in text:
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch == '"':
            quote = ch
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def _no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise InputError("text", f"repeats the key {shown(key)}")
        out[key] = value
    return out


def read_json(text: str, max_depth: int = MAX_DEPTH) -> Any:
    """JSON `text`, parsed once its nesting is known to be within `max_depth`; a repeated key
    in an object is an error, as DeepSpeed and most tools make it (json.loads keeps the last)."""
    if nesting(text) > max_depth:
        raise InputError("text", f"is nested more than {max_depth} levels deep")
    try:
        return json.loads(text, object_pairs_hook=_no_repeats)
    except json.JSONDecodeError as exc:
        raise InputError("text", f"is not valid JSON ({exc.msg} at line {exc.lineno}, column "
                         f"{exc.colno})") from None


def check_depth(data: Any, max_depth: int = MAX_DEPTH) -> None:
    """Raise if `data` (parsed JSON or YAML) nests lists and objects deeper than `max_depth`;
    iterative, so it cannot overflow the stack it protects."""
    stack = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict | list | tuple):
            if depth >= max_depth:
                raise InputError("text", f"is nested more than {max_depth} levels deep")
            items = value.values() if isinstance(value, dict) else value
            stack += [(item, depth + 1) for item in items]
