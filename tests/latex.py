"""Evaluate the LaTeX calc writes for a formula with its numbers in place, independently of calc.

The page shows `substituted` LaTeX; this reads it back as arithmetic with Python's own semantics
(what calc.formula documents): \\lceil a / b \\rceil is integer ceiling division, \\lfloor a / b
\\rfloor integer division, \\lfloor x \\rfloor rounds a float down, \\frac is true division. If the
rendering drops a parenthesis or a factor, the value read back differs from the value computed.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

_NUMBER = re.compile(r"\d+(?:\\,\d{3})*(?:\.\d+)?(?:e[-+]?\d+)?")


def _group(tex: str, start: int) -> tuple[str, int]:
    """The contents of the brace group opening at tex[start] == "{", and the index after it."""
    assert tex[start] == "{", tex[start:]
    depth = 0
    for i in range(start, len(tex)):
        depth += {"{": 1, "}": -1}.get(tex[i], 0)
        if depth == 0:
            return tex[start + 1:i], i + 1
    raise ValueError(f"unbalanced braces: {tex!r}")


def to_python(tex: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(tex):
        rest = tex[i:]
        if rest.startswith("\\underbrace"):
            inner, i = _group(tex, i + len("\\underbrace"))
            assert tex[i:].startswith("_\\text"), tex[i:]
            _, i = _group(tex, i + len("_\\text"))
            out.append(f"({to_python(inner)})")
        elif rest.startswith("\\frac"):
            num, i = _group(tex, i + len("\\frac"))
            den, i = _group(tex, i)
            out.append(f"(({to_python(num)}) / ({to_python(den)}))")
        elif rest.startswith("^"):
            power, i = _group(tex, i + 1)
            out.append(f"**({to_python(power)})")
        else:
            for latex, python in (("\\left\\lceil", "CEIL("), ("\\right\\rceil", ")"),
                                  ("\\left\\lfloor", "FLOOR("), ("\\right\\rfloor", ")"),
                                  ("\\max\\left(", "max("), ("\\min\\left(", "min("),
                                  ("\\left(", "("), ("\\right)", ")"), ("\\cdot", "*"),
                                  (",\\ ", ", ")):
                if rest.startswith(latex):
                    out.append(python)
                    i += len(latex)
                    break
            else:
                m = _NUMBER.match(rest)
                if m:
                    out.append(m.group().replace("\\,", ""))
                    i += m.end()
                elif rest[0] in " +-/,()":
                    out.append(" , " if rest[0] == "/" else rest[0])
                    i += 1
                else:
                    raise ValueError(f"unexpected LaTeX at {rest[:30]!r} in {tex!r}")
    return "".join(out)


def _ceil(a: int | float, b: int | float | None = None) -> int:
    if b is None:
        return math.ceil(a)
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)
    return math.ceil(Fraction(a) / Fraction(b))


def _floor(a: int | float, b: int | float | None = None) -> int:
    if b is None:
        return math.floor(a)
    return int(a // b)


def evaluate(tex: str) -> int | float:
    """The value of calc's LaTeX arithmetic (numbers in place of every symbol)."""
    source = to_python(tex)
    return eval(source, {"__builtins__": {}, "CEIL": _ceil, "FLOOR": _floor,
                         "max": lambda *a: max(a), "min": lambda *a: min(a)})


def middle(substituted: str) -> str:
    """`lhs = <numbers> = result`: the numbers."""
    parts = substituted.split(" = ")
    assert len(parts) >= 3, substituted
    return " = ".join(parts[1:-1])
