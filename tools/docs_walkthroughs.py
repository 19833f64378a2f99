"""The walkthroughs' numbers: each step is a scenario estimated at build time.

A step sets placeholders `<step>_device`, `<step>_util`, `<step>_fits`, `<step>_phase`,
`<step>_link` (the calculator opened on it) and `<step>_components` (a table). Where the prose
draws a conclusion from the numbers ("TP=4 alone does not fit"), `Story.claim` asserts it, so a
change to the estimator that would turn the story false fails the build instead of shipping it.
"""

from __future__ import annotations

from typing import Any

from docs_common import billions, calc_link, gib, md_table, num_gib, pct
from docs_live import live_example

from calc import PHASES, Estimate, estimate
from calc.charts import phase_timeline
from calc.formatting import COMPONENT_LABELS, FIT_PHRASES
from calc.plan import DEFAULT_TARGET, advise, max_micro_batch, recommend


class Story:
    def __init__(self, src: str) -> None:
        self.src = src
        self.ctx: dict[str, str] = {"target": f"{DEFAULT_TARGET:.0%}"}
        self.est: dict[str, Estimate] = {}

    def claim(self, ok: bool, what: str) -> None:
        if not ok:
            raise AssertionError(f"{self.src}: the page says {what!r}, the estimator no longer "
                                 "agrees; revise the page")

    def step(self, name: str, scenario: dict[str, Any], levers: tuple[str, ...] = ()) -> Estimate:
        """Estimate a step; `levers` are the scenario fields (paths) its live example offers
        beside the micro-batch, the sequence length and the GPU."""
        e = estimate(scenario)
        self.est[name] = e
        self.ctx.update({
            f"{name}_device": gib(e.device_bytes),
            f"{name}_peak": gib(e.peak_bytes),
            f"{name}_util": pct(e.utilization),
            f"{name}_fits": FIT_PHRASES[e.status],
            f"{name}_phase": e.peak_phase.replace("_", " "),
            f"{name}_link": calc_link(e.scenario, self.src),
            f"{name}_live": live_example(e, self.src, levers),
            f"{name}_components": components_table(e),
            f"{name}_confidence": e.confidence["level"],
        })
        for k, v in e.components.items():
            self.ctx[f"{name}_{k}"] = gib(v)
        return e

    def max_batch(self, name: str) -> int | None:
        r = max_micro_batch(self.est[name].scenario)
        self.ctx[f"{name}_maxmb"] = str(r.value) if r.value else "none"
        self.ctx[f"{name}_maxmb_reason"] = r.reason or ""
        if r.value and r.next_device_bytes:
            self.ctx[f"{name}_maxmb_next"] = str(r.next_value)
            self.ctx[f"{name}_maxmb_next_util"] = pct(r.next_device_bytes / r.limit_bytes * r.target)
        return r.value


def components_table(e: Estimate) -> str:
    """The device memory at the peak by part, in the calculator's words (COMPONENT_LABELS)."""
    parts = {**e.components, **e.overhead}
    rows = [[COMPONENT_LABELS[k], num_gib(v), pct(v / e.device_bytes)] for k, v in parts.items() if v]
    rows.append(["**device total**", f"**{num_gib(e.device_bytes)}**", ""])
    return md_table(["at the peak", "GiB", "share"], rows, "lrr")


def phases_table(e: Estimate) -> str:
    comps = list(e.components)
    rows = []
    for name in PHASES:
        ph = e.stage.phases[name]
        label = name.replace("_", " ") + (" (peak)" if name == e.peak_phase else "")
        rows.append([label, num_gib(ph.bytes)] + [num_gib(ph.components[c]) for c in comps])
    return md_table(["phase", "peak GiB", *(f"{COMPONENT_LABELS[c]} GiB" for c in comps)], rows,
                    "l" + "r" * (len(comps) + 1))


def recommendations_table(story: Story, name: str, limit: int = 8) -> str:
    recs = recommend(story.est[name].scenario)
    rows = []
    for i, r in enumerate(recs.levers[:limit], 1):
        rows.append([str(i), f"[{r.title}]({calc_link(r.scenario, story.src)})",
                     num_gib(r.device_bytes), pct(r.saving_percent / 100),
                     "yes" if r.fits else "no", r.cost])
    return md_table(["#", "change (opens the calculator)", "GiB after", "saved", "fits", "cost"],
                    rows, "rlrrcl")


def _scenario(model: str, gpu: str, training: dict[str, Any],
              parallelism: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"model": model, "gpu": gpu, "training": training, "parallelism": parallelism or {}}


