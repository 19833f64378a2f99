"""The calculator's serving-memory panel: calc.plan.inference_memory for the form's model and
GPU and the panel's engine settings, the same answer as the library gives in CPython, every
figure shown formatted from it, at a desktop and a phone's width."""

from __future__ import annotations

from typing import Any

import pytest

from calc.formatting import count, gib
from calc.plan import PlanError, inference_memory
from calc.plan.inference import NON_TORCH_LABELS

from .conftest import Calculator
from .test_planning import as_json, run_panel, shown_error


def page_answer(want: Any) -> Any:
    """What the worker sends: inference_memory's answer with the names of the parts outside
    PyTorch."""
    return as_json({"ok": True, **want.as_dict(), "non_torch_labels": {
        k: NON_TORCH_LABELS[k] for k in want.non_torch_bytes}})


SERVE = {"model": "llama-3.1-8b", "gpu": "h100-sxm-80gb", "training": {"seq_len": 4096}}
ENGINE = {"tp": 2, "max_model_len": 8192, "kv_cache_dtype": "fp8",
          "gpu_memory_utilization": 0.85, "max_num_seqs": 128}


def shown(page: Any, key: str) -> tuple[int, str]:
    """A figure of the serving panel: calc's raw value (data-value) and its text."""
    cell = page.locator(f"#calc-inference-out [data-key='{key}']")
    return int(cell.get_attribute("data-value")), cell.text_content()


def test_serving_panel_is_calcs_inference_memory(calculator: Calculator) -> None:
    """The model and GPU come from the form, the engine's settings from the panel; the
    answer is inference_memory's, and the page writes its figures through calc's formatting."""
    calculator.open(SERVE)
    page = calculator.page
    got = run_panel(calculator, "inference", {k: str(v) for k, v in ENGINE.items()})
    want = inference_memory("llama-3.1-8b", gpu="h100-sxm-80gb", **ENGINE)
    assert got == page_answer(want)
    assert want.status == "fits" and want.max_concurrent_sequences > 1
    value, text = shown(page, "max_concurrent_sequences")
    assert value == want.max_concurrent_sequences and text.startswith(count(value))
    parts = {"weight_bytes": want.weight_bytes, "activation_bytes": want.activation_bytes,
             "kv_cache_bytes": want.kv_cache_bytes, "device_bytes": want.device_bytes,
             **{f"non_torch_bytes.{k}": v for k, v in want.non_torch_bytes.items()}}
    assert "non_torch_bytes.nccl" in parts  # tp 2
    for key, bytes_ in parts.items():
        assert shown(page, key) == (bytes_, gib(bytes_)), key
    names = page.eval_on_selector_all("#calc-inference-table tbody td:first-child",
                                      "els => els.map((e) => e.textContent)")
    assert [n for n in names if "(empirical)" in n] == [
        f"{NON_TORCH_LABELS[k]} (empirical)" for k in want.non_torch_bytes]
    # the table is the engine's budget, part by part
    assert sum(v for k, v in parts.items() if k != "device_bytes") == want.budget_bytes
    per_seq = page.locator("#calc-inference-per-seq")
    assert int(per_seq.get_attribute("data-value")) == want.kv_bytes_per_sequence
    assert gib(want.kv_bytes_per_sequence) in per_seq.text_content()
    assert page.get_attribute("#calc-inference-out .calc-headline", "data-verdict") == "ok"


def test_serving_panel_follows_the_forms_gpu_and_says_when_it_does_not_start(
        calculator: Calculator) -> None:
    """Llama 3 70B's bf16 weights leave no KV cache on one 80 GB GPU: vLLM would not start,
    and the page says so; a change to the form's GPU marks the answer stale."""
    big = {**SERVE, "model": "llama-3-70b"}
    calculator.open(big)
    page = calculator.page
    got = run_panel(calculator, "inference", {"tp": "1", "max_model_len": "8192"})
    want = inference_memory("llama-3-70b", gpu="h100-sxm-80gb", tp=1, max_model_len=8192)
    assert want.status == "does_not_fit" and got == page_answer(want)
    assert page.get_attribute("#calc-inference-out .calc-headline", "data-verdict") == "no"
    assert shown(page, "max_concurrent_sequences")[0] == 0
    calculator.field("gpu").select_option("a100-80gb")
    page.wait_for_selector("#calc-inference-out[data-stale=true]", timeout=30_000)
    got = run_panel(calculator, "inference", {"tp": "4"})
    assert got["gpu"] == "a100-80gb" and got["status"] == "fits"
    assert got == page_answer(inference_memory("llama-3-70b", gpu="a100-80gb", tp=4,
                                               max_model_len=8192))


def test_serving_bad_tp_is_named_beside_the_input(calculator: Calculator) -> None:
    calculator.open(SERVE)
    got = run_panel(calculator, "inference", {"tp": "3"})
    with pytest.raises(PlanError) as exc:
        inference_memory("llama-3.1-8b", gpu="h100-sxm-80gb", tp=3)
    assert got == {"ok": False, "field": "tp", "message": exc.value.message}
    assert shown_error(calculator.page, "t-inference-tp") == exc.value.message


def test_serving_panel_fits_a_phone_width(calculator: Calculator) -> None:
    """At 390 px the panel's inputs and its answer stay inside the screen."""
    calculator.page.set_viewport_size({"width": 390, "height": 900})
    calculator.open(SERVE)
    run_panel(calculator, "inference", {"tp": "2", "max_model_len": "131072"})
    assert calculator.page.evaluate("document.documentElement.scrollWidth") <= 390
