"""The Planning tools pages' numbers: each page's example computed with calc.plan at build time.

Every page shows the CLI call with the output the CLI prints for it (run in-process, now), the
Python call's figures, and links that open the example in the calculator. Where the prose draws
a conclusion ("the next micro-batch does not fit"), `claim` asserts it, so a change to the
library that would turn a page false fails the build instead of shipping it.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import tempfile
from typing import Any

from docs_common import calc_link, gib, md_table, num_gib, pct

from calc import COMPONENTS, estimate, parse_scenario
from calc.cli import main as cli_main
from calc.formatting import FIT_WORDS, count, params, tflops
from calc.plan import (
    DEFAULT_MFU,
    DEFAULT_TARGET,
    ExportError,
    KVQuant,
    advise,
    compare,
    export,
    kv_cache_bytes,
    max_micro_batch,
    max_seq_len,
    recommend,
    training_cost,
)

# The examples: a ZeRO-3 full fine-tune on one H100 node, and a run that does not fit one A100.
ZERO3: dict[str, Any] = {
    "model": "llama-3.1-8b", "gpu": "h100-sxm-80gb",
    "training": {"seq_len": 4096, "activation_checkpointing": "full"},
    "parallelism": {"dp": 8, "zero": 3},
}
ZERO3_FLAGS = ["--model", "llama-3.1-8b", "--seq-len", "4096", "--activation-checkpointing",
               "full", "--dp", "8", "--zero", "3", "--gpu", "h100-sxm-80gb"]
TIGHT: dict[str, Any] = {"model": "llama-3.1-8b", "gpu": "a100-80gb", "training": {"seq_len": 8192}}
TIGHT_FLAGS = ["--model", "llama-3.1-8b", "--seq-len", "8192", "--gpu", "a100-80gb"]


def claim(src: str, ok: bool, what: str) -> None:
    if not ok:
        raise AssertionError(f"{src}: the page says {what!r}, the library no longer agrees; "
                             "revise the page")


def cli(argv: list[str], display: list[str] | None = None) -> str:
    """A console block: `$ calc ...` and what the CLI prints for it, run now."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        rc = cli_main(argv)
    if rc != 0:
        raise AssertionError(f"calc {' '.join(argv)} exited with {rc}")
    shown = " ".join(shlex.quote(a) for a in (display or argv))
    return f"```console\n$ calc {shown}\n{out.getvalue().rstrip()}\n```"


def _base(src: str) -> dict[str, str]:
    return {"target": f"{DEFAULT_TARGET:.0%}", "mfu": f"{DEFAULT_MFU:.0%}"}


def fit_search(src: str) -> dict[str, str]:
    ctx = _base(src)
    mb = max_micro_batch(ZERO3)
    claim(src, mb.value is not None and mb.next_device_bytes is not None, "a micro-batch fits")
    assert mb.value is not None and mb.next_device_bytes is not None and mb.scenario is not None
    claim(src, mb.device_bytes is not None and mb.device_bytes <= mb.limit_bytes
          < mb.next_device_bytes, "the value fits and the next does not")
    seq = max_seq_len(ZERO3)
    claim(src, seq.value is not None, "a sequence length fits")
    assert seq.value is not None and seq.scenario is not None
    e = estimate(ZERO3)
    ctx.update(
        base_link=calc_link(ZERO3, src), base_device=gib(e.device_bytes),
        usable=gib(e.usable_bytes), limit=gib(mb.limit_bytes),
        mb=str(mb.value), mb_device=gib(mb.device_bytes or 0), mb_link=calc_link(mb.scenario, src),
        mb_next=str(mb.next_value), mb_next_device=gib(mb.next_device_bytes),
        seq=f"{seq.value:,}", seq_device=gib(seq.device_bytes or 0),
        seq_link=calc_link(seq.scenario, src),
        seq_notes="; ".join(seq.notes) or "none",
        mb_cli=cli(["max-batch", *ZERO3_FLAGS]),
        seq_cli=cli(["max-seq", *ZERO3_FLAGS]),
    )
    return ctx


def _speed(slowdown: float | None) -> str:
    if slowdown is None:
        return "n/a"
    return f"{abs(slowdown):.1%} " + ("slower" if slowdown >= 0 else "faster")


