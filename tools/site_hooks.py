"""MkDocs hooks: render the calculator from calc's own models, and copy in the vendored runtime.

- The calculator page's marker `<div id="calculator-app"></div>` becomes the form (generated from
  the pydantic models' JSON Schema: field names, enums, bounds, defaults, descriptions), the
  preset data, the planning panels' inputs (from the operations' request models), and the
  default scenario's result computed now, in CPython, by the same `calc_worker.call` the
  browser calls. The page therefore shows real numbers before Python has
  loaded, and the browser swaps in live results when it is ready.
- After the build, `vendor/site/` (staged by tools/vendor_assets.py) is copied to `<site>/vendor/`,
  and every page is checked against its Content-Security-Policy (mkdocs.yml, `extra`): a policy
  meta tag in it, no inline script that would execute, no `<style>` element or style attribute.
  The policy would block them in the browser; the build says which page has one instead.
- Material's search index is built on first use, and Material's and PyScript's scripts carry
  V8 compile hints (tools/site_scripts.py).
"""

from __future__ import annotations

import html
import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
from pydantic import BaseModel

from calc import Architecture, Parallelism, Scenario, Training, __version__, gpus, models
from calc.formatting import COMPONENT_LABELS, natural_key
from calc.operations import get
from calc.plan import FORMATS, IMPORT_FORMATS
from calc.plan.export import FORMAT_NAMES
from calc.plan.importers import IMPORT_EXAMPLES, IMPORT_FORMAT_NAMES
from calc.plan.kv_cache import KV_CACHE_DTYPES

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))  # the page generators (tools/docs_*.py)
import docs_pages  # noqa: E402
import site_scripts  # noqa: E402  (how Material's and PyScript's scripts load)
from docs_common import DEFAULT_SCENARIO, READING_LIMITS  # noqa: E402  (the calculator's opening scenario)

VENDOR = ROOT / "vendor" / "site"
MARKER = '<div id="calculator-app"></div>'

LABELS = {
    "micro_batch_size": "Micro-batch size", "seq_len": "Sequence length (tokens)",
    "precision": "Precision", "gradient_accumulation_steps": "Gradient accumulation steps",
    "mixed_precision": "Mixed precision", "optimizer": "Optimizer",
    "optimizer_impl": "Optimizer implementation",
    "activation_checkpointing": "Activation checkpointing",
    "selective_policy": "Selective checkpointing policy",
    "recompute_layers": "Recompute only the first N layers",
    "checkpoint_every": "Checkpoint every Nth layer", "attention": "Attention",
    "loss": "Loss", "finetuning": "Fine-tuning", "lora_rank": "LoRA rank",
    "lora_targets": "LoRA targets", "lora_dropout": "LoRA dropout",
    "implementation": "Implementation", "dp": "Data parallel (dp)",
    "tp": "Tensor parallel (tp)", "pp": "Pipeline parallel (pp)", "cp": "Context parallel (cp)",
    "ep": "Expert parallel (ep)", "zero": "ZeRO stage", "sequence_parallel": "Sequence parallel",
    "offload_optimizer": "Offload optimizer to CPU", "offload_params": "Offload parameters to CPU",
    "pipeline_schedule": "Pipeline schedule", "virtual_stages": "Virtual stages per rank",
    "framework": "Data-parallel framework",
    "reduce_bucket_size": "DeepSpeed reduce bucket (elements)",
    "stage3_prefetch_bucket_size": "ZeRO-3 prefetch bucket (elements)",
    "stage3_param_persistence_threshold": "ZeRO-3 persistence threshold (elements)",
    "stage3_max_live_parameters": "ZeRO-3 max live parameters",
    "stage3_max_reuse_distance": "ZeRO-3 max reuse distance (elements)",
    "sub_group_size": "ZeRO-3 optimizer sub-group (elements)",
    "moe_capacity_factor": "MoE capacity factor", "moe_load_imbalance": "MoE load imbalance",
    "padded": "Padded batches (attention mask)",
}
BASIC = ("micro_batch_size", "seq_len", "precision")
ADVANCED_TRAINING = ("gradient_accumulation_steps", "activation_checkpointing", "selective_policy",
                     "recompute_layers", "checkpoint_every", "optimizer", "optimizer_impl",
                     "mixed_precision", "attention", "padded", "loss", "finetuning", "lora_rank",
                     "lora_targets", "lora_dropout", "implementation", "moe_capacity_factor",
                     "moe_load_imbalance")
