"""The accuracy page: calc and the other tools' formulas against the traced steps, and calc
against published GPU measurements. Recomputed at build time with validation/accuracy.py's own
functions (from the committed traces), so the page always describes the library it ships with."""

from __future__ import annotations

import importlib.util
import statistics
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from docs_common import breakable_code, md_table, num_gib, pct

from calc.baselines import BASELINES
from calc.charts import Point, scatter
from calc.confidence import VALIDATED_FAMILIES, VALIDATED_FEATURES
from calc.formatting import natural_key
from calc.scenario import Scenario, engine_of, parse_scenario

ROOT = Path(__file__).resolve().parent.parent
KEYS = (("error", "calc"), ("korthikanti", "Korthikanti et al. + 16 B/param"),
        ("megatron", "Megatron-LM theoretical"), ("eleuther", "EleutherAI Transformer Math 101"))
CLIP = 1.5  # the scatter's height, in largest traces: above it a prediction is drawn clipped


def _accuracy() -> Any:
    spec = importlib.util.spec_from_file_location("validation_accuracy",
                                                  ROOT / "validation" / "accuracy.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("validation_accuracy", module)
    spec.loader.exec_module(module)
    return module


def scatter_figure(rows: list[dict[str, Any]]) -> str:
    """Every traced case, calc's prediction and the other formulas' against the trace."""
    series = [(label, key, [Point(r["traced"], r["predicted" if key == "calc" else f"{key}_bytes"],
                                  f"{r['id']} ({label})") for r in rows
                            if key == "calc" or r[key] is not None])  # where it is compared
              for key, label in (*KEYS[1:], ("calc", KEYS[0][1]))]  # calc's drawn on top
    chart = scatter("accuracy", "Predicted against traced peak memory, every traced case", series,
                    clip=CLIP)
    keys = "".join(f'<li><span class="chart-key chart-key--{key}"></span>{label}</li>'
                   for label, key, _ in series)
    return (f'<figure class="chart-figure">{chart.svg()}<ul class="chart-legend">{keys}</ul>'
            "<figcaption>One dot per traced case and predictor (a formula only where it is "
            "compared); on the diagonal, the prediction "
            f"equals the trace. A prediction above {CLIP:g} times the largest trace is drawn at "
            "the top, faded (hover a dot for its case).</figcaption></figure>")


def _signed(error: float | None) -> str:
    """A baseline's error, or "-" where its source does not model the case (not compared)."""
    return "-" if error is None else pct(error, True)


def _case_cell(case_id: str) -> str:
    """A case id (`model_b2_s1024_...`) as its model and, on the line under it, its setting,
    which wraps after a `_`; the full id on hover. One id on one line made the table 1346 px
    wide in a laptop's 834 px column, and side by side the model and the setting still needed
    991 px (issue 13). The id is one text, the line after the model drawn by CSS (`.id-head`
    in site/assets/docs.css), so the browser's find matches a whole id."""
    # torch's optimizer implementation `for_loop` (`adamw-for_loop`) is one name
    return breakable_code(case_id, "_", case_id, keep=("for_loop",), lead="id-head")


def _measurement(measurement_id: str) -> str:
    """A published measurement's id (`swift-qwen3-30b-a3b-megatron-ep4-...`, up to 515 px on
    one line), which may wrap after a `-`: its words are joined by them."""
    return breakable_code(measurement_id, "-")


# The traced cases' groups, in the page's order: the parallel layout, then the fine-tuning.
LAYOUTS = ("One GPU", "DDP", "FSDP2", "DeepSpeed", "Tensor, context or expert parallel",
           "Pipeline parallel")
TUNING = {"full": "full fine-tuning", "lora": "LoRA", "qlora": "QLoRA"}


def _layout(s: Scenario) -> str:
    """The parallel layout a case is grouped under, the first that applies in LAYOUTS' reverse
    order (a pipeline with tensor parallelism is a pipeline). DeepSpeed is the engine in effect
    (master weights mean it, as in the harness); FSDP2 is torch's sharding (ZeRO 2 or 3), on one
    rank too; DDP includes torch's ZeroRedundancyOptimizer (ZeRO 1)."""
    p = s.parallelism
    if p.pp > 1:
        return "Pipeline parallel"
    if max(p.tp, p.cp, p.ep) > 1:
        return "Tensor, context or expert parallel"
    if engine_of(p.framework, s.training.mixed_precision) == "deepspeed":
        return "DeepSpeed"
    if p.zero >= 2:
        return "FSDP2"
    return "DDP" if p.dp > 1 or p.zero == 1 else "One GPU"


def _group(s: Scenario) -> tuple[int, int]:
    """A case's group, as its place in the page's order: its layout's, then its fine-tuning's."""
    return LAYOUTS.index(_layout(s)), list(TUNING).index(s.training.finetuning)


def cases_by_group(rows: list[dict[str, Any]], scenarios: dict[str, Scenario],
                   table: Callable[[list[dict[str, Any]]], str]) -> str:
    """Every traced case, folded by parallel layout and fine-tuning: one <details> per group,
    whose summary gives its cases and its median and worst error, its cases the largest error
    first. One table of 744 cases was 55,000 px tall (issue 13); each group is at most a few
    hundred rows, opened on purpose, and its first rows are where calc is least accurate."""
    groups: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(_group(scenarios[r["id"]]), []).append(r)
    out = []
    for (layout, tuning), members in sorted(groups.items()):
        members.sort(key=lambda r: (-abs(r["error"]), natural_key(r["id"])))
        splits = Counter(r["split"] for r in members)
        median = statistics.median(abs(r["error"]) for r in members)
        out.append(
            f'<details class="case-group" markdown="1"><summary><strong>{LAYOUTS[layout]}, '
            f"{list(TUNING.values())[tuning]}</strong>: {len(members)} cases "
            f"({splits['dev']} dev, {splits['test']} test); median error {pct(median)}, "
            f"worst {pct(members[0]['error'], True)}</summary>\n\n{table(members)}\n\n"
            "</details>")
    return "\n\n".join(out)


def context(src: str) -> dict[str, str]:
    acc = _accuracy()
    rows = acc.traced_rows("all")
    by_split = {s: [r for r in rows if r["split"] == s] for s in ("dev", "test")}
    ctx: dict[str, str] = {
        "cases": str(len(rows)),
        "dev_cases": str(len(by_split["dev"])),
        "test_cases": str(len(by_split["test"])),
    }
    validated = {r["id"] for r in rows if r["validated"]}

    def summary_row(label: str, key: str, keep: Callable[[dict[str, Any]], bool],
                    name: str | None = None) -> list[str]:
        """Median and worst absolute error of `key` per split, over the rows `keep` selects."""
        cells = [label, " / ".join(str(sum(map(keep, by_split[sp]))) for sp in ("dev", "test"))]
        for split in ("dev", "test"):
            s = acc.summary([r for r in by_split[split] if keep(r)], key)
            if name:
                ctx[f"{name}_{split}_median"] = pct(s["median_abs_error"])
                ctx[f"{name}_{split}_worst"] = pct(s["max_abs_error"])
            cells += [pct(s["median_abs_error"]), pct(s["max_abs_error"])]
        return cells

    summary_rows = [summary_row("calc", "error", lambda r: True, "error"),
                    summary_row(f"calc, the {len(validated)} cases it reports `validated`",
                                "error", lambda r: r["id"] in validated)]
    for key, label in KEYS[1:]:
        def compared(r: dict[str, Any], key: str = key) -> bool:
            return r[key] is not None
        summary_rows += [summary_row(label, key, compared, key),
                         summary_row("calc, on the same cases", "error", compared)]
    ctx["summary_table"] = md_table(
        ["", "cases (dev / test)", "dev: median abs. error", "dev: worst",
         "test: median abs. error", "test: worst"], summary_rows, "lrrrrr")
    omitted = []
    for b in BASELINES:
        reasons = Counter(r["omits"][b.name] for r in rows)
        omitted += [[dict(KEYS)[b.name], reason or "(compared)", str(n)]
                    for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1])]
    ctx["omitted_table"] = md_table(["formula", "the scenario uses what it does not model",
                                     "cases"], omitted, "llr")
    ctx["scatter"] = scatter_figure(rows)
    phase_match = sum(r["traced_phase"] == r["predicted_phase"] for r in rows)
    ctx["phase_match"] = str(phase_match)

    def cases_table(members: list[dict[str, Any]]) -> str:
        table = []
        for r in members:
            phase = r["traced_phase"] if r["traced_phase"] == r["predicted_phase"] else \
                f"{r['traced_phase']} / **{r['predicted_phase']}**"
            table.append([_case_cell(r["id"]), r["split"], num_gib(r["traced"]),
                          num_gib(r["predicted"]), pct(r["error"], True),
                          *(_signed(r[key]) for key, _ in KEYS[1:]), phase])
        return md_table(
            ["case id (model, setting)", "split", "traced GiB", "calc GiB", "calc",
             "Korthikanti", "Megatron", "EleutherAI", "peak phase (traced / calc)"], table,
            "llrrrrrrl")

    scenarios = {c["id"]: parse_scenario(c["scenario"]) for c in acc.load("cases.json")}
    ctx["case_groups"] = cases_by_group(rows, scenarios, cases_table)

    pub = acc.published_rows()
    kept = [r for r in pub if "excluded" not in r]
    excluded = [r for r in pub if "excluded" in r]
    s = acc.summary(kept)
    ctx.update(published_total=str(len(pub)), published_kept=str(len(kept)),
               published_excluded=str(len(excluded)),
               published_median=pct(s["median_abs_error"]),
               published_worst=pct(s["max_abs_error"]),
               published_min=pct(min(r["error"] for r in kept), True),
               published_max=pct(max(r["error"] for r in kept), True))
    field = acc.METRIC_FIELD
    ctx["published_table"] = md_table(
        ["measurement", "statistic", "published GiB", "calc figure", "calc GiB", "error"],
        [[_measurement(r["id"]), f"`{r['metric']}`", num_gib(r["published"]),
          f"`{field[r['metric']]}`", num_gib(r["predicted"]), pct(r["error"], True)]
         for r in kept], "llrlrr")
    ctx["excluded_table"] = md_table(
        ["measurement", "statistic", "published GiB", "calc GiB (not compared)", "why excluded"],
        [[_measurement(r["id"]), f"`{r['metric']}`", num_gib(r["published"]),
          num_gib(r["predicted"]) if "predicted" in r else "-", r["excluded"]]
         for r in excluded], "llrrl")
    ctx["validated_families"] = ", ".join(f"`{f}`" for f in sorted(VALIDATED_FAMILIES))
    ctx["validated_features"] = md_table(
        ["setting", "values covered by traced cases"],
        [[f"`{path}`", ", ".join(f"`{v}`" for v in sorted(vals, key=str))]
         for path, vals in VALIDATED_FEATURES.items()], "ll")
    return ctx
