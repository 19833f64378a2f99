"""The documentation pages: every walkthrough step opens in the calculator with the numbers the
text states, and the formula pages render their math."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from docs_common import DEFAULT_SCENARIO  # tools/, put on sys.path by conftest
from docs_reference import formula_tex

from calc import ScenarioError, estimate, parse_scenario
from calc.explain import explain
from calc.formula import FORMULAS

from .conftest import LIVE_TIMEOUT_MS, SITE, Calculator, decode, encode

WALKTHROUGHS = sorted((SITE / "walkthroughs").glob("*/index.html"))


def steps(page: Any) -> list[dict[str, Any]]:
    return [decode(m) for m in re.findall(r'calculator/#s=([A-Za-z0-9_-]+)', page.read_text())]


def test_there_are_four_walkthroughs_with_steps() -> None:
    assert len(WALKTHROUGHS) == 4
    assert all(steps(p) for p in WALKTHROUGHS)


@pytest.mark.parametrize("page", WALKTHROUGHS, ids=lambda p: p.parent.name)
def test_every_walkthrough_step_is_a_valid_scenario(page: Any) -> None:
    for scenario in steps(page):
        try:
            estimate(scenario)
        except ScenarioError as exc:  # pragma: no cover - the message is the point
            pytest.fail(f"{page.parent.name}: step {scenario} is rejected: {exc}")


@pytest.mark.parametrize("page", WALKTHROUGHS, ids=lambda p: p.parent.name)
def test_a_walkthrough_step_opens_live_with_cpythons_numbers(calculator: Calculator,
                                                           page: Any) -> None:
    """The last step of each walkthrough, opened from its link, computes in the browser what
    the library computes (and so what the page, built by the library, states)."""
    scenario = steps(page)[-1]
    calculator.open(scenario, live=False)
    report = calculator.wait_report_for(parse_scenario(scenario).model_dump(mode="json"))
    assert report == json.loads(json.dumps(estimate(scenario).as_dict()))


def test_formulas_render_as_math(calculator: Calculator) -> None:
    calculator.page.goto(calculator.base_url + "reference/formulas/")
    calculator.page.wait_for_selector(".arithmatex .katex", timeout=10_000)
    assert calculator.page.locator(".arithmatex .katex").count() >= 10


def test_katex_is_loaded_only_where_a_page_has_formulas(calculator: Calculator) -> None:
    """KaTeX's evaluation is a long main-thread task: the calculator and the home page, which
    have no formula, do not load it; the concepts page renders its formulas with it."""
    page = calculator.page
    fetched: list[str] = []
    page.on("request", lambda r: fetched.append(r.url))
    for path in ("calculator/", "", "concepts/"):
        fetched.clear()
        page.goto(calculator.base_url + path)
        page.wait_for_load_state("load")
        math = [u for u in fetched if "/vendor/katex/" in u or u.endswith("/assets/math.js")]
        if path == "concepts/":
            page.wait_for_selector(".arithmatex .katex", timeout=10_000)
            assert len(math) >= 3
        else:
            assert math == [], path


def test_material_and_pyscript_carry_v8_compile_hints() -> None:
    """Material's bundle and PyScript's core chunk, each one main-thread task to evaluate, start
    with V8's compile hint (tools/site_scripts.py), so Chromium compiles them while they download
    instead of function by function during the page's load; Material's source map follows."""
    hint = "//# allFunctionsCalledOnLoad\n"
    (bundle,) = (SITE / "assets" / "javascripts").glob("bundle.*.min.js")
    chunk = re.search(r'from\s*"\./(core-[\w-]+\.js)"', (SITE / "vendor" / "pyscript" / "core.js").read_text())
    assert chunk
    for script in (bundle, SITE / "vendor" / "pyscript" / chunk.group(1)):
        assert script.read_text().startswith(hint), script
        assert script.read_text().count(hint) == 1, script
    source_map = json.loads(bundle.with_name(bundle.name + ".map").read_text())
    assert source_map["mappings"].startswith(";") and not source_map["mappings"].startswith(";;")


def formula_page(calculator: Calculator, scenario: dict[str, Any] | None = None) -> Any:
    url = calculator.base_url + "reference/formulas/" + (f"#s={encode(scenario)}" if scenario else "")
    calculator.page.goto(url)
    return calculator.page


def explain_json(page: Any, state: str) -> dict[str, Any]:
    page.wait_for_selector(f"#explain-json[data-state={state}]", state="attached",
                           timeout=LIVE_TIMEOUT_MS)
    return json.loads(page.text_content("#explain-json"))  # type: ignore[no-any-return]


def test_show_the_math_renders_the_default_scenarios_steps_at_once(calculator: Calculator) -> None:
    page = formula_page(calculator)
    shown = explain_json(page, "static")
    assert shown == json.loads(json.dumps(explain(DEFAULT_SCENARIO).as_dict()))
    assert page.locator(".fm-step").count() == len(shown["steps"])
    assert page.locator(".fm-step .fm-values:has(.katex)").count() == len(shown["steps"])
    assert not page.locator(".fm-step .katex-error").count()


def test_show_the_math_keeps_every_result_in_view_on_a_laptop_and_a_phone(
        calculator: Calculator) -> None:
    """Each step's result has a line of its own: however long the numbers in place (which
    scroll sideways), the result fits its box at 1366 px and at 390 px, and it is the
    explanation's result."""
    page = formula_page(calculator)
    shown = explain_json(page, "static")
    results = [step["substituted"].rsplit(" = ", 1)[1] for step in shown["steps"]]
    for width in (1366, 390):
        page.set_viewport_size({"width": width, "height": 900})
        page.reload()
        explain_json(page, "static")
        boxes = page.locator(".fm-step .fm-values")
        assert boxes.count() == len(results)
        clipped = page.evaluate("""() => [...document.querySelectorAll('.fm-step .fm-values')]
            .map(box => box.querySelector('.fm-result') || box.firstElementChild)
            .filter(d => d.scrollWidth > d.clientWidth + 1).length""")
        assert clipped == 0, width
        tex = page.evaluate("""() => [...document.querySelectorAll('.fm-step .fm-values')]
            .map(box => (box.querySelector('.fm-result') || box)
                 .querySelector('annotation[encoding="application/x-tex"]').textContent)""")
        assert [t.rsplit(" = ", 1)[1].strip() for t in tex] == results


