"""Reference pages generated from the code and data: presets (presets/*.json through
calc.presets), the CLI (the operations registry, calc.operations), the Python API (docstrings), and the formula
reference's worked formulas (calc.explain) for the default scenario, which the page recomputes
live for the scenario in its address (site/reference/formulas.mjs)."""

from __future__ import annotations

import inspect
import json
import types
from typing import Any, Literal, Union, get_args, get_origin

from docs_common import DEFAULT_SCENARIO, billions, encode_scenario, gib, md_table, num_gib
from pydantic.fields import FieldInfo

import calc
import calc.activations
import calc.logits
import calc.overhead
import calc.plan
import calc.states
from calc import Parallelism, Scenario, Training, estimate, gpus, models
from calc.cli import ALIASES, takes
from calc.explain import explain
from calc.operations import DECLARED_IN, every
from calc.overhead import ALLOCATOR_FLOOR, ALLOCATOR_FRACTION, CUDA_CONTEXT, NCCL_PER_GROUP


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _link(url: str, label: str = "source") -> str:
    return f"[{label}]({url})" if url.startswith("http") else _cell(url)


def presets(src: str) -> dict[str, str]:
    mrows = []
    for m in sorted(models().values(), key=lambda m: (m.family, m.id)):
        e = estimate({"model": m.id, "training": {"seq_len": 128}})
        pub = f"{m.published_param_count:,}" if m.published_param_count else "-"
        mrows.append([f"`{m.id}`", m.name, m.family, billions(e.param_count), pub,
                      "yes" if m.verified else "**no**", _link(m.source_url, "config.json")])
    grows = []
    for g in sorted(gpus().values(), key=lambda g: (g.vendor, -g.usable_bytes)):
        tf = ", ".join(f"{k} {v:g}" for k, v in g.dense_tflops.items())
        srcs = " ".join(_link(u, f"[{i}]") for i, u in enumerate(g.sources, 1))
        grows.append([f"`{g.id}`", g.name, num_gib(g.usable_bytes), tf,
                      f"{g.memory_bandwidth_gbps:,.0f}",
                      f"{g.interconnect.name} {g.interconnect.bandwidth_gbps:,.0f}",
                      "yes" if g.verified else "**no**", srcs])
    notes = "\n".join(f"`{m.id}`\n: {_cell(m.verification_note)}\n" for m in sorted(models().values(), key=lambda m: m.id)
        if m.verification_note)
    gnotes = "\n".join(f"`{g.id}`\n: usable memory: {_cell(g.usable_bytes_source)}\n"
                       for g in sorted(gpus().values(), key=lambda g: g.id))
    return {
        "model_count": str(len(mrows)), "gpu_count": str(len(grows)),
        "models_table": md_table(["id", "name", "family", "parameters (calc)", "published count",
                                  "verified", "source"], mrows, "lllrrcl"),
        "gpus_table": md_table(["id", "name", "usable GiB", "dense TFLOPS", "memory GB/s",
                                "interconnect GB/s", "verified", "sources"], grows, "llrlrlcl"),
        "model_notes": notes, "gpu_notes": gnotes,
    }


def _values(annotation: Any) -> str:
    """The values a field takes, for a table: its choices, or its type."""
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        return " or ".join(_values(a) for a in get_args(annotation) if a is not type(None))
    if origin is Literal:
        return ", ".join(f"`{c}`" for c in get_args(annotation))
    names = {int: "integer", float: "number", str: "text", bool: "true / false", dict: "object",
             list: "list"}
    return names.get(origin or annotation, str(annotation))