# ---------------------------------------------------------------------------------------------
# 1. Llama 3.1 8B, 8K context, 4x A100 40GB
# ---------------------------------------------------------------------------------------------

def llama_8k(src: str) -> dict[str, str]:
    s = Story(src)
    M, G, S = "llama-3.1-8b", "a100-40gb", 8192
    AC = {"seq_len": S, "activation_checkpointing": "full"}
    base = s.step("base", _scenario(M, G, {"seq_len": S}), ("training.activation_checkpointing", "parallelism.tp"))
    s.ctx.update(params=billions(base.param_count), usable=gib(base.usable_bytes),
                 limit=gib(int(DEFAULT_TARGET * base.usable_bytes)))
    s.claim(not base.fits, "one GPU does not fit")
    tp4 = s.step("tp4", _scenario(M, G, {"seq_len": S}, {"tp": 4}),
                 ("parallelism.tp", "training.activation_checkpointing", "parallelism.sequence_parallel"))
    s.claim(not tp4.fits, "TP=4 alone does not fit")
    s.claim(tp4.components["activations"] > tp4.components["optimizer_states"],
            "activations are the largest component under TP=4")
    s.max_batch("tp4")
    s.claim(s.ctx["tp4_maxmb"] == "none", "no micro-batch fits with TP=4 alone")
    s.step("tp4ac", _scenario(M, G, AC, {"tp": 4}))
    tp4sp = s.step("tp4acsp", _scenario(M, G, AC, {"tp": 4, "sequence_parallel": True}),
                   ("parallelism.sequence_parallel", "training.gradient_accumulation_steps"))
    s.claim(tp4sp.fits and tp4sp.utilization > DEFAULT_TARGET,
            "TP=4 + checkpointing + SP fits, but above the target")
    s.claim(tp4sp.peak_phase == "optimizer_step", "its peak is the optimizer step")
    s.claim(tp4sp.setup.vocab_grad_split == 1, "torch's TP keeps the embedding's gradient whole")
    s.ctx["emb_grad"] = gib(tp4sp.setup.counts.embedding * 4)
    s.max_batch("tp4acsp")
    s.claim(s.ctx["tp4acsp_maxmb"] == "none", "no micro-batch is within the target")
    gas = 8
    s.ctx["gas"] = str(gas)
    acc = s.step("tp4acsp_gas", _scenario(M, G, {**AC, "gradient_accumulation_steps": gas},
                                          {"tp": 4, "sequence_parallel": True}))
    s.ctx["gas_grads"] = gib(acc.stage.phases["forward"].components["gradients"])
    s.claim(acc.device_bytes > tp4sp.device_bytes, "accumulation keeps the gradients")
    z2 = s.step("z2", _scenario(M, G, AC, {"dp": 4, "zero": 2}),
                ("parallelism.zero", "training.mixed_precision", "training.loss"))
    s.claim(not z2.fits, "ZeRO-2 + DP=4 + checkpointing does not fit")
    s.ctx["z2_gathered"] = num_gib(z2.components["temporaries"])
    z2m = s.step("z2m", _scenario(M, G, {**AC, "mixed_precision": "master"}, {"dp": 4, "zero": 2}))
    s.claim(not z2m.fits, "DeepSpeed's ZeRO-2 (master weights) does not fit either")
    s.step("z3", _scenario(M, G, AC, {"dp": 4, "zero": 3}))
    s.step("z3chunk", _scenario(M, G, {**AC, "loss": "chunked"}, {"dp": 4, "zero": 3}))
    s.step("z3pure", _scenario(M, G, {**AC, "mixed_precision": "pure"}, {"dp": 4, "zero": 3}))
    s.step("lora_amp", _scenario(M, G, {**AC, "finetuning": "lora", "mixed_precision": "amp"},
                                 {"dp": 4}))
    lora = s.step("lora", _scenario(M, G, {**AC, "finetuning": "lora"}, {"dp": 4}),
                  ("training.finetuning", "training.mixed_precision", "training.lora_rank"))
    s.claim(lora.scenario.training.mixed_precision == "autocast", "LoRA defaults to a bf16 base")
    s.ctx["lora_trainable"] = billions(lora.trainable_param_count)
    s.step("qlora", _scenario(M, G, {**AC, "finetuning": "qlora"}, {"dp": 4}))
    for n in ("z3", "z3chunk", "z3pure", "lora", "qlora", "tp4acsp"):
        s.max_batch(n)
    z3 = s.est["z3"]
    s.claim(sorted(z3.components, key=lambda k: -z3.components[k])[1] == "logits",
            "under ZeRO-3 the loss is second only to the optimizer states")
    s.claim(not acc.fits, "accumulation does not fit with TP=4")
    s.claim(acc.stage.phases["forward"].bytes >= acc.stage.phases["backward"].bytes,
            "with accumulation the forward's loss sets TP=4's peak")
    s.claim(s.est["z3pure"].utilization <= DEFAULT_TARGET, "ZeRO-3 pure bf16 fits the target")
    s.claim(lora.utilization <= DEFAULT_TARGET, "LoRA on a bf16 base fits the target")
    s.claim(not s.est["lora_amp"].fits, "LoRA under amp does not fit")
    validated_fits = [n for n in ("tp4", "tp4ac", "tp4acsp", "tp4acsp_gas", "z2", "z3",
                                  "z3chunk", "z3pure", "lora", "qlora")
                      if s.est[n].confidence["level"] == "validated" and s.est[n].fits]
    s.claim(validated_fits == ["tp4ac", "tp4acsp", "z3chunk", "z3pure", "lora", "qlora"],
            "every row that fits is validated: TP=4 with checkpointing (with or without "
            "sequence parallelism), ZeRO-3 with the chunked loss or pure bf16, LoRA and QLoRA")
    s.claim(s.est["tp4acsp"].confidence["level"] == "validated",
            "tensor and sequence parallelism are traced")
    rows = []
    for n, label in (("tp4", "TP=4 (the seeds' plan)"), ("tp4ac", "TP=4 + full checkpointing"),
                     ("tp4acsp", "TP=4 + checkpointing + sequence parallel"),
                     ("tp4acsp_gas", f"same, {gas} accumulation steps"),
                     ("z2", "ZeRO-2, DP=4 + checkpointing (the seeds' plan)"),
                     ("z3", "ZeRO-3, DP=4 + checkpointing"),
                     ("z3chunk", "ZeRO-3 + checkpointing + chunked loss"),
                     ("z3pure", "ZeRO-3 + checkpointing, pure bf16"),
                     ("lora", "LoRA, bf16 base, DP=4 + checkpointing"),
                     ("qlora", "QLoRA, DP=4 + checkpointing")):
        e = s.est[n]
        mb = s.ctx.get(f"{n}_maxmb", "-")
        rows.append([f"[{label}]({s.ctx[f'{n}_link']})", num_gib(e.device_bytes),
                     pct(e.utilization), s.ctx[f"{n}_fits"], mb, e.confidence["level"]])
    s.ctx["decision_table"] = md_table(
        ["configuration", "GiB per GPU", "of usable", "verdict", f"largest micro-batch at {DEFAULT_TARGET:.0%}",
         "confidence"], rows, "lrrlcl")
    return s.ctx


