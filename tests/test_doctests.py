"""The examples in the library's docstrings run and give what they show."""

import doctest
import importlib
import inspect
import pkgutil
import re

import pytest

import calc

MODULES = sorted(m.name for m in pkgutil.walk_packages(calc.__path__, "calc.")
                 if m.name != "calc.cli")


@pytest.mark.parametrize("name", ["calc", *MODULES])
def test_docstring_examples(name) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0


RST_MARKUP = re.compile(r":(?:class|func|mod|meth|attr|data|math):`|^\s*\.\. \w+::", re.M)


@pytest.mark.parametrize("name", ["calc", *MODULES, "calc.cli"])
def test_docstrings_are_markdown(name) -> None:
    """The API reference renders the docstrings as Markdown (mkdocstrings): reST roles such as
    :class:`X` and `.. math::` blocks would show up as raw text there."""
    module = importlib.import_module(name)
    docs = [module.__doc__ or ""] + [inspect.getdoc(obj) or "" for _, obj in inspect.getmembers(module)
                                     if getattr(obj, "__module__", None) == name]
    assert not [d for d in docs if RST_MARKUP.search(d)]
