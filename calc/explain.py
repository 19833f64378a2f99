"""Show the math: the estimator's formulas with one scenario's numbers in place of the symbols.

    >>> from calc.explain import explain
    >>> steps = {s.id: s for s in explain({"model": "gpt2", "training": {"seq_len": 1024}}).steps}
    >>> steps["parameters"].value
    124439808
    >>> steps["parameters"].substituted.endswith("= 124\\\\,439\\\\,808")
    True

Each :class:`Step` is one formula of the formula reference: LaTeX with symbols (`formula`), the
same with the scenario's numbers and the result (`substituted`), the result (`value`), and where
the report shows that number (`report`, a dotted path into ``estimate(...).as_dict()``). The
numbers come from the estimator's own functions; where a step re-states the estimator's
arithmetic to show it, the result is checked against the estimator's, so the page cannot show
math that disagrees with the report.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from .activations import decoder_layer, eager_mask, embedding_activations, head_activations, shape
from .baselines import korthikanti
from .estimate import Estimate, estimate
from .logits import logits_memory
from .numerics import numerics
from .overhead import ALLOCATOR_FLOOR, ALLOCATOR_FRACTION, CUDA_CONTEXT, NCCL_PER_GROUP
from .params import count_params, lora_targets
from .scenario import Scenario, parse_scenario, resolve
from .states import local_params, model_states

GiB = 1024**3


@dataclass(frozen=True, slots=True)
class Step:
    id: str
    title: str
    formula: str  # LaTeX, symbolic
    substituted: str  # LaTeX, the numbers in place, ending "= <value>"
    value: int
    unit: Literal["bytes", "parameters"]
    report: str | None  # dotted path of the same number in the report, or None
    source: str
    note: str = ""
    symbols: dict[str, int | float | str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Explanation:
    scenario: Scenario
    steps: tuple[Step, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario.model_dump(mode="json"),
                "steps": [asdict(step) for step in self.steps]}


def num(n: int | float) -> str:
    """An integer with thin-space thousands separators (LaTeX), a float to 4 significant digits."""
    if isinstance(n, float) and not n.is_integer():
        return f"{n:.4g}"
    return f"{int(n):,}".replace(",", "\\,")


def _bytes(n: int) -> str:
    return f"{num(n)}\\text{{ B}}" + (f" \\approx {n / GiB:.2f}\\text{{ GiB}}" if n >= GiB // 100 else "")


def _check(step: str, shown: int, estimator: int) -> None:
    if shown != estimator:
        raise AssertionError(f"explain: the {step} step computes {shown}, the estimator {estimator}")


def explain(scenario: Scenario | dict[str, Any] | str) -> Explanation:
    """The worked formulas of `scenario`, in the order the estimator applies them."""
    resolved = resolve(parse_scenario(scenario))
    e = estimate(resolved.scenario)
    steps = [*_parameters(e), *_states(e), _activations(e)]
    steps += _logits(e)
    steps += [_peak(e), *_overheads(e), _utilization(e), _korthikanti(e)]
    return Explanation(resolved.scenario, tuple(steps))


def _parameters(e: Estimate) -> list[Step]:
    arch, t = e.resolved.arch, e.resolved.training
    c = count_params(arch)
    terms = [("E", c.embedding), ("H", c.lm_head), ("n_f", c.final_norm)]
    kinds = [(c.dense_layers, c.dense_layer.count, "")]
    if c.moe_layer:
        kinds.append((c.moe_layers, c.moe_layer.count, "^\\text{MoE}"))
    formula = "P = E + H + n_f + " + " + ".join(f"L{k}\\,P_\\text{{layer}}{k}" for _, _, k in kinds)
    sub = " + ".join(num(v) for _, v in terms) + " + " + " + ".join(
        f"{num(n)} \\cdot {num(per)}" for n, per, _ in kinds)
    total = sum(v for _, v in terms) + sum(n * per for n, per, _ in kinds)
    _check("parameters", total, e.param_count)
    steps = [Step(
        "parameters", "Parameters of the model", formula, f"P = {sub} = {num(total)}", total,
        "parameters", "param_count", "counted from the Hugging Face module shapes (calc/params.py); "
        "checked against transformers on the meta device",
        "E: token embedding" + (" and learned positions" if arch.traits.learned_positions else "")
        + "; H: the untied lm_head (0 when tied); n_f: the final norm; P_layer: one decoder layer",
        {"E": c.embedding, "H": c.lm_head, "n_f": c.final_norm, "L": arch.num_hidden_layers,
         "P_layer": c.dense_layer.count})]
    if t.finetuning != "full":
        steps.append(Step(
            "trainable", "Trainable parameters (adapters)",
            "P_\\text{train} = \\sum_{\\text{targets}} r\\,(d_\\text{in} + d_\\text{out})",
            f"P_\\text{{train}} = {num(e.trainable_param_count)}", e.trainable_param_count,
            "parameters", "trainable_param_count", "Hu et al. (2021), LoRA, section 4.1",
            f"rank r = {t.lora_rank} on {t.lora_targets}; the base weights are frozen",
            {"r": t.lora_rank}))
    return steps


def _states(e: Estimate) -> list[Step]:
    r = e.resolved
    arch, t, p = r.arch, r.training, r.parallelism
    stage = e.stage.stage
    n = numerics(t, p)
    lora = t.finetuning != "full"
    targets = lora_targets(t.lora_targets) if lora else frozenset()
    local = local_params(arch, t, p, stage, targets)
    ms = model_states(local, n, t, p, arch)
    N = p.shard_group
    zero = p.zero if N > 1 else 0
    phase = e.stage.phases["optimizer_step"].components
    zero_note = f"ZeRO stage {zero} over N_d = dp × cp = {N} ranks" if N > 1 else "no data-parallel sharding"
    src = "Rajbhandari et al. (2020), ZeRO, section 3"

    def shard(count: int, stage_min: int) -> tuple[int, str]:
        if zero < stage_min:
            return count, num(count)
        return -(-count // N), f"\\lceil {num(count)} / {N} \\rceil"

    steps: list[Step] = []
    weights = sum(ms.parameters.values())
    if lora:
        parts = [(k.split("/", 1)[1], v) for k, v in ms.parameters.items() if v]
        sub = " + ".join(num(v) for _, v in parts)
        formula = "M_w = P_\\text{frozen}\\,w_\\text{base} + 4\\,P_\\text{train}"
        if t.finetuning == "qlora":
            formula = ("M_w = 0.5\\,P_\\text{linear}(1 + \\text{scales}) + P_\\text{other}\\,c "
                       "+ 4\\,P_\\text{train}")
        steps.append(Step("weights", "Weights held by one GPU", formula,
                          f"M_w = {sub} = {_bytes(weights)}", weights, "bytes",
                          "phases.optimizer_step.components.parameters", src,
                          "frozen base weights, and the adapters in fp32 (peft upcasts them)",
                          {"P_local": local.total, "P_train": local.trainable}))
    else:
        count, shown = shard(local.total, 3)
        value = count * n.weight
        if p.offload_params and zero == 3:
            value, note = 0, "offloaded to the host (ZeRO-Infinity): none on the GPU"
        else:
            note = zero_note
            _check("weights", value, weights)
        steps.append(Step(
            "weights", "Weights held by one GPU",
            "M_w = \\left\\lceil P_\\text{local} / N_d^{[z=3]} \\right\\rceil w",
            f"M_w = {shown} \\cdot {n.weight} = {_bytes(value)}", value, "bytes",
            "phases.optimizer_step.components.parameters", src,
            f"P_local: the parameters this GPU's pipeline stage holds after tp = {p.tp}, "
            f"pp = {p.pp}, ep = {p.ep} splits; w = {n.weight} bytes; {note}",
            {"P_local": local.total, "N_d": N, "w": n.weight, "z": zero}))
    grad_width = 4 if lora else n.grad
    step_width = n.master if n.master and not lora else grad_width
    count, shown = shard(local.trainable, 2)
    bucket = ms.grad_bucket if ms.grad_bucket and p.zero == 0 else 0
    grads = count * step_width + bucket
    _check("gradients", grads, phase["gradients"])
    formula = "M_g = \\left\\lceil P_\\text{train} / N_d^{[z\\ge2]} \\right\\rceil g"
    sub = f"{shown} \\cdot {step_width}"
    if bucket:
        formula += " + B_\\text{DDP}"
        sub += f" + {num(bucket)}"
    steps.append(Step(
        "gradients", "Gradients at the optimizer step", formula, f"M_g = {sub} = {_bytes(grads)}",
        grads, "bytes", "phases.optimizer_step.components.gradients", src,
        f"g = {step_width} bytes" + (" (fp32 for the step: master weights)" if step_width != grad_width else "")
        + (f"; DDP's flat buckets copy every gradient ({bucket:,} B)" if bucket else "") + f"; {zero_note}",
        {"P_train": local.trainable, "N_d": N, "g": step_width}))
    states = sum(ms.optimizer_states.values())
    if states or t.optimizer != "sgd":
        count, _ = shard(local.trainable, 1)
        named = " + ".join(f"\\underbrace{{{num(v)}}}_\\text{{{k.split('/', 1)[1].replace('_', ' ')}}}"
                           for k, v in ms.optimizer_states.items()) or "0"
        _check("optimizer states", states, phase["optimizer_states"])
        steps.append(Step(
            "optimizer_states", f"Optimizer states ({t.optimizer})",
            "M_\\text{opt} = \\left\\lceil P_\\text{train} / N_d^{[z\\ge1]} \\right\\rceil "
            "(k\\,w_s + m)",
            f"M_\\text{{opt}} = {named} = {_bytes(states)}", states, "bytes",
            "phases.optimizer_step.components.optimizer_states", src,
            f"per trainable parameter on this GPU ({count:,}): k states of w_s = "
            f"{4 if lora else n.state} bytes, m = {n.master if not lora else 0} bytes of master copy"
            + ("; offloaded to the host, none on the GPU" if p.offload_optimizer and zero >= 1 else ""),
            {"P_train": local.trainable, "N_d": N, "w_s": 4 if lora else n.state,
             "m": 0 if lora else n.master}))
    if ms.gathered_layer:
        w_g = n.gathered_weight
        value = local.per_layer * w_g
        _check("FSDP gather", value, ms.gathered_layer)
        peak = e.stage.peak.breakdown.get("temporaries/gathered_params")
        steps.append(Step(
            "fsdp_buffers", "FSDP: one layer's parameters gathered",
            "M_\\text{gather} = P_\\text{layer}\\,w_g",
            f"M_\\text{{gather}} = {num(local.per_layer)} \\cdot {w_g} = {_bytes(value)}", value,
            "bytes", "breakdown.temporaries/gathered_params" if peak == value else None,
            "traced: FSDP2 over 2-8 ranks (validation/cases.json); calc/estimate.py",
            f"FSDP all-gathers each layer before its forward and backward (w_g = {w_g} bytes); "
            f"around it: the prefetched next layer, 2 M_gather of all-gather outputs in the "
            f"forward, P_layer (2 w_g + g) = {ms.gathered_grads:,} B of gathered parameters and "
            f"unsharded gradients in a layer's backward, and the root unit (embedding, head) "
            f"kept gathered: {ms.root_gathered:,} B",
            {"P_layer": local.per_layer, "w_g": w_g}))
    if ms.step_temporary:
        count, shown = shard(local.trainable, 1)
        w_s = 4 if lora else n.state
        impl = t.optimizer_impl if t.optimizer in ("adamw", "adam") else t.optimizer
        if t.optimizer in ("adamw", "adam") and impl == "foreach":
            formula, sub = ("M_\\text{step} = \\left\\lceil P_\\text{train} / N_d^{[z\\ge1]} "
                            "\\right\\rceil w_s", f"{shown} \\cdot {w_s}")
            value, why = count * w_s, "foreach AdamW's torch._foreach_sqrt copies every second moment"
        else:  # per-tensor temporaries of the largest tensor
            k = ms.step_temporary // (local.largest_tensor * w_s) if t.optimizer != "adafactor" \
                else ms.step_temporary // (local.largest_tensor * 4)
            width = 4 if t.optimizer == "adafactor" else w_s
            formula, sub = ("M_\\text{step} = k\\,n_\\text{max}\\,w",
                            f"{k} \\cdot {num(local.largest_tensor)} \\cdot {width}")
            value, why = k * local.largest_tensor * width, (
                f"{impl}: k = {k} temporaries the size of the largest tensor (n_max) at a time")
        _check("optimizer step temporary", value, ms.step_temporary)
        bucket_tmp = bool(ms.grad_bucket and p.zero)
        steps.append(Step(
            "optimizer_step_temporary", "Temporaries inside optimizer.step()", formula,
            f"{sub} = {_bytes(value)}", value, "bytes",
            None if bucket_tmp else "phases.optimizer_step.components.temporaries",
            "traced: optimizer implementations in validation/cases.json (calc/states.py)", why,
            {"w_s": w_s, "n_max": local.largest_tensor}))
    return steps


def _activations(e: Estimate) -> Step:
    r = e.resolved
    arch, t, p = r.arch, r.training, r.parallelism
    stage = e.stage.stage
    n = numerics(t, p)
    s = shape(arch, t, p)
    c = count_params(arch)
    lora = t.finetuning != "full"
    layers = stage.dense_layers + stage.moe_layers
    ckpt = min(t.recompute_layers or layers, layers) if t.activation_checkpointing == "full" else 0
    in_flight = min(p.pp - stage.index, t.gradient_accumulation_steps) if p.pp > 1 else 1
    kinds = [(decoder_layer(arch, layer, n, t, p, s, trainable_weights=not lora), count)
             for layer, count in ((c.dense_layer, stage.dense_layers),
                                  (c.moe_layer, stage.moe_layers)) if layer is not None and count]
    remaining, terms, per_mb = ckpt, [], 0
    for act, count in kinds:
        stored = min(remaining, count)
        remaining -= stored
        per_mb += (count - stored) * act.total + stored * act.checkpoint_input
        if count - stored:
            terms.append(f"{count - stored} \\cdot {num(act.total)}")
        if stored:
            terms.append(f"{stored} \\cdot {num(act.checkpoint_input)}")
    ends = sum(embedding_activations(arch, s).values()) if stage.embedding else 0
    ends += sum(head_activations(arch, n, t, p, s).values()) if stage.head else 0
    if ends:
        terms.append(num(ends))
    per_mb += ends
    fwd = e.stage.phases["forward"].components["activations"]
    mask = eager_mask(t, n, s) if stage.embedding or p.pp == 1 else 0
    cache = fwd - per_mb * in_flight - mask  # autocast's weight cache under checkpointing
    sub = " + ".join(terms)
    sub = f"{in_flight} \\cdot ({sub})" if in_flight > 1 else sub
    extras = ""
    if cache:
        sub += f" + {num(cache)}"
        extras += " + M_\\text{cache}"
    if mask:
        sub += f" + {num(mask)}"
        extras += " + M_\\text{mask}"
    if cache < 0:
        raise AssertionError(f"explain: activations {per_mb * in_flight + mask} exceed the estimator's {fwd}")
    return Step(
        "activations", "Activations saved for backward (end of the forward)",
        "M_\\text{act} = n_\\text{flight}\\left[(L - L_c)\\,A_\\text{layer} + L_c\\,A_\\text{in} "
        "+ A_\\text{ends}\\right]" + extras,
        f"M_\\text{{act}} = {sub} = {_bytes(fwd)}", fwd, "bytes",
        "phases.forward.components.activations",
        "traced: validation/cases.json (op by op as transformers saves tensors, calc/activations.py)",
        f"L = {layers} layers on this GPU, L_c = {ckpt} checkpointed (each keeps only its input "
        f"A_in), n_flight = {in_flight} micro-batch(es) in flight; A_ends: embedding and head"
        + ("; M_cache: autocast's low-precision weight copies, alive for the whole forward" if cache else "")
        + ("; M_mask: the eager path's causal mask" if mask else ""),
        {"L": layers, "L_c": ckpt, "n_flight": in_flight, "b": s.batch, "s": s.seq, "h": s.hidden})


def _logits(e: Estimate) -> list[Step]:
    r = e.resolved
    arch, t, p = r.arch, r.training, r.parallelism
    if not e.stage.stage.head:
        return []
    n = numerics(t, p)
    T = shape(arch, t, p).tokens
    V = -(-arch.vocab_size // p.tp)
    got = logits_memory(arch, n, t, p, T).forward_peak
    c = n.compute
    if t.loss == "chunked":
        h = arch.hidden_size
        formula = "M_\\text{loss} = T h (c + 4 + 4) + T h c + 4 V h"
        sub = (f"{num(T)} \\cdot {h} \\cdot ({c} + 4 + 4) + {num(T)} \\cdot {h} \\cdot {c} "
               f"+ 4 \\cdot {num(V)} \\cdot {h}")
        value = T * h * (c + 8) + T * h * c + V * h * 4
    else:
        upcast = 0 if c == 4 else 4
        formula = "M_\\text{loss} = T\\,V\\,(c + u + 4)"
        sub = f"{num(T)} \\cdot {num(V)} \\cdot ({c} + {upcast} + 4)"
        value = T * V * (c + upcast + 4)
        if arch.final_logit_softcapping:
            formula += " + T V c"
            sub += f" + {num(T)} \\cdot {num(V)} \\cdot {c}"
            value += T * V * c
    _check("logits", value, got)
    return [Step(
        "logits", "Logits and loss at the forward's loss", formula, f"{sub} = {_bytes(value)}",
        value, "bytes", None, "calc/logits.py: Hugging Face ForCausalLMLoss (logits.float(), "
        "log_softmax, nll_loss)",
        f"T = b·s = {T:,} tokens, V = {V:,} (per tensor-parallel rank), c = {c}; "
        "a candidate for the forward's peak (the report's logits/loss when it is the peak)",
        {"T": T, "V": V, "c": c})]


def _peak(e: Estimate) -> Step:
    phases = {name: ph.peak_bytes for name, ph in e.stage.phases.items()}
    worst = e.peak_phase
    parts = " + ".join(f"\\underbrace{{{num(v)}}}_\\text{{{k.replace('_', ' ')}}}"
                       for k, v in e.components.items() if v)
    _check("peak", sum(e.components.values()), e.peak_bytes)
    return Step(
        "peak", f"The peak: the {worst.replace('_', ' ')}",
        "M_\\text{peak} = \\max_\\text{phase} \\max_\\text{moment} \\sum_\\text{live} \\text{bytes}",
        f"M_\\text{{peak}} = {parts} = {_bytes(e.peak_bytes)}", e.peak_bytes, "bytes", "peak_bytes",
        "calc/estimate.py: the worst moment of each phase, traced against validation/",
        "phase totals: " + ", ".join(f"{k.replace('_', ' ')} {v / GiB:.2f} GiB" for k, v in phases.items()),
        {k: v for k, v in phases.items()})


def _overheads(e: Estimate) -> list[Step]:
    p = e.resolved.parallelism
    o = e.overhead
    alloc = max(ALLOCATOR_FLOOR, int(e.peak_bytes * ALLOCATOR_FRACTION))
    _check("allocator", alloc, o["overhead/allocator"])
    groups = o["overhead/nccl"] // NCCL_PER_GROUP
    src = "EMPIRICAL (calc/overhead.py): not tensors, so not traced"
    return [
        Step("allocator", "Allocator cache (empirical)",
             "M_\\text{alloc} = \\max(f\\,M_\\text{peak},\\ M_\\text{floor})",
             f"M_\\text{{alloc}} = \\max({ALLOCATOR_FRACTION:g} \\cdot {num(e.peak_bytes)},\\ "
             f"{num(ALLOCATOR_FLOOR)}) = {_bytes(alloc)}", alloc, "bytes",
             "overhead.overhead/allocator", src, "the caching allocator's reserve above the peak",
             {"f": ALLOCATOR_FRACTION, "M_floor": ALLOCATOR_FLOOR}),
        Step("nccl", "CUDA context and NCCL buffers (empirical)",
             "M_\\text{ctx} + M_\\text{NCCL} = C + G \\cdot B_\\text{NCCL}",
             f"{num(CUDA_CONTEXT)} + {groups} \\cdot {num(NCCL_PER_GROUP)} = "
             f"{_bytes(CUDA_CONTEXT + o['overhead/nccl'])}", CUDA_CONTEXT + o["overhead/nccl"],
             "bytes", None, src, f"G = {groups} process group(s) of more than one rank among "
             f"dp·cp = {p.dp * p.cp}, tp = {p.tp}, pp = {p.pp}, ep = {p.ep}; in the report as "
             "overhead/cuda_context and overhead/nccl", {"C": CUDA_CONTEXT, "G": groups}),
        Step("device", "On the device (what nvidia-smi shows)",
             "M_\\text{device} = M_\\text{peak} + M_\\text{alloc} + M_\\text{ctx} + M_\\text{NCCL}",
             f"M_\\text{{device}} = {num(e.peak_bytes)} + {num(alloc)} + {num(CUDA_CONTEXT)} + "
             f"{num(o['overhead/nccl'])} = {_bytes(e.device_bytes)}", e.device_bytes, "bytes",
             "device_bytes", "calc/estimate.py", "", {}),
    ]


def _utilization(e: Estimate) -> Step:
    used = e.device_bytes
    usable = e.usable_bytes
    return Step(
        "usable", f"Against the GPU ({e.resolved.gpu.name})",
        "\\text{utilization} = M_\\text{device} / M_\\text{usable}",
        f"{num(used)} / {num(usable)} = {100 * used / usable:.1f}\\%\\quad(M_\\text{{usable}} = "
        f"{num(usable)})", usable, "bytes", "usable_bytes", "presets/gpus (usable memory)",
        "fits" if e.fits else "does not fit", {"utilization": round(e.utilization, 6)})


def _korthikanti(e: Estimate) -> Step:
    r = e.resolved
    arch, t, p = r.arch, r.training, r.parallelism
    s, b, h, a, L = (t.seq_len, t.micro_batch_size, arch.hidden_size, arch.num_attention_heads,
                     arch.num_hidden_layers)
    P, tp, pp = e.param_count, p.tp, p.pp
    value = korthikanti(r)
    states = f"\\frac{{16 \\cdot {num(P)}}}{{{tp} \\cdot {pp}}}"
    if t.activation_checkpointing == "full":
        formula = "M = \\frac{16 P}{t\\,p} + \\frac{2 s b h L}{p}"
        sub = f"{states} + \\frac{{2 \\cdot {s} \\cdot {b} \\cdot {h} \\cdot {L}}}{{{pp}}}"
        act: float = 2 * s * b * h * L
    else:
        formula = ("M = \\frac{16 P}{t\\,p} + \\frac{s b h L}{p}"
                   "\\left(10 + \\frac{24}{t} + 5\\frac{a s}{h t}\\right)")
        sub = (f"{states} + \\frac{{{s} \\cdot {b} \\cdot {h} \\cdot {L}}}{{{pp}}}\\left(10 + "
               f"\\frac{{24}}{{{tp}}} + 5\\frac{{{a} \\cdot {s}}}{{{h} \\cdot {tp}}}\\right)")
        act = s * b * h * L * (10 + 24 / tp + 5 * a * s / (h * tp))
    _check("Korthikanti", int(16 * P / (tp * pp) + act / pp), value)
    return Step(
        "korthikanti", "For comparison: the published formula",
        formula, f"M = {sub} = {_bytes(value)}", value, "bytes", None,
        "Korthikanti et al. (2022), Table 2, with mixed-precision Adam's 16 bytes per parameter "
        "(Rajbhandari et al. 2020)",
        "the paper's formula (16-bit activations, no flash attention, no ZeRO), not calc's; the "
        "accuracy page compares both with traced steps",
        {"s": s, "b": b, "h": h, "a": a, "L": L, "P": P, "t": tp, "p": pp})


__all__ = ["Explanation", "Step", "explain"]