# Issue 13's examples and the widest formulas of their tables: at 1366 px their table was wider
# than the column, since KaTeX broke no line inside a \max\left( \right) or a
# \left\lceil \right\rceil, and a reader scrolled it sideways to see them whole.
LONG_FORMULAS = ("peak.split_recomputed", "peak.split_weight_grad", "act.lora_forward_transient",
                 "act.ring_attention_backward", "peak.layer_reduce", "states.exp_avg_8bit.experts")

# Each table formula, found by its TeX (the MathML annotation): how far its widest line ends past
# its cell and past what its table shows unscrolled, and how many lines it takes.
TABLE_FORMULAS = """texs => texs.map((tex) => {
  const note = [...document.querySelectorAll('td annotation[encoding="application/x-tex"]')]
    .find((a) => a.textContent === tex);
  if (!note) return null;
  const cell = note.closest('td'), view = cell.closest('.md-typeset__scrollwrap');
  const lines = [...note.closest('.katex').querySelectorAll('.katex-html > .base')]
    .map((b) => b.getBoundingClientRect());
  const right = Math.max(...lines.map((r) => r.right));
  return {past_cell: right - cell.getBoundingClientRect().right,
          past_view: right - view.getBoundingClientRect().right,
          lines: new Set(lines.map((r) => Math.round(r.top))).size};
})"""


def test_long_formulas_wrap_in_their_table_cell_on_a_laptop_and_a_phone(
        calculator: Calculator) -> None:
    """Every formula in the reference's tables is whole on screen at 1366 px without scrolling the
    table, the long ones on several lines; on a phone each stays inside its own cell (the table
    scrolls, the page does not)."""
    page = calculator.page
    texs = {f.id: formula_tex(f) for f in FORMULAS.values() if "@" not in f.id}
    for width in (1366, 390):
        page.set_viewport_size({"width": width, "height": 900})
        page.goto(calculator.base_url + "reference/formulas/")
        page.wait_for_selector(".arithmatex .katex", timeout=10_000)
        seen = dict(zip(texs, page.evaluate(TABLE_FORMULAS, list(texs.values())), strict=True))
        assert all(seen.values()), [i for i, s in seen.items() if s is None]
        past_cell = {i: round(s["past_cell"]) for i, s in seen.items() if s["past_cell"] > 1}
        assert not past_cell, (width, past_cell)
        if width == 1366:
            hidden = {i: round(s["past_view"]) for i, s in seen.items() if s["past_view"] > 1}
            assert not [i for i in LONG_FORMULAS if i in hidden], hidden
            assert not hidden, f"formulas that need the table scrolled: {hidden}"
            longest = max(texs, key=lambda i: len(texs[i]))
            assert seen[longest]["lines"] > 1, longest
        assert page.evaluate("() => document.documentElement.scrollWidth"
                             " - document.documentElement.clientWidth") <= 0, width


