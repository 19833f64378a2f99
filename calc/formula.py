r"""Formulas written once: the estimator evaluates them, the explanation and the docs render them.

A `Formula` is a Python lambda over named symbols, kept as text:

    >>> from calc.sources import ADAMW
    >>> f = Formula("optimizer_states/exp_avg", "lambda P_t, N_1, w_s: ceil(P_t / N_1) * w_s",
    ...             id="doc.exp_avg", title="Adam's first moment", source=ADAMW)
    >>> term = f(8_030_261_248, 8, 4)
    >>> term.bytes
    4015130624
    >>> f.tex
    '\\left\\lceil P_\\text{train} / N_d^{[z\\ge1]} \\right\\rceil\\,w_s'
    >>> term.substituted
    '\\left\\lceil 8\\,030\\,261\\,248 / 8 \\right\\rceil \\cdot 4'

Calling it with the symbols' values (in the lambda's order) gives a `Term`: the values and
the bytes the lambda computed. The same text renders as LaTeX with the symbols (`tex`) or with
the values in their place (`Term.substituted`), so what a page shows is what was computed.

The language: integers and floats, ``+ - * / **``, parentheses, and
- ``ceil(x / y)``: integer ceiling division (a ZeRO shard, \(\lceil x / y \rceil\));
- ``floor(x / y)``: integer division; ``floor(x)``: a float rounded down;
- ``max(...)``, ``min(...)``.
Symbol names are those of `calc.symbols.SYMBOLS`, which gives their LaTeX and meaning.
Formulas are parsed and compiled on first use, so importing calc compiles nothing.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from typing import Literal, NamedTuple

from .sources import Source
from .symbols import SYMBOLS

Unit = Literal["bytes", "parameters"]
Number = int | float

FORMULAS: dict[str, Formula] = {}
"""Every formula by id, in definition order: the docs' formula reference is generated from it."""


class Term(NamedTuple):
    """One evaluated formula: its symbols' values and the bytes (or count) they give. It names
    its formula by id and holds only strings and numbers, so Python's garbage collector stops
    tracking it: a search that keeps thousands of estimates does not pay for their terms."""

    key: str  # the breakdown path its bytes are booked under
    id: str  # its formula's id (FORMULAS)
    values: tuple[Number, ...]
    bytes: int

    @property
    def formula(self) -> Formula:
        return FORMULAS[self.id]

    @property
    def symbols(self) -> dict[str, Number]:
        return dict(zip(self.formula.args, self.values, strict=True))

    @property
    def substituted(self) -> str:
        """The formula's LaTeX with this term's values in place of its symbols."""
        return self.formula.render(self.symbols)


class Formula:
    """A formula for the bytes (or parameter count) booked under breakdown path `key`."""

    __slots__ = ("_tree", "args", "expr", "id", "key", "note", "source", "title", "unit")

    def __init__(self, key: str, expr: str, *, id: str, title: str, source: Source,
                 unit: Unit = "bytes", note: str = "") -> None:
        if id in FORMULAS:
            raise ValueError(f"formula id {id!r} is defined twice")
        self.key, self.expr, self.id, self.title, self.source = key, expr, id, title, source
        self.unit, self.note = unit, note
        head = expr.partition(":")[0].split()
        if not head or head[0] != "lambda":
            raise ValueError(f"{id}: a formula is written 'lambda a, b: ...', got {expr!r}")
        self.args = tuple(a.strip() for a in " ".join(head[1:]).split(",") if a.strip())
        unknown = [a for a in self.args if a not in SYMBOLS]
        if unknown:
            raise ValueError(f"{id}: symbols {unknown} are not in calc.symbols.SYMBOLS")
        self._tree: ast.expr | None = None
        FORMULAS[id] = self

    def __call__(self, *values: Number) -> Term:
        """The term of these values (in the lambda's order). The first call compiles the
        formula into a `__call__` of its own, so later calls cost one Python call each."""
        self._compile()
        return self(*values)

    def __repr__(self) -> str:
        return f"Formula({self.id!r}: {self.expr})"

    # -- evaluation ----------------------------------------------------------------------------

    @property
    def body(self) -> ast.expr:
        if self._tree is None:
            tree = ast.parse(self.expr, mode="eval").body
            if not isinstance(tree, ast.Lambda):
                raise ValueError(f"{self.id}: not a lambda: {self.expr!r}")
            _check_names(self.id, tree.body, set(self.args))
            self._tree = tree.body
        return self._tree

    def _compile(self) -> None:
        """Give this formula a class of its own whose `__call__` evaluates the lambda's body
        (in integer arithmetic: see `_Integer`) and builds the `Term` in place."""
        body = ast.unparse(_Integer().visit(_copy(self.body)))
        args = "".join(f"{a}, " for a in self.args)
        source = (f"def __call__(self, {args}):\n"
                  f"    return _new(Term, (KEY, ID, ({args}), {body}))\n")
        space: dict[str, Callable[..., Term]] = {}
        exec(compile(source, f"<formula {self.id}>", "exec"),
             {"_new": tuple.__new__, "Term": Term, "_floor": math.floor, "KEY": self.key,
              "ID": self.id}, space)
        self.__class__ = type(f"Formula[{self.id}]", (Formula,),
                              {"__slots__": (), "__call__": space["__call__"]})

    # -- rendering -----------------------------------------------------------------------------

    @property
    def tex(self) -> str:
        """The formula in LaTeX, with the symbols' LaTeX names."""
        return _Tex(None).render(self.body)

    def render(self, values: dict[str, Number]) -> str:
        """The formula in LaTeX with `values` in place of the symbols."""
        return _Tex(values).render(self.body)

    def booked(self, key: str) -> Formula:
        """The same formula booked under another breakdown path (memoised)."""
        twin = FORMULAS.get(f"{self.id}@{key}")
        if twin is None:
            twin = Formula(key, self.expr, id=f"{self.id}@{key}", title=self.title,
                           source=self.source, unit=self.unit, note=self.note)
        return twin


