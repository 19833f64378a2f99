"""Reading a framework config with every key accounted for: the text as a mapping, then each
key the importer reads marked as read; what is left becomes notes (settings known not to change
memory listed together, the rest one note each), so nothing is dropped silently.
"""

from __future__ import annotations

import json
from typing import Any

from .common import ConfigImportError
from .yaml import YAML_BOOL, parse_yaml


def load(source: str | bytes | dict[str, Any], yaml: bool) -> dict[str, Any]:
    """The config as a mapping: a dict as given, JSON text, or (`yaml`) the YAML subset."""
    if isinstance(source, dict):
        return source
    text = source.decode() if isinstance(source, bytes) else source
    if not yaml or text.lstrip().startswith("{"):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigImportError("config", f"is not valid JSON ({exc.msg} at line "
                                    f"{exc.lineno})") from None
    else:
        data = parse_yaml(text)
    if not isinstance(data, dict):
        raise ConfigImportError("config", "must be a mapping (a JSON object)")
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
            raise ConfigImportError(self.path(key), f"must be a mapping, got {value!r}")
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
        raise ConfigImportError(reader.path(key), f"must be true or false, got {value!r}")
    return value


def positive(reader: Reader, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigImportError(reader.path(key), f"must be a positive integer, got {value!r}")
    return value