def recommendations(src: str) -> dict[str, str]:
    from calc.plan.recommend import RANK_RULES

    ctx = _base(src)
    recs = recommend(TIGHT)
    base = recs.base
    claim(src, not base.fits, "the example does not fit")
    claim(src, bool(recs.levers), "there are levers")
    claim(src, recs.levers[0].status == "fits", "the first lever makes it fit")
    claim(src, all(r.headroom_bytes > 0 for r in recs.larger_gpus),
          "larger GPUs are offered only where it fits")
    rows = [[str(i), f"[{r.title}]({calc_link(r.scenario, src)})", num_gib(r.device_bytes),
             pct(r.saving_percent / 100), _speed(r.slowdown), FIT_WORDS[r.status],
             r.cost]
            for i, r in enumerate(recs.levers[:8], 1)]
    best = recs.levers[0]
    claim(src, estimate(best.scenario).device_bytes == base.device_bytes - best.saving_bytes,
          "each saving is re-estimated")
    ctx.update(
        base_link=calc_link(TIGHT, src), base_device=gib(base.device_bytes),
        usable=gib(base.usable_bytes), levers=str(len(recs.levers)),
        fitting=str(sum(r.status == "fits" for r in recs.levers)), best=best.title,
        best_saving=gib(best.saving_bytes), best_slowdown=_speed(best.slowdown),
        rule_not_fit=RANK_RULES["does_not_fit"], rule_fit=RANK_RULES["fits"],
        table=md_table(["#", "change (opens the calculator)", "GiB after", "saved",
                        "tokens/s per GPU", "status", "cost"], rows, "rlrrrcl"),
        larger=", ".join(f"[{r.title.removeprefix('a larger GPU: ')}]({calc_link(r.scenario, src)})"
                         for r in recs.larger_gpus[:3]) or "none",
        cli=cli(["recommend", *TIGHT_FLAGS]),
    )
    return ctx


ADVISE = {"model": "llama-3.1-8b", "gpu": "h100-sxm-80gb", "gpus": 16, "seq_len": 8192,
          "global_batch": 64}


def advisor(src: str) -> dict[str, str]:
    ctx = _base(src)
    a = ADVISE
    res = advise(a["model"], a["gpu"], a["gpus"], a["seq_len"], a["global_batch"], top=5)
    claim(src, bool(res.plans), "the advisor finds plans")
    rows = []
    for p in res.plans:
        d = p.as_dict()
        lay = d["layout"]
        rows.append([str(p.rank), f"[tp {lay['tp']} · pp {lay['pp']} · dp {lay['dp']} · cp {lay['cp']}]"
                     f"({calc_link(p.scenario, src)})", str(lay["zero"]),
                     lay["activation_checkpointing"],
                     f"{lay['micro_batch_size']} × {lay['gradient_accumulation_steps']}",
                     pct(d["estimate"]["utilization"]), f"{d['step_time_s']:.3f}",
                     f"{d['tokens_per_s']:,.0f}", d["why"]])
    from calc.plan.advise import DEFAULT_HOST_MEMORY_GIB, DEFAULT_TOKENS_PER_STEP, TIE_TOLERANCE

    none = advise("llama-3.1-405b", a["gpu"], 8, 4096, 8)
    claim(src, not none.plans and none.floor is not None and bool(none.changes),
          "405B on 8 H100s: nothing fits, and a change does")
    assert none.floor is not None
    big = advise("llama-3-70b", a["gpu"], 16, 8192, top=3, suggest=False)
    claim(src, bool(big.plans), "70B on 16 H100s at 8K has plans")
    first = big.plans[0].as_dict()
    lay = first["layout"]
    ctx.update(_advisor_lora(src))
    ctx.update(
        host=f"{DEFAULT_HOST_MEMORY_GIB:g}", tie=f"{TIE_TOLERANCE:.0%}",
        tokens=f"{DEFAULT_TOKENS_PER_STEP / 1e6:.0f}M", none_gpus="8",
        none_floor=none.floor["text"], none_change=none.changes[0].title,
        big_plans=str(len(big.plans)),
        big_first=(f"tp {lay['tp']} · pp {lay['pp']} · dp {lay['dp']} · cp {lay['cp']}, ZeRO "
                   f"{lay['zero']}, {lay['mixed_precision']}, checkpointing "
                   f"{lay['activation_checkpointing']}, "
                   f"{gib(first['estimate']['device_bytes'])} per GPU"),
    )
    ctx.update(
        gpus=str(a["gpus"]), batch=str(a["global_batch"]), seq=f"{a['seq_len']:,}",
        searched=str(res.searched), estimates=str(res.estimates), fitting=str(res.fitting),
        best_link=calc_link(res.plans[0].scenario, src),
        table=md_table(["#", "layout (opens the calculator)", "ZeRO", "checkpointing",
                        "micro-batch × accumulation", "memory", "s/step", "tokens/s", "why"],
                       rows, "rlcccrrrl"),
        cli=cli(["advise", "--model", a["model"], "--gpu", a["gpu"], "--gpus", str(a["gpus"]),
                 "--global-batch", str(a["global_batch"]), "--seq-len", str(a["seq_len"]),
                 "--top", "5"]),
    )
    return ctx


