"""The home page, the Python API, the command-line reference, the presets and the accuracy
page, as a reader sees them: the home page's example and accuracy figures are the library's, the
API shows rendered docstrings (no reST roles), the CLI reference shows each default and each
shared flag once, each preset's verification notes are listed under its id, and every traced
case is on the accuracy page, in a group that says how many it holds."""

from __future__ import annotations

import json
import re
from typing import Any

from docs_common import DEFAULT_SCENARIO, gib  # tools/, put on sys.path by conftest
from docs_pages import _context
from docs_reference import _documented

import calc.plan
from calc import estimate, gpus, models, parse_scenario
from calc.cli import build_parser
from calc.formatting import natural_key
from calc.plan.fit import FitRequest

from .conftest import ROOT, Calculator, decode

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


# Each definition list after "Verification notes": its terms, each with how many notes follow it.
NOTES = """() => [...document.querySelectorAll('h2#verification-notes ~ dl')].map((dl) =>
  [...dl.querySelectorAll(':scope > dt')].map((dt) => {
    let notes = 0;
    for (let el = dt.nextElementSibling; el && el.tagName === 'DD'; el = el.nextElementSibling) notes++;
    return [dt.textContent.trim(), notes]; }))"""


def test_presets_verification_notes_are_listed_under_each_presets_id(
        calculator: Calculator) -> None:
    """Each model's note and each GPU's two (usable memory, list price) are a definition list
    entry under the preset's id, not a paragraph that runs on from the id after a literal " : "
    (the generator wrote a definition list that mkdocs.yml did not enable)."""
    page = open_page(calculator, "reference/presets/")
    noted = sorted((m.id for m in models().values() if m.verification_note), key=natural_key)
    assert page.evaluate(NOTES) == [[[i, 1] for i in noted], [[i, 2] for i in sorted(gpus())]]
    run_on = [p for p in page.locator("article p").all_inner_texts() if re.match(r"\S+\s+: ", p)]
    assert not run_on, run_on[:2]


# The accuracy page's groups of traced cases: open or not, the summary, the case ids in its rows
# (each case's id is its code's text, whole for the browser's find, and its title), and the
# section's height as the page opens.
CASE_GROUPS = """() => ({
  groups: [...document.querySelectorAll('details.case-group')].map((d) => ({
    open: d.open, summary: d.querySelector('summary').textContent,
    ids: [...d.querySelectorAll('tbody td:first-child code[title]')].map(
      (c) => (c.textContent === c.title ? c.title : `text ${c.textContent} != title ${c.title}`))})),
  height: document.querySelector('h2#published-gpu-measurements').getBoundingClientRect().top
    - document.querySelector('h2#every-traced-case').getBoundingClientRect().top})"""


def test_every_traced_case_is_on_the_accuracy_page_in_a_folded_group(
        calculator: Calculator) -> None:
    """Every case of validation/results/accuracy.json is in one of the page's groups, once, and
    each group's summary counts its rows; the groups start folded, so the section is short (one
    table of every case made it 55,000 px tall)."""
    traced = json.loads((ROOT / "validation" / "results" / "accuracy.json").read_text())["traced"]
    page = open_page(calculator, "accuracy/")
    seen = page.evaluate(CASE_GROUPS)
    ids = [i for g in seen["groups"] for i in g["ids"]]
    assert len(ids) == len(traced), ("cases on the page / in accuracy.json (stale? "
                                     "python validation/accuracy.py --write, then make site)")
    assert sorted(ids) == sorted(r["id"] for r in traced)
    for group in seen["groups"]:
        assert not group["open"]
        assert f": {len(group['ids'])} cases (" in group["summary"], group["summary"]
    assert seen["height"] < 2_000, seen["height"]
