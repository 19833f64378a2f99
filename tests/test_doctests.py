"""The examples in the library's docstrings run and give what they show."""

import doctest
import importlib
import pkgutil

import pytest

import calc

MODULES = sorted(m.name for m in pkgutil.walk_packages(calc.__path__, "calc.")
                 if m.name != "calc.cli")


@pytest.mark.parametrize("name", ["calc", *MODULES])
def test_docstring_examples(name) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
