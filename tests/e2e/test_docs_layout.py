"""Every page's layout on a laptop (1366 px) and a phone (390 px): the page never scrolls
sideways, and a table wider than its column scrolls inside its own wrapper (issue 13, point 5)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import SITE, Calculator

PAGES = sorted(p.parent.relative_to(SITE).as_posix().removeprefix(".")
               for p in SITE.glob("**/index.html") if "vendor" not in p.parts)
WIDTHS = (1366, 390)

# Each table that ends outside the page's content column with no box between them that scrolls
# sideways and ends inside it; and any code in a table cell (an id, a flag) split over lines,
# which is what made tables tall and unreadable.
MEASURE = """() => {
  const column = document.querySelector('.md-content');
  const edges = column.getBoundingClientRect();
  const inside = (el) => { const r = el.getBoundingClientRect();
    return r.left >= edges.left - 1 && r.right <= edges.right + 1; };
  const scrolls = (el) => ['auto', 'scroll'].includes(getComputedStyle(el).overflowX);
  const overflowing = [...column.querySelectorAll('table')].filter((table) => {
    for (let box = table; box !== column; box = box.parentElement) {
      if ((box === table || scrolls(box)) && inside(box)) return false;
    }
    return true;
  }).map((table) => table.rows[0].textContent.trim().slice(0, 60));
  const split = [...column.querySelectorAll('td code')]
    .filter((c) => c.getClientRects().length > 1).map((c) => c.textContent);
  return {sideways: document.documentElement.scrollWidth - document.documentElement.clientWidth,
          overflowing, split};
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
    tab.page.goto(tab.base_url + (path + "/" if path else ""))
    tab.page.wait_for_load_state("load")
    seen = tab.page.evaluate(MEASURE)
    assert seen["sideways"] <= 0, f"{path or 'home'}: the page scrolls {seen['sideways']} px sideways"
    assert not seen["overflowing"], f"tables wider than the column: {seen['overflowing']}"
    assert not seen["split"], f"code in table cells broken over lines: {seen['split'][:5]}"
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