LORA_ADVISE = {"model": "llama-3-70b", "gpu": "h100-sxm-80gb", "gpus": 8, "seq_len": 4096,
               "global_batch": 64}


def _advisor_lora(src: str) -> dict[str, str]:
    """allow_lora: one row per kind of training, its first plan."""
    a = LORA_ADVISE
    res = advise(a["model"], a["gpu"], a["gpus"], a["seq_len"], a["global_batch"], top=1,
                 allow_lora=True)
    claim(src, [g.finetuning for g in res.trains] == ["full", "lora", "qlora"]
          and all(g.plans for g in res.trains), "full fine-tuning, LoRA and QLoRA all have plans")
    full, lora = res.trains[:2]
    assert full.fastest_step_time_s is not None and lora.fastest_step_time_s is not None
    claim(src, lora.fastest_step_time_s < full.fastest_step_time_s,
          "LoRA's step is shorter than full fine-tuning's")
    claim(src, all(p.changes_training == (p.scenario.training.finetuning != "full")
                   for p in res.plans), "LoRA and QLoRA plans are marked as changing the training")
    rows = []
    for g, p in zip(res.trains, res.plans, strict=True):
        d = p.as_dict()
        lay = d["layout"]
        off = " · offload" if lay["offload_optimizer"] else ""
        rows.append([g.title + (" (changes what is trained)" if g.changes_training else ""),
                     params(g.trainable_param_count),
                     f"[tp {lay['tp']} · pp {lay['pp']} · dp {lay['dp']} · ZeRO {lay['zero']} · "
                     f"{lay['mixed_precision']}{off}]({calc_link(p.scenario, src)})",
                     gib(d["estimate"]["device_bytes"]), f"{d['step_time_s']:.3f}",
                     f"{d['tokens_per_s']:,.0f}"])
    return {
        "lora_gpus": str(a["gpus"]), "lora_seq": f"{a['seq_len']:,}",
        "lora_batch": str(a["global_batch"]),
        "lora_table": md_table(["trains", "trainable parameters", "first plan (opens the calculator)",
                                "memory per GPU", "s/step", "tokens/s"], rows, "lrlrrr"),
        "lora_cli": cli(["advise", "--model", a["model"], "--gpu", a["gpu"], "--gpus",
                         str(a["gpus"]), "--global-batch", str(a["global_batch"]), "--seq-len",
                         str(a["seq_len"]), "--top", "1", "--allow-lora"]),
    }


