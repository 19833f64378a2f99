"""Reading a framework config with every key accounted for: the text as a mapping, then each
key the importer reads marked as read; what is left becomes notes (settings known not to change
memory listed together, the rest one note each), so nothing is dropped silently.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import shown
from ..reading import MAX_CONFIG_BYTES, InputError, check_depth, decode, read_json
from .common import AUTO, ConfigImportError
from .yaml import YAML_BOOL, parse_yaml


def load(source: str | bytes | dict[str, Any], yaml: bool) -> dict[str, Any]:
    """The config as a mapping: a dict as given, JSON text, or (`yaml`) the YAML subset.
    Text must be UTF-8, nested at most MAX_DEPTH deep, without repeated keys (DeepSpeed and
    PyYAML refuse them; json.loads would keep the last silently)."""
    if isinstance(source, dict):
        data: Any = source
    else:
        try:
            text = decode(source, MAX_CONFIG_BYTES)
            if not yaml or text.lstrip().startswith("{"):
                data = read_json(text)
            else:
                data = parse_yaml(text)
        except InputError as exc:
            raise ConfigImportError("config" if exc.field == "text" else exc.field,
                                    exc.message) from None
    if not isinstance(data, dict):
        raise ConfigImportError("config", "must be a mapping (a JSON object)")
    try:
        check_depth(data)
    except InputError as exc:
        raise ConfigImportError("config", exc.message) from None
    return data


class Reader:
    """A config mapping whose keys are marked as read; what is left becomes notes."""

    def __init__(self, data: dict[str, Any], prefix: str, inert: frozenset[str]) -> None:
        self.data, self.prefix, self.inert = data, prefix, inert
        self.read: set[str] = set()
        self.children: list[Reader] = []

    def path(self, key: str) -> str:
        return f"{self.prefix}{key}"

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        return self.data.get(key, default)

    def sub(self, key: str) -> Reader | None:
        value = self.get(key)
        if value is None:
            return None
        if not isinstance(value, dict):
            raise ConfigImportError(self.path(key), f"must be a mapping, got {shown(value)}")
        child = Reader(value, f"{self.path(key)}.", self.inert)
        self.children.append(child)
        return child

    def leftovers(self) -> tuple[list[str], list[str]]:
        """(settings not affecting memory, others), as `path = value`."""
        inert: list[str] = []
        other: list[str] = []
        for key, value in self.data.items():
            if key in self.read:
                continue
            path = self.path(key)
            (inert if key in self.inert or path in self.inert else other).append(
                f"{path} = {json.dumps(value)}")
        for child in self.children:
            i, o = child.leftovers()
            inert += i
            other += o
        return inert, other


def finish(readers: list[Reader], notes: list[str]) -> None:
    inert: list[str] = []
    for reader in readers:
        i, other = reader.leftovers()
        inert += [s.split(" = ")[0] for s in i]
        notes += [f"{s}: not modelled by the estimate, not read" for s in other]
    if inert:
        notes.append("not memory settings, not read: " + ", ".join(inert))


def flag(reader: Reader, key: str, default: bool = False) -> bool:
    value = reader.get(key, default)
    if isinstance(value, str) and value.lower() in YAML_BOOL:
        value = YAML_BOOL[value.lower()]
    if not isinstance(value, bool):
        raise ConfigImportError(reader.path(key), f"must be true or false, got {shown(value)}")
    return value


def integer(reader: Reader, key: str, default: int, allowed: tuple[int, ...],
            digits: bool = False) -> int:
    """An integer setting among `allowed`: not true, not 1.0 (Python would take both for 1);
    with `digits`, a string of digits too (DeepSpeed's pydantic config reads "3" as 3)."""
    value = reader.get(key, default)
    if digits and isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value not in allowed:
        raise ConfigImportError(reader.path(key), f"must be one of {', '.join(map(str, allowed))}"
                                f", got {shown(value)}")
    return value


def enabled(reader: Reader | None, key: str = "enabled") -> bool | str:
    """A DeepSpeed switch as its pydantic config reads it: true/false, 1/0, "true"/"false"
    (and "auto", which the HF Trainer fills in); anything else is an error."""
    if reader is None:
        return False
    value = reader.get(key, False)
    if value == AUTO or isinstance(value, bool):
        return value  # type: ignore[no-any-return]
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in YAML_BOOL | {"1": True, "0": False}:
        return (YAML_BOOL | {"1": True, "0": False})[value.lower()]
    raise ConfigImportError(reader.path(key), f"must be true or false, got {shown(value)}")


def text(reader: Reader, key: str, default: str | None = None) -> str | None:
    value = reader.get(key, default)
    if value is not None and not isinstance(value, str):
        raise ConfigImportError(reader.path(key), f"must be a string, got {shown(value)}")
    return value


def positive(reader: Reader, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigImportError(reader.path(key), f"must be a positive integer, got {shown(value)}")
    return value