# ---------------------------------------------------------------------------------------------
# 2. Qwen2.5-7B on H100s: where the bytes go
# ---------------------------------------------------------------------------------------------

def qwen_bytes(src: str) -> dict[str, str]:
    s = Story(src)
    M, G = "qwen2.5-7b", "h100-sxm-80gb"
    e = s.step("run", _scenario(M, G, {"seq_len": 4096, "micro_batch_size": 1},
                                {"dp": 8, "zero": 3}),
               ("parallelism.zero", "training.activation_checkpointing", "training.loss"))
    s.ctx.update(params=billions(e.param_count), phases_table=phases_table(e),
                 timeline=f'<figure class="chart-figure">{phase_timeline(e).svg()}</figure>',
                 vocab=f"{e.resolved.arch.vocab_size:,}")
    top = sorted(e.stage.peak.breakdown.items(), key=lambda kv: -kv[1])[:12]
    s.ctx["breakdown_table"] = md_table(
        ["breakdown path", "GiB", "share of peak"],
        [[f"`{k}`", num_gib(v), pct(v / e.peak_bytes)] for k, v in top], "lrr")
    s.claim(e.peak_phase == "backward", "the peak is in the backward pass")
    s.claim(max(e.components, key=lambda k: e.components[k]) == "activations",
            "activations are the largest component")
    s.ctx["sum_of_maxima"] = gib(sum(max(ph.components[c] for ph in e.stage.phases.values())
                                     for c in e.components))
    s.ctx["recommendations"] = recommendations_table(s, "run")
    return s.ctx


# ---------------------------------------------------------------------------------------------
# 3. Debugging an OOM
# ---------------------------------------------------------------------------------------------