def comparison(src: str) -> dict[str, str]:
    ctx = _base(src)
    zero2 = {**ZERO3, "parallelism": {"dp": 8, "zero": 2}}
    c = compare([ZERO3, zero2], labels=["zero3", "zero2"]).as_dict()
    a, b = c["scenarios"]
    claim(src, b["difference"]["device_bytes"] > 0, "ZeRO-2 needs more memory than ZeRO-3")
    claim(src, b["difference"]["components"]["temporaries"] > 0,
          "the difference is in the gathered parameters (temporaries)")
    rows = [["device memory", gib(a["device_bytes"]), gib(b["device_bytes"]),
             gib(b["difference"]["device_bytes"])],
            ["peak allocated", gib(a["peak_bytes"]), gib(b["peak_bytes"]),
             gib(b["difference"]["peak_bytes"])],
            ["utilization", pct(a["utilization"]), pct(b["utilization"]), ""],
            ["global batch", str(a["global_batch_size"]), str(b["global_batch_size"]), ""]]
    rows += [[COMPONENTS.get(k, k) if isinstance(COMPONENTS, dict) else k, gib(a["components"][k]),
              gib(b["components"][k]), gib(b["difference"]["components"][k])]
             for k in a["components"]]
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for name, s in (("zero3", ZERO3), ("zero2", zero2)):
            path = os.path.join(tmp, f"{name}.json")
            with open(path, "w") as f:
                json.dump(s, f)
            paths.append(path)
        block = cli(["compare", *paths], ["compare", "zero3.json", "zero2.json"])
    ctx.update(
        zero3_link=calc_link(ZERO3, src), zero2_link=calc_link(zero2, src),
        table=md_table(["", "zero3 (baseline)", "zero2", "zero2 − zero3"], rows, "lrrr"),
        diff=gib(b["difference"]["device_bytes"]),
        diff_params=gib(b["difference"]["components"]["temporaries"]),
        cli=block, zero3_json=json.dumps(ZERO3),
    )
    return ctx


TOKENS = 10**10


def cost(src: str) -> dict[str, str]:
    ctx = _base(src)
    c = training_cost(ZERO3, TOKENS)
    claim(src, c.fits, "the example fits")
    f = c.flops_per_token
    ctx.update(
        link=calc_link(ZERO3, src), tokens=f"{TOKENS:,}", tokens_short="1e10",
        gpus=str(c.gpus), peak=tflops(c.peak_tflops_per_gpu), tokens_per_step=count(c.tokens_per_step),
        flops_token=f"{f.executed / 1e9:.1f} GFLOP", flops_model=f"{f.model / 1e9:.1f} GFLOP",
        recompute=f"{f.recompute / 1e9:.1f} GFLOP", achieved_mfu=pct(c.model_flops_utilization),
        step=f"{c.step_seconds:.3f} s", tps=count(c.tokens_per_second), steps=count(c.steps),
        days=f"{c.train_seconds / 86400:.2f}", gpu_hours=count(c.gpu_hours),
        cost=f"${c.cost_usd:,.0f}" if c.cost_usd is not None else "no price",
        price=f"{c.price_per_gpu_hour:g}" if c.price_per_gpu_hour is not None else "none",
        price_source=c.price_source or "none",
        cli=cli(["cost", *ZERO3_FLAGS, "--tokens", "1e10"]),
    )
    return ctx


def export_page(src: str) -> dict[str, str]:
    ctx = _base(src)
    e = export(ZERO3, "accelerate-fsdp")
    master = {**ZERO3, "training": {**ZERO3["training"], "mixed_precision": "master"}}
    ds = export(master, "deepspeed")
    tensor = {**ZERO3, "parallelism": {"dp": 4, "tp": 2, "zero": 3}}
    try:
        export(tensor, "deepspeed")
    except ExportError as exc:
        refused = f"{exc.field}: {exc.message}"
        claim(src, exc.field == "parallelism.tp", "DeepSpeed refuses tensor parallelism")
    else:  # pragma: no cover - the page's point
        raise AssertionError(f"{src}: DeepSpeed no longer refuses tensor parallelism; revise")
    claim(src, ds.data["zero_optimization"]["stage"] == 3, "DeepSpeed gets ZeRO stage 3")
    autocast3 = export(ZERO3, "deepspeed")
    claim(src, isinstance(autocast3.data, dict)
          and autocast3.data["zero_optimization"]["stage"] == 3
          and autocast3.data.get("torch_autocast", {}).get("enabled") is True,
          "amp at ZeRO-3 is DeepSpeed's torch_autocast at stage 3")
    zero2 = {**ZERO3, "parallelism": {"dp": 8, "zero": 2}}
    amp = export(zero2, "deepspeed")
    claim(src, isinstance(amp.data, dict) and amp.data.get("torch_autocast", {}).get("enabled")
          is True and "bf16" not in amp.data, "amp at ZeRO-2 is DeepSpeed's torch_autocast")
    ctx.update(
        amp_link=calc_link(zero2, src), amp=amp.text.rstrip("\n"),
        amp_notes="\n".join(f"- {n}" for n in amp.notes if "amp" in n or "autocast" in n))
    ctx.update(
        link=calc_link(ZERO3, src), master_link=calc_link(master, src),
        fsdp=e.text.rstrip("\n"), fsdp_notes="\n".join(f"- {n}" for n in e.notes) or "- none",
        deepspeed=ds.text.rstrip("\n"), refused=refused, tensor_link=calc_link(tensor, src),
        cli=cli(["export", "--format", "accelerate-fsdp", *ZERO3_FLAGS]),
    )
    return ctx


