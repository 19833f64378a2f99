"""A fuzzing campaign over every surface that reads input, counting failures by kind.

    python tools/fuzz_campaign.py [--count 2000] [--seed 1]

Draws inputs from the strategies of tests/test_fuzz.py (the command line in process, the
framework importers, the config.json readers, scenarios with wrong types) and runs each. A
failure is anything but a result or a field error: a traceback, NaN or infinity in the JSON, a
usage error longer than one line. Prints the count tried and the failures per surface, with
one example of each kind. The test suite runs the same strategies, bounded; this runs longer.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import math
import random
import sys
import typing
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
warnings.filterwarnings("ignore")

import test_fuzz as fz  # noqa: E402  (the strategies)
from hypothesis.errors import NonInteractiveExampleWarning  # noqa: E402

from calc import ScenarioError, estimate  # noqa: E402
from calc.architecture import ConfigError, from_hf_config  # noqa: E402
from calc.cli import main  # noqa: E402
from calc.errors import FieldError  # noqa: E402
from calc.plan import import_config  # noqa: E402

warnings.simplefilter("ignore", NonInteractiveExampleWarning)


def _cli(case: tuple[list[str], str]) -> str | None:
    argv, stdin = case
    out, err = io.StringIO(), io.StringIO()
    saved, sys.stdin = sys.stdin, io.StringIO(stdin)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:
                code = exc.code  # type: ignore[assignment]
    finally:
        sys.stdin = saved
    if code not in (0, 2):
        return f"exit {code}"
    if code == 2 and (not err.getvalue().startswith("calc: error: ")
                      or err.getvalue().count("\n") != 1):
        return "usage error not one line"
    if code == 0 and "--json" in argv:
        try:
            fz._no_nan(out.getvalue())
        except AssertionError:
            return "NaN/Infinity in JSON"
    return None


def _importer(case: tuple[str, Any, bool]) -> str | None:
    fmt, text, _ = case
    with contextlib.suppress(FieldError):
        estimate(import_config(text, fmt, model="gpt2", seq_len=512).scenario)
    return None


def _hf_config(config: dict[str, Any]) -> str | None:
    try:
        from_hf_config(config)
        estimate({"model": {"hf_config": config}, "training": {"seq_len": 128}})
    except (ConfigError, ScenarioError):
        pass
    return None


def _right_type(annotation: Any, value: Any) -> bool:
    """Whether `value` is what a field of `annotation` means (no coercion)."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Literal:
        return value in args
    if args:  # int | None
        return any(_right_type(a, value) for a in args)
    if annotation is type(None):
        return value is None
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, int | float) and not isinstance(value, bool) \
            and math.isfinite(value)
    return True


def _scenario(case: tuple[tuple[str, str], Any]) -> str | None:
    (group, name), value = case
    scenario: dict[str, Any] = {"model": "gpt2", "training": {"seq_len": 512}, "parallelism": {}}
    scenario[group][name] = value
    try:
        estimate(scenario).as_dict()
    except ScenarioError:
        return None
    model = fz.Training if group == "training" else fz.Parallelism
    if not _right_type(model.model_fields[name].annotation, value):
        return "a wrong type accepted"
    return None


SURFACES = {
    "command line": (fz.command_lines(), _cli),
    "framework import": (fz.st.tuples(
        fz.st.sampled_from(["deepspeed", "accelerate-fsdp", "hf-trainer"]),
        fz.st.one_of(fz.configs.map(json.dumps), fz.st.text(max_size=120),
                     fz.st.binary(max_size=40)), fz.st.booleans()), _importer),
    "config.json": (fz.hf_configs, _hf_config),
    "scenario fields": (fz.st.tuples(fz.st.sampled_from(
        [*(("training", f) for f in fz.Training.model_fields),
         *(("parallelism", f) for f in fz.Parallelism.model_fields)]), fz.wrong), _scenario),
}


def run(count: int, seed: int) -> dict[str, collections.Counter[str]]:
    random.seed(seed)
    found: dict[str, collections.Counter[str]] = {}
    for surface, (strategy, check) in SURFACES.items():
        kinds: collections.Counter[str] = collections.Counter()
        example: dict[str, str] = {}
        for _ in range(count):
            case = strategy.example()
            try:
                failure = check(case)
            except RecursionError:
                failure = "RecursionError"
            except Exception as exc:
                failure = type(exc).__name__
            if failure:
                kinds[failure] += 1
                example.setdefault(failure, repr(case)[:200])
        found[surface] = kinds
        total = sum(kinds.values())
        print(f"{surface}: {count} tried, {total} failed" + "".join(
            f"\n  {k}: {n}, e.g. {example[k]}" for k, n in kinds.most_common()))
    return found


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    run(args.count, args.seed)
