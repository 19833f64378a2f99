"""The calculator page, end to end: offline load, live results equal to CPython's, share links,
bad input. The page's `#estimate-json` is read as JSON, never its text."""

from __future__ import annotations

import html
import json
import re
from typing import Any

import pytest

from calc import estimate

from .conftest import LIVE_TIMEOUT_MS, SITE, Calculator, decode

SCENARIOS = {
    "lora-on-a100": {
        "model": "qwen2.5-7b",
        "training": {"micro_batch_size": 4, "finetuning": "lora", "lora_rank": 16},
        "gpu": "a100-80gb",
    },
    "pasted-config-zero3": {
        "schema_version": 1,
        "model": {"hf_config": {"model_type": "llama", "hidden_size": 1024, "num_hidden_layers": 8,
                                "num_attention_heads": 16, "num_key_value_heads": 4,
                                "intermediate_size": 2816, "vocab_size": 32000}},
        "training": {"seq_len": 2048, "activation_checkpointing": "selective"},
        "parallelism": {"dp": 4, "zero": 3},
        "gpu": "l4-24gb",
    },
    "architecture-tp-pp": {
        "model": {"hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 16,
                  "intermediate_size": 5632, "vocab_size": 50000},
        "training": {"micro_batch_size": 2, "seq_len": 1024, "optimizer": "sgd_momentum"},
        "parallelism": {"tp": 2, "pp": 2, "dp": 2},
        "gpu": "rtx-4090-24gb",
    },
}


def built_page() -> str:
    return (SITE / "calculator" / "index.html").read_text()


def page_data() -> dict[str, Any]:
    m = re.search(r'<script type="application/json" id="calc-data">(.*?)</script>', built_page(), re.S)
    assert m, "calc-data is missing from the built page"
    return json.loads(m.group(1).replace("<\\/", "</"))  # type: ignore[no-any-return]


def expected(scenario: dict[str, Any]) -> dict[str, Any]:
    return estimate(scenario).as_dict()


def test_build_time_report_is_calcs_report_for_the_default_scenario() -> None:
    """The numbers shown before Python loads come from the same library, for the default."""
    m = re.search(r'<pre id="estimate-json" data-state="static">(.*?)</pre>', built_page(), re.S)
    assert m, "#estimate-json with data-state=static is missing from the built page"
    assert json.loads(html.unescape(m.group(1))) == expected(page_data()["defaults"])


def test_page_goes_live_offline_and_matches_cpython(calculator: Calculator) -> None:
    """Static numbers show at once; the worker takes over with exactly calc's report."""
    calculator.open(live=False)
    calculator.page.wait_for_selector(".calc-big", timeout=5_000)
    calculator.wait_live()
    want = expected(page_data()["defaults"])
    assert calculator.report() == want
    assert calculator.page.text_content("#estimate-json") == json.dumps(want, indent=2)
    assert "Live" in calculator.page.inner_text("#calc-status")


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_linked_scenario_report_equals_cpython(calculator: Calculator, name: str) -> None:
    scenario = SCENARIOS[name]
    want = expected(scenario)
    calculator.open(scenario, live=False)
    assert calculator.wait_report_for(want["scenario"]) == want


def test_share_link_round_trip(calculator: Calculator, browser: Any, base_url: str) -> None:
    """Edits land in the #s= fragment; opening that link reproduces the form and the report."""
    calculator.open()
    calculator.field("training.seq_len").fill("2048")
    calculator.field("parallelism.zero").select_option("2")
    calculator.field("gpu").select_option("a100-40gb")
    want = expected({**page_data()["defaults"], "gpu": "a100-40gb",
                     "training": {**page_data()["defaults"]["training"], "seq_len": 2048},
                     "parallelism": {**page_data()["defaults"]["parallelism"], "zero": 2}})
    report = calculator.wait_report_for(want["scenario"])
    assert report == want
    fragment = calculator.page.evaluate("location.hash")
    assert "=" not in fragment.removeprefix("#s="), "share links are unpadded base64url"
    shared = decode(fragment)
    # the link leaves to calc what the form leaves to it (mixed precision follows fine-tuning)
    assert "mixed_precision" not in shared["training"]
    assert expected(shared)["scenario"] == want["scenario"]
    other = Calculator(calculator.page.context.new_page(), base_url)
    other.page.goto(f"{base_url}calculator/{fragment}")
    assert other.wait_report_for(report["scenario"]) == report
    assert other.field("training.seq_len").input_value() == "2048"
    assert other.field("gpu").input_value() == "a100-40gb"
    padded = fragment + "=" * (-len(fragment.removeprefix("#s=")) % 4)
    other.page.goto(f"{base_url}calculator/{padded}")
    other.page.reload()
    assert other.wait_report_for(report["scenario"]) == report


