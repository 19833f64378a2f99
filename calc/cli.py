"""`calc`: the command line. Thin: parse arguments, call the library, print.

    calc estimate SCENARIO.json [--json] [--tp 4 --seq-len 8192 ...]
    calc estimate --model llama-3-8b --batch 4 --gpu a100-40gb
    calc presets [--json]
    calc max-batch SCENARIO.json [--target 0.85] [--json]     calc max-seq ...
    calc recommend SCENARIO.json [--json]                      calc compare A.json B.json ...
    calc cost SCENARIO.json --tokens 1e12 [--mfu 0.4] [--price-per-gpu-hour 2.5]
    calc export --format deepspeed SCENARIO.json               calc kv-cache MODEL --seq-len N
    calc advise [SCENARIO.json] --model M --gpu G --gpus N [--global-batch B] [--json]
    calc import --format deepspeed ds_config.json --model M [--gpu G] [--dp N]
    calc cheapest [SCENARIO.json] --tokens 1e10 [--deadline-hours H] [--gpus a,b] [--json]
    calc rl [SCENARIO.json] --prompts N --samples-per-prompt K --response-len L [--json]

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
from .plan import (
    DEFAULT_INTER_NODE_GBPS,
    DEFAULT_MAX_GPUS,
    DEFAULT_MFU,
    DEFAULT_TARGET,
    FORMATS,
    IMPORT_FORMATS,
    ExportError,
    FitResult,
    KVQuant,
    PlanError,
    advise,
    cheapest,
    compare,
    export,
    import_config,
    kv_cache_bytes,
    max_micro_batch,
    max_seq_len,
    recommend,
    rl_memory,
    training_cost,
)
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
    _add_plan_commands(sub)
    _add_advise_command(sub)
    _add_import_cheapest_rl_commands(sub)
    return parser


# ---------------------------------------------------------------------------------------------
# Planning commands (calc.plan)
# ---------------------------------------------------------------------------------------------

def _scenario_command(sub: Any, name: str, help: str) -> argparse.ArgumentParser:
    cmd: argparse.ArgumentParser = sub.add_parser(name, help=help)
    cmd.add_argument("scenario", nargs="?", help="scenario JSON file, or - for stdin")
    cmd.add_argument("--json", action="store_true", help="print the result as JSON")
    _add_field_flags(cmd)
    return cmd


def _count(text: str) -> int:
    """A token count: 1000000, 1e12 or 2.5e9."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value.is_integer():
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}")
    return int(value)


def _add_plan_commands(sub: Any) -> None:
    for name, what in (("max-batch", "micro_batch_size"), ("max-seq", "seq_len")):
        cmd = _scenario_command(sub, name, f"largest {what} that fits the memory target")
        cmd.add_argument("--target", type=float, default=DEFAULT_TARGET,
                         help="fraction of the GPU's usable memory (default %(default)s)")
    _scenario_command(sub, "recommend", "changes that save device memory, ranked")
    cmp = sub.add_parser("compare", help="scenarios side by side")
    cmp.add_argument("scenarios", nargs="+", help="scenario JSON files")
    cmp.add_argument("--json", action="store_true")
    cost = _scenario_command(sub, "cost", "FLOPs, step time, time and cost to train N tokens")
    cost.add_argument("--tokens", type=_count, required=True, help="training tokens (1e12 ok)")
    cost.add_argument("--mfu", type=float, default=DEFAULT_MFU,
                      help="assumed utilisation of peak dense TFLOPS (default %(default)s)")
    cost.add_argument("--price-per-gpu-hour", type=float, help="USD (default: a list price)")
    exp = _scenario_command(sub, "export", "framework configuration for the scenario")
    exp.add_argument("--format", choices=FORMATS, required=True)
    kv = sub.add_parser("kv-cache", help="KV cache bytes for inference or RL rollouts")
    kv.add_argument("model", help="model preset id")
    kv.add_argument("--batch", type=int, default=1, help="sequences")
    kv.add_argument("--seq-len", type=int, required=True, help="tokens per sequence")
    kv.add_argument("--dtype-bytes", type=int, default=2, help="bytes per element (bf16: 2)")
    kv.add_argument("--tp", type=int, default=1, help="tensor-parallel GPUs sharing the heads")
    kv.add_argument("--quant-bits", type=int, choices=[2, 4, 8], help="quantised cache")
    kv.add_argument("--group-size", type=int, default=64)
    kv.add_argument("--residual-length", type=int, default=0)
    kv.add_argument("--json", action="store_true")


