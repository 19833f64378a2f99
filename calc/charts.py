"""Charts of the estimator's numbers, drawn as plain SVG text.

Why SVG written here rather than a charting library: the same code draws a chart at build time
(CPython, in the docs) and in the browser (Pyodide, in the calculator's worker), so the picture
cannot differ from the numbers; it needs no new dependency, no script in the page and no style
attribute (the site's Content-Security-Policy forbids them: colours come from classes, in
site/assets/charts.css). Every mark carries its number as a data attribute (`data-bytes`,
`data-x`, `data-gpu`), so a test reads the picture's data back and compares it to the library.

- `memory_sweep`: device memory against the micro-batch or the sequence length, with each
  GPU preset's usable memory as a level line (where the scenario stops fitting on that card).
- `phase_timeline`: the step's moments in the order they happen, each a stacked bar of
  the components alive then, the peak marked.
- `scatter`: predicted against measured, with the line where they are equal.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from .estimate import COMPONENTS, Estimate, estimate
from .formatting import COMPONENT_LABELS
from .operations import SCENARIO_HELP, Operation, Request
from .peak import stage_peak
from .presets import gpus
from .scenario import Scenario, ScenarioError

GiB = 1024**3
W, H = 440, 260  # the viewBox; the page scales it to the column's width
LEFT, RIGHT, TOP, BOTTOM = 44, 12, 12, 40  # room for the axes' labels
LEGEND_COLUMNS = 3
TIMELINE_NAMES = 90  # the timeline's extra height: its moments' names, rotated, and phases'
LABEL_GAP = 11  # least vertical distance, in viewBox units, between two level labels

SweepField = Literal["training.micro_batch_size", "training.seq_len"]
SWEEP_LABELS: dict[SweepField, str] = {"training.micro_batch_size": "micro-batch size",
                                       "training.seq_len": "sequence length (tokens)"}
MAX_SWEEP_MICRO_BATCH = 256
FIRST_SEQ_LEN = 256

# calc.peak.MOMENTS in the order they happen in a step (MOMENTS is in the order candidates are
# compared): the forward's last layer, its loss, the head's backward, the layers' backward from
# the last to the first, the end of the backward, the optimizer step. A test keeps it complete.
STEP_ORDER = ("forward.fsdp_start", "forward.experts_router", "forward.last_layer",
              "forward.prefetch_copy", "forward.final_norm",
              "forward.experts_combine", "forward.fsdp_prefetch", "forward.head_matmul",
              "forward.loss",
              "backward.loss_grad", "backward.head_matmul", "backward.head_weight", "backward.head_norm",
              "backward.offload_norm", "backward.offload_reduce", "backward.fsdp_prefetch",
              "backward.last_layer", "backward.offload_layer_norm",
              "backward.layer_reduce", "backward.experts_fsdp", "backward.below_top",
              "backward.below_top_late", "backward.recomputed_layer",
              "backward.experts_partitioned", "backward.experts_accumulating",
              "backward.experts_offload",
              "backward.experts_combine", "backward.experts", "backward.experts_softmax",
              "backward.experts_reduce",
              "backward.first_layer", "backward.input_norm", "backward.weight_pass",
              "backward.first_layer_late",
              "backward.first_reduce", "backward.fsdp_root_redistribute", "backward.fsdp_root",
              "backward.embedding", "backward.offload_clone",
              "backward.offload_embedding_norm",
              "backward.deepspeed_partition", "backward.weight_copies",
              "backward.fsdp_stage_reduce", "optimizer_step")


def _num(v: float) -> str:
    return f"{v:.1f}".removesuffix(".0")


def _exact(x: float) -> str:
    """A data attribute's number, whole numbers in full (bytes: 2458171392, not 2.45817e+09)."""
    return str(int(x)) if float(x).is_integer() else repr(x)


def _nice_step(span: float, ticks: int = 5) -> float:
    """A round step (1, 2 or 5 x 10^k) giving about `ticks` divisions of `span`."""
    raw = span / ticks
    mag: float = 10.0 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)


def _gib_label(b: float) -> str:
    return f"{b / GiB:g}"


