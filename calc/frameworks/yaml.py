"""The YAML subset framework configs use: Accelerate's config files, read and written.

Accelerate writes its config with PyYAML; calc has no YAML dependency (it also runs in
Pyodide), so both directions are written here for the small, fixed shapes involved:
`parse_yaml` reads the block-style subset `accelerate config` writes, `to_yaml`
writes nested mappings of str, bool, int, float and lists of str, quoting any string that could
read as anything else. Booleans are YAML 1.1's (`yes`/`no` too), as PyYAML reads them.

    >>> parse_yaml(to_yaml({"a": {"b": True, "c": "no"}, "d": ["X"]}))
    {'a': {'b': True, 'c': 'no'}, 'd': ['X']}
"""

from __future__ import annotations

import json
import re
from typing import Any

from ..errors import shown
from ..reading import MAX_DEPTH
from .common import ConfigImportError

# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------

_INT = re.compile(r"^[-+]?\d+$")
_FLOAT = re.compile(r"^[-+]?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?$")
YAML_BOOL = {"true": True, "false": False, "yes": True, "no": False, "on": True, "off": False}


def _split_flow(body: str) -> list[str]:
    """The items of a one-line flow collection, split at commas outside quotes."""
    items, start, quote = [], 0, ""
    for i, ch in enumerate(body):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in ("'", '"'):
            quote = ch
        elif ch == ",":
            items.append(body[start:i])
            start = i + 1
    items.append(body[start:])
    return [item.strip() for item in items if item.strip()]


def _read_scalar(text: str, line: int, flow: bool = True) -> Any:
    text = text.strip()
    if text[:1] in ("'", '"'):
        quote = text[0]
        if len(text) < 2 or text[-1] != quote:
            raise ConfigImportError("yaml", f"line {line}: unterminated string {shown(text)}")
        body = text[1:-1]
        if quote == "'":
            return body.replace("''", "'")
        try:
            return json.loads(text)  # YAML's double-quoted escapes are JSON's, for this subset
        except json.JSONDecodeError:
            raise ConfigImportError("yaml", f"line {line}: cannot read the string "
                                    f"{shown(text)} (a bad escape or a stray quote)") from None
    if text.startswith(("[", "{")):
        if not flow:
            raise ConfigImportError("yaml", f"line {line}: nested flow collections are not read")
        if not text.endswith("]" if text[0] == "[" else "}"):
            raise ConfigImportError("yaml", f"line {line}: flow collections must close on the "
                                    "same line")
        items = _split_flow(text[1:-1])
        if text[0] == "[":
            return [_read_scalar(i, line, flow=False) for i in items]
        out: dict[str, Any] = {}
        for item in items:
            key, sep, value = item.partition(":")
            if not sep:
                raise ConfigImportError("yaml", f"line {line}: expected key: value in "
                                        f"{shown(item)}")
            out[key.strip()] = _read_scalar(value, line, flow=False)
        return out
    low = text.lower()
    if low in YAML_BOOL:  # YAML 1.1, as PyYAML (Accelerate's reader) reads it
        return YAML_BOOL[low]
    if low in ("null", "~", ""):
        return None
    if _INT.match(text):
        return int(text)
    if _FLOAT.match(text):
        return float(text)
    return text


def _strip_comment(line: str) -> str:
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in ("'", '"'):
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i]
    return line


def parse_yaml(text: str) -> dict[str, Any]:
    """The block-style YAML subset Accelerate writes: nested mappings by indentation,
    `- item` lists of scalars, one-line flow `[a, b]` / `{k: v}` of scalars, quoted and plain
    scalars (YAML 1.1 booleans: `yes`/`no` too), `#` comments, `---`. Anchors, multi-line
    strings and nested flow collections are refused with the line number.

        >>> parse_yaml("a: 1\\nb:\\n  c: 'no'\\n  d: [x, 2]\\ne:\\n- f\\n")
        {'a': 1, 'b': {'c': 'no', 'd': ['x', 2]}, 'e': ['f']}
    """
    root: dict[str, Any] = {}
    # stack of (indent of the keys in this mapping, the mapping)
    stack: list[tuple[int, dict[str, Any]]] = [(0, root)]
    pending: tuple[int, dict[str, Any], str] | None = None  # a `key:` awaiting its block
    for number, raw in enumerate(text.splitlines(), 1):
        line = _strip_comment(raw).rstrip()
        if not line.strip() or line.strip() in ("---", "..."):
            continue
        if "\t" in line[: len(line) - len(line.lstrip())]:
            raise ConfigImportError("yaml", f"line {number}: tabs are not YAML indentation")
        indent = len(line) - len(line.lstrip())
        body = line.strip()
        if body.startswith(("&", "*", "|", ">", "!")) or re.search(r":\s+[&*|>!]", body):
            raise ConfigImportError("yaml", f"line {number}: anchors, tags and block strings "
                                    "are not read")
        if body.startswith("- ") or body == "-":
            if pending is None or indent < pending[0]:
                raise ConfigImportError("yaml", f"line {number}: a list item needs a key above")
            if re.match(r"^-\s+[^'\"\[{][^:]*:(\s|$)", body):
                raise ConfigImportError("yaml", f"line {number}: lists of mappings are not read")
            _, parent, key = pending
            if not isinstance(parent.get(key), list):
                parent[key] = []
            parent[key].append(_read_scalar(body[1:], number))
            continue
        if pending is not None:
            p_indent, parent, key = pending
            if isinstance(parent.get(key), list):
                pending = None
            elif indent > p_indent:
                child: dict[str, Any] = {}
                parent[key] = child
                stack.append((indent, child))
                if len(stack) > MAX_DEPTH:
                    raise ConfigImportError("yaml", f"line {number}: nested more than "
                                            f"{MAX_DEPTH} levels deep")
            pending = None
        while stack and indent < stack[-1][0]:
            stack.pop()
        if not stack or indent != stack[-1][0]:
            raise ConfigImportError("yaml", f"line {number}: unexpected indentation")
        mapping = stack[-1][1]
        match = re.match(r"^([^:]+?)\s*:(\s+(.*))?$", body)
        if match is None:
            raise ConfigImportError("yaml", f"line {number}: expected `key: value`")
        key, value = match.group(1).strip("'\""), match.group(3)
        if key in mapping:
            raise ConfigImportError("yaml", f"line {number}: duplicate key {key!r}")
        if value is None or value == "":
            mapping[key] = None
            pending = (indent, mapping, key)
        else:
            mapping[key] = _read_scalar(value, number)
    return root


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------

_PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")
_YAML_WORDS = {"yes", "no", "true", "false", "on", "off", "null", "y", "n", "~"}


def _write_scalar(value: Any) -> str:
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
            lines += [f"{pad}- {_write_scalar(v)}" for v in value]
        else:
            lines.append(f"{pad}{key}: {_write_scalar(value)}")
    return "\n".join(lines) + "\n"


__all__ = ["YAML_BOOL", "parse_yaml", "to_yaml"]
