"""The operations: every user-facing tool declared once, and the registry of them.

An `Operation` is a name, a one-line help, a request model (pydantic: frozen,
``extra="forbid"``, every field described, with its default), the library call and the text
the command line prints. The command line (`calc.cli`), the browser worker
(``site/calculator/calc_worker.py``, through `answer`) and the CLI reference
(``tools/docs_reference.py``) are generated from the registry, so a default is decided once, in
the request model, and adding a tool is one declaration in its module plus its docs page.

    >>> import json
    >>> from calc.operations import answer, get
    >>> get("kv-cache").request(model="llama-3-8b", seq_len=8192).batch
    1
    >>> json.loads(answer("kv-cache", '{"model": "llama-3-8b", "seq_len": 8192}'))
    {'ok': True, 'kv_cache_bytes': 1073741824}

Each planning tool declares its operations at the end of its own module (``OPERATIONS``); the
registry names that module and imports it on first use, so the browser worker loads
`calc.plan` only when the page first asks for a planning answer. `estimate`, `presets`,
`explain`, the page's `architecture` (a pasted config.json read) and the live examples'
`report` (the estimate without the calculator's GPU cards) are declared here.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ._version import __version__
from .architecture import ConfigError, from_hf_config
from .errors import FieldError, rule
from .estimate import COMPONENTS, FIT_TARGET, Estimate, estimate
from .formatting import FIT_WORDS, params, percent, setup_line, setup_parts
from .formatting import GiB as GiB
from .formatting import gib as gib
from .presets import GpuPreset, ModelPreset, gpus, models
from .scenario import ScenarioError

if TYPE_CHECKING:
    from .explain import Explanation


# name -> the module that declares it (in its OPERATIONS), in the command line's order
DECLARED_IN: dict[str, str] = {
    "estimate": "calc.operations",
    "presets": "calc.operations",
    "max-batch": "calc.plan.fit",
    "max-seq": "calc.plan.fit",
    "recommend": "calc.plan.recommend",
    "compare": "calc.plan.compare",
    "cost": "calc.plan.cost",
    "export": "calc.plan.export",
    "kv-cache": "calc.plan.kv_cache",
    "advise": "calc.plan.advise",
    "import": "calc.plan.importers",
    "cheapest": "calc.plan.cheapest",
    "rl": "calc.plan.rl",
    "inference": "calc.plan.inference",
    "explain": "calc.operations",
    # the pages' own (no command): a pasted config.json, "Batch and speed", a live example's
    "architecture": "calc.operations",
    "report": "calc.operations",
    "batch-and-speed": "calc.plan.cost",
    "charts": "calc.charts",
    "gpus": "calc.plan.compare",  # the GPU comparison page's
}

SCENARIO_HELP = ("the scenario (calc's JSON: model, training, parallelism, gpu); on the command "
                 "line a file, or - for stdin, and the scenario flags")


class Request(BaseModel):
    """What an operation is asked: every field described, with its default where it has one.
    Strict: a count is an integer (not true, not "8"), a number finite."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class RequestError(FieldError):
    """A request that does not match its operation's model: `field` names the request field."""


@dataclass(frozen=True, slots=True)
class Cli:
    """How the command line offers a request field, where not as ``--field-name VALUE``.

    Put it in the field's ``Annotated[...]`` metadata."""

    flag: str | None = None  # the flag, where it is not the field's name (an earlier release's)
    argument: str | None = None  # a positional argument of this name instead of a flag
    file: bool = False  # the argument names a file (or - for stdin): its text is the value
    labels: str | None = None  # with `file`: the request field the files' names go into
    negate: bool = False  # a flag that sets this boolean field to False
    help: str | None = None  # the flag's help, where not the field's description (`negate`)
    count: bool = False  # a whole number that may be written 1e12
    comma: bool = False  # a list written as one comma-separated value


Q = TypeVar("Q", bound=Request)
R = TypeVar("R")


def json_text(data: Any) -> str:
    """JSON as `calc ... --json` prints it (and the page shows it)."""
    return json.dumps(data, indent=2)


def _as_dict(result: Any, request: Any) -> Any:
    return result.as_dict()


def _no_notes(result: Any) -> Sequence[str]:
    return ()


def _text_as_json(result: Any, request: Any) -> str:
    return json_text(result.as_dict())


