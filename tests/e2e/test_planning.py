"""Planning in the calculator (pinned comparison, largest micro-batch, step time, export, the
advisor, import, cheapest and RL panels) and the Planning tools pages, checked against the
library in CPython."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from calc import ScenarioError, estimate, parse_scenario
from calc.plan import (
    DEFAULT_INTER_NODE_GBPS,
    ConfigImportError,
    ExportError,
    PlanError,
    advise,
    cheapest,
    compare,
    export,
    import_config,
    max_micro_batch,
    rl_memory,
    training_cost,
)

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
    page.wait_for_function("() => document.querySelectorAll('#calc-compare-table th[data-label]').length === 2",
                           timeout=LIVE_TIMEOUT_MS)
    pins = json.loads(page.evaluate("localStorage.getItem('calc.pinned-scenarios')"))
    want = compare([p["scenario"] for p in pins], labels=[p["name"] for p in pins]).as_dict()
    got = cells(page)
    for key in ("peak_bytes", "device_bytes", "micro_batch_size", "global_batch_size",
                "tokens_per_step", "gradient_accumulation_steps"):
        assert [int(v) for v in got[key]] == [s[key] for s in want["scenarios"]], key
    assert [float(v) for v in got["utilization"]] == [s["utilization"] for s in want["scenarios"]]
    assert got["status"] == [s["status"] for s in want["scenarios"]]
    for comp, values in want["scenarios"][0]["components"].items():
        assert int(got[f"components.{comp}"][0]) == values
    diffs = [int(d) for d in page.eval_on_selector_all(
        "#calc-compare-table td[data-key='device_bytes'] small[data-diff]", "els => els.map(e => e.dataset.diff)")]
    assert diffs == [want["scenarios"][1]["difference"]["device_bytes"]]
    assert want["scenarios"][1]["global_batch_size"] == 8
    assert "GiB" in page.text_content("#calc-compare-table")
    page.click("[data-unpin='0']")
    page.wait_for_function("() => document.querySelectorAll('#calc-compare-table th[data-label]').length === 1")


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


# ---- the planning panels: advisor, import, cheapest, RL (calc.plan in the worker) ----

ADVISE_SCENARIO = {"model": "llama-3.1-8b", "gpu": "h100-sxm-80gb", "training": {"seq_len": 8192}}
DS_CONFIG = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 8,
             "train_batch_size": 128, "bf16": {"enabled": True}, "gradient_clipping": 1.0,
             "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
CHEAP = {"model": "llama-3-8b", "training": {"seq_len": 4096, "activation_checkpointing": "full"}}
RL = {"model": "qwen2.5-7b", "training": {"activation_checkpointing": "full"},
      "parallelism": {"tp": 4}, "gpu": "h100-sxm-80gb"}


def as_json(value: Any) -> Any:
    """What the worker sends: calc's dict through json, as the page parses it."""
    return json.loads(json.dumps(value))


def run_panel(calculator: Calculator, name: str, values: dict[str, str]) -> dict[str, Any]:
    """Open a planning panel, type `values` into its inputs, press its button; calc's answer."""
    page = calculator.page
    if not page.evaluate(f"document.getElementById('calc-{name}').open"):
        page.click(f"#calc-{name} > summary")
    for input_name, value in values.items():
        locator = page.locator(f'#calc-{name}-form [name="{input_name}"]')
        if locator.evaluate("el => el.tagName") == "SELECT":
            locator.select_option(value)
        else:
            locator.fill(value)
    runs = page.get_attribute(f"#calc-{name}-json", "data-runs")
    page.click(f"#calc-{name}-form button[type=submit]")
    page.wait_for_function(f"() => document.getElementById('calc-{name}-json').dataset.runs !== '{runs}'",
                           timeout=LIVE_TIMEOUT_MS)
    return json.loads(page.text_content(f"#calc-{name}-json"))  # type: ignore[no-any-return]


def shown_error(page: Any, input_id: str) -> str:
    """The message beside an input marked invalid (it must be marked)."""
    assert page.get_attribute(f"#{input_id}", "aria-invalid") == "true"
    described = page.get_attribute(f"#{input_id}", "aria-describedby")
    return page.text_content(f"#{described}")  # type: ignore[no-any-return]