def _fit_text(r: FitResult) -> str:
    name = r.field.split(".")[1]
    if r.value is None:
        return f"{name}: nothing fits: {r.reason}"
    assert r.device_bytes is not None
    line = (f"{name} {r.value}: {_gib(r.device_bytes)} of {_gib(r.limit_bytes)} "
            f"({r.target:.0%} of the GPU)")
    if r.next_value is not None and r.next_device_bytes is not None:
        line += f"; {r.next_value} would need {_gib(r.next_device_bytes)}"
    return "\n".join([line, *(f"  note: {n}" for n in r.notes)])


def _plan(args: argparse.Namespace) -> tuple[dict[str, Any] | list[Any], str]:
    """Run one planning command: (its JSON, its text)."""
    cmd = args.command
    if cmd == "advise":
        return _advise(args)
    if cmd in _MORE_COMMANDS:
        return _MORE_COMMANDS[cmd](args)
    if cmd == "compare":
        texts = []
        for path in args.scenarios:
            try:
                texts.append(Path(path).read_text())
            except OSError as exc:
                raise ScenarioError("scenario", f"cannot read {path}: {exc.strerror}") from None
        d = compare(texts, labels=[Path(p).stem for p in args.scenarios]).as_dict()
        rows = [f"{'':<28}" + "".join(f"{col['label'][:16]:>18}" for col in d["scenarios"])]
        for key in ("device_bytes", "peak_bytes"):
            rows.append(f"{key:<28}" + "".join(f"{_gib(col[key]):>18}" for col in d["scenarios"]))
        for key in ("utilization", "fits", "micro_batch_size", "gradient_accumulation_steps",
                    "dp", "global_batch_size", "gpus"):
            rows.append(f"{key:<28}" + "".join(
                f"{col[key]:>18.0%}" if key == "utilization" else f"{col[key]!s:>18}"
                for col in d["scenarios"]))
        rows.append(f"difference vs {d['baseline']}:")
        for comp in COMPONENTS:
            rows.append(f"  {comp:<26}" + "".join(
                f"{_gib(col['difference']['components'][comp]):>18}" for col in d["scenarios"]))
        return d, "\n".join(rows)
    if cmd == "kv-cache":
        quant = None
        if args.quant_bits:
            quant = KVQuant(bits=args.quant_bits, group_size=args.group_size,
                            residual_length=args.residual_length)
        n = kv_cache_bytes(args.model, args.batch, args.seq_len, args.dtype_bytes,
                           quant=quant, tp=args.tp)
        return {"kv_cache_bytes": n}, f"KV cache: {_gib(n)} per GPU"
    data = _scenario_from(args)
    if cmd in ("max-batch", "max-seq"):
        fit = (max_micro_batch if cmd == "max-batch" else max_seq_len)(data, args.target)
        return fit.as_dict(), _fit_text(fit)
    if cmd == "recommend":
        recs = recommend(data)
        lines = [f"now {_gib(recs.base.device_bytes)} of {_gib(recs.base.usable_bytes)}"]
        for i, r in enumerate(recs.levers, 1):
            lines.append(f"{i:>3}. {r.title}: saves {_gib(r.saving_bytes)} "
                         f"({r.saving_percent:.0f}%){'' if r.fits else ', still does not fit'}")
            lines.append(f"     cost: {r.cost}")
        lines.append("larger GPUs (by headroom):")
        lines += [f"     {r.title}: {_gib(r.headroom_bytes)} headroom"
                  for r in recs.larger_gpus]
        return recs.as_dict(), "\n".join(lines)
    if cmd == "cost":
        c = training_cost(data, args.tokens, mfu=args.mfu,
                          price_per_gpu_hour=args.price_per_gpu_hour)
        money = "no price" if c.cost_usd is None else f"${c.cost_usd:,.0f}"
        lines = [f"{c.gpus} x {c.gpu}: {c.step_seconds:.3f} s/step, "
                 f"{c.tokens_per_second:,.0f} tokens/s at {c.mfu:.0%} of peak",
                 f"{c.tokens:,} tokens: {c.steps:,} steps, {c.train_seconds / 86400:,.2f} days, "
                 f"{c.gpu_hours:,.0f} GPU-hours, {money}"]
        if c.price_source:
            lines.append(f"  price: {c.price_per_gpu_hour} USD/GPU-hour ({c.price_source})")
        lines += [f"  note: {n}" for n in c.notes]
        return c.as_dict(), "\n".join(lines)
    if cmd == "export":
        e = export(data, args.format)
        for note in e.notes:
            print(f"note: {note}", file=sys.stderr)
        return e.as_dict(), e.text.rstrip("\n")
    raise AssertionError(cmd)  # pragma: no cover


