"""Charts and live documentation: every mark of a chart is the library's number, and the
documentation's embedded examples recompute in the browser what calc computes."""

from __future__ import annotations

import json
from typing import Any

import docs_accuracy  # tools/, put on sys.path by conftest
import pytest

from calc import estimate
from calc.charts import memory_sweep, phase_timeline
from calc.formatting import FIT_PHRASES, FIT_WORDS, gib, gib_number
from calc.plan import compare_gpus, max_micro_batch

from .conftest import LIVE_TIMEOUT_MS, Calculator, decode, encode

# What a chart's marks say: each sweep point's x and bytes, each level's GPU and bytes, each
# timeline bar's moment and bytes.
CHART_DATA = """svg => ({
  points: [...svg.querySelectorAll('circle[data-bytes]')].map(c => [Number(c.dataset.x), Number(c.dataset.bytes)]),
  levels: [...svg.querySelectorAll('.chart-level')].map(g => [g.dataset.gpu, Number(g.dataset.bytes)]),
  moments: [...svg.querySelectorAll('[data-moment]')].map(g => [g.dataset.moment, Number(g.dataset.bytes)]),
  peak: [...svg.querySelectorAll('.chart-bar--peak')].map(g => g.dataset.moment)})"""


def chart_data(page: Any, selector: str) -> dict[str, Any]:
    return page.locator(selector).evaluate(CHART_DATA)  # type: ignore[no-any-return]


def expected_sweep(scenario: dict[str, Any], field: str) -> list[list[int]]:
    return [[p.x, p.bytes] for p in memory_sweep(scenario, field).series[0].points]  # type: ignore[arg-type]


def test_calculator_charts_follow_the_scenario_with_the_librarys_numbers(
        calculator: Calculator) -> None:
    """The calculator's charts, recomputed live for a linked scenario, equal calc.charts'."""
    scenario = {"model": "qwen2.5-7b", "training": {"seq_len": 2048, "micro_batch_size": 2},
                "parallelism": {"dp": 4, "zero": 2}, "gpu": "a100-80gb"}
    calculator.open(scenario)
    page = calculator.page
    page.wait_for_selector("#calc-charts .chart-charts[data-state=live]", state="attached",
                           timeout=LIVE_TIMEOUT_MS)
    e = estimate(scenario)
    mb = chart_data(page, "#chart-sweep-micro-batch-size")
    assert mb["points"] == expected_sweep(scenario, "training.micro_batch_size")
    seq = chart_data(page, "#chart-sweep-seq-len")
    assert seq["points"] == expected_sweep(scenario, "training.seq_len")
    timeline = chart_data(page, "#chart-timeline")
    assert timeline["moments"] == [[b.moment, b.bytes] for b in phase_timeline(e).bars]
    assert timeline["peak"] == [e.peak_moment]
    assert ["a100-80gb", e.usable_bytes] in mb["levels"]
    assert page.locator("#chart-sweep-micro-batch-size .chart-level--current").get_attribute(
        "data-gpu") == "a100-80gb"


def test_a_walkthrough_step_edited_in_place_recomputes_the_librarys_figure(
        calculator: Calculator) -> None:
    """Debugging an OOM, step 1: the micro-batch, the loss and the GPU changed in place; the
    step shows what calc computes for the edited scenario, and its link opens that scenario."""
    page = calculator.page
    page.goto(calculator.base_url + "walkthroughs/debug-oom/")
    box = page.locator(".live-example").first
    built = json.loads(box.locator("script").text_content())["scenario"]
    assert int(box.get_attribute("data-device-bytes")) == estimate(built).device_bytes
    gpu = "a100-80gb" if built["gpu"] != "a100-80gb" else "h100-sxm-80gb"
    box.locator('[name="training.micro_batch_size"]').fill("1")
    box.locator('[name="training.loss"]').select_option(label="chunked")
    box.locator('[name="gpu"]').select_option(value=json.dumps(gpu))
    edited = {**built, "gpu": gpu,
              "training": {**built["training"], "micro_batch_size": 1, "loss": "chunked"}}
    want = estimate(edited)
    page.wait_for_function(
        """([el, bytes]) => el.dataset.state === 'live' && el.dataset.deviceBytes === bytes""",
        arg=[box.element_handle(), str(want.device_bytes)], timeout=LIVE_TIMEOUT_MS)
    assert box.locator('[data-key="device_bytes"]').text_content() == gib(want.device_bytes)
    assert box.locator('[data-key="status"]').text_content() == FIT_PHRASES[want.status]
    assert box.locator('[data-key="gpu"]').text_content() == want.resolved.gpu.name
    link = box.locator(".live-open").get_attribute("href")
    assert decode(link.split("#", 1)[1].removeprefix("s=")) == want.scenario.model_dump(mode="json")


def test_a_bad_value_in_a_live_example_is_calcs_error_naming_the_field(
        calculator: Calculator) -> None:
    page = calculator.page
    page.goto(calculator.base_url + "walkthroughs/where-the-bytes-go/")
    box = page.locator(".live-example").first
    box.locator('[name="training.seq_len"]').fill("0")
    page.wait_for_function("el => el.dataset.state === 'error'", arg=box.element_handle(),
                           timeout=LIVE_TIMEOUT_MS)
    assert "training.seq_len:" in box.locator(".live-status").text_content()
    assert box.locator('[name="training.seq_len"]').get_attribute("aria-invalid") == "true"