def test_advisor_panel_shows_calcs_plans(calculator: Calculator) -> None:
    """The advisor's plans on the page are calc.plan.advise's, for the scenario's model, GPU,
    sequence length and training settings, and every figure shown is formatted from them."""
    calculator.open(ADVISE_SCENARIO)
    page = calculator.page
    got = run_panel(calculator, "advise", {"gpus": "16", "gpus_per_node": "8", "global_batch": "64"})
    want = advise("llama-3.1-8b", "h100-sxm-80gb", 16, 8192, 64, gpus_per_node=8,
                  inter_node_gbps=DEFAULT_INTER_NODE_GBPS,
                  base_training=parse_scenario(ADVISE_SCENARIO).training, top=5)
    assert got == as_json({"ok": True, **want.as_dict()})
    assert len(want.plans) == 5
    rows = page.locator("#calc-advise-table tbody tr[data-rank]")
    assert rows.count() == 5
    for i, plan in enumerate(want.plans):
        row = rows.nth(i)
        lay = plan.as_dict()["layout"]
        assert row.locator("[data-key=step_time_s]").get_attribute("data-value") == repr(plan.step_time.total)
        assert int(row.locator("[data-key=device_bytes]").get_attribute("data-value")) == plan.estimate.device_bytes
        assert f"{plan.estimate.device_bytes / 1024**3:.2f} GiB" in row.text_content()
        assert f"{round(plan.tokens_per_s):,}" in row.text_content()
        assert f"tp {lay['tp']} · pp {lay['pp']} · dp {lay['dp']} · cp {lay['cp']}" in row.text_content()
        assert f"{lay['micro_batch_size']} × {lay['gradient_accumulation_steps']}" in row.text_content()
    whys = page.eval_on_selector_all("#calc-advise-table [data-key=why]", "els => els.map(e => e.textContent)")
    assert whys == [p.why for p in want.plans]
    assert f"{want.searched:,} combinations" in page.text_content("#calc-advise-out")


def test_advisor_with_lora_allowed_lists_each_training_apart(calculator: Calculator) -> None:
    """With LoRA and QLoRA allowed, the panel's answer is calc's, and the plans are headed by
    what they train: full fine-tuning first, then LoRA and QLoRA, said to change it."""
    calculator.open(ADVISE_SCENARIO)
    page = calculator.page
    page.click("#calc-advise > summary")
    page.check("#t-advise-allow_lora")
    got = run_panel(calculator, "advise", {"gpus": "8", "global_batch": "64"})
    want = advise("llama-3.1-8b", "h100-sxm-80gb", 8, 8192, 64,
                  base_training=parse_scenario(ADVISE_SCENARIO).training, top=5, allow_lora=True)
    assert got == as_json({"ok": True, **want.as_dict()})
    kinds = list(dict.fromkeys(p.scenario.training.finetuning for p in want.plans))
    assert kinds[0] == "full" and {"lora", "qlora"} <= set(kinds)
    headings = page.locator("#calc-advise-table tr.calc-group")
    assert [headings.nth(i).get_attribute("data-finetuning") for i in range(headings.count())] \
        == kinds
    for i, kind in enumerate(kinds):
        text = headings.nth(i).text_content()
        assert ("changes what is trained" in text) == (kind != "full")


def test_advisor_apply_loads_the_plan_into_the_form(calculator: Calculator) -> None:
    """Apply on a plan loads its scenario (layout, micro-batch, accumulation, checkpointing):
    the live report is then calc's estimate of exactly that scenario, and the advisor's answer
    is not stale, since what it searched is what changed."""
    calculator.open(ADVISE_SCENARIO)
    page = calculator.page
    got = run_panel(calculator, "advise", {"gpus": "16", "global_batch": "64"})
    plan = got["plans"][1]
    page.click("[data-apply-plan='advise:1']")
    report = calculator.wait_report_for(plan["scenario"])
    assert report["device_bytes"] == plan["estimate"]["device_bytes"]
    assert decode(page.evaluate("location.hash")) == {**plan["scenario"], "schema_version": 1}
    assert page.get_attribute("#calc-advise-out", "data-stale") == "false"
    calculator.field("training.seq_len").fill("4096")  # the advisor's own input: stale now
    page.wait_for_selector("#calc-advise-out[data-stale=true] .calc-stale", timeout=LIVE_TIMEOUT_MS)


def test_advisor_bad_gpu_count_is_named_beside_the_input(calculator: Calculator) -> None:
    calculator.open(ADVISE_SCENARIO)
    got = run_panel(calculator, "advise", {"gpus": "5000", "global_batch": "64"})
    with pytest.raises(PlanError) as exc:
        advise("llama-3.1-8b", "h100-sxm-80gb", 5000, 8192, 64)
    assert got == {"ok": False, "field": exc.value.field, "message": exc.value.message}
    assert exc.value.field == "gpus"
    assert shown_error(calculator.page, "t-advise-gpus") == exc.value.message
    assert calculator.page.inner_html("#calc-advise-out") == ""


IMPORTS = {
    "deepspeed": json.dumps(DS_CONFIG),
    "accelerate-fsdp": "compute_environment: LOCAL_MACHINE\ndistributed_type: FSDP\n"
                       "mixed_precision: bf16\nnum_processes: 8\nfsdp_config:\n"
                       "  fsdp_sharding_strategy: FULL_SHARD\n  fsdp_offload_params: false\n",
    "hf-trainer": json.dumps({"per_device_train_batch_size": 4, "gradient_accumulation_steps": 4,
                              "bf16": True, "gradient_checkpointing": True, "logging_steps": 10}),
}


