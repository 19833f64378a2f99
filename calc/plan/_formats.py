"""A hand-written YAML emitter for the small, fixed shapes the exports produce.

Only what the exports need: nested mappings of str, bool, int, float and lists of str. Strings are quoted whenever they could read as anything else.
"""

from __future__ import annotations

import re
from typing import Any

_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
_YAML_WORDS = {"yes", "no", "true", "false", "on", "off", "null", "y", "n", "~"}


def _yaml_scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if value is None:
        return "null"
    text = str(value)
    if _PLAIN.match(text) and text.lower() not in _YAML_WORDS:
        return text
    return "'" + text.replace("'", "''") + "'"


def to_yaml(data: dict[str, Any], indent: int = 0) -> str:
    """Block-style YAML of a nested mapping (keys in the given order).

        >>> print(to_yaml({"a": {"b": True, "c": "no"}, "d": ["X"]}), end="")
        a:
          b: true
          c: 'no'
        d:
        - X
    """
    lines: list[str] = []
    pad = " " * indent
    for key, value in data.items():
        if isinstance(value, dict):
            lines.append(f"{pad}{key}:")
            lines.append(to_yaml(value, indent + 2).rstrip("\n"))
        elif isinstance(value, list):
            lines.append(f"{pad}{key}:")
            lines += [f"{pad}- {_yaml_scalar(v)}" for v in value]
        else:
            lines.append(f"{pad}{key}: {_yaml_scalar(value)}")
    return "\n".join(lines) + "\n"