@pytest.mark.parametrize(("name", "value", "words"), [
    ("training.seq_len", "0", "greater than or equal to 1"),
    ("parallelism.tp", "3", "must divide"),
])
def test_bad_input_marks_the_field_and_keeps_the_last_result(
        calculator: Calculator, name: str, value: str, words: str) -> None:
    calculator.open()
    before = calculator.report()
    calculator.field(name).fill(value)
    calculator.page.wait_for_selector(f'[name="{name}"][aria-invalid="true"]', timeout=10_000)
    error_id = calculator.field(name).get_attribute("aria-describedby")
    assert words in calculator.page.inner_text(f"#{error_id}")
    assert calculator.report() == before
    assert calculator.page.get_attribute("#estimate-json", "data-state") == "live"
    calculator.field(name).fill("1")
    calculator.page.wait_for_selector(f'[name="{name}"]:not([aria-invalid])', timeout=10_000)


@pytest.mark.parametrize(("name", "value", "marked", "words"), [
    # the model group: an architecture field, and a pasted config.json
    ("model.num_key_value_heads", "3", "model.num_key_value_heads", "must divide"),
    ("model.hf_config", '{"model_type": "llama"}', "model.hf_config", "is required"),
    # the GPU group: a card the scenario's precision cannot run on
    ("gpu", "v100-32gb", "training.precision", "does not support bf16"),
])
def test_bad_input_in_the_model_and_gpu_groups_is_named(
        calculator: Calculator, name: str, value: str, marked: str, words: str) -> None:
    calculator.open()
    before = calculator.report()
    field = calculator.field(name)
    if name == "gpu":
        field.select_option(value)
    else:
        field.fill(value)
    calculator.page.wait_for_selector(f'[name="{marked}"][aria-invalid="true"]', timeout=30_000)
    error_id = calculator.field(marked).get_attribute("aria-describedby")
    assert words in calculator.page.inner_text(f"#{error_id}")
    assert calculator.report() == before


def test_every_input_has_a_visible_label(calculator: Calculator) -> None:
    calculator.open(live=False)
    unlabeled = calculator.page.evaluate("""() => [...document.querySelectorAll(
        '#calc-form input, #calc-form select, #calc-form textarea')]
        .filter(el => !(el.labels && el.labels.length && el.labels[0].textContent.trim()))
        .map(el => el.name)""")
    assert unlabeled == []


@pytest.mark.console_errors_expected
def test_missing_runtime_is_reported_in_plain_words(calculator: Calculator) -> None:
    """When a runtime file is missing, the page names it and keeps the build-time result."""
    calculator.page.route("**/pyodide.asm.wasm", lambda r: r.fulfill(status=404, body="missing"))
    calculator.open(live=False)
    calculator.page.wait_for_function(
        "() => document.getElementById('calc-status').textContent.includes('could not start')",
        timeout=LIVE_TIMEOUT_MS)
    assert "pyodide.asm.wasm" in calculator.page.inner_text("#calc-status")
    assert calculator.page.get_attribute("#estimate-json", "data-state") == "static"



def test_mixed_precision_left_to_calc_follows_finetuning(calculator: Calculator) -> None:
    """The form opens with mixed precision left to calc: choosing LoRA gives LoRA's default
    (autocast), as the library and the CLI do; an explicit choice is kept."""
    calculator.open()
    assert calculator.field("training.mixed_precision").input_value() == ""
    calculator.field("training.finetuning").select_option("lora")
    scenario = {**page_data()["defaults"],
                "training": {**page_data()["defaults"]["training"], "finetuning": "lora"}}
    del scenario["training"]["mixed_precision"]
    want = expected(scenario)
    assert want["scenario"]["training"]["mixed_precision"] == "autocast"
    assert calculator.wait_report_for(want["scenario"]) == want
    calculator.field("training.mixed_precision").select_option("amp")
    scenario["training"]["mixed_precision"] = "amp"
    want = expected(scenario)
    assert calculator.wait_report_for(want["scenario"]) == want


def test_calculator_fits_a_phone_width(browser: Any, base_url: str) -> None:
    """At 390 px nothing is wider than the screen: a select as wide as its longest option (a
    GPU's full name) stays inside its column, advanced settings open too."""
    context = browser.new_context(viewport={"width": 390, "height": 900})
    try:
        page = context.new_page()
        page.goto(f"{base_url}calculator/")
        page.wait_for_selector("#estimate-json[data-state=live]", state="attached",
                               timeout=LIVE_TIMEOUT_MS)
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        page.click("text=Advanced settings")
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
    finally:
        context.close()
