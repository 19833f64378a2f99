"""The start-up snapshot the build ships (tools/snapshot.mjs, restored by
site/assets/pyodide_start.mjs): a cold visit starts Python from it and computes exactly what a
normal start computes; a snapshot that does not match the runtime is refused, said on the
console, and Python starts normally.
"""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest

from .conftest import SITE, Calculator, python_start_messages

PYODIDE = SITE / "vendor" / "pyodide"
SCENARIO = {"model": "qwen2.5-7b", "training": {"seq_len": 4096, "micro_batch_size": 2}}
BUILD_ID = slice(16, 48)  # Pyodide 314's snapshot header: magic, offset, length, 0, build id


def shipped() -> tuple[dict[str, Any], bytes]:
    manifest = json.loads((PYODIDE / "snapshot.json").read_text())
    return manifest, gzip.decompress((PYODIDE / manifest["file"]).read_bytes())


def serve_instead(calc: Calculator, name: str, body: bytes) -> None:
    """`vendor/pyodide/<name>` answered with `body` (the worker's requests go through the
    context's routes; the last one registered is asked first)."""
    calc.page.context.route(f"**/vendor/pyodide/{name}", lambda r: r.fulfill(body=body))


def test_cold_visit_starts_from_the_snapshot_with_the_results_of_a_normal_start(
        calculator: Calculator, browser: Any, base_url: str) -> None:
    said = python_start_messages(calculator)
    calculator.open(SCENARIO)
    from_snapshot = calculator.report()
    assert any("started from the shipped snapshot" in m for m in said), said
    assert not any("afresh" in m for m in said), said

    normal = Calculator(browser.new_context().new_page(), base_url)
    normal.watch(normal.page.context, base_url)
    serve_instead(normal, *_another_version())
    said_normal = python_start_messages(normal)
    normal.open(SCENARIO)
    assert any("started afresh" in m for m in said_normal), said_normal
    assert normal.report() == from_snapshot
    normal.page.context.close()
    normal.assert_clean()

    calculator.field("training.seq_len").fill("2048")  # and the restored interpreter keeps computing
    scenario = from_snapshot["scenario"]
    shorter = {**scenario, "training": {**scenario["training"], "seq_len": 2048}}
    assert calculator.wait_report_for(shorter)["peak_bytes"] < from_snapshot["peak_bytes"]


def _another_build() -> tuple[str, bytes]:
    manifest, raw = shipped()
    other = bytearray(raw)
    other[BUILD_ID] = bytes(b ^ 0xFF for b in other[BUILD_ID])
    return manifest["file"], gzip.compress(bytes(other), compresslevel=1)


def _another_version() -> tuple[str, bytes]:
    return "snapshot.json", json.dumps({**shipped()[0], "pyodide": "0.1.0"}).encode()


def _truncated() -> tuple[str, bytes]:
    manifest, raw = shipped()
    return manifest["file"], gzip.compress(raw[: len(raw) // 2], compresslevel=1)


def _too_long() -> tuple[str, bytes]:
    manifest, raw = shipped()
    return manifest["file"], gzip.compress(raw + bytes(4096), compresslevel=1)


def _not_gzip() -> tuple[str, bytes]:
    return shipped()[0]["file"], b"\0" * 4096


@pytest.mark.parametrize(("damage", "reason"), [
    (_another_build, "build id mismatch"),
    (_another_version, "made for Pyodide 0.1.0"),
    (_truncated, "the manifest says"),
    (_too_long, "longer than the manifest says"),
    (_not_gzip, "the manifest says"),
])
def test_a_snapshot_that_does_not_match_is_refused_and_python_starts_normally(
        calculator: Calculator, damage: Any, reason: str) -> None:
    serve_instead(calculator, *damage())
    said = python_start_messages(calculator)
    calculator.open(SCENARIO)
    assert calculator.report()["scenario"]["model"] == SCENARIO["model"]
    refused = [m for m in said if "the shipped snapshot could not be used" in m]
    assert refused and reason in refused[0], said
    assert any("started afresh" in m for m in said), said
