"""A behaviour snapshot for refactors: every estimate and every CLI answer, byte for byte.

    python tools/snapshot.py write build/before.jsonl     # before the change
    python tools/snapshot.py write build/after.jsonl      # after it
    python tools/snapshot.py diff build/before.jsonl build/after.jsonl

`write` estimates a few thousand seeded random scenarios (valid and invalid: an error is
recorded as its field and message) and runs every CLI subcommand on a few dozen of them, text
and --json, recording stdout, stderr and the exit code. `diff` lists the records that differ.
A refactor that claims "no number changes" shows an empty diff. Fields named in `--ignore`
(dotted paths into the estimate JSON, e.g. `peak_moment`) are left out of the comparison, for
fields a change adds on purpose.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

from calc import ScenarioError, estimate
from calc.cli import main as cli_main
from calc.presets import models

SEED = 20261124
TRAINING: dict[str, list[Any]] = {
    "micro_batch_size": [1, 1, 2, 3, 4, 8],
    "seq_len": [256, 512, 1024, 2048, 4096, 8192, 1000],
    "gradient_accumulation_steps": [1, 1, 2, 4, 8],
    "precision": ["bf16", "bf16", "fp16", "fp32", "fp8"],
    "mixed_precision": ["amp", "pure", "master"],
    "optimizer": ["adamw", "adam", "sgd", "sgd_momentum", "adafactor", "lion", "adamw_8bit"],
    "optimizer_impl": ["fused", "foreach", "for_loop"],
    "activation_checkpointing": ["none", "selective", "full"],
    "recompute_layers": [None, None, None, 1, 4],
    "attention": ["flash", "eager"],
    "loss": ["standard", "chunked"],
    "finetuning": ["full", "full", "lora", "qlora"],
    "lora_rank": [8, 16, 64],
    "lora_targets": ["all_linear", "attention", "query_value"],
    "lora_dropout": [0.0, 0.0, 0.1],
    "implementation": ["hf", "hf", "megatron"],
}
PARALLELISM: dict[str, list[Any]] = {
    "dp": [1, 1, 2, 4, 8, 64],
    "tp": [1, 1, 2, 4, 8],
    "pp": [1, 1, 2, 4],
    "cp": [1, 1, 2],
    "ep": [1, 1, 2, 8],
    "zero": [0, 1, 2, 3],
    "sequence_parallel": [False, True],
    "offload_optimizer": [False, False, True],
    "offload_params": [False, False, True],
}
GPUS = ["h100-sxm-80gb", "a100-40gb", "a100-80gb", "v100-32gb", "mi300x-192gb", "rtx-4090-24gb"]
HF_CONFIGS = [
    {"model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 8, "num_attention_heads": 16,
     "num_key_value_heads": 4, "intermediate_size": 5632, "vocab_size": 32000},
    {"model_type": "qwen3_moe", "hidden_size": 1024, "num_hidden_layers": 6,
     "num_attention_heads": 16, "num_key_value_heads": 4, "intermediate_size": 3072,
     "moe_intermediate_size": 512, "num_experts": 16, "num_experts_per_tok": 4,
     "vocab_size": 50000, "head_dim": 64},
]


def scenarios(n: int) -> list[dict[str, Any]]:
    rng = random.Random(SEED)
    ids = sorted(models())
    out = []
    for _ in range(n):
        model: Any = rng.choice(ids) if rng.random() < 0.93 else {"hf_config": rng.choice(HF_CONFIGS)}
        training = {k: rng.choice(v) for k, v in TRAINING.items() if rng.random() < 0.5}
        parallelism = {k: rng.choice(v) for k, v in PARALLELISM.items() if rng.random() < 0.5}
        out.append({"model": model, "training": training, "parallelism": parallelism,
                    "gpu": rng.choice(GPUS)})
    return out


def _estimate(scenario: dict[str, Any]) -> dict[str, Any]:
    try:
        return estimate(scenario).as_dict()
    except ScenarioError as exc:
        return {"error": [exc.field, exc.message]}


def _cli(argv: list[str]) -> dict[str, Any]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli_main(argv)
        except SystemExit as exc:  # argparse
            code = exc.code if isinstance(exc.code, int) else 2
    return {"argv": argv, "code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}


def _commands(paths: list[str]) -> list[list[str]]:
    cmds: list[list[str]] = [["presets"], ["presets", "--json"],
                             ["kv-cache", "llama-3-8b", "--seq-len", "8192", "--batch", "4"],
                             ["kv-cache", "deepseek-v3", "--seq-len", "4096", "--tp", "8"],
                             ["kv-cache", "llama-3-8b", "--seq-len", "8192", "--quant-bits", "4"]]
    for i, path in enumerate(paths):
        cmds += [["estimate", path], ["estimate", path, "--json"],
                 ["max-batch", path, "--json"], ["max-seq", path],
                 ["recommend", path, "--json"], ["cost", path, "--tokens", "1e9", "--json"],
                 ["cost", path, "--tokens", "1e10"]]
        cmds += [["export", "--format", f, path] for f in
                 ("deepspeed", "accelerate-fsdp", "torchtitan", "megatron", "hf-trainer")]
        if i % 4 == 0:
            cmds += [["rl", path, "--prompts", "8", "--samples-per-prompt", "4",
                      "--response-len", "2048", "--json"],
                     ["compare", path, paths[(i + 1) % len(paths)], "--json"]]
        if i % 8 == 0:
            cmds += [["cheapest", path, "--tokens", "1e9", "--max-gpus", "16", "--json"],
                     ["advise", path, "--gpus", "8", "--top", "3", "--json"],
                     ["advise", path, "--gpus", "16", "--global-batch", "32"]]
    return cmds


def write(dest: Path, count: int) -> None:
    records = []
    for i, sc in enumerate(scenarios(count)):
        records.append({"id": f"estimate/{i}", "scenario": sc, "result": _estimate(sc)})
    valid = [r["scenario"] for r in records if "error" not in r["result"]][:48]
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i, sc in enumerate(valid):
            path = Path(tmp) / f"s{i}.json"
            path.write_text(json.dumps(sc))
            paths.append(str(path))
        for j, argv in enumerate(_commands(paths)):
            result = _cli(argv)
            result["argv"] = [a.replace(tmp, "TMP") for a in argv]
            for key in ("stdout", "stderr"):
                result[key] = result[key].replace(tmp, "TMP")
            records.append({"id": f"cli/{j}", "result": result})
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
    print(f"{dest}: {len(records)} records")


def _drop(data: Any, path: str) -> None:
    head, _, rest = path.partition(".")
    if isinstance(data, dict) and head in data:
        if rest:
            _drop(data[head], rest)
        else:
            del data[head]


def diff(a: Path, b: Path, ignore: list[str]) -> int:
    left = [json.loads(line) for line in a.read_text().splitlines()]
    right = [json.loads(line) for line in b.read_text().splitlines()]
    if len(left) != len(right):
        print(f"record counts differ: {len(left)} vs {len(right)}")
        return 1
    changed = 0
    for x, y in zip(left, right, strict=True):
        for rec in (x, y):
            for path in ignore:
                _drop(rec["result"], path)
                if rec["id"].startswith("cli/") and rec["result"]["stdout"].startswith("{"):
                    try:
                        out = json.loads(rec["result"]["stdout"])
                    except json.JSONDecodeError:
                        continue
                    _drop(out, path)
                    rec["result"]["stdout"] = json.dumps(out, indent=2) + "\n"
        if x != y:
            changed += 1
            if changed <= 10:
                print(f"- {x['id']}: {json.dumps(x)[:600]}\n+ {y['id']}: {json.dumps(y)[:600]}\n")
    print(f"{changed} of {len(left)} records differ")
    return 1 if changed else 0


def cli() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write")
    w.add_argument("dest", type=Path)
    w.add_argument("--count", type=int, default=3000)
    d = sub.add_parser("diff")
    d.add_argument("a", type=Path)
    d.add_argument("b", type=Path)
    d.add_argument("--ignore", action="append", default=[])
    args = parser.parse_args()
    if args.cmd == "write":
        write(args.dest, args.count)
        return 0
    return diff(args.a, args.b, args.ignore)


if __name__ == "__main__":
    sys.exit(cli())