@pytest.mark.console_errors_expected
def test_a_live_example_tries_a_failed_python_start_again_on_the_next_edit(
        calculator: Calculator) -> None:
    """Python cannot start (PyScript's file is missing): the example names the file and keeps
    its figures; once the file can be loaded, the next edit starts Python and computes."""
    page = calculator.page

    def missing(r: Any) -> None:
        r.fulfill(status=404, body="missing")

    page.route("**/vendor/pyscript/core.js", missing)
    page.goto(calculator.base_url + "walkthroughs/where-the-bytes-go/")
    box = page.locator(".live-example").first
    built = json.loads(box.locator("script").text_content())["scenario"]
    box.locator('[name="training.seq_len"]').fill("1024")
    page.wait_for_function("el => el.dataset.state === 'error'", arg=box.element_handle(),
                           timeout=LIVE_TIMEOUT_MS)
    said = box.locator(".live-status").text_content()
    assert "could not start" in said and "vendor/pyscript/core.js" in said
    assert box.get_attribute("data-device-bytes") == str(estimate(built).device_bytes)
    page.unroute("**/vendor/pyscript/core.js", missing)
    box.locator('[name="training.seq_len"]').fill("2048")
    want = estimate({**built, "training": {**built["training"], "seq_len": 2048}})
    page.wait_for_function(
        """([el, bytes]) => el.dataset.state === 'live' && el.dataset.deviceBytes === bytes""",
        arg=[box.element_handle(), str(want.device_bytes)], timeout=LIVE_TIMEOUT_MS)


def test_the_gpu_comparison_follows_a_share_link(calculator: Calculator) -> None:
    """A linked scenario (fp16 on Qwen2.5-7B, LoRA) is computed for every GPU preset in the
    browser: each row's bytes, verdict and largest micro-batch are the library's."""
    scenario = {"model": "qwen2.5-7b", "training": {"seq_len": 2048, "finetuning": "lora",
                                                     "precision": "fp16"}, "gpu": "a100-80gb"}
    page = calculator.page
    page.goto(calculator.base_url + f"gpus/#s={encode(scenario)}")
    page.wait_for_selector("#gpu-live[data-state=live]", state="attached", timeout=LIVE_TIMEOUT_MS)
    for fit in compare_gpus(scenario):
        row = page.locator(f'tr[data-gpu="{fit.gpu}"]')
        assert row.get_attribute("data-device-bytes") == str(fit.device_bytes or "")
        status = row.locator('[data-key="status"]').text_content()
        if fit.error:
            assert status == f"not supported ({fit.error})"
            continue
        assert status == FIT_WORDS[fit.status]
        assert row.locator('[data-key="device_bytes"]').text_content() == gib_number(fit.device_bytes)
        best = max_micro_batch({**scenario, "gpu": fit.gpu}).value
        assert row.locator('[data-key="max_micro_batch"]').text_content() == str(best or "none")
    assert "qwen2.5-7b, lora fine-tuning, 2048-token" in page.text_content("#gpu-scenario")


def test_the_gpu_comparison_names_a_bad_linked_field(calculator: Calculator) -> None:
    page = calculator.page
    page.goto(calculator.base_url + "gpus/#s=" + encode({"model": "gpt2", "training": {"seq_len": -1}}))
    page.wait_for_selector("#gpu-live[data-state=error]", state="attached", timeout=LIVE_TIMEOUT_MS)
    assert "training.seq_len:" in page.text_content("#gpu-status")


def test_accuracy_scatter_plots_every_traced_case_for_calc_and_the_other_formulas(
        calculator: Calculator) -> None:
    rows = docs_accuracy._accuracy().traced_rows("all")
    page = calculator.page
    page.goto(calculator.base_url + "accuracy/")
    for key in ("calc", "korthikanti", "megatron", "eleuther"):
        drawn = chart_data(page, f'#chart-accuracy [data-series="{key}"]')["points"]
        predicted = "predicted" if key == "calc" else f"{key}_bytes"
        # a formula with no comparable figure for a case (calc.baselines says why) has no dot
        want = [[r["traced"], r[predicted]] for r in rows if r[predicted] is not None]
        assert want and drawn == want, key


def test_the_walkthroughs_phase_timeline_is_the_librarys(calculator: Calculator) -> None:
    """Qwen2.5-7B, where the bytes go: each moment's bar and the marked peak are calc's."""
    page = calculator.page
    page.goto(calculator.base_url + "walkthroughs/where-the-bytes-go/")
    scenario = json.loads(page.locator(".live-example script").first.text_content())["scenario"]
    e = estimate(scenario)
    drawn = chart_data(page, "#chart-timeline")
    assert drawn["moments"] == [[b.moment, b.bytes] for b in phase_timeline(e).bars]
    assert drawn["peak"] == [e.peak_moment]
    assert max(b for _, b in drawn["moments"]) == e.peak_bytes
