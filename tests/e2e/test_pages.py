"""The documentation pages: every walkthrough step opens in the calculator with the numbers the
text states, and the formula pages render their math."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from calc import ScenarioError, estimate, parse_scenario

from .conftest import SITE, Calculator, decode

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
