"""The operations registry: each tool declared once, and the CLI, the worker and the page data
generated from it, so that no default is decided twice."""

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from calc import estimate, parse_scenario
from calc.cli import build_parser, main
from calc.estimate import COMPONENTS
from calc.formatting import COMPONENT_LABELS
from calc.operations import DECLARED_IN, Cli, answer, every, get
from calc.plan import DEFAULT_TARGET, FORMATS, advise, cheapest, rl_memory
from calc.plan.export import FORMAT_NAMES
from calc.plan.importers import IMPORT_EXAMPLES, IMPORT_FORMAT_NAMES

ROOT = Path(__file__).resolve().parents[1]
OPS = every()
SMALL = {"model": "llama-3.2-1b", "training": {"seq_len": 2048, "micro_batch_size": 2,
                                               "gradient_accumulation_steps": 2},
         "parallelism": {"dp": 2}, "gpu": "a100-80gb"}


def ask(name: str, request: dict) -> dict:
    return json.loads(answer(name, json.dumps(request)))


def test_each_operation_is_declared_in_the_module_the_registry_names() -> None:
    for module in set(DECLARED_IN.values()):
        names = [op.name for op in importlib.import_module(module).OPERATIONS]
        assert sorted(names) == sorted(n for n, m in DECLARED_IN.items() if m == module), module


@pytest.mark.parametrize("op", OPS, ids=[op.name for op in OPS])
def test_requests_are_frozen_strict_and_every_field_is_described(op) -> None:
    config = op.request.model_config
    assert config.get("frozen") and config.get("extra") == "forbid"
    for name, info in op.request.model_fields.items():
        assert info.description, f"{op.name}: {name} has no description"


@pytest.mark.parametrize("op", [op for op in OPS if op.cli], ids=lambda op: op.name)
def test_every_request_field_is_on_the_command_line(op) -> None:
    """Each field is a flag or an argument of the subcommand (its dest, or the argument it
    names), the scenario's flags (dests `training.*`, `parallelism.*`), or read from the files
    another field names."""
    sub = next(a for a in build_parser()._actions if hasattr(a, "choices") and a.choices
               and op.name in a.choices).choices[op.name]
    dests = {a.dest.split(".")[0] for a in sub._actions}
    cli = {name: next((m for m in info.metadata if isinstance(m, Cli)), Cli())
           for name, info in op.request.model_fields.items()}
    labelled = {c.labels for c in cli.values()}
    for name, c in cli.items():
        assert name in dests or c.argument in dests or name in labelled, (op.name, name)


def test_a_null_is_a_field_left_empty_and_errors_name_the_field() -> None:
    got = ask("cheapest", {"scenario": SMALL, "tokens": 10**9, "deadline_hours": None,
                           "max_gpus": 8})
    assert got["ok"] and got["deadline_hours"] is None
    assert ask("cheapest", {"scenario": SMALL}) == {"ok": False, "field": "tokens",
                                                    "message": "is required"}
    assert ask("cheapest", {"scenario": SMALL, "tokens": 10**9, "bogus": 1})["field"] == "bogus"
    assert ask("nope", {})["field"] == "operation"


def test_the_pages_cheapest_answer_has_price_sources_and_no_all_options() -> None:
    got = ask("cheapest", {"scenario": SMALL, "tokens": 10**9, "max_gpus": 8})
    want = cheapest(SMALL, 10**9, max_gpus=8)
    assert "all_options" not in got
    assert [o["price_source"] for o in got["options"]] == [o.cost.price_source
                                                           for o in want.options]


def test_the_pages_rl_answer_carries_the_scenarios_own_estimate() -> None:
    got = ask("rl", {"scenario": SMALL, "prompts": 4, "samples_per_prompt": 2,
                     "response_len": 512})
    want = rl_memory(SMALL, prompts=4, samples_per_prompt=2, response_len=512,
                     prompt_len=get("rl").request.model_fields["prompt_len"].default)
    assert got["total_bytes"] == want.total_bytes
    assert got["scenario_device_bytes"] == estimate(SMALL).device_bytes


def test_the_pages_estimate_answer_is_the_clis_report_with_gpu_cards(capsys, tmp_path) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps(SMALL))
    assert main(["estimate", str(path), "--json"]) == 0
    got = ask("estimate", {"scenario": SMALL})
    assert got["report_text"] + "\n" == capsys.readouterr().out
    assert len(got["gpus"]) > 5 and got["report"]["device_bytes"] == estimate(SMALL).device_bytes


