"""Planning in the calculator (pinned comparison, largest micro-batch, step time, export) and
the Planning tools pages, checked against the library in CPython."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from calc import ScenarioError, estimate, parse_scenario
from calc.plan import ExportError, compare, export, max_micro_batch, training_cost

from .conftest import LIVE_TIMEOUT_MS, SITE, Calculator, decode

SMALL = {"model": "qwen2.5-0.5b", "training": {"micro_batch_size": 2, "seq_len": 2048},
         "gpu": "l4-24gb"}
ZERO3 = {"model": "llama-3.1-8b", "training": {"seq_len": 4096, "activation_checkpointing": "full"},
         "parallelism": {"dp": 8, "zero": 3}, "gpu": "h100-sxm-80gb"}
TOOL_PAGES = ("fit-search", "recommendations", "advisor", "compare", "cost", "export", "kv-cache")


def dumped(scenario: dict[str, Any]) -> dict[str, Any]:
    return parse_scenario(scenario).model_dump(mode="json")


def cells(page: Any) -> dict[str, list[str]]:
    """The comparison table's raw values, by key, one per pinned scenario."""
    rows: dict[str, list[str]] = page.evaluate(
        """() => { const out = {};
            for (const td of document.querySelectorAll('#calc-compare-table td[data-key]'))
              (out[td.dataset.key] ??= []).push(td.dataset.value);
            return out; }""")
    return rows


def test_pinned_scenarios_compare_as_calc_compares_them(calculator: Calculator) -> None:
    """Save one scenario, pin it from the saved list, pin the current one: the table holds
    calc.plan.compare's figures, differences from the first; remove drops a column."""
    page = calculator.page
    calculator.open(SMALL)
    calculator.wait_report_for(dumped(SMALL))
    page.click("#calc-save")
    page.click("[data-pin-saved='0']")
    other = {**SMALL, "training": {**SMALL["training"], "micro_batch_size": 4,
                                   "gradient_accumulation_steps": 2}}
    calculator.open(other, live=False)
    calculator.wait_report_for(dumped(other))
    page.click("#calc-pin")
    page.wait_for_function("document.querySelectorAll('#calc-compare-table th[data-label]').length === 2",
                           timeout=LIVE_TIMEOUT_MS)
    pins = json.loads(page.evaluate("localStorage.getItem('calc.pinned-scenarios')"))
    want = compare([p["scenario"] for p in pins], labels=[p["name"] for p in pins]).as_dict()
    got = cells(page)
    for key in ("peak_bytes", "device_bytes", "micro_batch_size", "global_batch_size",
                "tokens_per_step", "gradient_accumulation_steps"):
        assert [int(v) for v in got[key]] == [s[key] for s in want["scenarios"]], key
    assert [float(v) for v in got["utilization"]] == [s["utilization"] for s in want["scenarios"]]
    assert got["fits"] == [str(s["fits"]).lower() for s in want["scenarios"]]
    for comp, values in want["scenarios"][0]["components"].items():
        assert int(got[f"components.{comp}"][0]) == values
    diffs = [int(d) for d in page.eval_on_selector_all(
        "#calc-compare-table td[data-key='device_bytes'] small[data-diff]", "els => els.map(e => e.dataset.diff)")]
    assert diffs == [want["scenarios"][1]["difference"]["device_bytes"]]
    assert want["scenarios"][1]["global_batch_size"] == 8
    assert "GiB" in page.text_content("#calc-compare-table")
    page.click("[data-unpin='0']")
    page.wait_for_function("document.querySelectorAll('#calc-compare-table th[data-label]').length === 1")


def test_max_micro_batch_and_step_time_are_calcs(calculator: Calculator) -> None:
    calculator.open(ZERO3)
    calculator.wait_report_for(dumped(ZERO3))
    page = calculator.page
    page.wait_for_selector("#calc-maxmb", timeout=LIVE_TIMEOUT_MS)
    fit = max_micro_batch(ZERO3)
    assert fit.value is not None
    assert page.get_attribute("#calc-maxmb", "data-value") == str(fit.value)
    assert str(fit.value) in page.text_content("#calc-maxmb")
    cost = training_cost(ZERO3, 10**9)
    assert float(page.get_attribute("#calc-cost", "data-step-seconds") or "nan") == cost.step_seconds
    text = page.text_content("#calc-cost")
    assert "estimate" in text and "MFU" in text and "40%" in text


@pytest.mark.parametrize("fmt", ["accelerate-fsdp", "megatron"])
def test_export_shows_calcs_text_or_its_error(calculator: Calculator, fmt: str) -> None:
    calculator.open(ZERO3)
    calculator.wait_report_for(dumped(ZERO3))
    page = calculator.page
    page.select_option("#calc-export-format", fmt)
    page.wait_for_function(
        "f => { const p = document.getElementById('calc-export-text');"
        " return p.dataset.format === f && p.dataset.state !== 'static'; }",
        arg=fmt, timeout=LIVE_TIMEOUT_MS)
    shown = page.text_content("#calc-export-text")
    try:
        want = export(ZERO3, fmt).text  # type: ignore[arg-type]
    except ExportError as exc:  # the page names the same setting
        assert page.get_attribute("#calc-export-text", "data-state") == "error"
        assert exc.field in shown and exc.message in shown
    else:
        assert page.get_attribute("#calc-export-text", "data-state") == "live"
        assert shown == want


def tool_links(page: Path) -> list[dict[str, Any]]:
    return [decode(m) for m in re.findall(r'calculator/#s=([A-Za-z0-9_-]+)', page.read_text())]


@pytest.mark.parametrize("name", TOOL_PAGES)
def test_planning_pages_link_valid_scenarios(name: str) -> None:
    page = SITE / "tools" / name / "index.html"
    assert page.is_file(), f"no planning page {name}"
    links = tool_links(page)
    assert links, f"{name}: no link to the calculator"
    for scenario in links:
        try:
            estimate(scenario)
        except ScenarioError as exc:  # pragma: no cover - the message is the point
            pytest.fail(f"{name}: linked scenario {scenario} is rejected: {exc}")
    assert "{{" not in page.read_text()


def test_a_planning_page_link_opens_live_with_cpythons_numbers(calculator: Calculator) -> None:
    scenario = tool_links(SITE / "tools" / "fit-search" / "index.html")[0]
    calculator.open(scenario, live=False)
    report = calculator.wait_report_for(dumped(scenario))
    assert report == json.loads(json.dumps(estimate(scenario).as_dict()))
