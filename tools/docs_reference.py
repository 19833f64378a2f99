"""Reference pages generated from the code and data: presets (presets/*.json through
calc.presets), the CLI (the operations registry, calc.operations), the Python API (docstrings), and the formula
reference's worked formulas (calc.explain) for the default scenario, which the page recomputes
live for the scenario in its address (site/reference/formulas.mjs)."""

from __future__ import annotations

import argparse
import inspect
import json
from typing import Any

from docs_common import (
    DEFAULT_SCENARIO,
    READING_LIMITS,
    billions,
    breakable_code,
    encode_scenario,
    item_list,
    md_table,
    num_gib,
)
from pydantic.fields import FieldInfo

import calc
import calc.activations
import calc.baselines
import calc.logits
import calc.overhead
import calc.plan
from calc import Scenario, estimate, gpus, models
from calc.cli import GROUPS, build_parser
from calc.explain import explain
from calc.formatting import count, natural_key, tflops
from calc.formula import FORMULAS, Formula
from calc.operations import DECLARED_IN, get
from calc.optimizers import OPTIMIZERS
from calc.peak import MOMENTS, PARTS
from calc.presets import GpuPrice
from calc.sources import SOURCES, Source
from calc.symbols import SYMBOLS


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _link(url: str, label: str = "source") -> str:
    """A citation: a short label (`config.json`, `[1]`) that keeps its own width in a table
    cell (`a.cite` in site/assets/docs.css), not the 12em a cell's only link is given."""
    return f"[{label}]({url}){{.cite}}" if url.startswith("http") else _cell(url)


def _month(as_of: str) -> str:
    """A price's month (`2025-06`), which a narrow cell must not break at its hyphen."""
    return f'<time datetime="{as_of}">{as_of}</time>'


def _price_note(price: GpuPrice | None) -> str:
    """A GPU preset's list price with its offer, source and month (calc.presets.GpuPrice)."""
    if price is None:
        return ("none: no stable, widely listed on-demand price to cite; `calc cost` takes "
                "your own (`--price-per-gpu-hour`)")
    offer = _cell(price.offer).replace("$", "\\$")  # a lone $ must not open arithmatex math
    checked = "" if price.verified else ", unverified (not re-read from that page)"
    # the link last: a cell's only link is laid out at a minimum width (docs.css), which
    # would push any text after it onto a line of its own
    return (f"{price.usd_per_gpu_hour:g} USD per GPU-hour, {offer}, {price.as_of}{checked}: "
            f"{_link(price.source, 'price page')}")


def presets(src: str) -> dict[str, str]:
    mrows = []
    for m in sorted(models().values(), key=lambda m: (m.family, natural_key(m.id))):
        e = estimate({"model": m.id, "training": {"seq_len": 128}})
        pub = count(m.published_param_count) if m.published_param_count else "-"
        mrows.append([f"`{m.id}`", m.name, m.family, billions(e.param_count), pub,
                      "yes" if m.verified else "**no**", _link(m.source_url, "config.json")])
    grows = []
    for g in sorted(gpus().values(), key=lambda g: (g.vendor, -g.usable_bytes)):
        tf = item_list([f"{k} {tflops(v)}" for k, v in g.dense_tflops.items()])
        srcs = " ".join(_link(u, f"[{i}]") for i, u in enumerate(g.sources, 1))
        price = "-" if g.price is None else \
            f"{g.price.usd_per_gpu_hour:g}, {_month(g.price.as_of)}: {_link(g.price.source)}"  # link last
        # the id with the name and its sources under it: nine columns side by side were
        # 1105 px wide in a laptop's 834 px column (issue 13)
        grows.append([f"`{g.id}`<br>{g.name} {srcs}", num_gib(g.usable_bytes), tf,
                      count(g.memory_bandwidth_gbps),
                      f"{g.interconnect.name} {count(g.interconnect.bandwidth_gbps)}", price,
                      "yes" if g.verified else "**no**"])
    # Definition lists (def_list in mkdocs.yml): a preset's id, then each of its notes
    notes = "\n".join(f"`{m.id}`\n: {_cell(m.verification_note)}\n"
                       for m in sorted(models().values(), key=lambda m: natural_key(m.id))
                       if m.verification_note)
    gnotes = "\n".join(f"`{g.id}`\n: *Usable memory*: {_cell(g.usable_bytes_source)}\n"
                       f": *List price*: {_price_note(g.price)}\n"
                       for g in sorted(gpus().values(), key=lambda g: g.id))
    return {
        "model_count": str(len(mrows)), "gpu_count": str(len(grows)),
        "models_table": md_table(["id", "name", "family", "parameters (calc)", "published count",
                                  "verified", "source"], mrows, "lllrrcl"),
        "gpus_table": md_table(["id, name [sources]", "usable GiB", "dense TFLOPS",
                                "memory GB/s", "interconnect GB/s", "list USD/GPU-hour",
                                "verified"], grows, "lrlrllc",
                               narrow=("id, name [sources]", "dense TFLOPS", "interconnect GB/s")),
        "model_notes": notes, "gpu_notes": gnotes,
    }