def debug_oom(src: str) -> dict[str, str]:
    s = Story(src)
    e = s.step("oom", _scenario("llama-3-8b", "a100-80gb",
                                {"seq_len": 8192, "micro_batch_size": 2}, {"dp": 8, "zero": 3}),
               ("training.activation_checkpointing", "training.loss", "training.gradient_accumulation_steps"))
    s.claim(not e.fits, "the configuration does not fit")
    s.claim(e.peak_phase == "backward", "the peak is in the backward pass")
    s.ctx["usable"] = gib(e.usable_bytes)
    s.ctx["over"] = gib(e.device_bytes - e.usable_bytes)
    s.ctx["recommendations"] = recommendations_table(s, "oom")
    recs = recommend(e.scenario)
    first = next(r for r in recs.levers if r.fits)
    s.ctx["first_fit"] = first.title
    s.step("fixed", first.scenario.model_dump(mode="json"), ("training.activation_checkpointing", "training.loss"))
    s.step("mb1", _scenario("llama-3-8b", "a100-80gb", {"seq_len": 8192, "micro_batch_size": 1,
                                                        "gradient_accumulation_steps": 2},
                            {"dp": 8, "zero": 3}))
    s.ctx["phases_table"] = phases_table(e)
    return s.ctx


# ---------------------------------------------------------------------------------------------
# 4. From 8B to 70B
# ---------------------------------------------------------------------------------------------

def to_70b(src: str) -> dict[str, str]:
    s = Story(src)
    M, S = "llama-3.1-70b", 8192
    AC = {"seq_len": S, "activation_checkpointing": "full"}
    small = s.step("small", _scenario("llama-3.1-8b", "a100-40gb", AC,
                                      {"tp": 4, "sequence_parallel": True}))
    big = s.step("tp4", _scenario(M, "a100-40gb", AC, {"tp": 4, "sequence_parallel": True}),
                 ("parallelism.tp", "parallelism.pp"))
    s.ctx.update(params=billions(big.param_count), params_small=billions(small.param_count))
    s.claim(not big.fits, "70B with TP=4 does not fit")
    s.step("tp4pp2", _scenario(M, "a100-40gb", AC, {"tp": 4, "pp": 2, "sequence_parallel": True}))
    s.step("tp8", _scenario(M, "h100-sxm-80gb", AC, {"tp": 8, "sequence_parallel": True}))
    s.claim(not s.est["tp8"].fits, "TP=8 on one H100 node does not fit")
    s.claim(not s.est["tp4pp2"].fits, "TP=4 x PP=2 does not fit")
    states = sum(big.components[c] for c in ("parameters", "gradients", "optimizer_states"))
    s.ctx["states_tp4"] = gib(states)
    s.step("qlora", _scenario(M, "h100-sxm-80gb", {**AC, "finetuning": "qlora"}),
           ("training.finetuning", "training.lora_rank"))
    gpus, batch = 64, 64
    res = advise(M, "h100-sxm-80gb", gpus, S, batch)
    s.ctx.update(adv_gpus=str(gpus), adv_batch=str(batch), adv_searched=str(res.searched),
                 adv_fitting=str(res.fitting))
    rows = []
    for p in res.plans[:5]:
        d = p.as_dict()
        lay = d["layout"]
        rows.append([str(p.rank), f"[tp {lay['tp']} · pp {lay['pp']} · dp {lay['dp']} · cp {lay['cp']}]"
                     f"({calc_link(p.scenario, src)})", str(lay["zero"]),
                     lay["activation_checkpointing"], str(lay["micro_batch_size"]),
                     str(lay["gradient_accumulation_steps"]), pct(d["estimate"]["utilization"]),
                     f"{d['tokens_per_s']:,.0f}", d["why"]])
    s.claim(bool(rows), "the advisor finds plans on 64 H100s")
    s.ctx["advise_table"] = md_table(
        ["#", "layout", "ZeRO", "checkpointing", "micro-batch", "accumulation", "memory",
         "tokens/s", "why"], rows, "rlcccccrl")
    small_res = advise(M, "a100-40gb", 32, S, batch)
    s.ctx["adv_a100"] = str(len(small_res.plans))
    s.ctx["adv_a100_states"] = str(small_res.rejected.get("model_states_exceed_target", 0))
    return s.ctx


# ---------------------------------------------------------------------------------------------
# Concepts: the numbers that illustrate the explanations
# ---------------------------------------------------------------------------------------------

