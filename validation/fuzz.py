"""Random combinations of settings, each traced and estimated: where the estimate misses.

Every setting the harness traces is covered by cases on its own; their combinations are not.
This samples scenarios from the models of `validation/cases.json` small enough to trace in
seconds (the cut-down ones and the presets under 2B), with random training settings and a
random layout the harness takes, skips what `calc` refuses, traces each (the first and last
pipeline ranks under pp, the larger counted) and records the estimate beside the trace:

    python validation/fuzz.py run --seed 1 --count 80 --out /tmp/fuzz.jsonl [--layout pp]
    python validation/fuzz.py report /tmp/fuzz.jsonl [--over 0.01]

`report` re-estimates every record with the current `calc` and lists the misses over the
threshold with their `confidence`: a miss marked `validated` is a mechanism to find (reset
one setting at a time to its default to isolate it, then read `trace.py --timeline`); one
marked `extrapolated` names the pair of settings no traced case combines (calc.coverage).
Traced cases come from here only through `make_cases.py`, dev where a mechanism was read
off, test where scored before tracing.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:  # run from anywhere, with either environment
    sys.path.insert(0, str(HERE.parent))

from calc import ScenarioError, estimate  # noqa: E402

# the tracing environment (`make trace` builds it), where torch is
_VAL_PYTHON = HERE.parent / ".venv-val" / "bin" / "python"
TRACE_PYTHON = str(_VAL_PYTHON) if _VAL_PYTHON.exists() else sys.executable
SMALL = {"llama-3.2-1b", "qwen2.5-0.5b", "qwen2.5-1.5b", "qwen3-0.6b", "gemma-3-1b", "gpt2",
         "gemma-2-2b", "gpt2-medium"}
TIED = SMALL - {"gemma-2-2b"}  # (the harness's TP plan needs separate head and embedding)


def _models() -> list[Any]:
    seen: dict[str, Any] = {}
    for case in json.loads((HERE / "cases.json").read_text()):
        model = case["scenario"]["model"]
        if isinstance(model, dict) or model in SMALL:
            seen.setdefault(json.dumps(model, sort_keys=True), model)
    return list(seen.values())


def _arch(model: Any) -> str:
    return json.dumps(model) if isinstance(model, dict) else model


LAYOUTS = ("single", "single", "fsdp", "ddp", "zero12", "deepspeed", "tp", "cp", "pp", "ep",
           "tp+pp", "fsdp x tp")


def sample(rng: random.Random, models: list[Any], layout: str | None = None
           ) -> dict[str, Any] | None:
    """One random scenario the harness can trace, or None (drawn again); `layout`: one of
    `LAYOUTS` only (the others drawn as they would be)."""
    model = rng.choice(models)
    arch = _arch(model)
    moe = any(a in arch for a in ("Moe", "Mixtral", "Deepseek", "GptOss"))
    t: dict[str, Any] = {"micro_batch_size": rng.choice([1, 1, 2, 3]),
                         "seq_len": rng.choice([512, 1024, 1536, 2048])}
    p: dict[str, Any] = {}
    finetuning = rng.choice(["full", "full", "lora", "qlora"])
    if finetuning != "full":
        t.update(finetuning=finetuning, lora_rank=rng.choice([8, 16]),
                 lora_targets=rng.choice(["all_linear", "attention", "query_value"]),
                 mixed_precision=rng.choice(["autocast", "autocast", "amp", "pure"]))
        if rng.random() < 0.3:
            t["lora_dropout"] = 0.1
    else:
        t["mixed_precision"] = rng.choice(["amp", "pure", "master", "autocast"])
    if rng.random() < 0.15:
        t["precision"] = "fp16"
    t["activation_checkpointing"] = rng.choice(["none", "none", "full", "selective"])
    if t["activation_checkpointing"] == "full" and rng.random() < 0.3:
        t["checkpoint_every"] = 2
    for key, value, chance in (("attention", "eager", 0.2), ("loss", "chunked", 0.15),
                               ("padded", True, 0.15), ("gradient_accumulation_steps", 2, 0.2)):
        if rng.random() < chance:
            t[key] = value
    if rng.random() < 0.15:
        t["optimizer_impl"] = rng.choice(["foreach", "for_loop"])
    if rng.random() < 0.1:
        t["optimizer"] = rng.choice(["sgd_momentum", "adafactor", "adam"])
    drawn = rng.choice(LAYOUTS)
    layout = layout or drawn
    if layout == "fsdp":  # (one rank: the wrapper without sharding)
        p.update(dp=rng.choice([1, 2, 4]), zero=3)
    elif layout == "ddp":
        p.update(dp=2, zero=0)
    elif layout == "zero12":
        p.update(dp=rng.choice([1, 2, 4]), zero=rng.choice([1, 2]))
    elif layout == "deepspeed":
        p.update(dp=rng.choice([1, 2, 4]), zero=rng.choice([1, 2, 3]), framework="deepspeed")
        if rng.random() < 0.3:
            p["offload_optimizer"] = True
    elif layout == "tp":
        p.update(tp=2, sequence_parallel=rng.random() < 0.5)
    elif layout == "fsdp x tp":
        p.update(dp=2, zero=3, tp=2, sequence_parallel=rng.random() < 0.5)
    elif layout == "cp":
        p.update(cp=2, dp=rng.choice([1, 2]), zero=3)
    elif layout == "pp":
        p.update(pp=2, pipeline_schedule=rng.choice(["1f1b", "gpipe", "interleaved_1f1b",
                                                     "zero_bubble", "zbv", "dualpipev"]))
        t["gradient_accumulation_steps"] = 4
        if p["pipeline_schedule"] == "interleaved_1f1b":
            p["virtual_stages"] = 2
    elif layout == "tp+pp":
        p.update(pp=2, tp=2)
        t["gradient_accumulation_steps"] = 4
    elif layout == "ep":
        if not moe:
            return None
        p.update(dp=2, ep=2, zero=3)
        if t["mixed_precision"] == "master":  # (DeepSpeed's engine, by default: EP not traced)
            t["mixed_precision"] = "amp"
    meshed = any(p.get(k, 1) > 1 for k in ("tp", "cp", "pp"))
    if meshed:  # the harness traces tp, cp and pp for full training with the standard loss
        for key in ("finetuning", "lora_rank", "lora_targets", "lora_dropout", "loss"):
            t.pop(key, None)
        if t["mixed_precision"] == "master":
            t["mixed_precision"] = "amp"
    if t["mixed_precision"] == "master" and layout in ("single", "ddp", "zero12", "fsdp"):
        p["framework"] = "deepspeed"
        if layout == "single":
            p.update(dp=2, zero=3)
    hf = model.get("hf_config", {}) if isinstance(model, dict) else {}
    if p.get("tp", 1) > 1 and (moe or "Phi3" in arch or hf.get("tie_word_embeddings")
                               or arch in TIED):
        return None
    if any(a in arch for a in ("GptOss", "Gemma2")) or arch == "gemma-2-2b":
        t["attention"] = "eager"  # their SDPA paths are refused
    gpu = rng.choice(["h100-sxm-80gb"] * 6 + ["a100-80gb", "t4-16gb", "v100-32gb"])
    return {"schema_version": 1, "model": model, "training": t, "parallelism": p, "gpu": gpu}


def trace(scenario: dict[str, Any], path: Path) -> dict[str, Any]:
    """The harness's result (the larger of the first and last pipeline ranks), or an error."""
    path.write_text(json.dumps(scenario))
    stages = ["first", "last"] if scenario["parallelism"].get("pp", 1) > 1 else [None]
    best: dict[str, Any] = {}
    for stage in stages:
        out = subprocess.run([TRACE_PYTHON, str(HERE / "trace.py"), "--scenario", str(path)]
                             + (["--pp-stage", stage] if stage else []),
                             capture_output=True, text=True, timeout=600)
        try:
            result = json.loads(out.stdout)
        except ValueError:
            return {"error": (out.stderr or out.stdout)[-400:]}
        if "peak_bytes" not in result:
            return {"error": str(result.get("error", result))[-400:]}
        if result["peak_bytes"] > best.get("peak_bytes", -1):
            best = result
    return best