def _add_advise_command(sub: Any) -> None:
    adv = _scenario_command(sub, "advise", "parallelism layouts of N GPUs that fit, fastest first")
    adv.add_argument("--gpus", type=int, required=True, help="GPU count (1 to 4096)")
    adv.add_argument("--gpus-per-node", type=int, default=8, help="default %(default)s")
    adv.add_argument("--global-batch", type=int,
                     help="sequences per step (default: the scenario's micro-batch x "
                          "accumulation x dp, else the GPU count)")
    adv.add_argument("--inter-node-gbps", type=float, default=DEFAULT_INTER_NODE_GBPS,
                     help="GB/s per GPU between nodes, one way (default %(default)s: 400 Gb/s "
                          "InfiniBand NDR)")
    adv.add_argument("--mfu", type=float, default=DEFAULT_MFU,
                     help="efficiency of the compute (default %(default)s)")
    adv.add_argument("--target", type=float, default=DEFAULT_TARGET,
                     help="fraction of the GPU's usable memory (default %(default)s)")
    adv.add_argument("--overlap", type=float, default=0.0,
                     help="fraction of communication hidden behind compute (default 0)")
    adv.add_argument("--allow-cross-node-tp", action="store_true",
                     help="let tensor parallelism span nodes")
    adv.add_argument("--top", type=int, default=10, help="plans to list (default %(default)s)")