@pytest.mark.parametrize("fmt", sorted(IMPORTS))
def test_import_panel_loads_calcs_scenario_into_the_form(calculator: Calculator, fmt: str) -> None:
    """Import reads the config on the form's model and GPU as calc.plan.import_config does,
    lists its notes, and the form then holds (and the report estimates) that scenario."""
    start = {"model": "llama-3-8b", "gpu": "a100-80gb"}
    calculator.open(start)
    page = calculator.page
    got = run_panel(calculator, "import", {"format": fmt, "seq_len": "4096", "text": IMPORTS[fmt]})
    want = import_config(IMPORTS[fmt], fmt, model="llama-3-8b", gpu="a100-80gb", seq_len=4096)  # type: ignore[arg-type]
    assert got == as_json({"ok": True, **want.as_dict()})
    assert want.notes
    notes = page.eval_on_selector_all("#calc-import-notes li", "els => els.map(e => e.textContent)")
    assert notes == list(want.notes)
    report = calculator.wait_report_for(want.scenario.model_dump(mode="json"))
    assert report == as_json(estimate(want.scenario).as_dict())


@pytest.mark.parametrize(("fmt", "text"), [
    ("deepspeed", '{"zero_optimization": {"stage": 7}}'),
    ("accelerate-fsdp", "distributed_type: FSDP\nfsdp_config: [1, 2\n"),
    ("hf-trainer", '{"bf16": true, "fp16": true}'),
    ("deepspeed", '{"train_micro_batch_size_per_gpu": 2,'),
])
def test_import_panel_names_the_bad_setting_beside_the_box(calculator: Calculator, fmt: str,
                                                           text: str) -> None:
    """A config calc refuses: its field-named error beside the text box, no traceback, and the
    form keeps its scenario."""
    start = {"model": "llama-3-8b", "gpu": "a100-80gb"}
    calculator.open(start)
    page = calculator.page
    before = page.evaluate("location.hash")
    got = run_panel(calculator, "import", {"format": fmt, "text": text})
    with pytest.raises(ConfigImportError) as exc:
        import_config(text, fmt, model="llama-3-8b", gpu="a100-80gb")  # type: ignore[arg-type]
    assert got == {"ok": False, "field": exc.value.field, "message": exc.value.message}
    assert shown_error(page, "t-import-text") == f"{exc.value.field}: {exc.value.message}"
    assert "Traceback" not in page.text_content("#calc-planning")
    assert page.evaluate("location.hash") == before


def cheapest_as_worker_sends(result: Any) -> dict[str, Any]:
    """calc.plan.cheapest's JSON as the panel gets it: options with their price source, and
    without `all_options` (the page does not show them)."""
    d = result.as_dict()
    del d["all_options"]
    for key in ("options", "unpriced"):
        for shown, option in zip(d[key], getattr(result, key), strict=True):
            shown["price_source"] = option.cost.price_source
    return as_json({"ok": True, **d})


def test_cheapest_panel_ranks_as_calc_does(calculator: Calculator) -> None:
    calculator.open(CHEAP)
    page = calculator.page
    got = run_panel(calculator, "cheapest", {"tokens": "2e9", "deadline_hours": "24", "max_gpus": "64"})
    want = cheapest(CHEAP, 2 * 10**9, deadline_hours=24.0, max_gpus=64)
    assert got == cheapest_as_worker_sends(want)
    assert len(want.options) >= 2
    rows = page.locator("#calc-cheapest-table tbody tr[data-gpu]")
    assert [rows.nth(i).get_attribute("data-gpu") for i in range(rows.count())] == [o.gpu for o in want.options]
    for i, option in enumerate(want.options):
        row = rows.nth(i)
        assert int(row.locator("[data-key=gpus]").get_attribute("data-value")) == option.gpus
        assert float(row.locator("[data-key=cost_usd]").get_attribute("data-value")) == option.cost.cost_usd
        assert float(row.locator("[data-key=train_hours]").get_attribute("data-value")) == option.cost.train_seconds / 3600
    prices = page.eval_on_selector_all("#calc-cheapest-table [data-key=price_source]",
                                       "els => els.map(e => e.textContent)")
    assert prices == [f"Price: {o.cost.price_source}" for o in want.options]
    assert all("list price" in (o.cost.price_source or "") for o in want.options)
    page.click("[data-apply-plan='cheapest:0']")
    calculator.wait_report_for(want.options[0].scenario.model_dump(mode="json"))