@dataclass(frozen=True, slots=True)
class Operation(Generic[Q, R]):
    """One user-facing tool: what it is asked, what it calls, what it answers."""

    name: str  # the command (`calc max-batch`) and the worker's call name
    help: str  # one line
    request: type[Q]
    run: Callable[[Q], R]  # the library call
    text: Callable[[R, Q], str] = _text_as_json  # what `calc NAME` prints
    data: Callable[[R, Q], Any] = _as_dict  # the JSON: `calc NAME --json`, and the page's answer
    browser: Callable[[R, Q], dict[str, Any]] | None = None  # the page's answer, where not `data`
    notes: Callable[[R], Sequence[str]] = _no_notes  # the command line prints them on stderr
    cli: bool = True  # False: the calculator page's alone

    def parse(self, data: Mapping[str, Any]) -> Q:
        """The request from JSON-like data, or a `FieldError` naming the field."""
        try:
            return self.request.model_validate(data)
        except ValidationError as exc:
            raise request_error(exc) from None

    def answer(self, data: Mapping[str, Any]) -> dict[str, Any]:
        """The page's answer for a request (`data` as the page sends it)."""
        request = self.parse(data)
        result = self.run(request)
        shown = (self.browser or self.data)(result, request)
        assert isinstance(shown, dict), f"{self.name}: the page's answer must be an object"
        return shown


def request_error(exc: ValidationError) -> FieldError:
    """pydantic's first complaint as one field error (`gpus: Input should be ...`)."""
    err = exc.errors(include_url=False)[0]
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, FieldError):  # raised by a validator: it already names its field
        return cause
    loc = ".".join(str(p) for p in err["loc"]) or "request"
    return RequestError(loc, rule(err))


def get(name: str) -> Operation[Any, Any]:
    """The operation `name`, its module imported on first use."""
    if name not in DECLARED_IN:
        raise RequestError("operation", f"unknown operation {name!r}; known: "
                           f"{', '.join(DECLARED_IN)}")
    module = importlib.import_module(DECLARED_IN[name])
    found: tuple[Operation[Any, Any], ...] = module.OPERATIONS
    return next(op for op in found if op.name == name)


def every() -> list[Operation[Any, Any]]:
    """Every operation, in the command line's order (imports every declaring module)."""
    return [get(name) for name in DECLARED_IN]


def answer(name: str, request_json: str) -> str:
    """The browser's one entry point: a JSON request in, a JSON answer out.

    ``{"ok": true, ...the operation's answer}`` or ``{"ok": false, "field", "message"}``. A
    null value is a field left empty: the request model's default applies."""
    try:
        data = json.loads(request_json)
        if not isinstance(data, dict):
            raise RequestError("request", "must be a JSON object")
        shown = get(name).answer({k: v for k, v in data.items() if v is not None})
    except FieldError as exc:
        return json.dumps({"ok": False, "field": exc.field, "message": exc.message})
    return json.dumps({"ok": True, **shown})


# ---------------------------------------------------------------------------------------------
# estimate: the report, as a table; the page's answer adds every GPU preset's fit
# ---------------------------------------------------------------------------------------------

class EstimateRequest(Request):
    scenario: dict[str, Any] = Field(description=SCENARIO_HELP)


def format_table(e: Estimate) -> str:
    """The report as `calc estimate` prints it."""
    d = e.as_dict()
    s = e.scenario
    name = s.model if isinstance(s.model, str) else s.model.__class__.__name__
    lines = [
        f"{name} on {e.resolved.gpu.name}  (calc {__version__})",
        f"  {setup_line(e)}",
        f"  device memory  {gib(e.device_bytes):>14}  of {gib(e.usable_bytes)}"
        f"  ({percent(e.utilization)}, {FIT_WORDS[e.status]}; target {percent(FIT_TARGET)})",
        f"  peak allocated {gib(e.peak_bytes):>14}  during {e.peak_phase}",
        f"  reserved       {gib(e.reserved_bytes):>14}",
        "",
        "  at the peak:",
    ]
    lines += [f"    {c:<18}{gib(d['components'][c]):>14}" for c in COMPONENTS]
    lines += ["", "  phases:"]
    lines += [f"    {p:<18}{gib(v['peak_bytes']):>14}" for p, v in d["phases"].items()]
    lines += ["", "  overhead (empirical):"]
    lines += [f"    {k.split('/')[1]:<18}{gib(v):>14}" for k, v in e.overhead.items()]
    if e.host_bytes:
        lines += ["", f"  host memory (offload) {gib(e.host_bytes)} per GPU"]
    lines += ["", f"  parameters {params(e.param_count)} ({params(e.trainable_param_count)} trainable)"]
    lines.append(f"  confidence: {e.confidence['level']}")
    lines += [f"    traced: {t}" for t in e.confidence["traced"]]
    lines += [f"    - {m}" for m in e.confidence["missing"]]
    lines += [f"  warning [{w['field']}]: {w['message']}" for w in d["warnings"]]
    return "\n".join(lines)


def _estimate(request: EstimateRequest) -> Estimate:
    return estimate(request.scenario)


def _report(report: Estimate, request: EstimateRequest) -> dict[str, Any]:
    """The report alone: what a documentation page's live example shows of it."""
    return {"report": report.as_dict()}


