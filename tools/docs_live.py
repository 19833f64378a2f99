"""Live embedded examples: a scenario's headline figures with the fields a step is about
editable in place, recomputed in the browser by calc's worker (site/assets/live_example.mjs).

The figures in the HTML are computed now, by the estimate the browser's `report` operation
answers with, so the page paints them before Python has started (and without JavaScript at all);
each figure sits in an element with `data-key`, which the script fills from the live answer, in
the same words (calc.formatting, and its twin site/assets/format.mjs). The fields and the
status line are `data-search-exclude`: Material's search would index every GPU's name as the
step's text; the figures' sentence stays searchable with the step's prose.
"""

from __future__ import annotations

import html
import json
from typing import Any

from docs_common import encode_scenario, gib, pct
from site_hooks import LABELS

from calc import Estimate, Parallelism, Training, gpus
from calc.formatting import FIT_PHRASES

ALWAYS = ("training.micro_batch_size", "training.seq_len", "gpu")
SCHEMAS = {"training": Training.model_json_schema()["properties"],
           "parallelism": Parallelism.model_json_schema()["properties"]}


def _field(path: str, value: Any) -> str:
    """One labelled input for the scenario field `path`, its kind from calc's JSON Schema."""
    name = path.rpartition(".")[2]
    label = html.escape(LABELS.get(name, "GPU" if path == "gpu" else name))
    if path == "gpu":
        options = [(g.id, g.name) for g in gpus().values()]
    else:
        prop = SCHEMAS[path.split(".")[0]][name]
        branches = prop.get("anyOf", [prop])
        enum = next((b["enum"] for b in branches if "enum" in b), None)
        types = {b.get("type") for b in branches}
        if "boolean" in types:
            options = [(True, "yes"), (False, "no")]
        elif enum:
            options = [(v, str(v)) for v in enum]
        else:
            low = next((b["minimum"] for b in branches if "minimum" in b), 1)
            return (f'<label>{label} <input type="number" name="{path}" value="{value}" '
                    f'min="{low}" step="1" inputmode="numeric"></label>')
    opts = "".join(f'<option value="{html.escape(json.dumps(v))}"'
                   f'{" selected" if v == value else ""}>{html.escape(text)}</option>'
                   for v, text in options)
    return f'<label>{label} <select name="{path}">{opts}</select></label>'


def _value(scenario: dict[str, Any], path: str) -> Any:
    group, _, name = path.rpartition(".")
    return scenario[group][name] if group else scenario[name]


def live_example(e: Estimate, page_src: str, levers: tuple[str, ...] = ()) -> str:
    """The step's live example: `e`'s figures, its micro-batch, sequence length and GPU and the
    `levers` (scenario field paths) editable."""
    scenario = e.scenario.model_dump(mode="json")
    root = "../" * (page_src.count("/") + (0 if page_src.endswith("index.md") else 1)) or "./"
    data = {"scenario": scenario, "calculator": f"{root}calculator/"}
    fields = "".join(_field(p, _value(scenario, p)) for p in (*ALWAYS, *levers))
    figures = {"device_bytes": gib(e.device_bytes), "utilization": pct(e.utilization),
               "gpu": html.escape(e.resolved.gpu.name), "usable_bytes": gib(e.usable_bytes),
               "status": FIT_PHRASES[e.status], "peak_phase": e.peak_phase.replace("_", " ")}
    out = {k: f'<span data-key="{k}">{v}</span>' for k, v in figures.items()}
    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    return (f'<div class="live-example" data-state="static" data-device-bytes="{e.device_bytes}"'
            f'><script type="application/json">{payload}</script>'
            f'<form class="live-fields" novalidate data-search-exclude>{fields}</form>'
            f'<p class="live-result"><strong>{out["device_bytes"]}</strong> per GPU, '
            f'{out["utilization"]} of {out["gpu"]} ({out["usable_bytes"]}): it '
            f'{out["status"]}; the peak is during the {out["peak_phase"]}. '
            f'<a class="live-open" href="{data["calculator"]}#s={encode_scenario(scenario)}">'
            'Open in the calculator</a></p>'
            '<p class="live-status" role="status" data-search-exclude>Edit a field to recompute it in your browser.'
            '</p></div>\n<script type="module" src="' + root + 'assets/live_example.mjs"></script>')