# Choices whose default depends on other fields: an empty first option leaves the field to the
# library (left out of the scenario, or null where the field is nullable).
DEFAULT_CHOICE = {
    "training.mixed_precision": "default (by fine-tuning)",
    "training.selective_policy": "default (by implementation)",
    "parallelism.framework": "default (by mixed precision)",
}
ARCH_FIELDS = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads",
               "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size",
               "tie_word_embeddings", "num_local_experts", "num_experts_per_tok",
               "moe_intermediate_size")


def _worker() -> Any:
    spec = importlib.util.spec_from_file_location(
        "calc_worker", ROOT / "site" / "calculator" / "calc_worker.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _form_scenario(scenario: dict[str, Any]) -> dict[str, Any]:
    """`scenario` with the fields the library defaults from others left empty (mixed_precision
    follows finetuning), as the form shows them."""
    training = dict(scenario["training"])
    for path in DEFAULT_CHOICE:
        group, name = path.split(".")
        if group == "training" and training.get(name) is not None:
            training[name] = ""
    return {**scenario, "training": training}


def _field(path: str, prop: dict[str, Any], label: str) -> tuple[str, dict[str, Any]]:
    """One labelled input for a JSON Schema property, and how the page reads it back."""
    fid = "f-" + path.replace(".", "-")
    err = "e-" + path.replace(".", "-")
    types = {t.get("type") for t in prop.get("anyOf", [prop])}
    nullable = "null" in types
    attrs = f'id="{fid}" name="{path}" aria-describedby="{err}"'
    hint = f'<small class="calc-hint">{html.escape(prop["description"])}</small>' \
        if prop.get("description") else ""
    enum = prop.get("enum") or next((t["enum"] for t in prop.get("anyOf", []) if "enum" in t), None)
    if path == "parallelism.zero":
        enum = [0, 1, 2, 3]
    if enum:
        kind = "int-enum" if all(isinstance(v, int) for v in enum) else "enum"
        opts = "".join(f'<option value="{v}">{v}</option>' for v in enum)
        if path in DEFAULT_CHOICE:
            opts = f'<option value="">{html.escape(DEFAULT_CHOICE[path])}</option>' + opts
            if not nullable:  # left out of the scenario: the library decides
                kind = "enum-default"
        widget = f"<select {attrs}>{opts}</select>"
    elif types == {"boolean"}:
        kind = "bool"
        widget = f'<input type="checkbox" {attrs}>'
        return kind, {"html": (f'<div class="calc-field calc-check">{widget}<label for="{fid}">'
                               f'{html.escape(label)}</label>{hint}'
                               f'<span class="calc-error" id="{err}"></span></div>')}
    else:
        kind = "int" if "integer" in types else "float"
        bounds = next((t for t in prop.get("anyOf", [prop]) if t.get("type") in ("integer", "number")), prop)
        extra = "".join(f' {a}="{bounds[k]}"' for k, a in (("minimum", "min"), ("maximum", "max"))
                        if k in bounds)
        step = "1" if kind == "int" else "any"
        widget = f'<input type="number" inputmode="decimal" step="{step}"{extra} {attrs}>'
    return kind + ("?" if nullable else ""), {"html": (
        f'<div class="calc-field"><label for="{fid}">{html.escape(label)}</label>{widget}{hint}'
        f'<span class="calc-error" id="{err}"></span></div>')}


def _fields(prefix: str, schema: dict[str, Any], names: tuple[str, ...],
            kinds: dict[str, str], labels: dict[str, str] | None = None) -> str:
    out = []
    for name in names:
        kind, rendered = _field(f"{prefix}.{name}", schema["properties"][name],
                                (labels or LABELS).get(name, name))
        kinds[f"{prefix}.{name}"] = kind
        out.append(rendered["html"])
    return "\n".join(out)


# The calculator's planning panels (operations), and the labels of fields offered as choices.
PANELS = ("advise", "import", "cheapest", "rl", "inference")


def _model_choices(default: str) -> dict[Any, str]:
    """A model field offered as a choice of presets; "" (sent as null: calc's default) first."""
    by_name = sorted(models().values(), key=lambda m: natural_key(m.name))
    return {"": default, **{m.id: m.name for m in by_name}}


CHOICES: dict[str, dict[str, dict[Any, str]]] = {
    "import": {"format": {f: IMPORT_FORMAT_NAMES[f] for f in IMPORT_FORMATS}},
    "rl": {"kv_dtype_bytes": {n: f"{name} ({n} byte{'s' if n > 1 else ''})"
                              for n, name in KV_CACHE_DTYPES.items()},
           "critic_model": _model_choices("The policy's model"),
           "reward_model": _model_choices("The policy's model (ppo) or none (grpo: a rule)")},
}


def _example(model: type[BaseModel], name: str) -> Any:
    info = model.model_fields[name]
    return info.examples[0] if info.examples else None


def _request_fields(model: type[BaseModel], choices: dict[str, dict[Any, str]]
                    ) -> dict[str, dict[str, Any]]:
    """Each request field as a panel input: label, hint, kind, first value, bounds, choices
    (from the model's JSON Schema: its titles, descriptions, defaults, examples)."""
    out = {}
    for name, prop in model.model_json_schema()["properties"].items():
        branches = prop.get("anyOf", [prop])
        types = {t.get("type") for t in branches}
        enum = next((t["enum"] for t in branches if "enum" in t), None)
        labels = choices.get(name) or ({v: str(v) for v in enum} if enum else None)
        kind = ("bool" if "boolean" in types else "choice" if labels else
                "int" if "integer" in types else "float" if "number" in types else "text")
        # a field with no default (null: required for some choices) opens on its example
        value = prop.get("default")
        if value is None:
            value = _example(model, name)
        out[name] = {"label": prop.get("title", name), "hint": prop.get("description", ""),
                     "kind": kind, "value": value,
                     "min": prop.get("minimum"), "max": prop.get("maximum"),
                     "choices": None if labels is None else [[v, t] for v, t in labels.items()]}
    return out


def _json_script(element_id: str, data: Any) -> str:
    text = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    return f'<script type="application/json" id="{element_id}">{text}</script>'


def calculator_html(root: str) -> str:
    """The calculator: form, results, data. Its parts are `data-search-exclude`, so that
    Material's search finds the page by its heading and introduction (calculator/index.md), not
    by the form's labels and every preset's name (its excerpt in the results). Each excluded
    element holds no element of its own tag: Material's indexer ends an exclusion at the first
    closing tag of that name (a `div` around the form would end at the form's first `</div>`)."""
    kinds: dict[str, str] = {}
    training, parallel = Training.model_json_schema(), Parallelism.model_json_schema()
    arch_schema = Architecture.model_json_schema()
    arch_labels = {n: n for n in ARCH_FIELDS}
    model_opts = []
    by_name = lambda p: natural_key(p.name)  # noqa: E731  (Llama 2 7B, 13B, 70B)
    for family in sorted({m.family for m in models().values()}):
        opts = "".join(f'<option value="{m.id}">{html.escape(m.name)}</option>'
                       for m in sorted(models().values(), key=by_name) if m.family == family)
        model_opts.append(f'<optgroup label="{html.escape(family)}">{opts}</optgroup>')
    gpu_opts = "".join(f'<option value="{g.id}">{html.escape(g.name)}</option>'
                       for g in sorted(gpus().values(), key=by_name))
    data = {
        "root": root,
        "calc_version": __version__,
        "defaults": DEFAULT_SCENARIO,
        # the form opens on it, leaving to the library the fields whose default depends on others
        "opening": _form_scenario(DEFAULT_SCENARIO),
        # what a link's scenario means where it leaves a field out: the library's defaults
        "field_defaults": _form_scenario(Scenario(model="-").model_dump(mode="json")),
        "kinds": kinds,
        "arch_fields": list(ARCH_FIELDS),
        "models": {m.id: {"name": m.name, "aliases": list(m.aliases),
                          "architecture": m.architecture().model_dump(mode="json")}
                   for m in models().values()},
        "gpus": {g.id: {"name": g.name, "aliases": list(g.aliases), "usable_bytes": g.usable_bytes}
                 for g in gpus().values()},
        # calc.reading's bounds: links, pastes, files and saved entries are measured against them
        "limits": READING_LIMITS,
        "component_labels": COMPONENT_LABELS,
        "export": {"formats": {f: FORMAT_NAMES[f] for f in FORMATS},
                   "default": _example(get("export").request, "format")},
        "import_examples": IMPORT_EXAMPLES,
        # the planning panels' inputs: their operations' request fields (calc.operations)
        "requests": {name: _request_fields(get(name).request, CHOICES.get(name, {}))
                     for name in PANELS},
    }
    arch = _fields("model", arch_schema, ARCH_FIELDS, kinds, arch_labels)
    basic = _fields("training", training, BASIC, kinds)
    adv_training = _fields("training", training, ADVANCED_TRAINING, kinds)
    adv_parallel = _fields("parallelism", parallel, tuple(parallel["properties"]), kinds)
    request = json.dumps({"scenario": DEFAULT_SCENARIO})
    worker = _worker()
    payload = json.loads(worker.call("estimate", request))
    payload["charts"] = json.loads(worker.call("charts", request))["charts"]  # charts.mjs
    report_text = html.escape(payload.pop("report_text"))
    return f"""
<div class="calc" id="calc">
<noscript data-search-exclude><p class="calc-status calc-status--error">The live calculator
needs JavaScript and WebAssembly. The result below was computed when this site was built, for
the default scenario.</p></noscript>
<p id="calc-status" class="calc-status" role="status" data-search-exclude>Showing the result
computed when this site was built. The live calculator is loading…</p>
<div class="calc-grid">
<form id="calc-form" class="calc-form" novalidate data-search-exclude>
<fieldset><legend>Model</legend>
<div class="calc-field"><label for="f-model">Model preset</label>
<select id="f-model" name="model" aria-describedby="e-model">{"".join(model_opts)}
<option value="custom">Custom (edited architecture)</option>
<option value="hf_config">Pasted config.json</option></select>
<span class="calc-error" id="e-model"></span></div>
<details><summary>Architecture (editable)</summary><div class="calc-fields">{arch}</div></details>
<details><summary>Paste a Hugging Face config.json</summary>
<div class="calc-field"><label for="f-hf-config">config.json contents</label>
<textarea id="f-hf-config" name="model.hf_config" rows="6" spellcheck="false"
 aria-describedby="e-model-hf_config" placeholder='{{"model_type": "llama", "hidden_size": 4096, ...}}'></textarea>
<span class="calc-error" id="e-model-hf_config"></span></div></details>
</fieldset>
<fieldset><legend>Basic</legend><div class="calc-fields">{basic}</div></fieldset>
<fieldset><legend>Target GPU</legend>
<div class="calc-field"><label for="f-gpu">GPU</label>
<select id="f-gpu" name="gpu" aria-describedby="e-gpu">{gpu_opts}</select>
<span class="calc-error" id="e-gpu"></span></div></fieldset>
<details class="calc-advanced"><summary>Advanced settings</summary>
<fieldset><legend>Parallelism and sharding</legend><div class="calc-fields">{adv_parallel}</div></fieldset>
<fieldset><legend>Training</legend><div class="calc-fields">{adv_training}</div></fieldset>
</details>
<p class="calc-share"><a id="calc-share" href="#">Link to this scenario</a> ·
<a id="calc-math" href="{root}reference/formulas/">Show the math</a>
<button type="button" id="calc-copy" class="md-button">Copy link</button>
<button type="button" id="calc-reset" class="md-button">Reset</button></p>
</form>
<section id="calc-results" class="calc-results" aria-label="Results"></section>
</div>
<details class="calc-json" data-search-exclude><summary>Report JSON (the output of <code>calc estimate --json</code>)</summary>
<pre id="estimate-json" data-state="static">{report_text}</pre></details>
{_json_script("calc-data", data)}
{_json_script("calc-static", payload)}
<script type="module" src="calculator.js"></script>
</div>
"""


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Render the page's `{{ name }}` placeholders with numbers computed now (tools/docs_pages.py)."""
    return docs_pages.render(page.file.src_uri, markdown)


# arithmatex's formulas are LaTeX until KaTeX renders them in the browser: not text for search
# (the formula reference's excerpt was raw LaTeX). Each holds only its source, no element of
# its own tag, so Material's indexer ends the exclusion at the formula's end.
ARITHMATEX = re.compile(r'<(span|div) class="arithmatex">')


def on_page_content(html_text: str, page: Any, config: Any, files: Any) -> str:
    html_text = ARITHMATEX.sub(r'<\1 class="arithmatex" data-search-exclude>', html_text)
    if MARKER not in html_text:
        return html_text
    depth = page.url.strip("/").count("/") + 1 if page.url.strip("/") else 0
    return html_text.replace(MARKER, calculator_html("../" * depth or "./"))


# KaTeX (its stylesheet, its script, and assets/math.js that runs it) only on a page with
# formulas (arithmatex's, or the formula reference's "Show the math"): mkdocs.yml loads them on
# every page, and evaluating katex.min.js is one 40-80 ms main-thread task of every page's load,
# the calculator's included (issue 13: no task over 50 ms).
MATH_ASSETS = re.compile(r'\s*(?:<link rel="stylesheet" href="[^"]*vendor/katex/[^"]*">'
                         r'|<script src="[^"]*(?:vendor/katex/|assets/math\.js)[^"]*"></script>)')
MATH_ASSET_COUNT = 3  # katex.min.css, katex.min.js, math.js
HAS_MATH = ('class="arithmatex"', 'id="formula-math"')


def without_unused_math(page_html: str) -> str:
    """The page without KaTeX's files when it has no formula to render."""
    if any(marker in page_html for marker in HAS_MATH):
        return page_html
    stripped, found = MATH_ASSETS.subn("", page_html)
    if found != MATH_ASSET_COUNT:
        raise PluginError(f"expected KaTeX's {MATH_ASSET_COUNT} tags in a page, found {found}: "
                          "update MATH_ASSETS (tools/site_hooks.py) to mkdocs.yml")
    return stripped


def on_post_page(output: str, page: Any, config: Any) -> str:
    return site_scripts.search_on_first_use(without_unused_math(output))


def on_post_template(output_content: str, template_name: str, config: Any) -> str:
    """The theme's own pages (404.html)."""
    if not template_name.endswith(".html"):
        return output_content
    return site_scripts.search_on_first_use(without_unused_math(output_content))


# What the Content-Security-Policy forbids in a page: a <script> with neither a src nor a data type
# (JSON), a <style> element, a style attribute.
CSP_META = re.compile(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)">')
INLINE = {
    "an inline script": re.compile(r"<script\b(?![^>]*\bsrc=)(?![^>]*\btype=\"application/json\")[^>]*>"),
    "a <style> element": re.compile(r"<style\b"),
    "a style attribute": re.compile(r"<[a-zA-Z][^>]*\sstyle=[\"']"),
}


def csp_problems(text: str, policy: str) -> list[str]:
    """What in one built page its Content-Security-Policy would block (or its policy missing)."""
    metas = [html.unescape(m) for m in CSP_META.findall(text)]
    problems = [] if metas == [policy] else [f"its Content-Security-Policy meta tags are {metas}"]
    for what, pattern in INLINE.items():
        m = pattern.search(text)
        if m:
            problems.append(f"{what}: {m.group(0)[:80]}")
    return problems


# Material's inline scripts, loaded from files instead (site/overrides/partials/javascripts/):
# (partial, which of its scripts, our file); base.html's scope is the one change (see
# site/assets/material_base.js).
MATERIAL_SCRIPTS = (("base.html", 0, "material_base.js"), ("palette.html", 0, "material_palette.js"),
                    ("content.html", 0, "material_tabs.js"), ("content.html", 1, "material_content.js"))
SCOPE = ('new URL("{{ config.extra.scope | d(base_url) }}",location)',
         'new URL("..",document.currentScript.src)')


def on_config(config: Any) -> Any:
    """Fail when the installed Material's inline scripts are no longer the copies the site loads
    (a Material upgrade): the copies would silently be an older Material's."""
    import material

    partials = Path(material.__file__).parent / "templates" / "partials" / "javascripts"
    for partial, index, copy in MATERIAL_SCRIPTS:
        theirs = re.findall(r"<script>(.*?)</script>", (partials / partial).read_text(), re.S)[index]
        ours = (ROOT / "site" / "assets" / copy).read_text().strip().splitlines()[-1]
        if theirs.replace(*SCOPE) != ours:
            raise PluginError(f"Material's {partial} script changed: update site/assets/{copy} "
                              "(and site/overrides/) from it")
    return config


def on_post_build(config: Any) -> None:
    if not (VENDOR / "pyodide" / "pyodide-lock.json").is_file():
        raise PluginError("vendor/site/ is missing: run `make site` (it runs tools/vendor_assets.py)")
    site = Path(config["site_dir"])
    policy = config["extra"]["content_security_policy"]
    for page in sorted(site.rglob("*.html")):
        problems = csp_problems(page.read_text(encoding="utf-8"), policy)
        if problems:
            raise PluginError(f"{page.relative_to(site)}: {'; '.join(problems)} "
                              "(the Content-Security-Policy, mkdocs.yml extra, would block it)")
    dest = site / "vendor"
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(VENDOR, dest)
    site_scripts.finish(site)