def concepts(src: str) -> dict[str, str]:
    s = Story(src)
    T = {"seq_len": 4096}
    for mode in ("pure", "amp", "master"):
        s.step(mode, _scenario("llama-3.1-8b", "h100-sxm-80gb", {**T, "mixed_precision": mode}))
    rows = []
    for mode in ("pure", "amp", "master"):
        e = s.est[mode]
        rows.append([f"[`{mode}`]({s.ctx[f'{mode}_link']})"] +
                    [num_gib(max(ph.components[c] for ph in e.stage.phases.values()))
                     for c in ("parameters", "gradients", "optimizer_states")] +
                    [num_gib(e.peak_bytes), e.peak_phase.replace("_", " ")])
    s.ctx["precision_table"] = md_table(
        ["mixed_precision", "parameters GiB", "gradients GiB", "optimizer states GiB",
         "peak GiB", "peak phase"], rows, "lrrrrl")
    shard_rows = []
    base = {**T, "activation_checkpointing": "full"}
    for label, par in (("none (1 GPU)", {}), ("ZeRO-1, dp 8", {"dp": 8, "zero": 1}),
                       ("ZeRO-2, dp 8", {"dp": 8, "zero": 2}), ("ZeRO-3 / FSDP, dp 8", {"dp": 8, "zero": 3}),
                       ("TP 8 + sequence parallel", {"tp": 8, "sequence_parallel": True}),
                       ("PP 4", {"pp": 4}), ("CP 2, ZeRO-3, dp 4", {"dp": 4, "cp": 2, "zero": 3})):
        name = "shard_" + str(len(shard_rows))
        e = s.step(name, _scenario("llama-3.1-8b", "h100-sxm-80gb", base, par))
        shard_rows.append([f"[{label}]({s.ctx[f'{name}_link']})"] +
                          [num_gib(max(ph.components[c] for ph in e.stage.phases.values()))
                           for c in ("parameters", "gradients", "optimizer_states", "activations")] +
                          [num_gib(e.device_bytes)])
    s.ctx["sharding_table"] = md_table(
        ["layout", "parameters", "gradients", "optimizer states", "activations", "device GiB"],
        shard_rows, "lrrrrr")
    attention_rows = []
    lora = {"seq_len": 2048, "micro_batch_size": 2, "finetuning": "lora"}
    for name, gpu, extra in (("attn_flash", "h100-sxm-80gb", {}),
                             ("attn_padded", "h100-sxm-80gb", {"padded": True}),
                             ("attn_eager", "h100-sxm-80gb", {"attention": "eager"}),
                             ("attn_t4", "t4-16gb", {"precision": "fp16"}),
                             ("attn_t4_padded", "t4-16gb", {"precision": "fp16", "padded": True})):
        e = s.step(name, _scenario("llama-3.2-1b", gpu, {**lora, **extra}))
        x = e.setup
        kernel = ("eager: the S x S scores, fp32 and bf16" if x.eager else
                  "math: fp32 q, K, V and S x S probabilities" if x.math_attention else
                  "memory-efficient: the mask as a bias, K/V repeated" if x.padded_sdpa else
                  "flash")
        attention_rows.append([f"[{e.resolved.gpu.name}{', padded' if extra.get('padded') else ''}"
                               f"{', eager' if x.eager else ''}]({s.ctx[f'{name}_link']})",
                               kernel, num_gib(max(ph.components["activations"]
                                                   for ph in e.stage.phases.values())),
                               num_gib(e.peak_bytes)])
    s.claim(s.est["attn_t4"].peak_bytes > 1.5 * s.est["attn_flash"].peak_bytes,
            "on a T4 the math kernel's S x S probabilities outweigh flash's by half the peak")
    s.claim(s.est["attn_t4_padded"].peak_bytes < s.est["attn_t4"].peak_bytes,
            "padding takes a T4 off the math kernel")
    s.claim(s.est["attn_padded"].peak_bytes > s.est["attn_flash"].peak_bytes,
            "a padded batch costs more than flash")
    s.ctx["attention_table"] = md_table(
        ["GPU, batch", "SDPA kernel", "activations GiB", "peak GiB"], attention_rows, "llrr")
    e = s.est["amp"]
    s.ctx["amp_phases"] = phases_table(e)
    s.ctx["amp_sum_of_maxima"] = gib(sum(max(ph.components[c] for ph in e.stage.phases.values())
                                         for c in e.components))
    s.ctx["amp_overhead"] = md_table(
        ["overhead (empirical)", "GiB"], [[f"`{k}`", num_gib(v)] for k, v in e.overhead.items()],
        "lr")
    return s.ctx