def test_cheapest_bad_deadline_is_named_beside_the_input(calculator: Calculator) -> None:
    calculator.open(CHEAP)
    got = run_panel(calculator, "cheapest", {"tokens": "2e9", "deadline_hours": "-1"})
    with pytest.raises(PlanError) as exc:
        cheapest(CHEAP, 2 * 10**9, deadline_hours=-1.0)
    assert got == {"ok": False, "field": "deadline_hours", "message": exc.value.message}
    assert shown_error(calculator.page, "t-cheapest-deadline_hours") == exc.value.message


def test_rl_panel_is_calcs_rl_memory(calculator: Calculator) -> None:
    """The rollout settings as rl_memory takes them; the per-GPU total beside the training
    step, and the scenario's own estimate as set, for comparison."""
    calculator.open(RL)
    page = calculator.page
    got = run_panel(calculator, "rl", {"prompts": "32", "samples_per_prompt": "8", "prompt_len": "1024",
                                       "response_len": "7168", "kv_dtype_bytes": "1"})
    want = rl_memory(RL, prompts=32, samples_per_prompt=8, prompt_len=1024, response_len=7168,
                     kv_dtype_bytes=1)
    assert got == as_json({"ok": True, **want.as_dict(),
                           "scenario_device_bytes": estimate(RL).device_bytes})
    for part, value in want.components.items():  # a part the algorithm lacks has no row
        cell = page.locator(f"#calc-rl-table [data-key={part}]")
        assert int(cell.get_attribute("data-value")) == value if value else cell.count() == 0
    assert f"{want.total_bytes / 1024**3:.2f} GiB" in page.text_content("#calc-rl-out .calc-big")
    page.uncheck("#t-rl-colocated")
    separate = run_panel(calculator, "rl", {})
    assert separate["total_bytes"] == rl_memory(
        RL, prompts=32, samples_per_prompt=8, prompt_len=1024, response_len=7168,
        kv_dtype_bytes=1, colocated=False).total_bytes


def test_rl_panel_takes_critic_and_reward_models_and_offload(calculator: Calculator) -> None:
    """The critic and reward models chosen among the presets, the models offloaded between
    phases: rl_memory's answer, with the host memory it needs."""
    calculator.open(RL)
    page = calculator.page
    if not page.evaluate("document.getElementById('calc-rl').open"):
        page.click("#calc-rl > summary")
    page.check("#t-rl-offload_between_phases")
    got = run_panel(calculator, "rl", {"algorithm": "ppo", "prompts": "32", "samples_per_prompt": "8",
                                       "prompt_len": "1024", "response_len": "7168",
                                       "critic_model": "qwen3-0.6b", "reward_model": "qwen3-8b"})
    want = rl_memory(RL, algorithm="ppo", prompts=32, samples_per_prompt=8, prompt_len=1024,
                     response_len=7168, critic_model="qwen3-0.6b", reward_model="qwen3-8b",
                     offload_between_phases=True)
    assert got == as_json({"ok": True, **want.as_dict(),
                           "scenario_device_bytes": estimate(RL).device_bytes})
    assert int(page.get_attribute("#calc-rl-host", "data-value")) == want.host_bytes > 0
    for phase, value in want.phases.items():
        assert int(page.get_attribute(f"#calc-rl-table tfoot [data-key='phases.{phase}']", "data-value")) == value
    page.select_option("#t-rl-algorithm", "grpo")  # a critic without ppo: named beside its input
    got = run_panel(calculator, "rl", {})
    assert got["ok"] is False and got["field"] == "critic_model"
    assert "critic" in shown_error(page, "t-rl-critic_model")


def test_rl_bad_prompt_count_is_named_beside_the_input(calculator: Calculator) -> None:
    calculator.open(RL)
    got = run_panel(calculator, "rl", {"prompts": "0"})
    with pytest.raises(PlanError) as exc:
        rl_memory(RL, prompts=0, samples_per_prompt=8, prompt_len=1024, response_len=7168)
    assert got == {"ok": False, "field": "prompts", "message": exc.value.message}
    assert shown_error(calculator.page, "t-rl-prompts") == exc.value.message


def test_export_follows_the_scenario_until_a_format_is_picked(calculator: Calculator) -> None:
    """The page opens on Accelerate's FSDP; a DeepSpeed scenario, which it cannot run, is
    written for DeepSpeed instead, as calc writes it."""
    scenario = {"model": "qwen2.5-0.5b", "training": {"mixed_precision": "master"},
                "parallelism": {"dp": 4, "zero": 3, "framework": "deepspeed"}}
    calculator.open(scenario)
    calculator.wait_report_for(dumped(scenario))
    page = calculator.page
    page.wait_for_function(
        "() => document.getElementById('calc-export-text').dataset.state === 'live'",
        timeout=LIVE_TIMEOUT_MS)
    assert page.input_value("#calc-export-format") == "deepspeed"
    assert page.text_content("#calc-export-text") == export(scenario, "deepspeed").text
