"""One number format for the command line, the docs and the page: calc/formatting.py and its
JavaScript twin site/assets/format.mjs give the same text for the same table of values."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from calc import estimate, gpus, models
from calc import formatting as fmt

FORMAT_MJS = Path(__file__).resolve().parents[1] / "site" / "assets" / "format.mjs"
GiB = 1024**3

# (function, value): ties on exact binary values (0.125, 2.5) and values just below them
# (2.675 is 2.67499...) are where Python's format and JavaScript's toFixed could part.
CASES: list[tuple[str, float]] = [
    *[(name, b) for name in ("gib", "gib_number")
      for b in (0, 1, GiB, 23_987_965_952, 0.125 * GiB, 2.675 * GiB, 80 * GiB, 1536.5 * GiB,
                -3 * GiB)],
    *[("percent", x) for x in (0, 0.2793, 0.85, 1, 0.00049, 0.0005, 1.23456, -0.1)],
    *[("params", n) for n in (0, 999, 1_000, 124_439_808, 494_032_768, 1_235_814_400,
                              7_615_616_512, 8_030_261_248, 70_553_706_496, 671_026_419_200,
                              1_000_000_000_000, 999_600_000)],
    *[("tflops", x) for x in (1307.4, 2250, 362.05, 19.5, 989.4, 99.96, 0.5, 125, 0)],
    *[("count", n) for n in (0, 7, 4096, 32_768, 1_234_567.5, 2.5)],
    *[("fixed2", x) for x in (0.125, 2.675, -0.001, 1234.5, 0.005, 1.005)],
    *[("significant", x) for x in (0, 450, 46.875, 1024, 0.125, 2.675, 99.96, 12.5)],
]


def python_side(name: str, value: float) -> str:
    if name == "fixed2":
        return fmt.fixed(value, 2)
    return str(getattr(fmt, name)(value))


def javascript_side(cases: list[tuple[str, float]], names: list[str]) -> dict[str, Any]:
    script = f"""import("{FORMAT_MJS.as_uri()}").then((f) => {{
      const cases = {json.dumps(cases)};
      const js = {{ gib_number: "gibNumber" }};
      const call = ([name, v]) => (name === "fixed2" ? f.fixed(v, 2) : f[js[name] ?? name](v));
      const names = {json.dumps(names)};
      console.log(JSON.stringify({{ values: cases.map(call), fit: f.FIT_WORDS, phrases: f.FIT_PHRASES,
                                    sorted: [...names].sort(f.naturalCompare) }}));
    }});"""
    out = subprocess.run(["node", "-e", script], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def names() -> list[str]:
    return [m.name for m in models().values()] + [g.name for g in gpus().values()] + \
        list(models()) + ["Llama 2 70B", "Llama 2 13B", "Llama 2 7B", "a10", "A9", "x-1.5b", "x-0.5b"]


@pytest.fixture(scope="module")
def js(names: list[str]) -> dict[str, Any]:
    if shutil.which("node") is None:
        pytest.skip("node is not installed")
    return javascript_side(CASES, names)


def test_python_and_javascript_write_every_number_alike(js: dict[str, Any]) -> None:
    got = dict(zip([f"{n}({v!r})" for n, v in CASES], js["values"], strict=True))
    want = {f"{n}({v!r})": python_side(n, v) for n, v in CASES}
    assert got == want


def test_python_and_javascript_sort_names_alike(js: dict[str, Any], names: list[str]) -> None:
    assert js["sorted"] == sorted(names, key=fmt.natural_key)


def test_the_fit_words_are_the_same_and_cover_every_status(js: dict[str, Any]) -> None:
    assert js["fit"] == fmt.FIT_WORDS and js["phrases"] == fmt.FIT_PHRASES
    assert set(fmt.FIT_WORDS) == set(fmt.FIT_PHRASES) == {"fits", "tight", "does_not_fit"}


def test_the_issue_examples() -> None:
    """Issue 13: one format for parameter counts and TFLOPS, not 7.62 B beside 7.616 B."""
    assert [fmt.params(7_615_616_512), fmt.tflops(1307.4), fmt.tflops(362.05), fmt.tflops(2250)] \
        == ["7.62 B", "1,307", "362", "2,250"]
    assert fmt.percent(0.05) == "5.0%" and fmt.gib(0) == "0.00 GiB"


def test_presets_are_listed_in_natural_order() -> None:
    """`calc presets`, the docs and the page list Llama 2 7B, 13B, 70B in that order."""
    for table in (models(), gpus()):
        assert list(table) == sorted(table, key=fmt.natural_key)


def test_setup_line_states_the_layout_behind_the_number() -> None:
    e = estimate({"model": "llama-3.1-8b", "training": {"activation_checkpointing": "full"},
                  "parallelism": {"dp": 8, "zero": 3}})
    assert fmt.setup_line(e) == ("Meta Llama 3.1 8B · 8 × NVIDIA H100 SXM5 80GB: dp 8, ZeRO-3 · "
                                 "bf16 (amp) · full checkpointing · micro-batch 1 × 4,096 tokens")
    fields = [f for f, _, _ in fmt.setup_parts(e)]
    assert fields[:2] == ["model", "gpu"] and "training.seq_len" in fields


def test_setup_line_names_the_deepspeed_sizes_a_scenario_sets() -> None:
    """Each size the scenario sets, linked to its field, in the scenario's order; none where
    the defaults apply (the line above)."""
    from calc.scenario import ZERO_SIZES
    e = estimate({"model": "llama-3.1-8b", "training": {"mixed_precision": "master"},
                  "parallelism": {"dp": 8, "zero": 3, "stage3_max_reuse_distance": 10**8,
                                  "stage3_max_live_parameters": 10**8}})
    assert "ZeRO-3, max live 100,000,000, reuse distance 100,000,000 · " in fmt.setup_line(e)
    fields = [f for f, _, _ in fmt.setup_parts(e)]
    assert fields.index("parallelism.stage3_max_live_parameters") + 1 == \
        fields.index("parallelism.stage3_max_reuse_distance")
    assert tuple(fmt._SIZE_WORDS) == ZERO_SIZES


def test_a_count_that_rounds_to_a_thousand_is_one_of_the_next_unit() -> None:
    """Three significant figures of 999,885,952 are 1,000 M: shown as 1.00 B (Gemma 3 1B on
    the presets page read "1,000 M"); just below the rounding it stays in millions."""
    assert fmt.params(999_885_952) == "1.00 B"
    assert fmt.params(999_400_000) == "999 M"
    assert fmt.params(999_500) == "1.00 M"