def kv_cache(src: str) -> dict[str, str]:
    ctx = _base(src)
    model, batch, seq = "llama-3.1-8b", 8, 8192
    full = kv_cache_bytes(model, batch=batch, seq=seq)
    fp8 = kv_cache_bytes(model, batch=batch, seq=seq, dtype_bytes=1)
    int4 = kv_cache_bytes(model, batch=batch, seq=seq, quant=KVQuant(bits=4))
    tp2 = kv_cache_bytes(model, batch=batch, seq=seq, tp=2)
    claim(src, fp8 * 2 == full and tp2 * 2 == full, "fp8 and tp 2 halve the cache")
    claim(src, int4 < fp8, "a 4-bit cache is smaller than fp8")
    train = {"model": model, "gpu": "h100-sxm-80gb",
             "training": {"seq_len": seq, "activation_checkpointing": "full", "finetuning": "lora"}}
    e = estimate(train)
    parse_scenario(train)
    ctx.update(
        model=model, batch=str(batch), seq=f"{seq:,}", full=gib(full), fp8=gib(fp8),
        int4=gib(int4), tp2=gib(tp2), train_device=gib(e.device_bytes),
        together=gib(e.device_bytes + full), usable=gib(e.usable_bytes),
        together_share=pct((e.device_bytes + full) / e.usable_bytes),
        link=calc_link(train, src),
        cli=cli(["kv-cache", model, "--seq-len", str(seq), "--batch", str(batch)]),
        cli_int4=cli(["kv-cache", model, "--seq-len", str(seq), "--batch", str(batch),
                      "--quant-bits", "4"]),
    )
    return ctx


# ---- import, cheapest, RL (calc.plan.import_config, cheapest, rl_memory) ----------------------

DS_CONFIG: dict[str, Any] = {  # a DeepSpeed config as a colleague might hand it over
    "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 8,
    "train_batch_size": 128, "bf16": {"enabled": True}, "gradient_clipping": 1.0,
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
}


def import_page(src: str) -> dict[str, str]:
    from calc.plan import import_config

    ctx = _base(src)
    imported = import_config(DS_CONFIG, "deepspeed", model="llama-3-8b", gpu="a100-80gb",
                             seq_len=4096)
    scenario = imported.scenario.model_dump(mode="json")
    report = estimate(scenario)
    claim(src, scenario["parallelism"]["dp"] == 8, "dp is read from train_batch_size as 8")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ds_config.json")
        with open(path, "w") as f:
            json.dump(DS_CONFIG, f)
        block = cli(["import", "--format", "deepspeed", path, "--model", "llama-3-8b",
                     "--gpu", "a100-80gb", "--seq-len", "4096"],
                    display=["import", "--format", "deepspeed", "ds_config.json", "--model",
                             "llama-3-8b", "--gpu", "a100-80gb", "--seq-len", "4096"])
    ctx.update(
        config=json.dumps(DS_CONFIG, indent=2), scenario=json.dumps(scenario, indent=2),
        notes="\n".join(f"- {n}" for n in imported.notes) or "- none",
        device=gib(report.device_bytes), usable=gib(report.usable_bytes),
        share=pct(report.utilization), verdict="fits" if report.fits else "does not fit",
        host=gib(report.host_bytes), link=calc_link(scenario, src), cli=block,
    )
    return ctx


CHEAP: dict[str, Any] = {"model": "llama-3-8b",
                         "training": {"seq_len": 4096, "activation_checkpointing": "full"}}
CHEAP_TOKENS, CHEAP_HOURS = 2 * 10**9, 24.0


