"""The calculator page, end to end: offline load, live results equal to CPython's, share links,
bad input. The page's `#estimate-json` is read as JSON, never its text."""

from __future__ import annotations

import html
import json
import re
from typing import Any

import pytest

from calc import estimate
from calc.formatting import gib, natural_key, setup_line

from .conftest import LIVE_TIMEOUT_MS, SITE, Calculator, decode, encode

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
    "deepspeed-zero3-moe-offload": {  # the ZeRO-3 coordinator's replay, in Pyodide too
        "model": "mixtral-8x7b",
        "training": {"mixed_precision": "master", "seq_len": 2048},
        "parallelism": {"dp": 8, "zero": 3, "offload_optimizer": True},
        "gpu": "h100-sxm-80gb",
    },
    "architecture-tp-pp": {
        "model": {"hidden_size": 2048, "num_hidden_layers": 16, "num_attention_heads": 16,
                  "intermediate_size": 5632, "vocab_size": 50000},
        "training": {"micro_batch_size": 2, "seq_len": 1024, "optimizer": "sgd_momentum"},
        "parallelism": {"tp": 2, "pp": 2, "dp": 2},
        "gpu": "rtx-4090-24gb",
    },
    "t4-math-kernel-padded": {  # the GPU picks SDPA's kernel; the form's padding checkbox
        "model": "llama-3.2-3b",
        "training": {"precision": "fp16", "seq_len": 2048, "finetuning": "qlora",
                     "padded": True},
        "gpu": "t4-16gb",
    },
    "gpt-oss-eager-sinks": {
        "model": "gpt-oss-20b",
        "training": {"attention": "eager", "seq_len": 2048, "finetuning": "lora",
                     "activation_checkpointing": "full"},
        "gpu": "h100-sxm-80gb",
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
    # the last valid result stays, dimmed and marked not current, until the input is valid again
    assert "Not current" in calculator.page.inner_text("#calc-stale")
    assert float(calculator.page.eval_on_selector("#calc-results", "el => getComputedStyle(el).opacity")) < 1
    calculator.field(name).fill("1")
    calculator.page.wait_for_selector(f'[name="{name}"]:not([aria-invalid])', timeout=10_000)
    calculator.page.wait_for_selector(".calc-side[data-state=live]", timeout=10_000)
    assert not calculator.page.is_visible("#calc-stale")
    assert calculator.page.eval_on_selector("#calc-results", "el => getComputedStyle(el).opacity") == "1"


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


def test_deepspeed_framework_is_chosen_in_the_form_and_estimated_as_the_cli_does(
        calculator: Calculator) -> None:
    """The framework opens left to calc; DeepSpeed at ZeRO-2 and at ZeRO-3 under amp (its
    torch_autocast) gives the library's figure, and a precision DeepSpeed is not modelled
    with (pure) is named as a field error."""
    calculator.open()
    assert calculator.field("parallelism.framework").input_value() == ""
    calculator.field("parallelism.zero").select_option("2")
    calculator.field("parallelism.framework").select_option("deepspeed")
    defaults = page_data()["defaults"]
    for zero in (2, 3):
        if zero == 3:
            calculator.field("parallelism.zero").select_option("3")
        scenario = {**defaults, "parallelism": {**defaults["parallelism"], "zero": zero,
                                                "framework": "deepspeed"}}
        want = expected(scenario)
        assert calculator.wait_report_for(want["scenario"]) == want
    calculator.field("training.mixed_precision").select_option("pure")
    error = calculator.page.locator("#e-parallelism-framework")
    error.wait_for(state="visible")
    assert "not pure" in error.inner_text()


def test_calculator_fits_a_phone_width(browser: Any, base_url: str) -> None:
    """At 390 px nothing is wider than the screen: a select as wide as its longest option (a
    GPU's full name) stays inside its column, advanced settings open too; the longest setup
    line, the confidence's reasons, the pending skeleton and the not-current note wrap."""
    context = browser.new_context(viewport={"width": 390, "height": 900})
    wide = lambda: page.evaluate("document.documentElement.scrollWidth")  # noqa: E731
    try:
        page = context.new_page()
        page.goto(f"{base_url}calculator/#s={encode(LONG_SETUP)}")
        assert wide() <= 390  # pending
        page.wait_for_selector("#estimate-json[data-state=live]", state="attached",
                               timeout=LIVE_TIMEOUT_MS)
        page.wait_for_selector("#calc-confidence-why li")
        assert wide() <= 390
        page.click("text=Advanced settings")
        assert wide() <= 390
        page.fill('[name="training.seq_len"]', "0")
        page.wait_for_selector(".calc-side[data-state=stale]", timeout=10_000)
        assert wide() <= 390
    finally:
        context.close()



def test_recommendations_wrap_deepspeed_s_setting_names_at_a_phone_width(
        browser: Any, base_url: str) -> None:
    """A recommendation naming DeepSpeed's zero_optimization sizes (stage3_max_reuse_distance,
    one unbreakable word) wraps beside its Apply button at 390 px."""
    context = browser.new_context(viewport={"width": 390, "height": 900})
    try:
        page = context.new_page()
        page.goto(f"{base_url}calculator/#s={encode(DEEPSPEED_QLORA)}")
        page.wait_for_selector(".calc-recs li:has-text(\"stage3_max_reuse_distance\") button",
                               timeout=LIVE_TIMEOUT_MS)
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
    finally:
        context.close()


DEEPSPEED_QLORA = {"model": "qwen2.5-32b", "training": {
    "seq_len": 1024, "finetuning": "qlora", "lora_rank": 16, "mixed_precision": "amp"},
    "parallelism": {"dp": 4, "zero": 3, "framework": "deepspeed"}}

# Every part of the setup line at once: tp, pp, cp, LoRA, offload; 70B is beyond the traced models.
LONG_SETUP = {"model": "llama-3.1-70b", "gpu": "a100-40gb",
              "training": {"finetuning": "lora", "activation_checkpointing": "selective", "seq_len": 32768},
              "parallelism": {"dp": 2, "tp": 8, "pp": 4, "cp": 2, "zero": 1, "offload_optimizer": True}}
OUT_OF_MEMORY = {"model": "llama-3.1-70b", "gpu": "a100-40gb"}
# Beyond the largest traced model (405B), in Megatron-LM's kernels: two reasons not to trust it
EXTRAPOLATED = {"model": "deepseek-v3", "gpu": "a100-40gb", "training": {"implementation": "megatron"}}

# Every state of the headline from the first paint, recorded as it changes (an init script runs
# before the page's own scripts): its verdict and its text.
RECORD_HEADLINE = """
window.__headlines = [];
const note = () => { const h = document.querySelector('#calc-results .calc-headline');
  window.__headlines.push(h ? [h.dataset.verdict, h.innerText] : [null, '']); };
document.addEventListener('DOMContentLoaded', () => {
  const box = document.getElementById('calc-results');
  note();
  new MutationObserver(note).observe(box.parentElement, { childList: true, subtree: true, characterData: true });
});"""


def test_setup_line_states_the_scenario_and_links_each_part_to_its_field(calculator: Calculator) -> None:
    """Issue 13: the opening "22.34 GiB per GPU, fits" came from dp 8, ZeRO-3 and full
    checkpointing hidden in the closed advanced settings. The header says them, each part a
    link that opens its section and focuses its field."""
    calculator.open(live=False)
    want = setup_line(estimate(page_data()["defaults"]))
    assert calculator.page.inner_text("#calc-setup") == want  # before Python: the build's
    calculator.wait_live()
    assert calculator.page.inner_text("#calc-setup") == want
    advanced = calculator.page.locator("details.calc-advanced")
    assert advanced.get_attribute("open") is None
    for name in ("parallelism.zero", "training.activation_checkpointing", "training.seq_len", "gpu", "model"):
        calculator.page.click(f'#calc-setup [data-field="{name}"]')
        assert calculator.page.evaluate("document.activeElement.name") == name
    assert advanced.get_attribute("open") is not None
    calculator.field("parallelism.zero").select_option("2")
    calculator.page.wait_for_function(
        "() => document.getElementById('calc-setup').innerText.includes('ZeRO-2')", timeout=LIVE_TIMEOUT_MS)


def test_share_link_out_of_memory_never_shows_fits_or_another_figure(calculator: Calculator) -> None:
    """Issue 13: a cold share link showed the default scenario's green "fits" beside the linked
    out-of-memory form for up to 20 s. From the first paint until live: a pending skeleton, then
    this scenario's verdict, never "fits" and never the default's figure. (The calculator sets
    itself up in the task after the page's parsing ends: until then the results hold no
    headline, so no figure at all.)"""
    calculator.page.context.add_init_script(RECORD_HEADLINE)
    want = expected(OUT_OF_MEMORY)
    assert want["status"] == "does_not_fit"
    default_figure = gib(expected(page_data()["defaults"])["device_bytes"]).split()[0]
    calculator.open(OUT_OF_MEMORY, live=False)
    calculator.wait_report_for(want["scenario"])
    seen = calculator.page.evaluate("window.__headlines")
    while seen and seen[0] == [None, ""]:
        seen.pop(0)
    assert seen and seen[0][0] == "pending", seen[:3]
    for verdict, text in seen:
        assert verdict in ("pending", "no"), (verdict, text)
        assert not re.search(r"\bfits\b", text) and default_figure not in text, text
    assert seen[-1] == ["no", calculator.page.inner_text("#calc-results .calc-headline")]
    assert gib(want["device_bytes"]) in seen[-1][1]


def test_share_link_to_the_built_scenario_shows_the_built_result_at_once(calculator: Calculator) -> None:
    """Only where the link is the scenario the build computed does the page show a number before
    Python is ready."""
    calculator.open(expected(page_data()["defaults"])["scenario"], live=False)
    calculator.page.wait_for_selector(".calc-headline[data-verdict=ok]", timeout=5_000)
    assert calculator.page.get_attribute("#estimate-json", "data-state") == "static"


def test_choosing_pasted_config_opens_the_box_and_waits_for_it(calculator: Calculator) -> None:
    """Issue 13: choosing "Pasted config.json" did nothing visible and kept Llama's numbers
    marked Live. Now it opens and focuses the box, the result waits for a config.json, and a
    pasted one is computed."""
    calculator.open()
    calculator.page.select_option('[name="model"]', "hf_config")
    assert calculator.page.evaluate("document.activeElement.name") == "model.hf_config"
    assert calculator.page.locator('[name="model.hf_config"]').is_visible()
    calculator.page.wait_for_selector(".calc-headline[data-verdict=pending]", timeout=10_000)
    assert "config.json" in calculator.page.inner_text("#calc-pending")
    assert calculator.page.query_selector("#calc-results .calc-big").inner_text().strip() == "per GPU"
    config = SCENARIOS["pasted-config-zero3"]["model"]["hf_config"]
    calculator.page.fill('[name="model.hf_config"]', json.dumps(config))
    report = calculator.page.wait_for_function(
        """() => { const el = document.getElementById('estimate-json');
            const r = JSON.parse(el.textContent);
            return el.dataset.state === 'live' && r.scenario.model.hf_config ? r : null; }""",
        timeout=LIVE_TIMEOUT_MS).json_value()
    assert report["scenario"]["model"]["hf_config"] == config
    assert report == expected(report["scenario"])
    assert calculator.page.inner_text("#calc-setup").startswith("pasted config.json")


def test_extrapolated_confidence_names_its_reasons(calculator: Calculator) -> None:
    """The CLI lists why an estimate is extrapolated; the page shows the same reasons."""
    want = expected(EXTRAPOLATED)
    assert want["confidence"]["level"] == "extrapolated" and len(want["confidence"]["missing"]) == 2
    calculator.open(EXTRAPOLATED, live=False)
    calculator.wait_report_for(want["scenario"])
    assert calculator.page.inner_text("#calc-confidence") == "extrapolated"
    assert calculator.page.eval_on_selector_all("#calc-confidence-why li", "els => els.map(e => e.innerText)") \
        == want["confidence"]["missing"]


def test_model_and_gpu_lists_are_in_natural_order(calculator: Calculator) -> None:
    """Llama 2 7B, 13B, 70B; not 13B, 70B, 7B."""
    calculator.open(live=False)
    groups = calculator.page.eval_on_selector_all(
        '[name="model"] optgroup, [name="gpu"]', "els => els.map(g => [...g.querySelectorAll('option')].map(o => o.text))")
    assert len(groups) > 2
    for names in groups:
        assert names == sorted(names, key=natural_key)
    llama2 = [n for g in groups for n in g if "Llama 2 " in n]
    assert [n.split()[-1] for n in llama2] == ["7B", "13B", "70B"]