# Each rendered formula's symbols (its MathML's text) and delimiter sizes, beside those of the TeX
# in its annotation rendered as written: equal when line breaking changed nothing but the breaks.
SAME_MATH = r"""() => {
  const symbols = (root) => [...root.querySelectorAll('.katex-mathml semantics > :not(annotation)')]
    .map((m) => m.textContent).join('').replace(/\s+/g, '');
  const delimiters = (root) => [...root.querySelectorAll('.katex-html :is(.mopen, .mclose)')]
    .flatMap((d) => [...d.textContent].map((c) =>
      c + (d.querySelector('.delimsizing')?.className.match(/size\d|mult/)?.[0] ?? '')));
  const differ = [];
  for (const k of document.querySelectorAll('.md-content .katex')) {
    const tex = k.querySelector('annotation[encoding="application/x-tex"]').textContent;
    const written = document.createElement('div');
    katex.render(k.closest('.fm-step') ? `\\displaystyle ${tex}` : tex, written, {throwOnError: false});
    if (symbols(k) !== symbols(written)
        || delimiters(k).join(' ') !== delimiters(written).join(' ')) differ.push(tex);
  }
  return {count: document.querySelectorAll('.md-content .katex').length, differ};
}"""


def test_wrapped_formulas_are_the_formulas_as_written(calculator: Calculator) -> None:
    """Line breaking rewrites a long \\left( \\right) group with fixed-size delimiters
    (site/assets/math.js): every formula on the page, tables and "Show the math" alike, still
    shows the symbols of calc's TeX in its order, with delimiters of the same sizes, and keeps
    that TeX as its annotation."""
    page = formula_page(calculator)
    shown = explain_json(page, "static")
    page.wait_for_selector(".fm-step .katex", timeout=10_000)
    seen = page.evaluate(SAME_MATH)
    assert seen["count"] > len(FORMULAS) + 2 * len(shown["steps"])
    assert not seen["differ"], seen["differ"][:3]
    notes = page.evaluate("""() => [...document.querySelectorAll('.fm-step .fm-formula')]
        .map((f) => f.querySelector('annotation[encoding="application/x-tex"]').textContent)""")
    assert notes == [step["formula"] for step in shown["steps"]]


def test_show_the_math_computes_a_linked_scenario_in_the_browser(calculator: Calculator) -> None:
    """The calculator's "Show the math" link carries the scenario; the page computes its steps
    with calc in the browser, equal to CPython's, and each result is the report's number."""
    scenario = {"model": "qwen2.5-7b", "gpu": "h100-sxm-80gb",
                "training": {"seq_len": 8192, "micro_batch_size": 2, "finetuning": "lora"},
                "parallelism": {"dp": 2, "zero": 2}}
    page = formula_page(calculator, scenario)
    shown = explain_json(page, "live")
    assert shown == json.loads(json.dumps(explain(scenario).as_dict()))
    device = next(s for s in shown["steps"] if s["report"] == "device_bytes")
    assert device["value"] == estimate(scenario).device_bytes
    assert page.locator(".fm-step").count() == len(shown["steps"])
    assert "qwen2.5-7b" in page.inner_text("#formula-scenario")
    assert "#s=" in page.get_attribute("#formula-open", "href")


def test_show_the_math_names_the_field_of_a_bad_linked_scenario(calculator: Calculator) -> None:
    page = formula_page(calculator, {"model": "gpt2", "training": {"seq_len": 0}})
    page.wait_for_function(
        "() => document.getElementById('formula-status').dataset.kind === 'error'", timeout=LIVE_TIMEOUT_MS)
    assert "training.seq_len" in page.inner_text("#formula-status")
    assert page.get_attribute("#explain-json", "data-state") == "static"


def test_the_calculators_show_the_math_link_opens_its_scenario(calculator: Calculator) -> None:
    calculator.open({"model": "gpt2", "training": {"seq_len": 1024, "micro_batch_size": 4}})
    report = calculator.report()
    calculator.page.click("#calc-math")
    shown = explain_json(calculator.page, "live")
    assert shown["scenario"] == report["scenario"]
    device = next(s for s in shown["steps"] if s["report"] == "device_bytes")
    assert device["value"] == report["device_bytes"]
