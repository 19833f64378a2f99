"""Recommendations with one-click apply, scenario files, saved scenarios: in the browser, checked
against the library."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from calc import estimate, parse_scenario
from calc.plan import recommend

from .conftest import LIVE_TIMEOUT_MS, Calculator

TIGHT = {"model": "llama-3.1-8b", "training": {"seq_len": 8192}, "gpu": "a100-80gb"}
SMALL = {"model": "qwen2.5-0.5b", "training": {"micro_batch_size": 2, "seq_len": 2048},
         "gpu": "l4-24gb"}


def dumped(scenario: dict[str, Any]) -> dict[str, Any]:
    return parse_scenario(scenario).model_dump(mode="json")


def test_applying_a_recommendation_saves_what_it_claims(calculator: Calculator) -> None:
    """The panel lists calc's recommendations; Apply loads the changed scenario, whose live
    report is CPython's and smaller by the claimed saving."""
    calculator.open(TIGHT)
    calculator.wait_report_for(dumped(TIGHT))
    page = calculator.page
    page.wait_for_selector("[data-apply]", timeout=LIVE_TIMEOUT_MS)
    best = recommend(TIGHT).levers[0]
    assert best.title in page.text_content("#calc-recs")
    before = calculator.report()["device_bytes"]
    page.click('[data-apply="0"]')
    after = calculator.wait_report_for(best.scenario.model_dump(mode="json"))
    assert after == json.loads(json.dumps(estimate(best.scenario).as_dict()))
    assert before - after["device_bytes"] == best.saving_bytes


def test_scenario_file_download_and_upload_round_trip(calculator: Calculator, tmp_path: Path) -> None:
    calculator.open(SMALL)
    calculator.wait_report_for(dumped(SMALL))
    page = calculator.page
    with page.expect_download() as info:
        page.click("#calc-download")
    downloaded = json.loads(Path(info.value.path()).read_text())
    assert dumped(downloaded) == dumped(SMALL)

    other = {**SMALL, "gpu": "a10g-24gb", "training": {**SMALL["training"], "seq_len": 1024}}
    path = tmp_path / "other.json"
    path.write_text(json.dumps(other))
    page.set_input_files("#calc-upload", str(path))
    report = calculator.wait_report_for(dumped(other))
    assert report == json.loads(json.dumps(estimate(other).as_dict()))


def test_saved_scenarios_survive_a_reload_and_reopen(calculator: Calculator) -> None:
    calculator.open(SMALL)
    calculator.wait_report_for(dumped(SMALL))
    page = calculator.page
    page.click("#calc-save")
    page.wait_for_selector(".calc-saved a")
    calculator.open(None)  # the default scenario, a fresh page load
    link = page.locator(".calc-saved a").first
    assert "qwen2.5-0.5b" in link.text_content()
    link.click()
    assert calculator.wait_report_for(dumped(SMALL))["device_bytes"] == \
        estimate(SMALL).device_bytes