@dataclass(frozen=True, slots=True)
class Point:
    x: float
    bytes: int
    label: str  # the <title>: what the point is, in words


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    key: str  # the CSS class suffix (chart-series--KEY) and the data-series attribute
    points: tuple[Point, ...]
    joined: bool = True  # a line through the points, or markers only


@dataclass(frozen=True, slots=True)
class Level:
    """A horizontal line: a GPU's usable memory."""

    key: str  # the GPU preset id
    label: str
    bytes: int
    current: bool = False


@dataclass(frozen=True, slots=True)
class XYChart:
    """Points against an x axis (log2 or bytes), bytes upward, with level lines."""

    id: str
    title: str
    x_label: str
    y_label: str
    series: tuple[Series, ...]
    levels: tuple[Level, ...] = ()
    x_axis: Literal["log2", "bytes"] = "log2"
    diagonal: bool = False  # the line y = x (a scatter of predicted against measured)
    y_max: int | None = None  # points above it are drawn at the top, marked clipped
    current_x: float | None = None  # the scenario's own value, marked

    def svg(self) -> str:
        pts = [p for s in self.series for p in s.points]
        xs = [p.x for p in pts]
        top = self.y_max or max(p.bytes for p in pts)
        if self.x_axis == "bytes":
            x_lo, x_hi = 0.0, max(xs) * 1.05
            if self.diagonal:
                top = max(top, int(x_hi))
        else:
            x_lo, x_hi = math.log2(min(xs)), math.log2(max(xs))
        y_step = _nice_step(top / GiB) * GiB
        y_hi = math.ceil(top * 1.04 / y_step) * y_step
        pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

        def px(x: float) -> float:
            v = math.log2(x) if self.x_axis == "log2" else x
            return LEFT + pw * ((v - x_lo) / (x_hi - x_lo) if x_hi > x_lo else 0.5)

        def py(b: float) -> float:
            return TOP + ph * (1 - min(b, y_hi) / y_hi)

        out = [_open(self.id, self.title)]
        out += _y_axis(y_hi, y_step, py, self.y_label)
        if self.x_axis == "log2":
            ticks = sorted(set(xs))
            out += [_x_tick(px(v), f"{v:g}" if v < 1024 else f"{v / 1024:g}K") for v in ticks]
        else:
            step = _nice_step(x_hi / GiB) * GiB
            out += [_x_tick(px(v * step), _gib_label(v * step))
                    for v in range(int(x_hi // step) + 1)]
        out.append(f'<text class="chart-axis-label" x="{_num(LEFT + pw / 2)}" y="{H - 4}" '
                   f'text-anchor="middle">{html.escape(self.x_label)}</text>')
        if self.diagonal:
            d = min(x_hi, y_hi)
            out.append(f'<line class="chart-diagonal" x1="{_num(px(0))}" y1="{_num(py(0))}" '
                       f'x2="{_num(px(d))}" y2="{_num(py(d))}"><title>predicted = measured'
                       '</title></line>')
        out += _levels(self.levels, y_hi, py)
        if self.current_x is not None:
            x = _num(px(self.current_x))
            out.append(f'<line class="chart-current" x1="{x}" y1="{TOP}" x2="{x}" '
                       f'y2="{TOP + ph}" data-x="{_exact(self.current_x)}"><title>this scenario'
                       '</title></line>')
        for s in self.series:
            out.append(f'<g class="chart-series chart-series--{s.key}" data-series="{s.key}">'
                       f'<title>{html.escape(s.name)}</title>')
            if s.joined and len(s.points) > 1:
                path = " ".join(f"{_num(px(p.x))},{_num(py(p.bytes))}" for p in s.points)
                out.append(f'<polyline points="{path}"/>')
            for p in s.points:
                clipped = ' class="chart-clipped"' if p.bytes > y_hi else ""
                out.append(f'<circle{clipped} cx="{_num(px(p.x))}" cy="{_num(py(p.bytes))}" r="3"'
                           f' data-x="{_exact(p.x)}" data-bytes="{p.bytes}">'
                           f'<title>{html.escape(p.label)}</title></circle>')
            out.append("</g>")
        out.append("</svg>")
        return "".join(out)


def _open(chart_id: str, title: str, height: int = H) -> str:
    return (f'<svg class="chart" id="chart-{chart_id}" data-chart="{chart_id}" '
            f'viewBox="0 0 {W} {height}" role="img" aria-label="{html.escape(title)}" '
            f'xmlns="http://www.w3.org/2000/svg"><title>{html.escape(title)}</title>')


def _y_axis(y_hi: float, y_step: float, py: Any, label: str) -> list[str]:
    middle = _num((py(0) + py(y_hi)) / 2)
    out = []
    for i in range(round(y_hi / y_step) + 1):
        y = _num(py(i * y_step))
        out.append(f'<line class="chart-grid" x1="{LEFT}" y1="{y}" x2="{W - RIGHT}" y2="{y}"/>'
                   f'<text class="chart-tick" x="{LEFT - 4}" y="{y}" text-anchor="end" '
                   f'dominant-baseline="middle">{_gib_label(i * y_step)}</text>')
    out.append(f'<text class="chart-axis-label" x="10" y="{middle}" text-anchor="middle" '
               f'transform="rotate(-90 10 {middle})">{html.escape(label)}</text>')
    return out


def _x_tick(x: float, text: str) -> str:
    return (f'<text class="chart-tick" x="{_num(x)}" y="{H - BOTTOM + 14}" '
            f'text-anchor="middle">{html.escape(text)}</text>')


def _levels(levels: Sequence[Level], y_hi: float, py: Any) -> list[str]:
    """Each level within the plot as a line; labels where they do not crowd (the current GPU's
    first), drawn after every line so no line crosses them; every line named in its <title>."""
    shown = [lv for lv in levels if lv.bytes <= y_hi]
    labelled: list[float] = []
    lines, labels = [], []
    for lv in sorted(shown, key=lambda lv: (not lv.current, lv.bytes)):
        y = py(lv.bytes)
        current = " chart-level--current" if lv.current else ""
        lines.append(f'<g class="chart-level{current}" data-gpu="{html.escape(lv.key)}" '
                     f'data-bytes="{lv.bytes}"><title>{html.escape(lv.label)}</title>'
                     f'<line x1="{LEFT}" y1="{_num(y)}" x2="{W - RIGHT}" y2="{_num(y)}"/></g>')
        if all(abs(y - other) >= LABEL_GAP for other in labelled):
            labelled.append(y)
            mark = " chart-label--current" if lv.current else ""
            labels.append(f'<text class="chart-label{mark}" x="{W - RIGHT - 2}" '
                          f'y="{_num(y - 3)}" text-anchor="end">{html.escape(lv.label)}</text>')
    return lines + labels


# ---------------------------------------------------------------------------------------------
# memory against the micro-batch or the sequence length
# ---------------------------------------------------------------------------------------------

def _sweep_values(s: Scenario, field: SweepField, max_seq: int) -> list[int]:
    """Powers of two (the scenario's own value added): micro-batches 1..256; sequence lengths
    from 256 to the model's max_position_embeddings, in multiples of what the parallelism
    needs (cp; tp x cp with sequence parallelism)."""
    t, p = s.training, s.parallelism
    if field == "training.micro_batch_size":
        own, values = t.micro_batch_size, [1 << i for i in range(9)]
    else:
        step = p.tp * p.cp if p.sequence_parallel else p.cp
        own = t.seq_len
        values = [-(-(FIRST_SEQ_LEN << i) // step) * step
                  for i in range(20) if FIRST_SEQ_LEN << i <= max(max_seq, FIRST_SEQ_LEN)]
    return sorted({*values, own})


def memory_sweep(scenario: Scenario | dict[str, Any] | Estimate, field: SweepField) -> XYChart:
    """Device memory of `scenario` as `field` doubles, and every GPU preset's usable memory.

    The sweep stops after the first value beyond the largest preset (no card holds more).

        >>> c = memory_sweep({"model": "gpt2", "training": {"seq_len": 1024}},
        ...                  "training.micro_batch_size")
        >>> [p.x for p in c.series[0].points][:3]
        [1, 2, 4]
    """
    base = scenario if isinstance(scenario, Estimate) else estimate(scenario)
    s = base.scenario
    largest = max(g.usable_bytes for g in gpus().values())
    name = field.split(".")[1]
    own = getattr(s.training, name)
    points = []
    for v in _sweep_values(s, field, base.resolved.arch.max_position_embeddings):
        if v == own:
            e = base
        else:
            data = s.model_dump(mode="json")
            data["training"][name] = v
            try:
                e = estimate(data)
            except ScenarioError:  # not a valid value for this scenario: left out of the line
                continue
        points.append(Point(v, e.device_bytes, f"{name} {v}: {e.device_bytes / GiB:.2f} GiB"))
        if e.device_bytes > largest:
            break
    levels = tuple(Level(g.id, g.name, g.usable_bytes, g.id == base.resolved.gpu.id)
                   for g in gpus().values())
    label = SWEEP_LABELS[field]
    return XYChart(f"sweep-{name.replace('_', '-')}", f"Device memory per GPU against the {label}",
                   label, "GiB per GPU", (Series("device memory", "calc", tuple(points)),),
                   levels, current_x=getattr(s.training, name))


# ---------------------------------------------------------------------------------------------
# the step's moments
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Bar:
    moment: str  # calc.peak.MOMENTS' name
    components: dict[str, int]
    peak: bool

    @property
    def bytes(self) -> int:
        return sum(self.components.values())


@dataclass(frozen=True, slots=True)
class Timeline:
    """The allocated memory of each moment of the step, as stacked bars by component."""

    title: str
    bars: tuple[Bar, ...]
    gpu: Level

    id = "timeline"

    def svg(self) -> str:
        top = max(max(b.bytes for b in self.bars), self.gpu.bytes)
        y_step = _nice_step(top / GiB) * GiB
        y_hi = math.ceil(top * 1.04 / y_step) * y_step
        pw, ph = W - LEFT - RIGHT, H - TOP - 20  # below: the moments' and phases' names

        def py(b: float) -> float:
            return TOP + ph * (1 - b / y_hi)

        drawn = [c for c in COMPONENTS if any(b.components[c] for b in self.bars)]
        legend_rows = -(-len(drawn) // LEGEND_COLUMNS)
        out = [_open(self.id, self.title, H + TIMELINE_NAMES + 16 * legend_rows)]
        for i, comp in enumerate(drawn):  # the legend, under the phases' names
            x = LEFT + (i % LEGEND_COLUMNS) * (W - LEFT) / LEGEND_COLUMNS
            y = H + TIMELINE_NAMES + 16 * (i // LEGEND_COLUMNS)
            out.append(f'<g class="chart-legend-item"><rect class="chart-part chart-part--{comp}" '
                       f'x="{_num(x)}" y="{y}" width="10" height="10"/><text class="chart-tick" '
                       f'x="{_num(x + 14)}" y="{y + 9}">{html.escape(COMPONENT_LABELS[comp])}'
                       '</text></g>')
        out += _y_axis(y_hi, y_step, py, "GiB allocated")
        slot = pw / len(self.bars)
        phases = [b.moment.partition(".")[0] for b in self.bars]
        for phase in dict.fromkeys(phases):  # each phase's name under its bars, a rule between
            first, n = phases.index(phase), phases.count(phase)
            x0, x1 = LEFT + slot * first, LEFT + slot * (first + n)
            last = x1 >= W - RIGHT - 1  # the last phase's name ends at the edge
            out.append(f'<g class="chart-phase" data-phase="{phase}"><line x1="{_num(x0 + 2)}" '
                       f'y1="{H + TIMELINE_NAMES - 18}" x2="{_num(x1 - 2)}" '
                       f'y2="{H + TIMELINE_NAMES - 18}"/><text x="{_num(x1 if last else (x0 + x1) / 2)}"'
                       f' y="{H + TIMELINE_NAMES - 5}" text-anchor="{"end" if last else "middle"}">'
                       f'{phase.replace("_", " ")}</text></g>')
        for i, bar in enumerate(self.bars):
            x = LEFT + slot * i + slot * 0.15
            cls = "chart-bar chart-bar--peak" if bar.peak else "chart-bar"
            out.append(f'<g class="{cls}" data-moment="{bar.moment}" data-bytes="{bar.bytes}">'
                       f'<title>{bar.moment}: {bar.bytes / GiB:.2f} GiB'
                       f'{" (the peak)" if bar.peak else ""}</title>')
            below = 0
            for comp, b in bar.components.items():
                if b:
                    out.append(f'<rect class="chart-part chart-part--{comp}" x="{_num(x)}" '
                               f'y="{_num(py(below + b))}" width="{_num(slot * 0.7)}" '
                               f'height="{_num(py(below) - py(below + b))}" data-component='
                               f'"{comp}" data-bytes="{b}"/>')
                    below += b
            phase, _, what = bar.moment.partition(".")
            cx, ty = _num(x + slot * 0.35), _num(TOP + ph + 10)
            out.append(f'<text class="chart-tick" x="{cx}" y="{ty}" text-anchor="end" '
                       f'transform="rotate(-40 {cx} {ty})">'
                       f'{html.escape((what or "step").replace("_", " "))}</text>')
            if bar.peak:
                out.append(f'<text class="chart-peak" x="{cx}" y="{_num(py(bar.bytes) - 4)}" '
                           'text-anchor="middle">peak</text>')
            out.append("</g>")
        out += _levels((self.gpu,), y_hi, py)
        out.append("</svg>")
        return "".join(out)


def phase_timeline(scenario: Scenario | dict[str, Any] | Estimate) -> Timeline:
    """Each moment of the step on the rank with the peak, in step order.

        >>> t = phase_timeline({"model": "gpt2", "training": {"seq_len": 1024}})
        >>> [b.moment for b in t.bars if b.peak] == [estimate(
        ...     {"model": "gpt2", "training": {"seq_len": 1024}}).peak_moment]
        True
    """
    e = scenario if isinstance(scenario, Estimate) else estimate(scenario)
    moments = {m.name: m for m in stage_peak(e.setup, e.stage.stage, detail=True).moments}
    bars = tuple(Bar(name, moments[name].components, name == e.peak_moment)
                 for name in STEP_ORDER if name in moments)
    g = e.resolved.gpu
    return Timeline("Allocated memory through the step (overheads excluded)", bars,
                    Level(g.id, g.name, g.usable_bytes, True))


# ---------------------------------------------------------------------------------------------
# predicted against measured
# ---------------------------------------------------------------------------------------------

def scatter(chart_id: str, title: str, series: Iterable[tuple[str, str, Sequence[Point]]],
            clip: float = 2.0) -> XYChart:
    """Predicted (up) against measured (across) bytes, one series per predictor, with the line
    where they are equal; a prediction above `clip` times the largest measurement is drawn at
    the top, its true value kept in `data-bytes`."""
    drawn = tuple(Series(name, key, tuple(points), joined=False) for name, key, points in series)
    measured = max(p.x for s in drawn for p in s.points)
    return XYChart(chart_id, title, "measured peak (GiB)", "predicted (GiB)", drawn,
                   x_axis="bytes", diagonal=True, y_max=int(clip * measured))


def charts(scenario: Scenario | dict[str, Any]) -> list[XYChart | Timeline]:
    """The calculator's charts of a scenario: both sweeps and the step's timeline."""
    e = estimate(scenario)
    return [memory_sweep(e, "training.micro_batch_size"), memory_sweep(e, "training.seq_len"),
            phase_timeline(e)]


# ---------------------------------------------------------------------------------------------
# the operation: the calculator's charts (no command: a picture is the page's)
# ---------------------------------------------------------------------------------------------

class ChartsRequest(Request):
    scenario: dict[str, Any] = Field(description=SCENARIO_HELP)


def _drawn(result: list[XYChart | Timeline], request: ChartsRequest) -> dict[str, Any]:
    """What the page places (site/calculator/charts.mjs): each chart's id and SVG. The numbers
    travel inside the SVG, as its marks' data attributes."""
    return {"charts": [{"id": c.id, "svg": c.svg()} for c in result]}


OPERATIONS: tuple[Operation[ChartsRequest, list[XYChart | Timeline]], ...] = (
    Operation("charts", "memory against micro-batch and sequence length, and through the step",
              ChartsRequest, run=lambda q: charts(q.scenario), data=_drawn, cli=False),
)

__all__ = [
    "STEP_ORDER",
    "Bar",
    "ChartsRequest",
    "Level",
    "Point",
    "Series",
    "Timeline",
    "XYChart",
    "charts",
    "memory_sweep",
    "phase_timeline",
    "scatter",
]