def _default(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    default = info.get_default(call_default_factory=True)
    if default in (None, {}, []):
        return "-"
    return f"`{default if isinstance(default, str) else json.dumps(default)}`"


# The command line as `calc --help` has it: the parser itself (calc.cli.build_parser), each
# flag's help expanded by argparse's own formatter, so `%(default)s` and the like never show.
_HELP = argparse.HelpFormatter("calc")
SHARED_GROUPS = {group for group, _ in GROUPS}  # the scenario flags: argument groups of their own


def _flags(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest.upper()}`"
    return ", ".join(f"`{o}`" for o in action.option_strings)


def _takes(action: argparse.Action) -> str:
    if action.choices is not None:
        return ", ".join(f"`{c}`" for c in action.choices)
    if action.nargs == 0:
        return "(a switch)"
    kind = getattr(action.type, "__name__", "text")
    return {"int": "integer", "float": "number", "_count": "count (`1e9`, `2B`)",
            "_comma": "comma-separated list", "str": "text"}.get(kind, "text")


def _help(action: argparse.Action) -> str:
    """The flag's help as `--help` prints it; none where it only repeats the field's name."""
    text = _HELP._expand_help(action) if action.help else ""
    return "" if text == action.dest else _cell(text)


def _own_actions(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """A command's own arguments: not the scenario flags, not --help and --json, which the
    reference documents once."""
    shared = {a for g in parser._action_groups if g.title in SHARED_GROUPS for a in g._group_actions}
    scenario = any(a.dest == "scenario" for a in parser._actions)
    return [a for a in parser._actions
            if a not in shared and a.dest not in ("help", "json", "scenario")
            and not (scenario and a.dest in ("model", "gpu"))]


def _scenario_flags(parser: argparse.ArgumentParser) -> str:
    """The scenario flags of a command that takes a scenario, once: every such command takes
    them. Their argparse default is None (the file's value stays); the scenario's own default
    is the field's (each flag's dest is its scenario field)."""
    rows = [[_flag_and_field(a), _help(a), _takes(a), _default(Scenario.model_fields[a.dest])]
            for a in parser._actions if a.dest in ("model", "gpu")]
    models = dict(GROUPS)
    for group in parser._action_groups:
        if group.title in SHARED_GROUPS:
            for a in group._group_actions:
                name = a.dest.split(".", 1)[1]
                rows.append([_flag_and_field(a), _help(a), _takes(a),
                             _default(models[group.title].model_fields[name])])
    return md_table(["flag (scenario field)", "meaning", "values", "default"], rows, "llll")


def _flag_and_field(action: argparse.Action) -> str:
    """A scenario flag with the field it sets under it: side by side, the two longest
    (`--stage3-param-persistence-threshold`, `parallelism.stage3_param_persistence_threshold`)
    made the table 1169 px wide in a laptop's 834 px column (issue 13)."""
    return (f'{_flags(action)}<span class="cell-under">{breakable_code(action.dest, ".")}'
            "</span>")


def cli(src: str) -> dict[str, str]:
    """One section per subcommand of calc's parser: its usage and only its own arguments (the
    scenario flags, --json and --help are documented once, above the commands)."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out, shared = [], None
    for name, cmd in sub.choices.items():
        own = _own_actions(cmd)
        takes_scenario = any(a.dest == "scenario" for a in cmd._actions)
        if takes_scenario:
            shared = shared or _scenario_flags(cmd)
        prog = f"calc {name}" + (" [SCENARIO] [scenario flags]" if takes_scenario else "")
        usage = argparse.HelpFormatter(prog, width=90)  # wrapped as --help wraps it
        usage.add_usage(None, own, [], prefix="")
        line = usage.format_help().strip() + " [--json]"
        rows = [[_flags(a), _help(a), _takes(a), "yes" if a.required else ""] for a in own]
        table = md_table(["argument", "meaning", "values", "required"], rows, "lllc") \
            if rows else "No arguments of its own."
        op = get(name)
        out.append(f"## `calc {name}`\n\n{cmd.description}. Request model: "
                   f"`{DECLARED_IN[name]}.{op.request.__name__}`.\n\n```text\n{line}\n```\n\n"
                   f"{table}")
    assert shared is not None
    return {"commands": "\n\n".join(out), "scenario_flags": shared, "version": calc.__version__}


def _doc(obj: Any) -> str:
    """A module's docstring as it is laid out in the code (aligned columns of symbols)."""
    return f"```text\n{inspect.getdoc(obj)}\n```"


def _documented(obj: Any) -> bool:
    """A public function (cached ones too) or class of calc's, not a constant or a type alias."""
    return callable(obj) and getattr(obj, "__module__", "").startswith("calc")


def api(src: str) -> dict[str, str]:
    """mkdocstrings directives for the public names of `calc` and `calc.plan` (their `__all__`):
    each package's docstring, then its functions and classes where they are defined, rendered
    from the docstrings and signatures when the site is built."""
    parts = []
    for mod in (calc, calc.plan):
        parts.append(f"## `{mod.__name__}`\n\n::: {mod.__name__}\n    options:\n"
                     "      members: false\n      show_root_heading: false\n"
                     "      show_root_toc_entry: false\n")
        for name in mod.__all__:
            obj = getattr(mod, name)
            if _documented(obj):
                parts.append(f"::: {obj.__module__}.{obj.__qualname__}\n    options:\n"
                             "      show_root_full_path: false\n")
    return {"api": "\n".join(parts)}


# The formula reference's sections: formula id prefix -> heading.
FORMULA_GROUPS = {
    "params": "Parameters", "placement": "Parameters one GPU holds",
    "states": "Weights, gradients and optimizer states", "act": "Activations (transformers)",
    "megatron": "Activations (Megatron-LM, Korthikanti et al.)", "logits": "Logits and loss",
    "peak": "Moments of the step", "overhead": "Beyond the tensors (empirical)",
    "baseline": "Other calculators' formulas (for comparison only)",
}


def _math(tex: str) -> str:
    return f"\\({tex}\\)"


def _source(source: Source) -> str:
    return f"[{source.short}](#source-{source.id})"


def formula_tex(f: Formula) -> str:
    """A formula as its table row shows it: the quantity it gives, equal to its expression."""
    return f"{'P' if f.unit == 'parameters' else 'M'} = {f.tex}"


def _stacked(table: str, *, formula_last: bool = True) -> str:
    """A table whose cells a phone stacks, each row's under its first (`.fm-table` in
    site/assets/docs.css), instead of a table wider than the phone's column that scrolls. On
    wider screens a formula in the last of two columns gets half the table
    (`.fm-table--formula`), so that a long one wraps less than the sentence beside it."""
    kind = "fm-table fm-table--formula" if formula_last else "fm-table"
    return f'<div class="{kind}" markdown>\n\n{table}\n\n</div>'


def _labelled(label: str, cell: str) -> str:
    """A cell that says which column it is in where its cells are stacked (a phone: `_stacked`),
    and where the header row above is too far away to tell."""
    return f'<span class="cell-label">{label}: </span>{cell}'


def _formula_rows(items: list[Formula]) -> str:
    """Two columns, the quantity and its formula, so that every table fits the content column
    at 1366 px (issue 13). Where a term is booked in the breakdown and where the formula comes
    from go on a line of their own under the quantity: as columns of their own, with a path
    (`host/optimizer_states/factored_second_moment`) that may not wrap, they made three of the
    tables 909-1068 px wide in an 834 px column. The path may wrap after a `/`."""
    rows = [[_cell(f.title) + f'<span class="cell-under">{breakable_code(f.key, "/")} · '
             f"{_source(f.source)}</span>", _math(formula_tex(f))] for f in items]
    return md_table(["quantity (booked under · source)", "formula"], rows, "ll")


def formula_tables() -> str:
    """One table per group of the estimator's formulas (calc.formula.FORMULAS); a formula
    booked twice (the same arithmetic under another breakdown path) is listed once."""
    out = []
    for prefix, heading in FORMULA_GROUPS.items():
        items = [f for f in FORMULAS.values()
                 if f.id.split(".", 1)[0] == prefix and "@" not in f.id]
        if items:
            out.append(f"### {heading}\n\n{_stacked(_formula_rows(items))}")
    unknown = {f.id.split(".", 1)[0] for f in FORMULAS.values()} - FORMULA_GROUPS.keys()
    if unknown:
        raise ValueError(f"formula groups without a heading: {sorted(unknown)}")
    return "\n\n".join(out)


_STATE_BYTES = {  # bytes per trainable parameter of one state, as calc/states.py's formulas say
    "dense": _math("w_s"),
    "blockwise_8bit": _math("1 + 4 / 256") + " (8-bit, an fp32 scale per block)",
    "factored": _math("4\\,(n + m)") + " per n x m matrix (vectors whole)",
}


def optimizer_table() -> str:
    """The optimizers with the name, whether traced and the source under each id, and each
    optimizer's two kinds of memory beside it: six columns side by side made the table 962 px
    wide on a 390 px phone. On a phone the two go under the optimizer, each with its label."""
    steps = {"none": "none", "state_copy": _math("P_\\text{train} w_s") + " (a copy of each "
             "second moment)", "two_largest": _math("2\\,n_\\text{max} w_s"),
             "adafactor": _math("(2 + u_a)\\,n_\\text{max} \\cdot 4")}
    rows = []
    for o in OPTIMIZERS.values():
        states = ", ".join(f"`{s.name}` {_STATE_BYTES[s.kind]}" for s in o.states) or "none"
        impls = ", ".join(f"`{i}`: {steps[r]}" for i, r in o.step) if o.implementations \
            else steps[o.step[0][1]]
        traced = "traced" if o.traced else "not traced"
        rows.append([f'`{o.id}` {o.name}<span class="cell-under">{traced} · '
                     f"{_source(o.source)}</span>",
                     _labelled("States per parameter", states),
                     _labelled("Step temporaries", impls)])
    return _stacked(md_table(["optimizer (traced · source)", "states per parameter",
                              "step temporaries"], rows, "lll"), formula_last=False)


def moments_table() -> str:
    """Each moment's name (the report's `peak_moment`) followed by when it happens, in one
    cell, and the parts alive then: the name and the sentence in columns of their own made the
    table 749 px wide on a 390 px phone; there the parts go under the moment."""
    # the parts' sum on one line beside the sentence (a phone, under it, may wrap it at a +)
    rows = [[f"`{name}`: {_cell(kind.what)}", '<span class="cell-sum">'
             + " + ".join(_math(PARTS[p][0]) for p in kind.parts) + "</span>"]
            for name, kind in MOMENTS.items()]
    parts = [[_math(sym), _cell(what)] for sym, what in PARTS.values()]
    return (_stacked(md_table(["moment: when", "bytes alive"], rows, "ll"), formula_last=False)
            + "\n\nwhere\n\n"
            + md_table(["part", "what it holds"], parts, "ll"))


def symbols_table() -> str:
    """Each symbol with its name in the code beside it, and its meaning; on a phone the meaning
    goes under the symbol: three columns were 430 px wide on a 390 px phone, and the widest
    symbol (`P_xg`) beside a sentence at its readable width still 365 px."""
    rows = [[f"{_math(sym.tex)} `{name}`", _cell(sym.meaning)] for name, sym in SYMBOLS.items()]
    return _stacked(md_table(["symbol, in the code", "meaning"], rows, "ll"), formula_last=False)


def sources_list() -> str:
    return "\n".join(f'- <span id="source-{s.id}"></span>**{s.short}** ({s.kind}): '
                      f"{_cell(s.cite)}" + (f" [link]({s.url})" if s.url else "")
                      for s in SOURCES.values())


def formulas(src: str) -> dict[str, str]:
    data = {
        "root": "../../",  # the page is reference/formulas/: relative links from its URL
        "calculator": "../../calculator/",
        "link": encode_scenario(DEFAULT_SCENARIO),
        "static": explain(DEFAULT_SCENARIO).as_dict(),
        "limits": READING_LIMITS,
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
        "formula_count": str(sum("@" not in f for f in FORMULAS)),
        "formula_tables": formula_tables(), "optimizer_table": optimizer_table(),
        "moments_table": moments_table(), "symbols_table": symbols_table(),
        "sources_list": sources_list(),
        "activations_doc": _doc(calc.activations), "logits_doc": _doc(calc.logits),
        "overhead_doc": _doc(calc.overhead), "worked": worked,
    }