def _advise(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    """`calc advise`: the scenario's training settings are the base, parallelism is searched."""
    given = [k for k, v in vars(args).items() if v is not None and k.startswith("parallelism.")]
    if given:
        raise PlanError(given[0], "is searched by advise; leave it out")
    data = _scenario_from(args)
    training = dict(data.get("training") or {})
    par = dict(data.get("parallelism") or {})
    batch = args.global_batch
    if batch is None:
        batch = (training.get("micro_batch_size", 1) * training.get(
            "gradient_accumulation_steps", 1) * par.get("dp", 1) if args.scenario else args.gpus)
    seq_len = training.get("seq_len", Training().seq_len)
    result = advise(data["model"], data.get("gpu", "h100-sxm-80gb"), args.gpus, seq_len, batch,
                    gpus_per_node=args.gpus_per_node, inter_node_gbps=args.inter_node_gbps,
                    mfu=args.mfu, target=args.target, overlap=args.overlap,
                    base_training=training, tp_across_nodes=args.allow_cross_node_tp,
                    top=args.top)
    d = result.as_dict()
    lines = [f"{args.gpus} GPUs, {batch} sequences of {seq_len} tokens per step: "
             f"{d['estimates']} estimates over {d['searched']} combinations"]
    for p in d["plans"]:
        lay, est = p["layout"], p["estimate"]
        lines.append(
            f"{p['rank']:>3}. tp {lay['tp']} pp {lay['pp']} dp {lay['dp']} cp {lay['cp']} "
            f"ep {lay['ep']} zero {lay['zero']} ckpt {lay['activation_checkpointing']} "
            f"micro-batch {lay['micro_batch_size']} x {lay['gradient_accumulation_steps']}: "
            f"{p['step_time_s']:.3f} s/step, {p['tokens_per_s']:,.0f} tokens/s, "
            f"{_gib(est['device_bytes'])}")
        lines.append(f"     {p['why']}")
    if not d["plans"]:
        lines.append("nothing fits: " + ", ".join(f"{k} {v}" for k, v in d["rejected"].items()))
    return d, "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# import, cheapest, rl
# ---------------------------------------------------------------------------------------------

def _add_import_cheapest_rl_commands(sub: Any) -> None:
    imp = sub.add_parser("import", help="a DeepSpeed / Accelerate / HF Trainer config as a "
                         "scenario (pipe into calc estimate -)")
    imp.add_argument("--format", choices=IMPORT_FORMATS, required=True)
    imp.add_argument("config", help="the config file, or - for stdin")
    imp.add_argument("--model", required=True, help="model preset id")
    imp.add_argument("--gpu", help="GPU preset id (default: the scenario default)")
    imp.add_argument("--dp", type=int, help="data-parallel GPUs, where the config does not say")
    imp.add_argument("--seq-len", type=int, help="tokens per sequence (configs do not say)")
    imp.add_argument("--json", action="store_true",
                     help="the output is the scenario JSON either way; notes go to stderr")
    chp = _scenario_command(sub, "cheapest", "cheapest GPU type and count to train N tokens")
    chp.add_argument("--tokens", type=_count, required=True, help="training tokens (1e12 ok)")
    chp.add_argument("--deadline-hours", type=float, help="wall-clock limit")
    chp.add_argument("--gpus", help="comma-separated GPU preset ids (default: every GPU with "
                     "a list price; --gpu alone restricts to that one)")
    chp.add_argument("--max-gpus", type=int, default=DEFAULT_MAX_GPUS,
                     help="largest count tried, powers of two (default %(default)s)")
    chp.add_argument("--mfu", type=float, default=DEFAULT_MFU,
                     help="assumed utilisation of peak dense TFLOPS (default %(default)s)")
    chp.add_argument("--target", type=float, default=DEFAULT_TARGET,
                     help="fraction of the GPU's usable memory (default %(default)s)")
    chp.add_argument("--top", type=int, default=10, help="options to list (default %(default)s)")
    rl = _scenario_command(sub, "rl", "RL fine-tuning: training + rollout KV cache + engine "
                           "weights per GPU")
    rl.add_argument("--prompts", type=int, required=True, help="prompts per rollout batch")
    rl.add_argument("--samples-per-prompt", type=int, required=True, help="responses each")
    rl.add_argument("--response-len", type=int, required=True, help="tokens per response")
    rl.add_argument("--prompt-len", type=int, default=512, help="tokens (default %(default)s)")
    rl.add_argument("--kv-dtype-bytes", type=int, default=2, help="bf16: 2, fp8 cache: 1")
    rl.add_argument("--separate", action="store_true",
                    help="the rollout engine runs on GPUs of its own (not colocated)")
    rl.add_argument("--engines", type=int, help="rollout engines (default world_size / tp)")


def _import(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    try:
        text = sys.stdin.read() if args.config == "-" else Path(args.config).read_text()
    except OSError as exc:
        raise ScenarioError("config", f"cannot read {args.config}: {exc.strerror}") from None
    scenario, notes = import_config(text, args.format, model=args.model, gpu=args.gpu,
                                    dp=args.dp, seq_len=args.seq_len)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    data = scenario.model_dump(mode="json")
    return data, json.dumps(data, indent=2)


def _cheapest(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    data = _scenario_from(args)
    names = args.gpus.split(",") if args.gpus else ([args.gpu] if args.gpu else None)
    r = cheapest(data, args.tokens, deadline_hours=args.deadline_hours, gpus=names,
                 max_gpus=args.max_gpus, mfu=args.mfu, target=args.target)
    deadline = "" if r.deadline_hours is None else f" within {r.deadline_hours:g} h"
    lines = [f"{r.tokens:,} tokens{deadline}, cheapest first:"]
    for i, o in enumerate(r.options[: args.top], 1):
        c = o.cost
        extra = f" ({', '.join(o.changes)})" if o.changes else ""
        lines.append(f"{i:>3}. {o.gpus} x {o.gpu}{extra}: ${c.cost_usd:,.0f}, "
                     f"{c.train_seconds / 3600:,.1f} h, {c.gpu_hours:,.0f} GPU-hours, "
                     f"{_gib(o.device_bytes)} of {_gib(o.usable_bytes)}")
    if not r.options:
        lines.append("  none")
    if r.unpriced:
        lines.append("no list price (by GPU-hours):")
        lines += [f"     {o.gpus} x {o.gpu}: {o.cost.train_seconds / 3600:,.1f} h, "
                  f"{o.cost.gpu_hours:,.0f} GPU-hours" for o in r.unpriced[: args.top]]
    lines += [f"  {gpu}: {why}" for gpu, why in r.rejected.items()]
    lines += [f"  note: {n}" for n in r.notes]
    return r.as_dict(), "\n".join(lines)


def _rl(args: argparse.Namespace) -> tuple[dict[str, Any], str]:
    m = rl_memory(_scenario_from(args), prompts=args.prompts,
                  samples_per_prompt=args.samples_per_prompt, response_len=args.response_len,
                  prompt_len=args.prompt_len, kv_dtype_bytes=args.kv_dtype_bytes,
                  colocated=not args.separate, engines=args.engines)
    lines = [f"{m.sequences} sequences of {m.seq_len} tokens, {m.engines} engine(s) of tp "
             f"{m.tp}, {m.sequences_per_engine} sequences each, on {m.gpu}:"]
    lines += [f"  {name:<18}{_gib(value):>14}" + ("  <- dominates" if name == m.dominant
                                                  else "")
              for name, value in m.components.items()]
    lines.append(f"  {'per GPU':<18}{_gib(m.total_bytes):>14}  of {_gib(m.usable_bytes)} "
                 f"({m.utilization:.0%}, {'fits' if m.fits else 'DOES NOT FIT'})")
    lines += [f"  note: {n}" for n in m.notes]
    return m.as_dict(), "\n".join(lines)


_MORE_COMMANDS = {"import": _import, "cheapest": _cheapest, "rl": _rl}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "presets":
            print(_presets(args.json))
            return 0
        if args.command != "estimate":
            data, text = _plan(args)
            print(json.dumps(data, indent=2) if args.json else text)
            return 0
        report = estimate(_scenario_from(args))
    except (ScenarioError, PlanError, ExportError) as exc:
        print(f"calc: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report.as_dict(), indent=2) if args.json else format_table(report))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