def _copy(node: ast.expr) -> ast.expr:
    return ast.parse(ast.unparse(node), mode="eval").body


_FUNCTIONS = {"ceil", "floor", "max", "min"}


def _check_names(fid: str, body: ast.expr, args: set[str]) -> None:
    _check_integer(fid, body, inside_floor=False)
    for node in ast.walk(body):
        if isinstance(node, ast.Call):
            if not (isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS):
                raise ValueError(f"{fid}: only {sorted(_FUNCTIONS)} may be called")
        elif isinstance(node, ast.Name) and node.id not in args | _FUNCTIONS:
            raise ValueError(f"{fid}: {node.id!r} is not an argument of the lambda")
        elif isinstance(node, ast.operator) and not isinstance(
                node, ast.Add | ast.Sub | ast.Mult | ast.Div | ast.Pow):
            raise ValueError(f"{fid}: {type(node).__name__} is not part of the formula "
                             "language (integer division: floor(x / y))")
        elif not isinstance(node, ast.expr | ast.operator | ast.unaryop | ast.expr_context):
            raise ValueError(f"{fid}: {type(node).__name__} is not part of the formula language")


def _check_integer(fid: str, node: ast.AST, inside_floor: bool) -> None:
    """A term is a whole number of bytes: true division only inside floor() or ceil()."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and not inside_floor:
        raise ValueError(f"{fid}: '/' outside floor() or ceil(): a term must be an integer")
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
            node.func.id in ("floor", "ceil"):
        inside_floor = True
    for child in ast.iter_child_nodes(node):
        _check_integer(fid, child, inside_floor)


class _Integer(ast.NodeTransformer):
    """ceil(x / y) -> -(-x // y); floor(x / y) -> x // y; floor(x) -> math.floor(x)."""

    def visit_Call(self, node: ast.Call) -> ast.expr:
        self.generic_visit(node)
        assert isinstance(node.func, ast.Name)
        name, args = node.func.id, node.args
        if name in ("ceil", "floor") and len(args) == 1:
            (x,) = args
            if isinstance(x, ast.BinOp) and isinstance(x.op, ast.Div):
                if name == "floor":
                    return ast.BinOp(x.left, ast.FloorDiv(), x.right)
                neg = ast.UnaryOp(ast.USub(), x.left)
                return ast.UnaryOp(ast.USub(), ast.BinOp(neg, ast.FloorDiv(), x.right))
            if name == "floor":
                return ast.Call(ast.Name("_floor", ast.Load()), [x], [])
            raise ValueError("ceil() takes a division: ceil(x / y)")
        return node


# Precedence, for parentheses: sums 1 < products 2 < unary minus 3 < powers 4 < atoms 5.


def number(n: Number) -> str:
    """A number in LaTeX: integers with thin-space thousands separators, floats exactly."""
    if isinstance(n, float) and not n.is_integer():
        return repr(n)
    return f"{int(n):,}".replace(",", "\\,")


class _Tex:
    """LaTeX of a formula body; with `values`, numbers in place of the symbols."""

    def __init__(self, values: dict[str, Number] | None) -> None:
        self.values = values

    def render(self, node: ast.expr) -> str:
        return self._tex(node)[0]

    def _tex(self, node: ast.expr) -> tuple[str, int]:
        """(LaTeX, precedence of its outermost operation)."""
        if isinstance(node, ast.Constant):
            assert isinstance(node.value, int | float), node.value
            return number(node.value), 5
        if isinstance(node, ast.Name):
            if self.values is not None:
                return number(self.values[node.id]), 5
            return SYMBOLS[node.id].tex, 5
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            inner, p = self._tex(node.operand)
            return f"-{self._wrap(inner, p, 3)}", 3
        if isinstance(node, ast.BinOp):
            return self._binop(node)
        if isinstance(node, ast.Call):
            assert isinstance(node.func, ast.Name)
            name, args = node.func.id, node.args
            if name in ("ceil", "floor"):
                left, right = ("\\left\\lceil ", " \\right\\rceil") if name == "ceil" else \
                    ("\\left\\lfloor ", " \\right\\rfloor")
                (x,) = args
                if isinstance(x, ast.BinOp) and isinstance(x.op, ast.Div):
                    a, pa = self._tex(x.left)
                    b, pb = self._tex(x.right)
                    return f"{left}{self._wrap(a, pa, 2)} / {self._wrap(b, pb, 3)}{right}", 5
                return f"{left}{self._tex(x)[0]}{right}", 5
            inner = ",\\ ".join(self._tex(a)[0] for a in args)
            return f"\\{name}\\left({inner}\\right)", 5
        raise ValueError(f"cannot render {ast.dump(node)}")

    def _binop(self, node: ast.BinOp) -> tuple[str, int]:
        op = type(node.op)
        a, pa = self._tex(node.left)
        b, pb = self._tex(node.right)
        if op is ast.Div:
            return f"\\frac{{{a}}}{{{b}}}", 5
        if op is ast.Pow:
            return f"{self._wrap(a, pa, 5)}^{{{b}}}", 4
        # The right operand keeps its parentheses even where algebra would not need them:
        # with floats, a + (b + c) and (a + b) + c round differently.
        if op is ast.Mult:
            a, b = self._wrap(a, pa, 2), self._wrap(b, pb, 3)
            numeric = self.values is not None or (a[-1].isdigit() and b[0].isdigit())
            return f"{a} \\cdot {b}" if numeric else f"{a}\\,{b}", 2
        sign = "+" if op is ast.Add else "-"
        return f"{a} {sign} {self._wrap(b, pb, 2)}", 1

    @staticmethod
    def _wrap(tex: str, prec: int, needed: int) -> str:
        return f"\\left({tex}\\right)" if prec < needed else tex


Items = tuple[tuple[Term, int], ...]


class Part(NamedTuple):
    """Bytes alive together: terms, each counted its number of times (`bytes` like a Term's,
    so a moment of the step can hold parts and single terms alike). `breakdown` is the bytes by
    breakdown path; `items` the terms themselves where kept (for the explanation): a report
    keeps only the numbers, so thousands of estimates held by a search hold no terms."""

    bytes: int
    breakdown: dict[str, int]  # zeros left out
    items: Items  # () where not kept


def add_up(items: Items | list[tuple[Term, int]]) -> int:
    """Bytes of `items`, each term counted its number of times."""
    total = 0
    for term, times in items:
        total += term[3] * times  # term.bytes, without the attribute lookup: a hot path
    return total


def part(items: Items, keep: bool = True) -> Part:
    """The part of `items`; `keep`: keep the terms as well as their bytes."""
    total = 0
    breakdown: dict[str, int] = {}
    for term, times in items:
        nbytes = term[3] * times  # term.bytes: a hot path
        if nbytes:
            total += nbytes
            breakdown[term[0]] = breakdown.get(term[0], 0) + nbytes  # term.key
    return tuple.__new__(Part, (total, breakdown, items if keep else ()))


def extended(p: Part, items: Items, keep: bool = True) -> Part:
    """`p` with `items` added (cheaper than a new part of all the items)."""
    total, breakdown = p.bytes, dict(p.breakdown)
    for term, times in items:
        nbytes = term[3] * times
        if nbytes:
            total += nbytes
            breakdown[term[0]] = breakdown.get(term[0], 0) + nbytes
    return tuple.__new__(Part, (total, breakdown, p.items + items if keep else ()))


def scaled(p: Part, times: int, keep: bool = True) -> Part:
    """`p` counted `times` times (the micro-batches in flight)."""
    items = tuple((t, k * times) for t, k in p.items) if keep else ()
    return tuple.__new__(Part, (p.bytes * times, {k: v * times for k, v in p.breakdown.items()},
                                items))


def joined(a: Part, b: Part, keep: bool = True) -> Part:
    """`a` and `b` alive together."""
    breakdown = dict(a.breakdown)
    for key, nbytes in b.breakdown.items():
        breakdown[key] = breakdown.get(key, 0) + nbytes
    return tuple.__new__(Part, (a.bytes + b.bytes, breakdown, a.items + b.items if keep else ()))


def part_of(*terms: Term | None) -> Part | None:
    """The part of these terms, once each (None where there are none)."""
    items = tuple((t, 1) for t in terms if t is not None)
    return part(items) if items else None


__all__ = ["FORMULAS", "Formula", "Items", "Part", "Term", "add_up", "extended", "joined",
           "number", "part", "part_of", "scaled"]
