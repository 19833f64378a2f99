"""Show the math: the estimate's own terms, with the scenario's numbers in their symbols' place.

    >>> from calc.explain import explain
    >>> steps = {s.id: s for s in explain({"model": "gpt2", "training": {"seq_len": 1024}}).steps}
    >>> steps["params.model"].value, steps["params.model"].report
    (124439808, 'param_count')

Each `Step` renders one term the estimator computed (`calc.formula.Term`), or a sum or a
maximum of them (the peak moment's parts, the moments, the phases): the formula in LaTeX
(`formula`), the same with the numbers in place ending in its result (`substituted`: always
``... = `` + `result`), the value, where the report shows it (`report`, a dotted path into
``estimate(...).as_dict()``, split on "." only) and its source. Nothing here computes bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from .baselines import korthikanti
from .estimate import Estimate, estimate
from .formula import Number, Part, Term, Unit, number
from .peak import COMPONENTS, MOMENTS, PARTS, PHASES, Moment, StagePeak, stage_peak
from .scenario import Scenario, parse_scenario
from .sources import TRACED_PEAK

GiB = 1024**3
_BOOKED = {*COMPONENTS, "host"}  # breakdown paths start with these


@dataclass(frozen=True, slots=True)
class Step:
    """One formula, symbolic and with the scenario's numbers, and its result."""

    id: str
    title: str
    formula: str  # LaTeX, symbolic (no $ delimiters)
    substituted: str  # LaTeX, the numbers in place, ending "= " + result(value, unit)
    value: int
    unit: Unit
    report: str | None  # dotted path of the same number in estimate(...).as_dict(), or None
    source: str
    note: str = ""
    symbols: Mapping[str, int | float | str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Explanation:
    scenario: Scenario
    steps: tuple[Step, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario.model_dump(mode="json"),
                "steps": [step.as_dict() for step in self.steps]}


def result(value: int, unit: Unit) -> str:
    """How a step's value is written at the end of its `substituted` (after ``= ``)."""
    if unit == "parameters":
        return number(value)
    gib = f" \\approx {value / GiB:.2f}\\text{{ GiB}}" if value >= GiB // 100 else ""
    return f"{number(value)}\\text{{ B}}{gib}"


def _escape(text: str) -> str:
    return text.replace("_", "\\_")


def _label(key: str) -> str:
    return _escape(key.rsplit("/", 1)[-1])


def _times(n: int) -> str:
    return "" if n == 1 else f"{n} \\cdot "


def _lhs(key: str, unit: Unit) -> str:
    """The quantity a term computes, named by its breakdown path (`M_{gradients/weights}`)."""
    return f"{'P' if unit == 'parameters' else 'M'}_\\text{{{_escape(key)}}}"


class _Renderer:
    def __init__(self, e: Estimate, detail: StagePeak) -> None:
        self.e, self.detail = e, detail
        self.report = e.as_dict()
        self.steps: list[Step] = []
        self.seen: set[tuple[str, tuple[Number, ...]]] = set()  # each term is shown once
        self.ids: dict[str, int] = {}

    def where(self, term: Term) -> str | None:
        """The report path showing this term's bytes, if the report shows them: its key in the
        peak's breakdown, the host's or the overheads, or its component at a phase's worst
        moment where nothing else is booked there."""
        key, value = term.key, term.bytes
        for section in ("breakdown", "host_breakdown", "overhead"):
            if self.report[section].get(key) == value:
                return f"{section}.{key}"
        component = key.split("/", 1)[0]
        for phase, moment in self.detail.phases.items():
            shown = self.report["phases"][phase]["components"].get(component)
            if shown == value and any(p is term or (isinstance(p, Part) and (term, 1) in p.items)
                                      for p in moment.parts):
                return f"phases.{phase}.components.{component}"
        return None

    def id(self, base: str) -> str:
        """`base`, or `base.2`, `base.3`... where a formula is shown with other values."""
        n = self.ids[base] = self.ids.get(base, 0) + 1
        return base if n == 1 else f"{base}.{n}"

    def term(self, scope: str | None, term: Term | None, report: str | None = None,
             note: str = "", times: int = 1, id: str | None = None) -> None:
        """A term's step, unless it is None, adds nothing, or was shown already."""
        if term is None or not term.bytes or (term.id, term.values) in self.seen:
            return
        self.seen.add((term.id, term.values))
        f = term.formula
        lhs = _lhs(f.key, f.unit)
        report = report or self.where(term)
        extra = [f.note, note] + ([f"{times} of these per micro-batch"] if times > 1 else [])
        if report is None:
            extra.append(f"not in the report on its own: it is booked under {f.key} where it "
                         "is alive (the breakdown sums those)" if f.key.split("/")[0] in _BOOKED
                         else "an intermediate result, not in the report")
        name, _, booked = f.id.partition("@")  # a twin booked elsewhere: say where
        if booked:
            name += "_on_host" if booked.startswith("host/") else f"_in_{booked.rsplit('/', 1)[1]}"
        if scope:  # the formula's own module prefix gives way to the layer kind
            name = f"{scope}.{name.split('.', 1)[1]}"
        self.steps.append(Step(
            self.id(id or name), f.title, f"{lhs} = {f.tex}",
            f"{lhs} = {term.substituted} = {result(term.bytes, f.unit)}", term.bytes, f.unit,
            report, str(f.source), "; ".join(n for n in extra if n), term.symbols))

    def sum(self, id: str, title: str, lhs: str, items: Iterable[tuple[str, int, int]],
            total: int, report: str | None, note: str) -> None:
        """A step adding up labelled (label, times, bytes) items."""
        shown = [(label, times, b) for label, times, b in items if times and b]
        terms = [f"\\underbrace{{{_times(times)}{number(b)}}}_\\text{{{label}}}"
                 for label, times, b in shown]
        self.steps.append(Step(
            id, title, f"{lhs} = \\sum_i n_i\\,M_i", f"{lhs} = {' + '.join(terms) or '0'} = "
            f"{result(total, 'bytes')}", total, "bytes", report, str(TRACED_PEAK), note,
            {label.replace("\\_", "_"): b for label, _, b in shown}))

    def maximum(self, id: str, title: str, lhs: str, options: list[tuple[str, int]],
                best: int, report: str | None, note: str) -> None:
        names = ", ".join(f"M_\\text{{{_escape(name)}}}" for name, _ in options)
        values = ",\\ ".join(number(v) for _, v in options)
        self.steps.append(Step(
            id, title, f"{lhs} = \\max\\left({names}\\right)",
            f"{lhs} = \\max\\left({values}\\right) = {result(best, 'bytes')}", best, "bytes",
            report, str(TRACED_PEAK), note, dict(options)))


def explain(scenario: Scenario | dict[str, Any] | str) -> Explanation:
    """The estimate's terms for `scenario`, in the order the estimator applies them.

    Raises `calc.ScenarioError` for a bad scenario (as `calc.estimate` does)."""
    e = estimate(parse_scenario(scenario))
    x = e.setup
    sp = stage_peak(x, e.stage.stage, detail=True)  # the reported stage, every term kept
    ms, ly, r = sp.states, sp.layers, _Renderer(e, sp)
    assert ly is not None
    # parameters
    r.term(None, x.counts.dense_term, note="one dense decoder layer", id="params.dense_layer")
    r.term(None, x.counts.moe_term, note="one MoE decoder layer", id="params.moe_layer")
    r.term(None, x.counts.model, "param_count")
    if x.lora:
        r.term(None, e.trainable, "trainable_param_count")
    if x.tp > 1 or x.pp > 1 or x.ep > 1:
        r.term(None, ms.local.term, note=f"pipeline stage {sp.stage.index} of {x.pp}, "
               "the one with the higher peak")
    # model states
    for t in (*ms.parameters, ms.gradients, *ms.resident, *ms.optimizer_states,
              ms.step_gradients, *ms.host,
              ms.gathered_layer, ms.gathered_grads, ms.gathered_root, ms.root_grads, ms.ddp_buckets,
              ms.reduce_bucket, ms.step_temporary):
        r.term(None, t)
    # activations
    for name, act, count in ly.kinds:
        kind = f"{name}_layer"
        for t in act.saved:
            r.term(kind, t, times=act.saved.count(t))
        r.sum(f"{kind}.total", f"Activations one {name} layer saves (one micro-batch)",
              "A_\\text{layer}", ((_label(t.key), 1, t.bytes) for t in act.saved),
              act.total, None,
              f"{count} such layers on this GPU, {ly.checkpointed} checkpointed in all")
        for t in (act.forward_transient, act.backward_transient, act.checkpoint_input):
            r.term(kind, t)
    for t in ly.ends:
        r.term(None, t)
    # the step's moments
    peak = sp.peak
    for m in sp.moments:  # what only the moments hold (the loss, FSDP's and the step's buffers)
        for p in m.parts:
            for t in (t for t, _ in p.items) if isinstance(p, Part) else (p,) if p else ():
                r.term(None, t)
    _moments(r, sp.moments, peak)
    # beyond the tensors
    terms, reserved, device = e.beyond
    for t in terms:
        r.term(None, t)
    r.term(None, reserved, "reserved_bytes")
    r.term(None, device, "device_bytes")
    r.steps.append(Step(
        "gpu.usable", f"Against the GPU ({e.resolved.gpu.name})", "M_\\text{usable}",
        f"M_\\text{{usable}} = {number(e.usable_bytes)} = {result(e.usable_bytes, 'bytes')}",
        e.usable_bytes, "bytes", "usable_bytes",
        f"presets/gpus ({e.resolved.gpu.id}): {e.resolved.gpu.usable_bytes_source}",
        f"utilization M_device / M_usable = {100 * e.utilization:.1f}%: "
        f"{'fits' if e.fits else 'does not fit'}", {"u": round(e.utilization, 6)}))
    if ms.host:
        r.sum("host.total", "Offloaded to host (CPU) memory", "M_\\text{host}",
              ((_label(t.key), 1, t.bytes) for t in ms.host), e.host_bytes,
              "host_bytes", "not on the GPU: each part is above")
    r.term(None, korthikanti(x), note="not calc's estimate and not in the report: the "
           "published per-layer formula as other calculators use it; the accuracy page "
           "compares both with traced steps")
    return Explanation(e.scenario, tuple(r.steps))


def _moments(r: _Renderer, moments: tuple[Moment, ...], peak: Moment) -> None:
    """The peak moment's parts and total, each phase's worst moment, the peak."""
    kind = MOMENTS[peak.name]
    for name, p in zip(kind.parts, peak.parts, strict=True):
        if isinstance(p, Part):
            sym, what = PARTS[name]
            r.sum(f"peak.part.{name}", what[0].upper() + what[1:], sym,
                  ((_label(t.key), times, t.bytes) for t, times in p.items), p.bytes,
                  None, f"a part of the peak moment ({peak.name})")
    names = [(n, p) for n, p in zip(kind.parts, peak.parts, strict=True) if p is not None]
    symbols = [PARTS[n][0] for n, _ in names]
    r.steps.append(Step(
        "peak.moment", f"The peak moment, {peak.name}: {kind.what}",
        f"M_\\text{{{_escape(peak.name)}}} = {' + '.join(symbols) or '0'}",
        f"M_\\text{{{_escape(peak.name)}}} = "
        f"{' + '.join(number(p.bytes) for _, p in names) or '0'} = "
        f"{result(peak.bytes, 'bytes')}", peak.bytes, "bytes", "peak_bytes", str(TRACED_PEAK),
        "; ".join(f"{PARTS[n][0]}: {PARTS[n][1]}" for n, _ in names), {
            n: p.bytes for n, p in names}))
    for phase in PHASES:
        options = [(m.name, m.bytes) for m in moments if m.phase == phase]
        worst = max(options, key=lambda o: o[1])
        r.maximum(f"phase.{phase}", f"The {phase.replace('_', ' ')}: its worst moment",
                  f"M_\\text{{{_escape(phase)}}}", options, worst[1],
                  f"phases.{phase}.peak_bytes", f"the worst is {worst[0]}: "
                  + MOMENTS[worst[0]].what)
    phases = [(p, r.detail.phases[p].bytes) for p in PHASES]
    r.maximum("peak", f"The peak: the {peak.phase.replace('_', ' ')} ({peak.name})",
              "M_\\text{peak}", phases, peak.bytes, "peak_bytes",
              "the report's components and breakdown are this moment's")


__all__ = ["Explanation", "Step", "explain", "result"]