def run(seed: int, count: int, out: Path, layout: str | None = None) -> None:
    rng = random.Random(seed)
    models = _models()
    done = tries = 0
    while done < count and tries < 50 * count:
        tries += 1
        scenario = sample(rng, models, layout)
        if scenario is None:
            continue
        try:
            estimate(scenario)
        except ScenarioError:
            continue
        t0 = time.time()
        result = trace(scenario, out.with_suffix(".scenario.json"))
        record = {"seed": seed, "n": done, "scenario": scenario,
                  "seconds": round(time.time() - t0, 1)}
        if "error" in result:
            record["error"] = result["error"]
        else:
            record["traced"] = result["peak_bytes"]
            record["traced_phase"] = result["peak_phase"]
        with out.open("a") as f:
            f.write(json.dumps(record) + "\n")
        done += 1
        print(f"{done}/{count}", record.get("error", "")[-120:] or
              f"{record['traced'] / 2**30:.2f} GiB", flush=True)


def report(paths: list[Path], over: float) -> None:
    rows = []
    for path in paths:
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if "traced" not in record:
                continue
            e = estimate(record["scenario"])
            rows.append((e.peak_bytes / record["traced"] - 1, e.confidence, record))
    rows.sort(key=lambda r: -abs(r[0]))
    for error, conf, record in rows:
        if abs(error) <= over:
            break
        s = record["scenario"]
        model = s["model"] if isinstance(s["model"], str) else \
            s["model"]["hf_config"]["architectures"][0]
        print(f"{error:+7.2%} {conf['level']:<12} {record['seed']}/{record['n']} {model} "
              f"{json.dumps(s['training'])} {json.dumps(s['parallelism'])} {s['gpu']}")
        if conf["missing"]:
            print(f"{'':21}{conf['missing'][0][:150]}")
    misses = [r for r in rows if abs(r[0]) > over]
    flagged = sum(r[1]["level"] != "validated" for r in misses)
    print(f"\n{len(rows)} traced; {len(misses)} off by more than {over:.0%}, {flagged} of them "
          f"extrapolated; {sum(r[1]['level'] == 'validated' for r in rows)} validated in all")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="sample, trace and record scenarios")
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--count", type=int, default=40)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--layout", choices=sorted(set(LAYOUTS)),
                   help="draw this layout only (the other settings as ever)")
    p = sub.add_parser("report", help="the misses of recorded runs under the current calc")
    p.add_argument("paths", type=Path, nargs="+")
    p.add_argument("--over", type=float, default=0.01)
    args = parser.parse_args(argv)
    if args.command == "run":
        run(args.seed, args.count, args.out, args.layout)
    else:
        report(args.paths, args.over)
    return 0


if __name__ == "__main__":
    sys.exit(main())