def _estimate_page(report: Estimate, request: EstimateRequest) -> dict[str, Any]:
    """The report, the same scenario on every GPU preset (the page's cards, ~28 more
    estimates), the setup line (calc.formatting.setup_parts), and the report as
    `calc estimate --json` prints it."""
    from .plan.compare import compare_gpus

    shown = _report(report, request)
    return {**shown, "gpus": [fit.as_dict() for fit in compare_gpus(report.scenario)],
            "setup": [{"field": f, "text": t, "join": j} for f, t, j in setup_parts(report)],
            "report_text": json_text(shown["report"])}


ESTIMATE: Operation[EstimateRequest, Estimate] = Operation(
    "estimate", "estimate per-GPU memory for a scenario", EstimateRequest,
    run=_estimate, text=lambda r, q: format_table(r), browser=_estimate_page)

# The documentation's live examples: the same estimate, without the calculator's GPU cards
# (a walkthrough step shows one GPU: the cards were ~28x the work of its answer).
REPORT: Operation[EstimateRequest, Estimate] = Operation(
    "report", "the estimate's report alone (a live example's answer)", EstimateRequest,
    run=_estimate, data=_report, cli=False)


# ---------------------------------------------------------------------------------------------
# presets
# ---------------------------------------------------------------------------------------------

class PresetsRequest(Request):
    pass


Presets = tuple[dict[str, ModelPreset], dict[str, GpuPreset]]


def _presets_data(result: Presets, request: PresetsRequest) -> dict[str, Any]:
    ms, gs = result
    return {
        "models": [{"id": m.id, "name": m.name, "param_count": m.hf_param_count,
                    "aliases": list(m.aliases)} for m in ms.values()],
        "gpus": [{"id": g.id, "name": g.name, "usable_bytes": g.usable_bytes,
                  "aliases": list(g.aliases)} for g in gs.values()],
    }


def _presets_text(result: Presets, request: PresetsRequest) -> str:
    ms, gs = result
    out = ["models:"]
    out += [f"  {m.id:<16} {m.name}" for m in ms.values()]
    out += ["gpus:"]
    out += [f"  {g.id:<16} {g.name} ({gib(g.usable_bytes)} usable)" for g in gs.values()]
    return "\n".join(out)


PRESETS: Operation[PresetsRequest, Presets] = Operation(
    "presets", "list model and GPU presets", PresetsRequest, run=lambda q: (models(), gpus()),
    text=_presets_text, data=_presets_data)


# ---------------------------------------------------------------------------------------------
# explain: the estimator's formulas with the scenario's numbers (the formula reference)
# ---------------------------------------------------------------------------------------------

class ExplainRequest(Request):
    scenario: dict[str, Any] = Field(description=SCENARIO_HELP)


def _explain(request: ExplainRequest) -> Explanation:
    from .explain import explain  # a large module: only the formula page needs it

    return explain(request.scenario)


def _explain_text(result: Explanation, request: ExplainRequest) -> str:
    lines = []
    for step in result.steps:
        lines += [f"{step.id}: {step.title}", f"    {step.formula}", f"    {step.substituted}"]
    return "\n".join(lines)


EXPLAIN: Operation[ExplainRequest, Explanation] = Operation(
    "explain", "the estimator's formulas with the scenario's numbers (LaTeX)", ExplainRequest,
    run=_explain, text=_explain_text,
    browser=lambda r, q: {"explanation": r.as_dict()})


# ---------------------------------------------------------------------------------------------
# architecture: a pasted config.json read as calc reads it (the page fills its fields)
# ---------------------------------------------------------------------------------------------

class ArchitectureRequest(Request):
    hf_config: Any = Field(description="a Hugging Face config.json, as an object")


def _architecture(request: ArchitectureRequest) -> dict[str, Any]:
    """Its errors name the scenario field the page shows them beside (`model.hf_config...`)."""
    if not isinstance(request.hf_config, dict):
        raise ScenarioError("model.hf_config", "must be a JSON object")
    try:
        arch, notes = from_hf_config(request.hf_config)
    except ConfigError as exc:
        raise ScenarioError(f"model.{exc.field}", exc.message) from None
    return {"architecture": arch.model_dump(mode="json"), "notes": notes}


ARCHITECTURE: Operation[ArchitectureRequest, dict[str, Any]] = Operation(
    "architecture", "the architecture calc reads from a config.json", ArchitectureRequest,
    run=_architecture, data=lambda r, q: r, cli=False)


OPERATIONS: tuple[Operation[Any, Any], ...] = (ESTIMATE, REPORT, PRESETS, EXPLAIN, ARCHITECTURE)

__all__ = ["DECLARED_IN", "Cli", "Operation", "Request", "RequestError",
           "answer", "every", "get", "gib", "json_text"]
