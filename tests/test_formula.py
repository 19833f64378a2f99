"""calc.formula: every formula renders as LaTeX that evaluates to what the estimator computes."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from latex import evaluate

import calc.estimate
import calc.explain  # noqa: F401
from calc.formula import FORMULAS, Formula
from calc.sources import ZERO
from calc.symbols import SYMBOLS

FLOAT_SYMBOLS = {"q_4": 0.515869140625, "f_a": 0.05}  # symbols whose values are fractions


def test_every_formula_parses_and_names_known_symbols() -> None:
    assert len(FORMULAS) > 60
    for f in FORMULAS.values():
        assert f.tex and f.title and f.source and f.key, f.id
        assert set(f.args) <= set(SYMBOLS), f.id


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_every_formula_renders_to_latex_that_gives_its_value(data: st.DataObject) -> None:
    """Any values: the substituted LaTeX, read back as arithmetic, equals the term's bytes."""
    f = data.draw(st.sampled_from(sorted(FORMULAS.values(), key=lambda f: f.id)))
    values = [FLOAT_SYMBOLS.get(a) or data.draw(st.integers(1, 10**7), label=a) for a in f.args]
    term = f(*values)
    assert isinstance(term.bytes, int)
    if f.args:
        assert evaluate(term.substituted) == term.bytes, (f.id, term.substituted)


def test_a_term_is_a_whole_number_of_bytes() -> None:
    f = Formula("test/half", "lambda P: P / 2", id="test.half", title="t", source=ZERO)
    try:
        with pytest.raises(ValueError, match="outside floor"):
            f(3)
    finally:
        del FORMULAS["test.half"]


def test_a_formula_names_only_known_symbols_and_ids_once() -> None:
    with pytest.raises(ValueError, match=r"not in calc\.symbols"):
        Formula("test/x", "lambda zzz: zzz", id="test.unknown", title="t", source=ZERO)
    with pytest.raises(ValueError, match="defined twice"):
        Formula("test/x", "lambda P: P", id="states.weights", title="t", source=ZERO)


def test_only_the_operators_the_latex_renders_are_allowed() -> None:
    """`//` or `%` would render as a subtraction in 'show the math' (and did, once): a
    formula says floor(x / y) instead."""
    for op in ("//", "%"):
        f = Formula("test/x", f"lambda P: P {op} 2", id="test.operator", title="t",
                    source=ZERO)
        try:
            with pytest.raises(ValueError, match="not part of the formula language"):
                f(3)
        finally:
            del FORMULAS["test.operator"]


def test_ceiling_division_is_exact_for_large_integers() -> None:
    f = FORMULAS["states.gradients"]
    big = 10**18 + 1
    assert f(big, 8, 2).bytes == -(-big // 8) * 2  # float division would round
