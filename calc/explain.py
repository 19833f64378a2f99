"""Show the math: the estimator's formulas with one scenario's numbers in place of the symbols.

    >>> from calc.explain import explain
    >>> steps = {s.id: s for s in explain({"model": "gpt2", "training": {"seq_len": 1024}}).steps}
    >>> steps["parameters"].value, steps["parameters"].report
    (124439808, 'param_count')
    >>> steps["parameters"].substituted.endswith("= 124\\\\,439\\\\,808")
    True

Each :class:`Step` is one formula of the formula reference: LaTeX with symbols (`formula`), the
same with the scenario's numbers and its result (`substituted`, always ending in
``= `` + :func:`result`), the result (`value`), and where the report shows that number
(`report`, a dotted path into ``estimate(...).as_dict()``; dict keys may contain "/", so split
on "." only). The numbers come from one `estimate` and the estimator's own functions
(`count_params`, `local_params`, `model_states`, `decoder_layer`, `logits_memory`, `korthikanti`);
where a step re-states the estimator's arithmetic to show it, the result is checked against the
estimator's and a disagreement raises AssertionError, so the page cannot show math that the
report does not do.

Conventions: bytes are exact integers with thin-space thousands separators and ``\\text{ B}``,
followed by the GiB (1024**3) value when it is at least 0.01 GiB; parameter counts are bare
integers. ``\\lceil x / N \\rceil`` is a ZeRO shard, ``\\lfloor\\cdot\\rfloor`` an ``int()``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from .activations import (
    Shape,
    decoder_layer,
    eager_mask,
    embedding_activations,
    head_activations,
    mask_width,
    shape,
)
from .baselines import korthikanti
from .estimate import Estimate, checkpointed_layers, estimate, micro_batches_in_flight
from .logits import logits_memory
from .numerics import Numerics, numerics
from .overhead import ALLOCATOR_FLOOR, ALLOCATOR_FRACTION, CUDA_CONTEXT, NCCL_PER_GROUP
from .params import LayerParams, ParamCounts, count_params, lora_targets
from .scenario import Parallelism, Scenario, Training, parse_scenario
from .states import (
    BNB_BLOCK,
    NF4_BYTES_PER_WEIGHT,
    LocalParams,
    ModelStates,
    Stage,
    local_params,
    model_states,
)

GiB = 1024**3
Unit = Literal["bytes", "parameters"]
ZERO = "Rajbhandari et al. (2020), ZeRO, section 3"
TRACED = ("traced: validation/cases.json (calc/activations.py, op by op as transformers saves "
          "tensors)")
EMPIRICAL = "EMPIRICAL (calc/overhead.py): not tensors, so not traced"


@dataclass(frozen=True, slots=True)
class Step:
    """One formula, symbolic and with the scenario's numbers, and its result."""

    id: str
    title: str
    formula: str  # LaTeX, symbolic (no $ delimiters)
    substituted: str  # LaTeX, the numbers in place, ending "= " + result(value, unit)
    value: int
    unit: Unit
    report: str | None  # dotted path of the same number in estimate(...).as_dict(), or None
    source: str
    note: str = ""
    symbols: dict[str, int | float | str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Explanation:
    scenario: Scenario
    steps: tuple[Step, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"scenario": self.scenario.model_dump(mode="json"),
                "steps": [step.as_dict() for step in self.steps]}


def num(n: int | float) -> str:
    """An integer with thin-space thousands separators (LaTeX), a float to 4 significant digits."""
    if isinstance(n, float) and not n.is_integer():
        return f"{n:.4g}"
    return f"{int(n):,}".replace(",", "\\,")


def result(value: int, unit: Unit) -> str:
    """How a step's value is written at the end of its `substituted` (after ``= ``)."""
    if unit == "parameters":
        return num(value)
    gib = f" \\approx {value / GiB:.2f}\\text{{ GiB}}" if value >= GiB // 100 else ""
    return f"{num(value)}\\text{{ B}}{gib}"


def _label(key: str) -> str:
    """A breakdown key as a \\text label: the part after the first "/", underscores escaped."""
    return key.split("/", 1)[-1].replace("_", "\\_")


def _brace(tex: str, key: str) -> str:
    return f"\\underbrace{{{tex}}}_\\text{{{_label(key)}}}"


def _check(step: str, shown: int, estimator: int) -> None:
    if shown != estimator:
        raise AssertionError(f"calc.explain: the {step} step computes {shown:,}, the estimator "
                             f"{estimator:,}: the explanation has drifted from the estimator")


def _step(id: str, title: str, formula: str, lhs: str, sub: str, value: int, unit: Unit,
          report: str | None, source: str, note: str = "",
          symbols: dict[str, int | float | str] | None = None) -> Step:
    """A step whose `substituted` is ``lhs = sub = result``."""
    head = f"{lhs} = " if lhs else ""
    return Step(id, title, formula, f"{head}{sub} = {result(value, unit)}", value, unit, report,
                source, note, symbols or {})


@dataclass(frozen=True, slots=True)
class _Ctx:
    """What every step reads, computed once by the estimator's own functions."""

    e: Estimate
    t: Training
    p: Parallelism
    stage: Stage
    n: Numerics
    s: Shape
    c: ParamCounts
    local: LocalParams
    ms: ModelStates
    lora: bool
    targets: frozenset[str]
    N: int  # N_d = dp x cp
    zero: int  # the effective ZeRO stage (0 when N_d = 1)

    def shard(self, count: int, stage_min: int) -> tuple[int, str]:
        """(count on this GPU, its LaTeX) at ZeRO stage `stage_min` or above, as model_states."""
        if self.zero < stage_min:
            return count, num(count)
        return -(-count // self.N), f"\\lceil {num(count)} / {self.N} \\rceil"

    @property
    def zero_note(self) -> str:
        p = self.p
        if self.N > 1 and not self.zero:
            return f"no ZeRO: plain data parallelism over N_d = dp × cp = {self.N} ranks"
        if self.N > 1:
            return f"ZeRO stage {self.zero} over N_d = dp × cp = {p.dp} × {p.cp} = {self.N} ranks"
        if p.zero:
            return f"ZeRO stage {p.zero} asked for, but N_d = dp × cp = 1: nothing is sharded"
        return "no data-parallel sharding (N_d = 1)"


def explain(scenario: Scenario | dict[str, Any] | str) -> Explanation:
    """The worked formulas of `scenario`, in the order the estimator applies them.

    Raises :class:`calc.ScenarioError` for a bad scenario (as :func:`calc.estimate` does), and
    AssertionError if a formula shown here no longer gives the estimator's number."""
    e = estimate(parse_scenario(scenario))
    r = e.resolved
    t, p = r.training, r.parallelism
    n = numerics(t, p)
    lora = t.finetuning != "full"
    targets = lora_targets(t.lora_targets) if lora else frozenset()
    local = local_params(r.arch, t, p, e.stage.stage, targets)
    ctx = _Ctx(e, t, p, e.stage.stage, n, shape(r.arch, t, p), count_params(r.arch), local,
               model_states(local, n, t, p, r.arch), lora, targets, p.shard_group,
               p.zero if p.shard_group > 1 else 0)
    steps = [*_parameters(ctx), *_states(ctx), *_activations(ctx), *_logits(ctx), _peak(ctx),
             *_overheads(ctx), *_host(ctx), _korthikanti(ctx)]
    return Explanation(e.scenario, tuple(steps))


# ---------------------------------------------------------------------------------------------
# Parameters (calc/params.py, calc/states.py)
# ---------------------------------------------------------------------------------------------

def _kinds(x: _Ctx, whole: bool) -> list[tuple[str, LayerParams, int]]:
    """(name, layer, count) of each decoder-layer kind, in the whole model or on this stage."""
    c, st = x.c, x.stage
    out = [("dense", c.dense_layer, c.dense_layers if whole else st.dense_layers)]
    if c.moe_layer is not None:
        out.append(("MoE", c.moe_layer, c.moe_layers if whole else st.moe_layers))
    return [k for k in out if k[2]]


def _parameters(x: _Ctx) -> list[Step]:
    arch = x.e.resolved.arch
    c, p = x.c, x.p
    src = ("counted from the Hugging Face module shapes (calc/params.py); checked against "
           "transformers' own count on the meta device (validation/param_counts.py)")
    steps: list[Step] = []
    for kind, layer, _ in _kinds(x, whole=True):
        terms, total = [], layer.norm_count
        for lin in layer.linears:
            bias = 1 if lin.bias else 0
            size = (lin.in_features + bias) * lin.out_features * lin.copies
            total += size
            d_in = f"({num(lin.in_features)} + 1)" if bias else num(lin.in_features)
            copies = f"{lin.copies} \\cdot " if lin.copies > 1 else ""
            name = {"experts": f"{lin.name} (experts)", "shared_expert": f"{lin.name} (shared)"}
            terms.append(_brace(f"{copies}{d_in} \\cdot {num(lin.out_features)}",
                                name.get(lin.group, lin.name)))
        if layer.norm_count:
            terms.append(_brace(num(layer.norm_count), "norms"))
        _check(f"{kind} layer parameters", total, layer.count)
        sym = "P_\\text{MoE}" if layer.moe else "P_\\text{dense}"
        steps.append(_step(
            "moe_layer_parameters" if layer.moe else "layer_parameters",
            f"Parameters of one {kind} decoder layer",
            f"{sym} = \\sum_\\text{{linears}} e\\,(d_\\text{{in}} + \\beta)\\,d_\\text{{out}} "
            "+ n_\\text{norms}", sym, " + ".join(terms), layer.count, "parameters", None, src,
            "intermediate, not in the report: each nn.Linear's d_in × d_out (+1 row with a bias), "
            "e copies for routed experts; the norms' weights (and biases)",
            {"h": arch.hidden_size, "n_norms": layer.norm_count, "linears": len(layer.linears)}))
    h, V = arch.hidden_size, arch.vocab_size
    emb = f"{num(V)} \\cdot {num(h)}"
    if arch.traits.learned_positions:
        emb += f" + {num(arch.max_position_embeddings)} \\cdot {num(h)}"
    head = "0" if arch.tie_word_embeddings else f"{num(V)} \\cdot {num(h)}"
    layers = [(k, layer.count, count) for k, layer, count in _kinds(x, whole=True)]
    total = c.embedding + c.lm_head + c.final_norm + sum(per * count for _, per, count in layers)
    _check("parameters", total, x.e.param_count)
    steps.append(_step(
        "parameters", "Parameters of the model",
        "P = E + H + n_f + "
        + " + ".join(f"L_\\text{{{k}}}\\,P_\\text{{{k}}}" for k, _, _ in layers),
        "P", f"{emb} + {head} + {num(c.final_norm)} + "
        + " + ".join(f"{count} \\cdot {num(per)}" for _, per, count in layers),
        total, "parameters", "param_count", src,
        "E: token embedding V × h" + (" and learned positions" if arch.traits.learned_positions
                                      else "")
        + "; H: the lm_head V × h (0 when tied to the embedding); n_f: the final norm",
        {"V": V, "h": h, "E": c.embedding, "H": c.lm_head, "n_f": c.final_norm,
         **{f"L_{k}": count for k, _, count in layers},
         **{f"P_{k}": per for k, per, _ in layers}}))
    if x.lora:
        steps.append(_trainable(x))
    if p.tp > 1 or p.pp > 1 or (p.ep > 1 and c.moe_layer is not None):
        steps.append(_local(x))
    return steps


def _adapter_terms(layer: LayerParams, targets: frozenset[str], tp: int,
                   ep: int) -> tuple[int, str]:
    """LoRA adapter parameters of one layer on one GPU: r (rows + cols) per targeted linear."""
    total, terms = 0, []
    for lin in layer.linears:
        if lin.name not in targets:
            continue
        copies = lin.copies // (ep if lin.group == "experts" else 1)
        rows, cols = lin.local_shape(tp)
        total += (rows + cols) * copies
        pre = f"{copies} \\cdot " if copies > 1 else ""
        terms.append(f"{pre}({num(cols)} + {num(rows)})")
    return total, " + ".join(terms)


def _trainable(x: _Ctx) -> Step:
    t = x.t
    r = t.lora_rank
    value, parts = 0, []
    for _, layer, count in _kinds(x, whole=True):
        per, tex = _adapter_terms(layer, x.targets, 1, 1)
        if per:
            value += count * r * per
            parts.append(f"{count} \\cdot {r} \\cdot ({tex})")
    _check("trainable parameters", value, x.e.trainable_param_count)
    return _step(
        "trainable", "Trainable parameters (LoRA adapters)",
        "P_\\text{train} = \\sum_\\text{layers} \\sum_\\text{targets} "
        "r\\,(d_\\text{in} + d_\\text{out})",
        "P_\\text{train}", " + ".join(parts) or "0", value, "parameters", "trainable_param_count",
        "Hu et al. (2021), LoRA, section 4.1: B A with A r × d_in and B d_out × r; targets as "
        "calc/params.py lora_targets names them (peft's)",
        f"rank r = {r} on '{t.lora_targets}'; the base weights are frozen",
        {"r": r, "targets": t.lora_targets})


def _local(x: _Ctx) -> Step:
    """Parameters one GPU of the reported pipeline stage holds, after tp, pp and ep splits."""
    p, c, st, local = x.p, x.c, x.stage, x.local
    terms, value = [], 0
    for kind, layer, count in _kinds(x, whole=False):
        per = layer.norm_count + sum(sum(lin.local_counts(p.tp, p.ep)) for lin in layer.linears)
        value += count * per
        terms.append(f"\\underbrace{{{count} \\cdot {num(per)}}}_\\text{{{kind} layers}}")
    root: list[str] = []
    vocab = c.embedding // p.tp
    if st.embedding:
        value += vocab
        root.append(f"\\lfloor {num(c.embedding)} / {p.tp} \\rfloor")
    if st.head:
        value += c.final_norm
        root.append(num(c.final_norm))
        if c.lm_head:
            value += c.lm_head // p.tp
            root.append(f"\\lfloor {num(c.lm_head)} / {p.tp} \\rfloor")
        elif not st.embedding:
            value += vocab  # tied weights: the last stage keeps its own copy
            root.append(f"\\lfloor {num(c.embedding)} / {p.tp} \\rfloor")
    if root:
        terms.append(f"\\underbrace{{{' + '.join(root)}}}_\\text{{embedding, head}}")
    if x.lora:
        adapters = sum(count * x.t.lora_rank * _adapter_terms(layer, x.targets, p.tp, p.ep)[0]
                       for _, layer, count in _kinds(x, whole=False))
        value += adapters
        terms.append(_brace(num(adapters), "adapters"))
    _check("local parameters", value, local.total)
    why = ("the first, most micro-batches in flight" if st.embedding
           else "the last, with the head and the loss")
    return _step(
        "local_parameters", f"Parameters on one GPU of pipeline stage {st.index}",
        "P_\\text{local} = \\sum_\\text{kinds} L_\\text{stage} P_\\text{layer}^{(tp, ep)} "
        "+ P_\\text{root}^{(tp)}", "P_\\text{local}", " + ".join(terms), value, "parameters",
        None, "Megatron-LM conventions (calc/states.py local_params): column- and row-parallel "
        "weights and the vocabulary-parallel embedding / tp, routed experts / ep",
        f"intermediate, not in the report; stage {st.index} of pp = {p.pp} (the stage with the "
        f"higher peak: {why}); tp = {p.tp}, ep = {p.ep}; norms and "
        "routers are replicated",
        {"tp": p.tp, "pp": p.pp, "ep": p.ep, "stage": st.index, "P_local": value})


# ---------------------------------------------------------------------------------------------
# Model states (calc/states.py)
# ---------------------------------------------------------------------------------------------

def _states(x: _Ctx) -> list[Step]:
    steps = [_weights(x), _gradients(x), *_optimizer_states(x)]
    if x.ms.gathered_layer:
        steps.append(_fsdp(x))
    temporaries = x.e.stage.phases["optimizer_step"].components["temporaries"]
    if temporaries:
        steps.append(_step_temporaries(x, temporaries))
    return steps


def _weights(x: _Ctx) -> Step:
    t, p, n, local, ms = x.t, x.p, x.n, x.local, x.ms
    report = "phases.optimizer_step.components.parameters"
    shown = sum(ms.parameters.values())
    frozen = local.total - local.trainable
    if t.finetuning == "qlora":
        nf4 = int(local.linear_weights * NF4_BYTES_PER_WEIGHT)
        value = nf4 + (frozen - local.linear_weights) * n.compute + 4 * local.trainable
        _check("weights", value, shown)
        return _step(
            "weights", "Weights held by one GPU (QLoRA)",
            "M_w = \\left\\lfloor P_\\text{linear}\\left(\\tfrac12 + \\tfrac1{64} + "
            "\\tfrac{4}{64 \\cdot 256}\\right)\\right\\rfloor + (P_\\text{frozen} - "
            "P_\\text{linear})\\,c + 4\\,P_\\text{train}", "M_w",
            f"\\left\\lfloor {num(local.linear_weights)} \\cdot {NF4_BYTES_PER_WEIGHT:.12g} "
            f"\\right\\rfloor + {num(frozen - local.linear_weights)} \\cdot {n.compute} + 4 \\cdot "
            f"{num(local.trainable)}", value, "bytes", report,
            "Dettmers et al. (2023), QLoRA, section 3 (NF4, blocksize 64, double-quantised "
            "absmax); adapters in fp32 as peft upcasts them",
            "the linear weights in NF4, the other frozen weights (embedding, norms) in c = "
            f"{n.compute} bytes, the adapters in fp32; ZeRO does not shard the frozen base in "
            "calc's model", {"P_linear": local.linear_weights, "P_frozen": frozen,
                             "P_train": local.trainable, "c": n.compute})
    if x.lora:
        w_base = n.weight if t.mixed_precision == "amp" else n.compute
        value = frozen * w_base + 4 * local.trainable
        _check("weights", value, shown)
        return _step(
            "weights", "Weights held by one GPU (LoRA)",
            "M_w = P_\\text{frozen}\\,w_\\text{base} + 4\\,P_\\text{train}", "M_w",
            f"{num(frozen)} \\cdot {w_base} + 4 \\cdot {num(local.trainable)}", value, "bytes",
            report, "calc/states.py: frozen base in the model's dtype; adapters in fp32 (peft "
            "upcasts them)", "ZeRO does not shard the frozen base in calc's model",
            {"P_frozen": frozen, "P_train": local.trainable, "w_base": w_base})
    count, tex = x.shard(local.total, 3)
    value = count * n.weight
    formula = "M_w = \\left\\lceil P_\\text{local} / N_d^{[z=3]} \\right\\rceil w"
    symbols: dict[str, int | float | str] = {"P_local": local.total, "N_d": x.N, "z": x.zero,
                                              "w": n.weight}
    note = (f"P_local: the parameters this GPU holds (tp = {p.tp}, pp = {p.pp}, ep = {p.ep}); "
            f"w = {n.weight} bytes ({t.mixed_precision}, {t.precision}); {x.zero_note}")
    if p.offload_params and x.zero == 3:
        _check("offloaded weights", value, x.e.stage.host["host/parameters"])
        _check("weights", 0, shown)
        return Step(
            "weights", "Weights held by one GPU (offloaded to the host)",
            formula.replace("M_w", "M_w^\\text{host}") + ",\\quad M_w = 0",
            f"M_w^\\text{{host}} = {tex} \\cdot {n.weight} = {result(value, 'bytes')},\\quad "
            f"M_w = {result(0, 'bytes')}", 0, "bytes", report, ZERO + "; ZeRO-Infinity (offload)",
            note + "; the shards live in host memory (host_breakdown.host/parameters) and are "
            "gathered layer by layer", symbols)
    _check("weights", value, shown)
    return _step("weights", "Weights held by one GPU", formula, "M_w", f"{tex} \\cdot {n.weight}",
                 value, "bytes", report, ZERO, note, symbols)


def _gradients(x: _Ctx) -> Step:
    p, n, local, ms = x.p, x.n, x.local, x.ms
    grad_width = 4 if x.lora else n.grad
    g = n.master if n.master and not x.lora else grad_width
    count, tex = x.shard(local.trainable, 2)
    value = count * g
    _check("gradients at the step", value, sum(ms.step_gradients.values()))
    formula = "M_g = \\left\\lceil P_\\text{train} / N_d^{[z\\ge2]} \\right\\rceil g"
    sub = f"{tex} \\cdot {g}"
    note = f"g = {g} bytes"
    if g != grad_width:
        note += (f" (the step works on fp32 gradients beside the master weights; {grad_width}-byte "
                 "gradients during backward)")
    elif x.lora:
        note += " (adapter gradients in fp32)"
    symbols: dict[str, int | float | str] = {"P_train": local.trainable, "N_d": x.N, "z": x.zero,
                                              "g": g}
    if ms.grad_bucket and p.zero == 0:
        bucket = local.trainable * n.grad
        _check("DDP buckets", bucket, ms.grad_bucket)
        value += bucket
        formula += " + P_\\text{train}\\,g_b"
        sub += f" + {num(local.trainable)} \\cdot {n.grad}"
        note += f"; DDP's flat buckets copy every gradient (g_b = {n.grad} bytes)"
        symbols["g_b"] = n.grad
    _check("gradients", value, x.e.stage.phases["optimizer_step"].components["gradients"])
    return _step("gradients", "Gradients at the optimizer step", formula, "M_g", sub, value,
                 "bytes", "phases.optimizer_step.components.gradients", ZERO,
                 f"{note}; {x.zero_note}", symbols)


def _optimizer_states(x: _Ctx) -> list[Step]:
    t, p, n, local, ms = x.t, x.p, x.n, x.local, x.ms
    offloaded = p.offload_optimizer and x.zero >= 1
    on_gpu = {k.split("/", 1)[1]: v for k, v in ms.optimizer_states.items()}
    held = on_gpu if not offloaded else {
        k.removeprefix("host/optimizer_states/"): v for k, v in x.e.stage.host.items()
        if k.startswith("host/optimizer_states/")}
    count, tex = x.shard(local.trainable, 1)
    w_s = 4 if x.lora else n.state
    ceil = "\\left\\lceil P_\\text{train} / N_d^{[z\\ge1]} \\right\\rceil"
    steps: list[Step] = []
    for name, shown in held.items():
        source, what = ZERO, f"w_s = {w_s} bytes per element"
        if name in ("exp_avg", "exp_avg_sq", "momentum"):
            value, formula, sub = count * w_s, f"{ceil}\\,w_s", f"{tex} \\cdot {w_s}"
            title = {"exp_avg": "Adam's first moment", "exp_avg_sq": "Adam's second moment",
                     "momentum": "Momentum"}[name]
        elif name == "master_weights":
            value, formula, sub = count * n.master, f"{ceil} \\cdot 4", f"{tex} \\cdot {n.master}"
            title, what = "fp32 master weights", "an fp32 copy of each trainable parameter"
        elif name.endswith("_8bit"):
            blocks = -(-count // BNB_BLOCK)
            value = count + 4 * blocks
            formula = f"n + 4 \\lceil n / {BNB_BLOCK} \\rceil,\\quad n = {ceil}"
            sub = f"{tex} + 4 \\cdot \\lceil {num(count)} / {BNB_BLOCK} \\rceil"
            title = ("8-bit first moment" if name == "exp_avg_8bit" else "8-bit second moment")
            source = f"bitsandbytes 8-bit blockwise optimizers (bnb.optim defaults: block {BNB_BLOCK})"
            what = f"1 byte per element plus one fp32 absmax per block of {BNB_BLOCK}"
        elif name == "factored_second_moment":
            share = count / max(1, local.trainable)
            value = int(4 * local.factored * share)
            formula = f"\\left\\lfloor 4\\,F \\cdot {ceil} / P_\\text{{train}} \\right\\rfloor"
            sub = (f"\\left\\lfloor 4 \\cdot {num(local.factored)} \\cdot {num(count)} / "
                   f"{num(local.trainable)} \\right\\rfloor")
            title = "Adafactor's factored second moment"
            source = "Shazeer & Stern (2018), Adafactor, section 3"
            what = (f"F = {local.factored:,}: rows + cols of each trainable matrix, vectors whole, "
                    "in fp32; the ZeRO share of it")
        else:
            raise AssertionError(f"calc.explain has no formula for optimizer state {name!r}")
        _check(name, value, shown)
        report = (f"host_breakdown.host/optimizer_states/{name}" if offloaded
                  else f"breakdown.optimizer_states/{name}")
        steps.append(_step(
            name, title + (" (in host memory)" if offloaded else ""),
            f"M_\\text{{{_label(name)}}} = {formula}",
            f"M_\\text{{{_label(name)}}}", sub, value, "bytes", report if value else None, source,
            f"{t.optimizer} in {t.mixed_precision} {t.precision}: {what}; {x.zero_note}"
            + ("; ZeRO-Offload keeps it on the host" if offloaded else ""),
            {"P_train": local.trainable, "N_d": x.N, "z": x.zero, "w_s": w_s, "n": count,
             **({"F": local.factored} if name == "factored_second_moment" else {})}))
    if not steps:
        return steps
    total = sum(on_gpu.values())
    opt = x.e.stage.phases["optimizer_step"].components["optimizer_states"]
    _check("optimizer states", total, opt)
    sub = " + ".join(_brace(num(v), k) for k, v in on_gpu.items()) if on_gpu else "0"
    steps.append(_step(
        "optimizer_states", f"Optimizer states on one GPU ({t.optimizer})",
        "M_\\text{opt} = \\sum_\\text{states} M_\\text{state}", "M_\\text{opt}", sub, total,
        "bytes", "phases.optimizer_step.components.optimizer_states", ZERO,
        "offloaded: the optimizer runs on the CPU (ZeRO-Offload), none on the GPU" if offloaded
        else f"the states above, on the GPU; {x.zero_note}", {"states": len(on_gpu)}))
    return steps


def _fsdp(x: _Ctx) -> Step:
    n, local, ms = x.n, x.local, x.ms
    value = local.per_layer * n.gathered_weight
    _check("FSDP gather", value, ms.gathered_layer)
    at_peak = x.e.stage.peak.breakdown.get("temporaries/gathered_params") == value
    return _step(
        "fsdp_buffers", "FSDP: one layer's parameters gathered",
        "M_\\text{gather} = P_\\text{layer}\\,w_g", "M_\\text{gather}",
        f"{num(local.per_layer)} \\cdot {n.gathered_weight}", value, "bytes",
        "breakdown.temporaries/gathered_params" if at_peak else None,
        "traced: FSDP2 over 2-8 ranks (validation/cases.json); calc/states.py, calc/estimate.py",
        ("" if at_peak else "not in the report's breakdown: the peak moment holds no gathered "
         "layer; ") + f"FSDP all-gathers each layer before its forward and backward (w_g = "
        f"{n.gathered_weight} bytes); around it: the prefetched next layer, 2 M_gather of "
        f"all-gather outputs in the forward, P_layer (2 w_g + g) = {ms.gathered_grads:,} B of "
        "gathered parameters and unsharded gradients in a layer's backward, and the root unit "
        f"(embedding, head) kept gathered: {ms.root_gathered:,} B",
        {"P_layer": local.per_layer, "w_g": n.gathered_weight})


def _step_temporaries(x: _Ctx, total: int) -> Step:
    """What optimizer.step() allocates beside the states (calc/states.py _step_temporary)."""
    t, n, local, ms = x.t, x.n, x.local, x.ms
    count, tex = x.shard(local.trainable, 1)
    w_s, g = (4, 4) if x.lora else (n.state, n.grad)
    n_max = local.largest_tensor
    formulas, subs, notes = [], [], []
    value = 0
    if ms.step_temporary:
        o, impl = t.optimizer, t.optimizer_impl
        if o in ("adamw", "adam") and impl == "foreach":
            value = count * w_s
            formulas.append("\\left\\lceil P_\\text{train} / N_d^{[z\\ge1]} \\right\\rceil w_s")
            subs.append(f"{tex} \\cdot {w_s}")
            notes.append("foreach AdamW's torch._foreach_sqrt copies every second moment")
        elif o == "adafactor":
            k = 4 if w_s == 4 and g < 4 else 2
            value = k * n_max * 4
            formulas.append("k\\,n_\\text{max} \\cdot 4")
            subs.append(f"{k} \\cdot {num(n_max)} \\cdot 4")
            notes.append(f"Adafactor: {k} fp32 temporaries the size of the largest tensor"
                         + (" (2 more: the low-precision gradient upcast)" if k == 4 else ""))
        else:  # for-loop AdamW, Lion: sqrt then the division, one tensor at a time
            value = 2 * n_max * w_s
            formulas.append("2\\,n_\\text{max}\\,w_s")
            subs.append(f"2 \\cdot {num(n_max)} \\cdot {w_s}")
            notes.append(f"{o} ({impl}): two temporaries the size of the largest tensor")
        _check("optimizer step temporary", value, ms.step_temporary)
    if ms.grad_bucket and x.p.zero:  # ZeRO's reduce bucket, alive through the step
        h = x.e.resolved.arch.hidden_size
        _check("reduce bucket", h * h * n.grad, ms.grad_bucket)
        value += h * h * n.grad
        formulas.append("h^2\\,g")
        subs.append(f"{num(h)}^2 \\cdot {n.grad}")
        notes.append("DeepSpeed's reduce bucket: reduce_bucket_size = h² elements under HF's "
                     "'auto' config")
    _check("optimizer step temporaries", value, total)
    return _step(
        "optimizer_step_temporary", "Temporaries inside optimizer.step()",
        "M_\\text{step} = " + " + ".join(formulas), "M_\\text{step}", " + ".join(subs), value,
        "bytes", "phases.optimizer_step.components.temporaries",
        "traced: optimizer implementations in validation/cases.json (calc/states.py)",
        "; ".join(notes), {"n_max": n_max, "w_s": w_s, "N_d": x.N})


# ---------------------------------------------------------------------------------------------
# Activations (calc/activations.py, calc/estimate.py)
# ---------------------------------------------------------------------------------------------

def _activations(x: _Ctx) -> list[Step]:
    arch, t, p, n, s, st = x.e.resolved.arch, x.t, x.p, x.n, x.s, x.stage
    megatron = t.implementation == "megatron"
    source = ("Korthikanti et al. (2022), Table 2, generalised (calc/activations.py "
              "_megatron_layer)" if megatron else TRACED)
    kinds = [(kind, decoder_layer(arch, layer, n, t, p, s, trainable_weights=not x.lora), count)
             for kind, layer, count in _kinds(x, whole=False)]
    r_in = 2 if megatron else n.residual  # the width of a layer's input, kept when checkpointed
    steps: list[Step] = []
    for kind, act, _ in kinds:
        items = {k: v for k, v in act.saved.items() if v}
        steps.append(_step(
            "moe_layer_activations" if kind == "MoE" else "layer_activations",
            f"Activations one {kind} layer saves for backward (one micro-batch)",
            "A_\\text{layer} = \\sum_\\text{ops} \\text{bytes saved}", "A_\\text{layer}",
            " + ".join(_brace(num(v), k) for k, v in items.items()) or "0", act.total, "bytes",
            None, source, "intermediate, not in the report (its breakdown sums these over the "
            f"layers): T = {s.tokens:,} tokens, h = {s.hidden:,} per GPU, c = {n.compute}, "
            f"r = {r_in}; each op's rule is in calc/activations.py",
            {"T": s.tokens, "h": s.hidden, "c": n.compute, "r": r_in,
             **{_label(k).replace("\\_", "_"): v for k, v in items.items()}}))
    layers = st.dense_layers + st.moe_layers
    ckpt = checkpointed_layers(t, layers)
    in_flight = micro_batches_in_flight(t, p, st)
    remaining, terms, cache_terms = ckpt, [], []
    per_mb = cache = 0
    for kind, act, count in kinds:
        stored = min(remaining, count)
        remaining -= stored
        _check(f"{kind} checkpointed input", s.tokens * s.hidden * r_in, act.checkpoint_input)
        if count - stored:
            per_mb += (count - stored) * act.total
            terms.append(f"{count - stored} \\cdot {num(act.total)}")
        if stored:
            per_mb += stored * act.checkpoint_input
            terms.append(f"{stored} \\cdot {num(s.tokens)} \\cdot {num(s.hidden)} \\cdot {r_in}")
            copies = act.saved.get("activations/weight_copies", 0)
            if n.autocast and copies:
                cache += stored * copies
                cache_terms.append(f"{stored} \\cdot {num(copies)}")
    for key, ends in (("embedding", embedding_activations(arch, s) if st.embedding else {}),
                      ("head", head_activations(arch, n, t, p, s) if st.head else {})):
        if sum(ends.values()):
            per_mb += sum(ends.values())
            terms.append(_brace(num(sum(ends.values())), key))
    sub = " + ".join(terms)
    sub = f"{in_flight} \\cdot \\left({sub}\\right)" if in_flight > 1 else sub
    value = in_flight * per_mb + cache
    formula = ("M_\\text{act} = n_\\text{flight}\\left[\\sum_\\text{kinds}\\left((L - L_c)"
               "\\,A_\\text{layer} + L_c\\,T\\,h\\,r\\right) + A_\\text{emb} + A_\\text{head}\\right]")
    if cache_terms:
        formula += " + L_c W"
        sub += " + " + " + ".join(cache_terms)
    mask = eager_mask(t, n, s) if st.embedding or p.pp == 1 else 0
    if mask:
        width = mask_width(n)
        _check("eager mask", s.batch * s.seq * s.seq * width, mask)
        value += mask
        formula += " + b\\,s^2\\,m"
        sub += f" + {s.batch} \\cdot {num(s.seq)}^2 \\cdot {width}"
    _check("activations", value, x.e.stage.phases["forward"].components["activations"])
    steps.append(_step(
        "activations", "Activations saved for backward (end of the forward)", formula,
        "M_\\text{act}", sub, value, "bytes", "phases.forward.components.activations", source,
        f"L = {layers} layers on this GPU, L_c = {ckpt} checkpointed, each keeping only its input "
        f"T h r (r = {r_in} bytes); n_flight = {in_flight} micro-batch(es) in flight"
        + (" (1F1B pipeline)" if p.pp > 1 else "") + "; A_emb, A_head: the embedding's and the "
        "head's saved tensors" + ("; W: autocast's low-precision weight copies of a "
                                  "checkpointed layer, cached for the whole forward"
                                  if cache_terms else "")
        + ("; b s² m: the eager path's additive causal mask" if mask else ""),
        {"L": layers, "L_c": ckpt, "n_flight": in_flight, "T": s.tokens, "h": s.hidden,
         "r": r_in}))
    return steps


# ---------------------------------------------------------------------------------------------
# Logits and loss (calc/logits.py)
# ---------------------------------------------------------------------------------------------

def _logits(x: _Ctx) -> list[Step]:
    if not x.stage.head:
        return []
    arch, t, p, n = x.e.resolved.arch, x.t, x.p, x.n
    T, h, c = x.s.tokens, arch.hidden_size, n.compute
    V = -(-arch.vocab_size // p.tp)
    got = logits_memory(arch, n, t, p, T)
    src = "calc/logits.py: Hugging Face ForCausalLMLoss (logits.float(), log_softmax, nll_loss)"
    symbols: dict[str, int | float | str] = {"T": T, "V": V, "c": c}
    if t.loss == "chunked":
        src = "calc/logits.py: Liger-Kernel's fused linear cross-entropy (chunked)"
        symbols["h"] = h
        kept_f = "T\\,h\\,c + 4\\,V\\,h"
        kept_s = f"{num(T)} \\cdot {num(h)} \\cdot {c} + 4 \\cdot {num(V)} \\cdot {num(h)}"
        fwd = (T * h * (c + 8) + T * h * c + V * h * 4, "T\\,h\\,(c + 4 + 4) + " + kept_f,
               f"{num(T)} \\cdot {num(h)} \\cdot ({c} + 4 + 4) + {kept_s}")
        bwd = (T * h * c + V * h * 4, kept_f, kept_s)
        why = ("one chunk of logits (low precision, fp32 and its gradient) plus what the kernel "
               "keeps: the input gradient and the fp32 head-weight gradient")
    else:
        u = 0 if c == 4 else 4
        symbols["u"] = u
        cap = arch.final_logit_softcapping
        cap_f, cap_s = (" + T\\,V\\,c", f" + {num(T)} \\cdot {num(V)} \\cdot {c}") if cap else ("", "")
        softcap = T * V * c if cap else 0
        fwd = (T * V * (c + u + 4) + softcap, "T\\,V\\,(c + u + 4)" + cap_f,
               f"{num(T)} \\cdot {num(V)} \\cdot ({c} + {u} + 4)" + cap_s)
        bwd = (T * V * 12 + softcap, "12\\,T\\,V" + cap_f,
               f"12 \\cdot {num(T)} \\cdot {num(V)}" + cap_s)
        why = (f"the logits (c = {c}), their fp32 copy (u = {u}) and log_softmax's fp32 output"
               + ("; Gemma 2's soft-capping keeps its tanh output (T V c)" if cap else ""))
    _check("logits at the loss", fwd[0], got.forward_peak)
    _check("logits at the loss backward", bwd[0], got.backward_peak)
    steps = []
    for sid, phase, (value, formula, sub), title, what in (
            ("logits", "forward", fwd, "Logits and loss at the forward's loss", why),
            ("logits_backward", "backward", bwd, "Logits' gradients at the start of backward",
             "the saved log_softmax output and the gradients nll_loss and log_softmax return, "
             "all fp32" if t.loss != "chunked" else "what the fused kernel kept from the forward")):
        in_report = x.e.stage.phases[phase].components["logits"] == value
        steps.append(_step(
            sid, title, "M_\\text{loss} = " + formula, "M_\\text{loss}", sub, value, "bytes",
            f"phases.{phase}.components.logits" if in_report else None, src,
            f"T = b s / cp = {T:,} tokens, V = {V:,} (per tensor-parallel rank): {what}"
            + ("" if in_report else f"; not in the report: the {phase}'s worst moment is "
               "elsewhere (this is a candidate it was compared with)"), symbols))
    return steps


# ---------------------------------------------------------------------------------------------
# The peak, overheads, the device (calc/estimate.py, calc/overhead.py)
# ---------------------------------------------------------------------------------------------

def _peak(x: _Ctx) -> Step:
    e = x.e
    phases = {name: ph.peak_bytes for name, ph in e.stage.phases.items()}
    parts = {k: v for k, v in e.components.items() if v}
    _check("peak", sum(parts.values()), e.peak_bytes)
    return _step(
        "peak", f"The peak: the {e.peak_phase.replace('_', ' ')}",
        "M_\\text{peak} = \\max_\\text{phase} \\max_\\text{moment} "
        "\\sum_\\text{live} \\text{bytes}",
        "M_\\text{peak}", " + ".join(_brace(num(v), k) for k, v in parts.items()), e.peak_bytes,
        "bytes", "peak_bytes", "calc/estimate.py: the worst moment of each phase, traced "
        "against validation/cases.json",
        "the components at the worst moment of the worst phase; phase totals: "
        + ", ".join(f"{k.replace('_', ' ')} {v / GiB:.2f} GiB" for k, v in phases.items())
        + " (report: phases.<phase>.peak_bytes; the report's components and breakdown are "
        "this moment's)", {**phases, "phase": e.peak_phase})


def _overheads(x: _Ctx) -> list[Step]:
    e, p = x.e, x.p
    o = e.overhead
    peak = e.peak_bytes
    alloc = max(int(peak * ALLOCATOR_FRACTION), ALLOCATOR_FLOOR)
    _check("allocator", alloc, o["overhead/allocator"])
    sizes = {"dp × cp": p.dp * p.cp, "tp": p.tp, "pp": p.pp, "ep": p.ep}
    groups = [name for name, size in sizes.items() if size > 1]
    nccl = len(groups) * NCCL_PER_GROUP
    _check("NCCL", nccl, o["overhead/nccl"])
    _check("CUDA context", CUDA_CONTEXT, o["overhead/cuda_context"])
    steps = [
        _step("allocator", "Allocator cache (empirical)",
              "M_\\text{alloc} = \\max(\\lfloor f\\,M_\\text{peak} \\rfloor,\\ M_\\text{floor})",
              "M_\\text{alloc}", f"\\max(\\lfloor {ALLOCATOR_FRACTION:g} \\cdot {num(peak)} "
              f"\\rfloor,\\ {num(ALLOCATOR_FLOOR)})", alloc, "bytes",
              "overhead.overhead/allocator", EMPIRICAL,
              "the caching allocator's reserve above the allocated peak (reserved_bytes = "
              "peak + this)", {"f": ALLOCATOR_FRACTION, "M_floor": ALLOCATOR_FLOOR}),
        Step("cuda_context", "CUDA context (empirical)", "M_\\text{ctx} = C",
             f"M_\\text{{ctx}} = {result(CUDA_CONTEXT, 'bytes')}", CUDA_CONTEXT, "bytes",
             "overhead.overhead/cuda_context", EMPIRICAL,
             "about 500 MiB on A100/H100 as nvidia-smi shows after torch.cuda.init()",
             {"C": CUDA_CONTEXT}),
    ]
    if groups:
        steps.append(_step(
            "nccl", "NCCL buffers (empirical)", "M_\\text{NCCL} = G\\,B_\\text{NCCL}",
            "M_\\text{NCCL}", f"{len(groups)} \\cdot {num(NCCL_PER_GROUP)}", nccl, "bytes",
            "overhead.overhead/nccl", EMPIRICAL,
            f"G = {len(groups)} process group(s) of more than one rank: {', '.join(groups)}",
            {"G": len(groups), "B_NCCL": NCCL_PER_GROUP}))
    device = peak + alloc + CUDA_CONTEXT + nccl
    _check("device", device, e.device_bytes)
    steps.append(_step(
        "device", "On the device (what nvidia-smi shows)",
        "M_\\text{device} = M_\\text{peak} + M_\\text{alloc} + M_\\text{ctx} + M_\\text{NCCL}",
        "M_\\text{device}", f"{num(peak)} + {num(alloc)} + {num(CUDA_CONTEXT)} + {num(nccl)}",
        device, "bytes", "device_bytes", "calc/estimate.py", "", {}))
    usable = e.usable_bytes
    u = round(device / usable, 6)
    steps.append(Step(
        "utilization", f"Against the GPU ({e.resolved.gpu.name})",
        "u = \\frac{M_\\text{device}}{M_\\text{usable}},\\quad M_\\text{usable}: "
        "\\text{the GPU's usable memory}",
        f"u = \\frac{{{num(device)}}}{{{num(usable)}}} = {100 * device / usable:.1f}\\%,\\quad "
        f"M_\\text{{usable}} = {result(usable, 'bytes')}", usable, "bytes", "usable_bytes",
        f"presets/gpus ({e.resolved.gpu.id}): {e.resolved.gpu.usable_bytes_source}",
        f"{'fits' if e.fits else 'does not fit'}: u is the report's utilization; the step's value "
        "is M_usable", {"u": u, "M_device": device, "M_usable": usable}))
    return steps


def _host(x: _Ctx) -> list[Step]:
    host = {k: v for k, v in x.e.stage.host.items() if v}
    if not host:
        return []
    count, tex = x.shard(x.local.trainable, 1)
    parts = []
    for key, v in host.items():
        if key == "host/gradients_fp32":
            _check("host fp32 gradients", count * 4, v)
            parts.append(_brace(f"{tex} \\cdot 4", key))
        else:
            parts.append(_brace(num(v), key))
    total = sum(host.values())
    _check("host", total, x.e.host_bytes)
    return [_step(
        "host", "Offloaded to host (CPU) memory", "M_\\text{host} = \\sum \\text{offloaded}",
        "M_\\text{host}", " + ".join(parts), total, "bytes", "host_bytes",
        ZERO + "; Ren et al. (2021), ZeRO-Offload",
        "not on the GPU: ZeRO-Offload's optimizer states and fp32 gradient partitions, "
        "ZeRO-Infinity's parameter shards (each shown above)", {"N_d": x.N})]


def _korthikanti(x: _Ctx) -> Step:
    r = x.e.resolved
    arch, t, p = r.arch, r.training, r.parallelism
    s, b, h, a, L = t.seq_len, t.micro_batch_size, arch.hidden_size, arch.num_attention_heads, \
        arch.num_hidden_layers
    P, tp, pp = x.e.param_count, p.tp, p.pp
    states = f"\\frac{{16 \\cdot {num(P)}}}{{{tp} \\cdot {pp}}}"
    act: float
    if t.activation_checkpointing == "full":
        formula = "M = \\left\\lfloor\\frac{16 P}{t\\,p} + \\frac{2 s b h L}{p}\\right\\rfloor"
        sub = f"{states} + \\frac{{2 \\cdot {s} \\cdot {b} \\cdot {h} \\cdot {L}}}{{{pp}}}"
        act = 2 * s * b * h * L
    else:
        formula = ("M = \\left\\lfloor\\frac{16 P}{t\\,p} + \\frac{s b h L}{p}"
                   "\\left(10 + \\frac{24}{t} + 5\\frac{a s}{h t}\\right)\\right\\rfloor")
        sub = (f"{states} + \\frac{{{s} \\cdot {b} \\cdot {h} \\cdot {L}}}{{{pp}}}\\left(10 + "
               f"\\frac{{24}}{{{tp}}} + 5\\frac{{{a} \\cdot {s}}}{{{h} \\cdot {tp}}}\\right)")
        act = s * b * h * L * (10 + 24 / tp + 5 * a * s / (h * tp))
    value = int(16 * P / (tp * pp) + act / pp)
    _check("Korthikanti", value, korthikanti(r))
    return _step(
        "korthikanti", "For comparison: the published formula", formula, "M",
        f"\\left\\lfloor {sub} \\right\\rfloor", value, "bytes", None,
        "Korthikanti et al. (2022), Table 2, with mixed-precision Adam's 16 bytes per parameter "
        "(Rajbhandari et al. 2020); calc/baselines.py",
        "not calc's estimate and not in the report: the paper's per-layer formula (16-bit "
        "activations, no flash attention, no ZeRO, no logits) as other calculators use it, "
        "A_layer per layer in symbols; the "
        "accuracy page compares both with traced steps",
        {"s": s, "b": b, "h": h, "a": a, "L": L, "P": P, "t": tp, "p": pp,
         "A_layer": round(act / L)})


__all__ = ["Explanation", "Step", "explain", "num", "result"]