def cheapest_page(src: str) -> dict[str, str]:
    from calc.plan import cheapest

    ctx = _base(src)
    result = cheapest(CHEAP, CHEAP_TOKENS, deadline_hours=CHEAP_HOURS)
    claim(src, bool(result.options), "some GPU type meets the deadline")
    options = [o.as_dict() for o in result.options]
    rows = [[o["gpu"], str(o["gpus"]), f"zero {o['zero']}", gib(o["device_bytes"]),
             f"{o['train_hours']:.1f} h", f"{o['gpu_hours']:,.0f}", f"${o['cost_usd']:,.0f}"]
            for o in options]
    best = result.options[0]
    ctx.update(
        tokens=f"{CHEAP_TOKENS:,}", hours=f"{CHEAP_HOURS:g}",
        table=md_table(["GPU", "count", "sharding", "memory per GPU", "time", "GPU-hours", "cost"],
                       rows),
        best=f"{best.gpus} x {best.gpu}", best_cost=f"${options[0]['cost_usd']:,.0f}",
        link=calc_link(best.scenario.model_dump(mode="json"), src),
        base_link=calc_link(CHEAP, src),
        unpriced=", ".join(o.gpu for o in result.unpriced) or "none",
        cli=cli(["cheapest", "--model", "llama-3-8b", "--seq-len", "4096",
                 "--activation-checkpointing", "full", "--tokens", "2e9",
                 "--deadline-hours", "24"]),
    )
    return ctx


RL: dict[str, Any] = {"model": "qwen2.5-7b", "training": {"activation_checkpointing": "full"},
                      "parallelism": {"tp": 4}}


def rl_page(src: str) -> dict[str, str]:
    from calc.plan import rl_memory

    ctx = _base(src)
    m = rl_memory(RL, prompts=32, samples_per_prompt=8, response_len=7168, prompt_len=1024)
    d = m.as_dict()
    parts = d["components"]
    rows = [[name.replace("_", " "), gib(value)] for name, value in parts.items() if value]
    rows.append(["per GPU", gib(d["total_bytes"])])
    trained = {**RL, "training": {**RL["training"], "seq_len": d["seq_len"]}}
    rollout = {"prompts": 32, "samples_per_prompt": 8, "response_len": 7168, "prompt_len": 1024}
    asleep = rl_memory(RL, **rollout, sleep_mode=True)
    ppo = rl_memory(RL, **rollout, algorithm="ppo")
    apart = rl_memory(RL, **rollout, algorithm="ppo", colocated=False)
    dpo = rl_memory(RL, algorithm="dpo", prompt_len=512, response_len=1536)
    dpo_pre = rl_memory(RL, algorithm="dpo", prompt_len=512, response_len=1536,
                        reference_model=False)
    claim(src, asleep.total_bytes < m.total_bytes, "sleep mode lowers the GRPO peak")
    claim(src, asleep.phases["rollout"] >= asleep.phases["training"],
          "with sleep mode the rollout phase sets the peak")
    claim(src, ppo.total_bytes > m.total_bytes > apart.total_bytes,
          "PPO needs more than GRPO colocated, PPO on separate GPUs less")
    claim(src, dpo_pre.total_bytes < dpo.total_bytes, "precomputed log-probs save memory")
    variants = [["grpo", gib(m.total_bytes), pct(m.utilization)],
                ["grpo, sleep mode", gib(asleep.total_bytes), pct(asleep.utilization)],
                ["ppo (critic, reward model)", gib(ppo.total_bytes), pct(ppo.utilization)],
                ["ppo, each model on its own GPUs", gib(apart.total_bytes),
                 pct(apart.utilization)],
                ["dpo, 2,048 tokens", gib(dpo.total_bytes), pct(dpo.utilization)],
                ["dpo, reference log-probs precomputed", gib(dpo_pre.total_bytes),
                 pct(dpo_pre.utilization)]]
    ctx.update(
        variants=md_table(["setting", "per GPU", "of the card"], variants),
        phases=", ".join(f"{k} {gib(v)}" for k, v in d["phases"].items()),
        sleep_phases=", ".join(f"{k} {gib(v)}" for k, v in asleep.phases.items()),
        cli_dpo=cli(["rl", "--model", "qwen2.5-7b", "--tp", "4", "--activation-checkpointing",
                     "full", "--algorithm", "dpo", "--response-len", "1536"]))
    ctx.update(_rl_models_and_offload(src))
    ctx.update(
        table=md_table(["part", "per GPU"], rows), sequences=str(d["sequences"]),
        seq=f"{d['seq_len']:,}", dominant=d["dominant"].replace("_", " "),
        share=pct(d["utilization"]), usable=gib(d["usable_bytes"]),
        verdict="fits" if d["fits"] else "does not fit", link=calc_link(trained, src),
        cli=cli(["rl", "--model", "qwen2.5-7b", "--tp", "4", "--activation-checkpointing",
                 "full", "--prompts", "32", "--samples-per-prompt", "8", "--response-len",
                 "7168", "--prompt-len", "1024"]),
    )
    return ctx


