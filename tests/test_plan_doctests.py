"""The examples in calc.plan's docstrings run and give what they show."""

import doctest
import importlib
import pkgutil

import pytest

import calc.plan

MODULES = sorted(m.name for m in pkgutil.iter_modules(calc.plan.__path__, "calc.plan."))


@pytest.mark.parametrize("name", ["calc.plan", *MODULES])
def test_docstring_examples(name) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
