"""`calc`: the command line, generated from the operations (`calc.operations`).

    calc estimate SCENARIO.json [--json] [--tp 4 --seq-len 8192 ...]
    calc estimate --model llama-3-8b --batch 4 --gpu a100-40gb
    calc max-batch SCENARIO.json [--target 0.85] [--json]     calc kv-cache MODEL --seq-len N
    calc advise [SCENARIO.json] --model M --gpu G --gpus N    calc import --format F CONFIG ...

One subcommand per operation, one flag per field of its request model (help and default from
the field). An operation with a `scenario` takes a scenario file (or - for stdin) and the
scenario flags, generated from the scenario's fields (`--micro-batch-size` for
`training.micro_batch_size`), so the CLI and the JSON contract cannot drift apart; a request
field named `model`, `gpu`, `training` or `parallelism` gets those flags instead of the
scenario. Errors go to stderr as one plain line naming the field, with exit code 2.
"""

from __future__ import annotations

import argparse
import os
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, NoReturn, Union, get_args, get_origin

from pydantic.fields import FieldInfo

from ._version import __version__
from .errors import FieldError, printable
from .operations import Cli, Operation, every, get, json_text
from .reading import InputError, decode
from .scenario import Parallelism, ScenarioError, Training, scenario_dict

ALIASES = {"micro_batch_size": ["--batch"]}
GROUPS = (("training", Training), ("parallelism", Parallelism))
SCENARIO_FLAGS = ("model", "gpu", "training", "parallelism")  # request fields they may fill


def _cli(info: FieldInfo) -> Cli:
    return next((m for m in info.metadata if isinstance(m, Cli)), Cli())


def _bare(annotation: Any) -> Any:
    """`int | None` -> int."""
    if isinstance(annotation, types.UnionType) or get_origin(annotation) is Union:
        return next(a for a in get_args(annotation) if a is not type(None))
    return annotation


def _count(text: str) -> int:
    """A whole number, as a count is written: 1000000, 1e12 or 2.5e9."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value.is_integer():
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}")
    return int(value)


def _comma(text: str) -> list[str]:
    return text.split(",")


def _typed(annotation: Any, kwargs: dict[str, Any]) -> None:
    """argparse's `type` and `choices` for a field's annotation."""
    bare = _bare(annotation)
    if get_origin(bare) is Literal:
        kwargs["choices"] = list(get_args(bare))
        kwargs["type"] = type(kwargs["choices"][0])
    elif bare is int:
        kwargs["type"] = _count  # whole numbers in scientific notation too (3e8)
    elif bare is float:
        kwargs["type"] = float


def helps(info: FieldInfo) -> str:
    """A request field's help: its description and its default."""
    text = info.description or ""
    default = None if info.is_required() else info.get_default(call_default_factory=True)
    if default not in (None, False, {}, []):
        text += f" (default {default})"
    return text


def _add_scenario_flags(parser: argparse.ArgumentParser, own: dict[str, FieldInfo]) -> None:
    """--model, --gpu and a flag per training and parallelism field."""
    for name, what in (("model", "model preset id"), ("gpu", "GPU preset id")):
        text = own[name].description if name in own else f"{what} (overrides the file)"
        parser.add_argument(f"--{name}", help=text)
    for group, model in GROUPS:
        section = parser.add_argument_group(group)
        for name, info in model.model_fields.items():
            kwargs: dict[str, Any] = {"dest": f"{group}.{name}", "default": None,
                                      "help": (info.description or f"{group}.{name}").replace(
                                          "%", "%%")}
            if info.annotation is bool:
                kwargs["action"] = argparse.BooleanOptionalAction
            else:
                _typed(info.annotation, kwargs)
            section.add_argument("--" + name.replace("_", "-"), *ALIASES.get(name, []), **kwargs)


def _add_field(parser: argparse.ArgumentParser, name: str, info: FieldInfo) -> None:
    cli = _cli(info)
    text = (cli.help or helps(info)).replace("%", "%%")
    if cli.argument:
        listed = get_origin(_bare(info.annotation)) is list
        parser.add_argument(cli.argument, nargs="+" if listed else None, help=text)
        return
    flag = cli.flag or "--" + name.replace("_", "-")
    kwargs: dict[str, Any] = {"dest": name, "default": None, "help": text}
    if _bare(info.annotation) is bool:
        kwargs.update(action="store_const", const=not cli.negate)
    else:
        kwargs["required"] = info.is_required()
        _typed(info.annotation, kwargs)
        if cli.count:
            kwargs["type"] = _count
        if cli.comma:
            kwargs["type"] = _comma
    parser.add_argument(flag, **kwargs)