# A 70B policy with an 8B reward model, and a 7B policy with a 1.5B critic (verl's FSDP layout)
RL70: dict[str, Any] = {"model": "llama-3.1-70b", "training": {"activation_checkpointing": "full"},
                        "parallelism": {"tp": 8, "dp": 2, "zero": 3}}
RL70_ROLLOUT: dict[str, Any] = {"prompts": 32, "samples_per_prompt": 8, "prompt_len": 1024,
                                "response_len": 4096}
RL70_FLAGS = ["rl", "--model", "llama-3.1-70b", "--tp", "8", "--dp", "2", "--zero", "3",
              "--activation-checkpointing", "full", "--prompts", "32", "--samples-per-prompt",
              "8", "--prompt-len", "1024", "--response-len", "4096"]
RL7_FSDP: dict[str, Any] = {"model": "qwen2.5-7b", "training": {"activation_checkpointing": "full"},
                            "parallelism": {"dp": 8, "zero": 3}}


def _rl_models_and_offload(src: str) -> dict[str, str]:
    from calc.plan import PlanError, rl_memory
    from calc.plan.rl import scorer

    rm70 = rl_memory(RL70, **RL70_ROLLOUT, reward="model")
    rm8 = rl_memory(RL70, **RL70_ROLLOUT, reward_model="llama-3.1-8b")
    off = rl_memory(RL70, **RL70_ROLLOUT, reward_model="llama-3.1-8b", sleep_mode=True,
                    offload_between_phases=True)
    asleep = rl_memory(RL70, **RL70_ROLLOUT, reward_model="llama-3.1-8b", sleep_mode=True)
    rollout = {"prompts": 32, "samples_per_prompt": 8, "prompt_len": 1024, "response_len": 7168}
    c7 = rl_memory(RL7_FSDP, **rollout, algorithm="ppo")
    c15 = rl_memory(RL7_FSDP, **rollout, algorithm="ppo", critic_model="qwen2.5-1.5b")
    claim(src, rm8.total_bytes < rm70.total_bytes and rm8.reward_model_bytes
          < rm70.reward_model_bytes, "an 8B reward model takes less than a 70B one")
    claim(src, not asleep.fits and off.fits, "offload between phases makes the 70B step fit")
    claim(src, not rm70.fits and not rm8.fits, "neither reward model's step fits as set")
    claim(src, off.phases["training"] > off.phases["rollout"],
          "offloaded, the training phase sets the peak")
    claim(src, c15.critic_bytes < c7.critic_bytes, "a 1.5B critic takes less than a 7B one")
    at_len = {**RL7_FSDP["training"], "seq_len": c15.seq_len}
    lm15 = estimate({**RL7_FSDP, "model": "qwen2.5-1.5b", "training": at_len})
    critic15 = estimate({**RL7_FSDP, "model": scorer(lm15.resolved.arch).model_dump(mode="json"),
                         "training": at_len})
    claim(src, critic15.device_bytes == c15.critic_bytes, "the critic is its own estimate")
    claim(src, critic15.device_bytes < lm15.device_bytes, "a value head needs less than logits")
    try:
        rl_memory(RL, **rollout, algorithm="ppo", critic_model="qwen2.5-1.5b")
        claim(src, False, "a 1.5B critic does not split over tp 4")
    except PlanError as exc:
        claim(src, exc.field == "critic_model", "the error names critic_model")
    resident = asleep.policy_resident_bytes + asleep.frozen_bytes
    claim(src, asleep.phases["rollout"] - off.phases["rollout"] == resident,
          "offload lowers the rollout phase by the resident bytes")
    models = [["reward model = the policy (Llama 3.1 70B)", gib(rm70.reward_model_bytes),
               gib(rm70.total_bytes), pct(rm70.utilization)],
              ["reward model Llama 3.1 8B", gib(rm8.reward_model_bytes), gib(rm8.total_bytes),
               pct(rm8.utilization)]]
    critics = [[f"critic {name}", gib(m.critic_bytes), gib(m.total_bytes), pct(m.utilization)]
               for name, m in (("= the policy (Qwen2.5 7B)", c7), ("Qwen2.5 1.5B", c15))]
    phases = [[name, gib(m.phases["rollout"]), gib(m.phases["training"]), gib(m.total_bytes),
               gib(m.host_bytes)] for name, m in (("sleep mode", asleep),
                                                   ("sleep mode + offload between phases", off))]
    return dict(
        rm_table=md_table(["setting", "reward model", "per GPU", "of the card"], models),
        critic_table=md_table(["setting", "critic", "per GPU", "of the card"], critics),
        offload_table=md_table(["setting", "rollout phase", "training phase", "per GPU",
                                "host memory per GPU"], phases),
        rm_saved=gib(rm70.total_bytes - rm8.total_bytes), critic15=gib(c15.critic_bytes),
        critic_lm=gib(lm15.device_bytes), critic_logits=gib(lm15.components["logits"]),
        vocab=f"{lm15.resolved.arch.vocab_size:,}", kv_heads=str(lm15.resolved.arch.kv_heads),
        resident=gib(resident), off_host=gib(off.host_bytes),
        off_usable=gib(off.usable_bytes), off_share=pct(off.utilization),
        off_verdict=FIT_WORDS[off.status],
        cli_offload=cli([*RL70_FLAGS, "--reward-model", "llama-3.1-8b", "--sleep-mode",
                         "--offload-between-phases"]),
    )


