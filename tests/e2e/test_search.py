"""Material's search, whose index the site builds on first use (tools/site_scripts.py)."""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from serve import Handler, server  # tools/, put on sys.path by conftest

from calc import gpus

from .conftest import SITE, Calculator

MATERIAL_WORKER = "/assets/javascripts/workers/search."


@pytest.fixture(scope="module")
def counting_site() -> Iterator[tuple[str, list[str]]]:
    """The built site served on 127.0.0.1, with the paths it was asked for, workers' included
    (a worker's own worker is out of Playwright's sight)."""
    asked: list[str] = []

    class Counting(Handler):
        def log_request(self, code: Any = "-", size: Any = "-") -> None:
            asked.append(self.path.split("?")[0])

    srv = server(SITE)
    srv.RequestHandlerClass = functools.partial(Counting, directory=str(SITE))  # type: ignore[assignment]
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/", asked
    srv.shutdown()


def results_for(page: Any, text: str) -> list[str]:
    """The result titles Material shows once `text` is typed into the header's search box."""
    box = page.locator(".md-search__input")
    box.fill("")
    box.press_sequentially(text)  # Material reads the box on keyup
    page.wait_for_function(
        """t => [...document.querySelectorAll('.md-search-result__item h1, .md-search-result__item h2')]
                 .some(h => h.textContent.toLowerCase().includes(t))""",
        arg=text.lower(), timeout=15_000)
    return page.locator(".md-search-result__item h1, .md-search-result__item h2").all_text_contents()  # type: ignore[no-any-return]


@pytest.mark.parametrize("path", ["calculator/", "tools/advisor/"])
def test_search_builds_its_index_at_the_first_query_and_finds_pages(
        browser: Any, counting_site: tuple[str, list[str]], path: str) -> None:
    """Loading a page does not start Material's search worker (its lunr build of the whole index
    ran at every page view, on the calculator while Python starts: issue 13); the first query
    with text starts it, and a later query goes to the same worker."""
    base, asked = counting_site
    context = browser.new_context(viewport={"width": 1280, "height": 900},
                                  service_workers="block")  # its precache would fetch every file
    calc = Calculator(context.new_page(), base)
    calc.watch(context, base)
    page = calc.page
    asked.clear()
    with page.expect_response(lambda r: r.url.endswith("/search/search_index.json"), timeout=15_000):
        page.goto(base + path)
    page.wait_for_load_state("load")
    page.wait_for_timeout(1000)  # Material has handed the index over; a worker of its own would be asked for by now
    assert "/assets/search_worker.js" in asked
    assert not [p for p in asked if p.startswith(MATERIAL_WORKER)], "Material's worker started at load"
    page.click(".md-search__input")
    assert any("advisor" in t.lower() for t in results_for(page, "advisor"))
    assert any("kv cache" in t.lower() for t in results_for(page, "KV cache"))
    assert len([p for p in asked if p.startswith(MATERIAL_WORKER)]) == 1, asked
    context.close()
    calc.assert_clean()


def _index() -> dict[str, str]:
    """Material's search index of the built site: each entry's location -> its text."""
    docs = json.loads((SITE / "search" / "search_index.json").read_text())["docs"]
    return {d["location"]: d["text"] for d in docs}


def test_live_pages_are_found_by_their_prose_not_their_forms() -> None:
    """A page with a live form is indexed by its headings and prose: the calculator's search
    excerpt was its whole form (every preset's name, every label), a walkthrough step's was
    every GPU's name (its select's options, run together), the GPU comparison's the
    saved-scenario picker."""
    index = _index()
    options = "".join(g.name for g in list(gpus().values())[:2])  # a live example's GPU select
    form_words = ["Model preset", "Micro-batch size", "Sequence length (tokens)",
                  "(none saved in this browser)", "Edit a field to recompute",
                  "The live calculator is loading", "Report JSON", options]
    calculator = index["calculator/"]
    assert calculator.startswith("<p>Pick a model and a training setup"), calculator[:200]
    live = {loc: text for loc, text in index.items()
            if loc.startswith(("calculator/", "gpus/", "walkthroughs/"))}
    assert any("#" in loc for loc in live if loc.startswith("walkthroughs/")), "no step headings indexed"
    for loc, text in live.items():
        found = [w for w in form_words if w in text]
        assert not found, f"{loc}: the search text holds form text {found}: {text[:300]}"
    # a step's prose and its live example's figures stay searchable
    step = index["walkthroughs/fit-llama-8b-8k/#1-baseline-one-gpu"]
    assert "in your browser" in step and "per GPU" in step, step[:300]


def test_formulas_are_not_search_text() -> None:
    """A formula is LaTeX until KaTeX renders it: the formula reference's search excerpt was
    raw LaTeX (\\frac, \\text, ...); its titles and prose stay searchable."""
    index = _index()
    latex = {loc: text for loc, text in index.items() if "\\frac" in text or "\\text{" in text}
    assert not latex, f"LaTeX in the search text of {sorted(latex)[:5]}"
    formulas = " ".join(text for loc, text in index.items() if loc.startswith("reference/formulas/"))
    assert "fp32 master weights" in formulas and "Korthikanti" in formulas