def test_a_live_examples_report_is_the_estimates_without_the_gpu_cards() -> None:
    """The documentation's live examples ask `report`: the calculator's report, none of the
    ~28 estimates of its GPU cards, and the same field errors."""
    page = ask("estimate", {"scenario": SMALL})
    assert ask("report", {"scenario": SMALL}) == {"ok": True, "report": page["report"]}
    bad = {**SMALL, "training": {"seq_len": 0}}
    assert ask("report", {"scenario": bad}) == ask("estimate", {"scenario": bad})
    assert not get("report").cli


def test_advisor_global_batch_default_is_decided_once(capsys, tmp_path) -> None:
    """With a scenario that sets its batch: its micro-batch x accumulation x dp (here 8), on
    the page and the command line alike; with only a model, about 2M tokens per step."""
    path = tmp_path / "s.json"
    path.write_text(json.dumps(SMALL))
    page = ask("advise", {"scenario": SMALL, "gpus": 4, "top": 1})
    assert main(["advise", str(path), "--gpus", "4", "--top", "1", "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert page["assumptions"]["global_batch"] == cli["assumptions"]["global_batch"] == 8
    want = advise("llama-3.2-1b", "a100-80gb", 4, 2048, 8,
                  base_training=parse_scenario(SMALL).training, top=1)
    assert page["plans"][0]["scenario"] == want.as_dict()["plans"][0]["scenario"]
    alone = ask("advise", {"model": "llama-3.2-1b", "gpus": 4, "top": 1})
    assert alone["assumptions"]["global_batch"] == 512  # 2^21 tokens of 4096
    assert alone["assumptions"]["global_batch_source"] == "default"


def test_advisor_refuses_parallelism_it_searches_and_takes_offload() -> None:
    refused = ask("advise", {"scenario": SMALL, "gpus": 4, "parallelism": {"tp": 2}})
    assert refused["ok"] is False and refused["field"] == "parallelism.tp"
    assert "offload_optimizer" in refused["message"]
    forced = ask("advise", {"scenario": SMALL, "gpus": 4, "top": 3,
                            "parallelism": {"offload_optimizer": True}})
    assert forced["plans"] and all(p["layout"]["offload_optimizer"] for p in forced["plans"])


def test_component_labels_cover_the_report() -> None:
    keys = set(estimate({"model": "llama-3.2-1b"}).overhead)
    assert set(COMPONENT_LABELS) == {*COMPONENTS, *keys}


def test_worker_starts_without_calc_plan() -> None:
    """The page's worker imports calc.operations only; a planning tool's module loads when the
    page first asks for it."""
    code = ("import sys; sys.path.insert(0, 'site/calculator'); import calc_worker; "
            "print(sorted(m for m in sys.modules if m.startswith('calc.plan')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"


def test_calculator_javascript_copies_no_library_constant() -> None:
    """The fit target, component labels, format names and import examples reach the page as
    data (tools/site_hooks.py), so the calculator's JavaScript holds none of them."""
    js = "\n".join(p.read_text() for p in (ROOT / "site" / "calculator").glob("*js"))
    assert not re.search(rf"\b{DEFAULT_TARGET}\b", js)
    copied = [*COMPONENT_LABELS.values(), *(FORMAT_NAMES[f] for f in FORMATS if f != "torchtitan"),
              *IMPORT_FORMAT_NAMES.values(), *(e.splitlines()[0] for e in IMPORT_EXAMPLES.values())]
    assert [text for text in copied if f'"{text}"' in js or f"`{text}`" in js] == []


def test_calc_plan_names_load_lazily_from_the_module_that_defines_them() -> None:
    """calc.plan re-exports each tool's names on first use; the type checkers' imports and
    the run-time table name the same modules."""
    import ast

    import calc.plan as plan

    tree = ast.parse((ROOT / "calc" / "plan" / "__init__.py").read_text())
    typed = {alias.name: node.module for node in ast.walk(tree)
             if isinstance(node, ast.ImportFrom) and node.level == 1 for alias in node.names}
    assert typed == plan._WHERE
    for name, module in plan._WHERE.items():
        assert getattr(plan, name) is getattr(importlib.import_module(f"calc.plan.{module}"), name)
