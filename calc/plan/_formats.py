"""Hand-written YAML and TOML emitters for the small, fixed shapes the exports produce.

Only what the exports need: nested mappings of str, bool, int, float (YAML, TOML tables one
level deep) and lists of str. Strings are quoted whenever they could read as anything else.
"""

from __future__ import annotations

import json
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


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(str(value))  # a TOML basic string is a JSON string for these inputs


def to_toml(tables: dict[str, dict[str, Any]]) -> str:
    """TOML of tables of scalars (one level: `[table]` then `key = value`).

        >>> print(to_toml({"job": {"name": "x", "n": 2}}), end="")
        [job]
        name = "x"
        n = 2
    """
    out: list[str] = []
    for name, table in tables.items():
        if out:
            out.append("")
        out.append(f"[{name}]")
        out += [f"{key} = {_toml_value(value)}" for key, value in table.items()]
    return "\n".join(out) + "\n"