def _default(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    default = info.get_default(call_default_factory=True)
    if default in (None, {}, []):
        return "-"
    return f"`{default if isinstance(default, str) else json.dumps(default)}`"


def _scenario_flags() -> str:
    """The scenario flags, once: every operation with a scenario takes them."""
    scenario = Scenario.model_fields
    rows = [["`--model`", "`model`", "model preset id (overrides the file)", "text", "required"],
            ["`--gpu`", "`gpu`", "GPU preset id (overrides the file)", "text",
             _default(scenario["gpu"])]]
    for group, model in (("training", Training), ("parallelism", Parallelism)):
        for name, info in model.model_fields.items():
            flag = "--" + name.replace("_", "-")
            flags = ", ".join(f"`{f}`" for f in [flag, *ALIASES.get(name, [])])
            if info.annotation is bool:
                flags = f"`{flag}`, `--no-{flag[2:]}`"
            rows.append([flags, f"`{group}.{name}`", _cell(info.description or ""),
                         _values(info.annotation), _default(info)])
    return md_table(["flag", "scenario field", "meaning", "values", "default"], rows, "lllll")


def cli(src: str) -> dict[str, str]:
    """One section per command of the operations registry (calc.operations): its request's
    fields, how the command line takes each, what it means, its values and its default."""
    out = []
    for op in every():
        if not op.cli:
            continue
        fields = op.request.model_fields
        rows = [[f"`{name}`", f"`{takes(op, name)}`".replace(" and the scenario flags`",
                                                             "` and the [scenario flags](#scenario-flags)"),
                 _cell(info.description or ""), _values(info.annotation), _default(info)]
                for name, info in fields.items()]
        rows.append(["", "`--json`", "print the result as JSON", "", ""])
        table = md_table(["field", "command line", "meaning", "values", "default"], rows, "lllll")
        module = DECLARED_IN[op.name]
        out.append(f"## `calc {op.name}`\n\n{op.help}. Request model: "
                   f"`{module}.{op.request.__name__}`.\n\n{table}")
    return {"commands": "\n\n".join(out), "scenario_flags": _scenario_flags(),
            "version": calc.__version__}


def _doc(obj: Any) -> str:
    doc = inspect.getdoc(obj) or "(no docstring)"
    return f"```text\n{doc}\n```"


def api(src: str) -> dict[str, str]:
    parts = []
    for mod in (calc, calc.plan):
        parts.append(f"## `{mod.__name__}`\n\n{_doc(mod)}")
        for name in mod.__all__:
            obj = getattr(mod, name)
            if not (inspect.isfunction(obj) or inspect.isclass(obj)):
                continue
            try:
                sig = str(inspect.signature(obj)) if inspect.isfunction(obj) else ""
            except (TypeError, ValueError):
                sig = ""
            kind = "class" if inspect.isclass(obj) else "def"
            parts.append(f"### `{mod.__name__}.{name}`\n\n```python\n{kind} {name}{sig}\n```\n\n"
                         f"{_doc(obj)}")
    return {"api": "\n\n".join(parts)}


def formulas(src: str) -> dict[str, str]:
    data = {
        "root": "../../",  # the page is reference/formulas/: relative links from its URL
        "calculator": "../../calculator/",
        "link": encode_scenario(DEFAULT_SCENARIO),
        "static": explain(DEFAULT_SCENARIO).as_dict(),
    }
    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    worked = f"""<div id="formula-math" data-state="static" markdown="0">
<p><strong>Scenario:</strong> <span id="formula-scenario"></span>
(<a id="formula-open" href="{data['calculator']}#s={data['link']}">open it in the calculator</a>)</p>
<p id="formula-status" role="status" aria-live="polite"></p>
<ol id="formula-steps" class="fm-steps"></ol>
<details><summary>The same steps as JSON (<code>calc.explain</code>)</summary>
<pre id="explain-json" data-state="static"></pre></details>
<script type="application/json" id="formula-data">{payload}</script>
</div>
<script type="module" src="../formulas.mjs"></script>"""
    return {
        "alloc_fraction": f"{ALLOCATOR_FRACTION:g}", "alloc_floor": gib(ALLOCATOR_FLOOR),
        "cuda_context": gib(CUDA_CONTEXT), "nccl": gib(NCCL_PER_GROUP),
        "activations_doc": _doc(calc.activations), "logits_doc": _doc(calc.logits),
        "overhead_doc": _doc(calc.overhead), "worked": worked,
    }
