"""`calc`: the command line. Thin: parse arguments, call the library, print.

    calc estimate SCENARIO.json [--json] [--tp 4 --seq-len 8192 ...]
    calc estimate --model llama-3-8b --batch 4 --gpu a100-40gb
    calc presets [--json]

Flags are generated from the scenario's fields (`--micro-batch-size` for
`training.micro_batch_size`), so the CLI and the JSON contract cannot drift apart. Errors go to
stderr as one plain line naming the field, with exit code 2.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from ._version import __version__
from .estimate import COMPONENTS, Estimate, estimate
from .presets import gpus, models
from .scenario import Parallelism, ScenarioError, Training, scenario_dict

GiB = 1024**3
ALIASES = {"micro_batch_size": ["--batch"]}


def _add_field_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="model preset id (overrides the file)")
    parser.add_argument("--gpu", help="GPU preset id (overrides the file)")
    for group, model in (("training", Training), ("parallelism", Parallelism)):
        section = parser.add_argument_group(group)
        for name, info in model.model_fields.items():
            flag = "--" + name.replace("_", "-")
            kwargs: dict[str, Any] = {"dest": f"{group}.{name}", "default": None,
                                      "help": info.description or f"{group}.{name}"}
            annotation = info.annotation
            if get_origin(annotation) is Literal:
                kwargs["choices"] = list(get_args(annotation))
            elif annotation is bool:
                kwargs["action"] = argparse.BooleanOptionalAction
            elif annotation in (int, float):
                kwargs["type"] = annotation
            elif isinstance(annotation, types.UnionType):  # int | None
                kwargs["type"] = next(a for a in get_args(annotation) if a is not type(None))
            section.add_argument(flag, *ALIASES.get(name, []), **kwargs)


def _scenario_from(args: argparse.Namespace) -> dict[str, Any]:
    data: dict[str, Any] = {}
    if args.scenario:
        try:
            text = sys.stdin.read() if args.scenario == "-" else Path(args.scenario).read_text()
        except OSError as exc:
            raise ScenarioError("scenario", f"cannot read {args.scenario}: {exc.strerror}") from None
        data = scenario_dict(text)
    for key, value in vars(args).items():
        if value is None or "." not in key:
            continue
        group, name = key.split(".", 1)
        section = data.setdefault(group, {})
        if not isinstance(section, dict):
            raise ScenarioError(group, "must be a JSON object")
        section[name] = value
    if args.model:
        data["model"] = args.model
    if args.gpu:
        data["gpu"] = args.gpu
    if "model" not in data:
        raise ScenarioError("model", "is required: give a scenario file or --model")
    return data


def _gib(n: int) -> str:
    return f"{n / GiB:,.2f} GiB"


def format_table(e: Estimate) -> str:
    d = e.as_dict()
    s = e.scenario
    name = s.model if isinstance(s.model, str) else s.model.__class__.__name__
    lines = [
        f"{name} on {e.resolved.gpu.name}  (calc {__version__})",
        f"  device memory  {_gib(e.device_bytes):>14}  of {_gib(e.usable_bytes)}"
        f"  ({e.utilization:.0%}, {'fits' if e.fits else 'DOES NOT FIT'})",
        f"  peak allocated {_gib(e.peak_bytes):>14}  during {e.peak_phase}",
        f"  reserved       {_gib(e.reserved_bytes):>14}",
        "",
        "  at the peak:",
    ]
    lines += [f"    {c:<18}{_gib(d['components'][c]):>14}" for c in COMPONENTS]
    lines += ["", "  phases:"]
    lines += [f"    {p:<18}{_gib(v['peak_bytes']):>14}" for p, v in d["phases"].items()]
    lines += ["", "  overhead (empirical):"]
    lines += [f"    {k.split('/')[1]:<18}{_gib(v):>14}" for k, v in e.overhead.items()]
    if e.host_bytes:
        lines += ["", f"  host memory (offload) {_gib(e.host_bytes)} per GPU"]
    lines += ["", f"  parameters {e.param_count:,} ({e.trainable_param_count:,} trainable)"]
    lines.append(f"  confidence: {e.confidence['level']}")
    lines += [f"    - {m}" for m in e.confidence["missing"]]
    lines += [f"  warning [{w['field']}]: {w['message']}" for w in d["warnings"]]
    return "\n".join(lines)


def _presets(as_json: bool) -> str:
    ms, gs = models(), gpus()
    if as_json:
        return json.dumps({
            "models": [{"id": m.id, "name": m.name, "param_count": m.hf_param_count,
                        "aliases": list(m.aliases)} for m in ms.values()],
            "gpus": [{"id": g.id, "name": g.name, "usable_bytes": g.usable_bytes,
                      "aliases": list(g.aliases)} for g in gs.values()],
        }, indent=2)
    out = ["models:"]
    out += [f"  {m.id:<16} {m.name}" for m in ms.values()]
    out += ["gpus:"]
    out += [f"  {g.id:<16} {g.name} ({g.usable_bytes / GiB:.1f} GiB usable)" for g in gs.values()]
    return "\n".join(out)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="calc", description="Per-GPU LLM training memory")
    parser.add_argument("--version", action="version", version=f"calc {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    est = sub.add_parser("estimate", help="estimate per-GPU memory for a scenario")
    est.add_argument("scenario", nargs="?", help="scenario JSON file, or - for stdin")
    est.add_argument("--json", action="store_true", help="print the report as JSON")
    _add_field_flags(est)
    pre = sub.add_parser("presets", help="list model and GPU presets")
    pre.add_argument("--json", action="store_true")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "presets":
            print(_presets(args.json))
            return 0
        report = estimate(_scenario_from(args))
    except ScenarioError as exc:
        print(f"calc: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report.as_dict(), indent=2) if args.json else format_table(report))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
