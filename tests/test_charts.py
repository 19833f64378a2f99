"""calc.charts: every mark of a chart is the library's number, and the SVG is well formed."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import Any

import pytest

from calc import estimate, gpus
from calc.charts import (
    STEP_ORDER,
    Point,
    charts,
    memory_sweep,
    phase_timeline,
    scatter,
)
from calc.operations import answer
from calc.peak import MOMENTS, PARTS

SVG = "{http://www.w3.org/2000/svg}"
SCENARIOS = [
    {"model": "llama-3.1-8b", "training": {"seq_len": 4096, "activation_checkpointing": "full"},
     "parallelism": {"dp": 8, "zero": 3}},
    {"model": "gpt2", "training": {"seq_len": 1024, "micro_batch_size": 3}, "gpu": "a100-40gb"},
    {"model": "llama-3.1-8b", "training": {"seq_len": 8192},
     "parallelism": {"tp": 4, "sequence_parallel": True, "cp": 2}, "gpu": "a100-40gb"},
]


def marks(svg: str, tag: str) -> list[ET.Element]:
    return [el for el in ET.fromstring(svg).iter(SVG + tag) if "data-bytes" in el.attrib]


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("field", ["training.micro_batch_size", "training.seq_len"])
def test_sweep_points_are_the_estimates_at_each_value(scenario: dict[str, Any], field: str) -> None:
    chart = memory_sweep(scenario, field)  # type: ignore[arg-type]
    group, name = field.split(".")
    circles = marks(chart.svg(), "circle")
    assert len(circles) == len(chart.series[0].points) >= 3
    for el in circles:
        x = int(el.get("data-x", ""))
        changed = {**scenario, group: {**scenario.get(group, {}), name: x}}
        assert int(el.get("data-bytes", "")) == estimate(changed).device_bytes
    own = estimate(scenario).scenario.training
    assert chart.current_x == getattr(own, name)
    assert getattr(own, name) in [p.x for p in chart.series[0].points]


def test_sequence_sweep_keeps_to_lengths_the_parallelism_allows() -> None:
    """tp=4 with sequence parallelism and cp=2: every length is a multiple of 8."""
    chart = memory_sweep(SCENARIOS[2], "training.seq_len")
    assert all(p.x % 8 == 0 for p in chart.series[0].points)


def test_sweep_stops_after_the_first_value_beyond_every_gpu() -> None:
    largest = max(g.usable_bytes for g in gpus().values())
    points = memory_sweep(SCENARIOS[0], "training.seq_len").series[0].points
    assert all(p.bytes <= largest for p in points[:-1])


def test_every_gpu_preset_is_a_capacity_line_and_the_current_one_is_marked() -> None:
    chart = memory_sweep(SCENARIOS[1], "training.micro_batch_size")
    assert {lv.key: lv.bytes for lv in chart.levels} == {
        g.id: g.usable_bytes for g in gpus().values()}
    drawn = [el for el in ET.fromstring(chart.svg()).iter(SVG + "g")
             if "chart-level" in el.get("class", "")]
    top = max(p.bytes for p in chart.series[0].points)
    assert {el.get("data-gpu") for el in drawn} >= {lv.key for lv in chart.levels
                                                    if lv.bytes <= top}
    current = [el for el in drawn if "chart-level--current" in el.get("class", "")]
    assert [el.get("data-gpu") for el in current] == ["a100-40gb"]


def test_step_order_names_every_moment_once() -> None:
    assert sorted(STEP_ORDER) == sorted(MOMENTS)


def test_every_part_of_every_moment_is_named_for_the_formula_page() -> None:
    """The formula reference names each part of each moment (its symbol, what it holds): a
    moment with a part PARTS does not know breaks the site's build."""
    unknown = {(name, p) for name, kind in MOMENTS.items() for p in kind.parts if p not in PARTS}
    assert not unknown


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_timeline_marks_the_reports_peak_moment(scenario: dict[str, Any]) -> None:
    e = estimate(scenario)
    t = phase_timeline(e)
    peak = [b for b in t.bars if b.peak]
    assert [b.moment for b in peak] == [e.peak_moment]
    assert peak[0].bytes == e.peak_bytes and peak[0].components == e.components
    assert all(b.bytes <= e.peak_bytes for b in t.bars)
    bars = [el for el in marks(t.svg(), "g") if "data-moment" in el.attrib]
    assert [el.get("data-moment") for el in bars] == [b.moment for b in t.bars]
    for el, bar in zip(bars, t.bars, strict=True):
        parts = [int(r.get("data-bytes", "")) for r in el.iter(SVG + "rect")]
        assert sum(parts) == int(el.get("data-bytes", "")) == bar.bytes


def test_scatter_keeps_a_clipped_points_true_value() -> None:
    gib = 1024**3
    chart = scatter("t", "test", [("ours", "calc", [Point(10 * gib, 11 * gib, "a")]),
                                  ("theirs", "other", [Point(10 * gib, 90 * gib, "b")])])
    circles = marks(chart.svg(), "circle")
    assert [int(c.get("data-bytes", "")) for c in circles] == [11 * gib, 90 * gib]
    assert [c.get("class") for c in circles] == [None, "chart-clipped"]


def test_the_charts_operation_answers_the_page_and_names_a_bad_field() -> None:
    """The page's answer is what charts.mjs places, each chart's id and SVG, nothing more."""
    good = json.loads(answer("charts", json.dumps({"scenario": SCENARIOS[1]})))
    drawn = charts(SCENARIOS[1])
    assert good == {"ok": True, "charts": [{"id": c.id, "svg": c.svg()} for c in drawn]}
    bad = json.loads(answer("charts", json.dumps({"scenario": {"model": "gpt2", "training": {
        "micro_batch_size": 0}}})))
    assert bad["ok"] is False and bad["field"] == "training.micro_batch_size"
