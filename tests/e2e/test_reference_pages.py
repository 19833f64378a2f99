"""The home page, the Python API and the command-line reference, as a reader sees them: the
home page's example and accuracy figures are the library's, the API shows rendered docstrings
(no reST roles), the CLI reference shows each default and each shared flag once."""

from __future__ import annotations

import re
from typing import Any

from docs_common import DEFAULT_SCENARIO, gib  # tools/, put on sys.path by conftest
from docs_pages import _context
from docs_reference import _documented

import calc.plan
from calc import estimate, parse_scenario
from calc.cli import build_parser
from calc.plan.fit import FitRequest

from .conftest import Calculator, decode

RAW_MARKUP = (":class:`", ":func:`", ":mod:`", ":math:`", ".. math::", "%(default)s", "%(")


def open_page(calculator: Calculator, path: str) -> Any:
    calculator.page.goto(calculator.base_url + path)
    return calculator.page


def test_home_page_example_and_accuracy_are_the_librarys(calculator: Calculator) -> None:
    page = open_page(calculator, "")
    example = page.inner_text(".home-example")
    e = estimate(DEFAULT_SCENARIO)
    for figure in (gib(e.peak_bytes), gib(e.device_bytes), gib(e.usable_bytes)):
        assert figure in example
    assert ("it fits" if e.fits else "it does not fit") in example
    link = page.get_attribute(".home-example a[href*='calculator/#s=']", "href")
    assert decode(link[link.index("#"):]) == parse_scenario(DEFAULT_SCENARIO).model_dump(mode="json")
    accuracy = _context("accuracy.md")
    text = page.inner_text("article")
    for key in ("cases", "test_cases", "error_test_median", "error_test_worst", "published_kept"):
        assert accuracy[key] in text, key


def test_api_page_renders_every_public_name_without_raw_markup(calculator: Calculator) -> None:
    page = open_page(calculator, "reference/api/")
    text = page.inner_text("article")
    assert not [m for m in RAW_MARKUP if m in text]
    headings = set(page.locator("article .doc-heading").all_inner_texts())
    for mod in (calc, calc.plan):
        for name in mod.__all__:
            if _documented(getattr(mod, name)):
                assert any(re.match(rf"{name}\b", h) for h in headings), name
    # a pydantic model's fields with their descriptions (griffe-pydantic)
    assert "sequences per GPU per micro-batch" in text


def test_cli_page_expands_defaults_and_lists_shared_flags_once(calculator: Calculator) -> None:
    page = open_page(calculator, "reference/cli/")
    text = page.inner_text("article")
    assert not [m for m in RAW_MARKUP if m in text]
    subcommands = next(a for a in build_parser()._actions if a.dest == "command").choices
    for name in subcommands:
        assert page.locator(f"h2#calc-{name}").count() == 1, name
    assert f"(default {FitRequest.model_fields['target'].default})" in \
        page.inner_text("h2#calc-max-batch ~ .md-typeset__scrollwrap >> nth=0")
    cells = page.locator("article td:first-child code").all_inner_texts()
    assert cells.count("--micro-batch-size") == 1  # the scenario flags: one table, not one per command
    assert cells.count("--zero") == 1