def inference_page(src: str) -> dict[str, str]:
    from calc.plan import inference_memory

    ctx = _base(src)
    model, seq = "llama-3.1-8b", 8192
    m = inference_memory(model, max_model_len=seq)
    tp2 = inference_memory(model, max_model_len=seq, tp=2)
    fp8 = inference_memory(model, max_model_len=seq, kv_cache_dtype="fp8")
    big = inference_memory("llama-3-70b", max_model_len=seq)
    big4 = inference_memory("llama-3-70b", max_model_len=seq, tp=4)
    q = inference_memory("qwen2.5-1.5b", max_model_len=4096)
    claim(src, m.status == "fits" and tp2.max_concurrent_sequences > m.max_concurrent_sequences,
          "tp 2 serves more sequences per engine")
    claim(src, fp8.max_concurrent_sequences > m.max_concurrent_sequences, "fp8 serves more")
    claim(src, big.status == "does_not_fit" and big4.status == "fits",
          "70B does not start on one H100, does at tp 4")
    rows = [["engine budget (90% of the GPU)", gib(m.budget_bytes)],
            ["weights (bf16)", gib(m.weight_bytes)],
            ["profiling activations", gib(m.activation_bytes)],
            ["outside PyTorch (empirical)", gib(sum(m.non_torch_bytes.values()))],
            ["KV cache", f"{gib(m.kv_cache_bytes)} = {m.kv_cache_tokens:,} tokens"],
            ["KV per sequence", gib(m.kv_bytes_per_sequence)],
            ["max concurrent sequences", str(m.max_concurrent_sequences)]]
    ctx.update(
        model=model, seq=f"{seq:,}", table=md_table(["", "per GPU"], rows, "lr"),
        seqs=str(m.max_concurrent_sequences), tp2_seqs=str(tp2.max_concurrent_sequences),
        fp8_seqs=str(fp8.max_concurrent_sequences),
        big_note=f"{gib(big.weight_bytes)} of weights in a {gib(big.budget_bytes)} budget",
        big_tp4=str(big4.max_concurrent_sequences),
        q_weights=gib(q.weight_bytes), q_per_token=f"{q.kv_bytes_per_token:,}",
        q_kv=gib(20_992 * q.kv_bytes_per_token),
        cli=cli(["inference", "--model", model, "--max-model-len", str(seq)]),
    )
    return ctx
