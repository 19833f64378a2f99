"""Every page's layout on a laptop (1366 px) and a phone (390 px): the page never scrolls
sideways; on a laptop every table fits its column, and on a phone a table wider than its column
scrolls inside its own wrapper, except on the pages where every table fits a phone too; code in
a table cell wraps only where it was written to (issue 13, point 5)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import SITE, Calculator

PAGES = sorted(p.parent.relative_to(SITE).as_posix().removeprefix(".")
               for p in SITE.glob("**/index.html") if "vendor" not in p.parts)
LAPTOP, PHONE = 1366, 390
WIDTHS = (LAPTOP, PHONE)
# Pages whose every table fits a phone's column too: the formula reference's tables put their
# secondary columns under the first cell there (tools/docs_reference.py _stacked); the optimizer
# table was 962 px wide at 390 px, "How the pieces add up" 749, the symbols 430.
FIT_A_PHONE = ("reference/formulas",)

# With every <details> open (a table folded away is still on the page): each table wider than
# the page's content column, with its width and the column's; of those, each that ends outside
# the column with no box between them that scrolls sideways and ends inside it; and any code in
# a table cell (an id, a flag, a path) broken inside a name, which made tables tall and
# unreadable. A long path or id may wrap where it has a <wbr> (tools/docs_common.py
# breakable_code): each text node between them must stay on one line.
MEASURE = """() => {
  document.querySelectorAll('.md-content details').forEach((d) => { d.open = true; });
  const column = document.querySelector('.md-content');
  const edges = column.getBoundingClientRect();
  const text = column.querySelector('.md-typeset').getBoundingClientRect().width;
  const inside = (el) => { const r = el.getBoundingClientRect();
    return r.left >= edges.left - 1 && r.right <= edges.right + 1; };
  const scrolls = (el) => ['auto', 'scroll'].includes(getComputedStyle(el).overflowX);
  const named = (table) => table.rows[0].textContent.trim().replace(/\\s+/g, ' ').slice(0, 60);
  const tables = [...column.querySelectorAll('table')];
  const wide = tables.filter((table) => {
    const wrap = table.closest('.md-typeset__scrollwrap');
    return !inside(table) || (wrap !== null && wrap.scrollWidth > wrap.clientWidth + 1);
  }).map((table) => `${named(table)}: ${Math.round(table.getBoundingClientRect().width)} px`
                    + ` in ${Math.round(text)} px`);
  const overflowing = tables.filter((table) => {
    for (let box = table; box !== column; box = box.parentElement) {
      if ((box === table || scrolls(box)) && inside(box)) return false;
    }
    return true;
  }).map(named);
  const oneLine = (node) => { const range = document.createRange(); range.selectNodeContents(node);
    return range.getClientRects().length <= 1; };
  const split = [...column.querySelectorAll('td code')].filter((code) => {
    const walk = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
    for (let node = walk.nextNode(); node; node = walk.nextNode()) if (!oneLine(node)) return true;
    return false;
  }).map((c) => c.textContent);
  return {sideways: document.documentElement.scrollWidth - document.documentElement.clientWidth,
          wide, overflowing, split};
}"""


@pytest.fixture(scope="module", params=WIDTHS, ids=lambda w: f"{w}px")
def tab(browser: Any, base_url: str, request: pytest.FixtureRequest) -> Iterator[Calculator]:
    context = browser.new_context(viewport={"width": request.param, "height": 900})
    tab = Calculator(context.new_page(), base_url)
    tab.watch(context, base_url)
    yield tab
    context.close()


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p or "home")
def test_no_page_scrolls_sideways_and_tables_stay_in_their_column(tab: Calculator,
                                                                  path: str) -> None:
    """On a laptop no table is wider than the column, so nothing in one is out of sight (the
    formula reference's paths and sources, the accuracy page's case ids were, at 909-1346 px in
    834); on a phone a table may scroll, inside its own wrapper, except on FIT_A_PHONE's pages.
    Either way, no code in a cell is broken inside a name."""
    tab.page.goto(tab.base_url + (path + "/" if path else ""))
    tab.page.wait_for_load_state("load")
    seen = tab.page.evaluate(MEASURE)
    name = path or "home"
    assert seen["sideways"] <= 0, f"{name}: the page scrolls {seen['sideways']} px sideways"
    if tab.page.viewport_size["width"] == LAPTOP or path in FIT_A_PHONE:
        assert not seen["wide"], f"{name}: tables wider than the column: {seen['wide']}"
    assert not seen["overflowing"], f"{name}: tables wider than the column: {seen['overflowing']}"
    assert not seen["split"], f"{name}: code in table cells broken over lines: {seen['split'][:5]}"
    assert not tab.foreign_requests and not tab.csp_violations


# Rankings with a sentence per row: on a laptop the whole row is on screen, sentence included.
FITTING_TABLES = {"tools/advisor": "why", "walkthroughs/8b-to-70b": "why",
                  "tools/recommendations": "cost"}
SCROLLING = """last => [...document.querySelectorAll('.md-content table')]
  .filter((t) => t.rows[0].cells[t.rows[0].cells.length - 1].textContent.trim() === last)
  .map((t) => { const box = t.closest('.md-typeset__scrollwrap') ?? t;
                return box.scrollWidth - box.clientWidth; })"""


@pytest.mark.parametrize("path", FITTING_TABLES)
def test_a_ranking_with_reasons_fits_a_laptop_without_scrolling(browser: Any, base_url: str,
                                                                 path: str) -> None:
    context = browser.new_context(viewport={"width": 1366, "height": 900})
    page = context.new_page()
    page.goto(f"{base_url}{path}/")
    scrolled = page.evaluate(SCROLLING, FITTING_TABLES[path])
    context.close()
    assert scrolled and all(s <= 0 for s in scrolled), \
        f"{path}: the table ending in '{FITTING_TABLES[path]}' scrolls by {scrolled} px"
