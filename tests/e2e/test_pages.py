"""The documentation pages: every walkthrough step opens in the calculator with the numbers the
text states, and the formula pages render their math."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from docs_common import DEFAULT_SCENARIO  # tools/, put on sys.path by conftest

from calc import ScenarioError, estimate, parse_scenario
from calc.explain import explain

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
            .map(box => box.querySelector('.fm-result .katex-display') || box.querySelector('.katex-display'))
            .filter(d => d.scrollWidth > d.clientWidth + 1).length""")
        assert clipped == 0, width
        tex = page.evaluate("""() => [...document.querySelectorAll('.fm-step .fm-values')]
            .map(box => (box.querySelector('.fm-result') || box)
                 .querySelector('annotation[encoding="application/x-tex"]').textContent)""")
        assert [t.rsplit(" = ", 1)[1].strip() for t in tex] == results


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