def add_command(sub: Any, op: Operation[Any, Any]) -> argparse.ArgumentParser:
    """The subcommand of one operation: its arguments in its request's field order."""
    cmd: argparse.ArgumentParser = sub.add_parser(op.name, help=op.help, description=op.help)
    fields = op.request.model_fields
    if "scenario" in fields:
        cmd.add_argument("scenario", nargs="?", help="scenario JSON file, or - for stdin")
        cmd.add_argument("--json", action="store_true", help="print the result as JSON")
        _add_scenario_flags(cmd, fields)
    for name, info in fields.items():
        if name != "scenario" and not ("scenario" in fields and name in SCENARIO_FLAGS) \
                and not any(_cli(i).labels == name for i in fields.values()):
            _add_field(cmd, name, info)
    if "scenario" not in fields:
        cmd.add_argument("--json", action="store_true", help="print the result as JSON")
    return cmd


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as calc reports every error: one line, exit 2,
    with `--help` named for the rest (argparse prints the whole usage block)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"calc: error: {printable(message)} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="calc", description="Per-GPU LLM training memory")
    parser.add_argument("--version", action="version", version=f"calc {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for op in every():
        if op.cli:
            add_command(sub, op)
    return parser


# ---------------------------------------------------------------------------------------------
# Arguments -> the request
# ---------------------------------------------------------------------------------------------

def _read(path: str, field: str) -> str:
    """The text of file `path` (- for stdin), as UTF-8 of at most a MiB."""
    try:
        stdin = getattr(sys.stdin, "buffer", sys.stdin)  # bytes, where stdin has them
        data = stdin.read() if path == "-" else Path(path).read_bytes()
        return decode(data)
    except OSError as exc:
        raise ScenarioError(field, f"cannot read {printable(path)}: {exc.strerror}") from None
    except InputError as exc:
        raise ScenarioError(field, f"{printable(path)} {exc.message}") from None


def _scenario_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The scenario flags given: {"model": ..., "gpu": ..., "training": {...}, ...}."""
    given: dict[str, Any] = {}
    for key, value in vars(args).items():
        if value is None:
            continue
        if "." in key:
            group, name = key.split(".", 1)
            given.setdefault(group, {})[name] = value
        elif key in ("model", "gpu"):
            given[key] = value
    return given


def _over(data: dict[str, Any], flags: dict[str, Any]) -> dict[str, Any]:
    """The scenario file's data with the flags over it."""
    for key, value in flags.items():
        if isinstance(value, dict):
            section = data.setdefault(key, {})
            if not isinstance(section, dict):
                raise ScenarioError(key, "must be a JSON object")
            section.update(value)
        else:
            data[key] = value
    return data


def request_data(op: Operation[Any, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The request's fields from parsed arguments (left out where not given: the default).

    With a scenario: the file, the scenario flags over it, except the flags the request has a
    field of its own for (advise's `model`, `gpu`, `training`, `parallelism`; cheapest's
    `gpu`), which go there; an optional scenario (advise) is left out without a file."""
    fields = op.request.model_fields
    out: dict[str, Any] = {}
    if "scenario" in fields:
        flags = _scenario_flags(args)
        own = {k: v for k, v in flags.items() if k in fields}
        data = scenario_dict(_read(args.scenario, "scenario")) if args.scenario else None
        scenario = _over(data or {}, {k: v for k, v in flags.items() if k not in own})
        if "model" not in scenario and "model" not in own:
            raise ScenarioError("model", "is required: give a scenario file or --model")
        if data is not None or fields["scenario"].is_required():
            out["scenario"] = scenario
        out.update(own)
    for name, info in fields.items():
        cli = _cli(info)
        value = getattr(args, cli.argument or name, None)
        if name in out or value is None:
            continue
        if cli.file and isinstance(value, list):
            if value.count("-") > 1:
                raise ScenarioError(name, "standard input (-) can be read once")
            out[name] = [_read(path, "scenario") for path in value]
            if cli.labels:
                out[cli.labels] = ["stdin" if path == "-" else Path(path).stem for path in value]
        elif cli.file:
            out[name] = _read(value, cli.argument or name)
        else:
            out[name] = value
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    op = get(args.command)
    try:
        request = op.parse(request_data(op, args))
        result = op.run(request)
        for note in op.notes(result):
            print(f"note: {note}", file=sys.stderr)
        print(json_text(op.data(result, request)) if args.json else op.text(result, request))
        sys.stdout.flush()
    except FieldError as exc:
        print(f"calc: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `calc presets | head -1`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no flush error at exit
        return 0
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
