"""Which parameters one GPU holds: pipeline stages, tensor and expert splits, LoRA adapters.

Megatron-LM's conventions (Shoeybi et al. 2019; Narayanan et al. 2021): tensor parallelism
divides column- and row-parallel weights and the vocabulary-parallel embedding by tp, norms and
routers are replicated; pipeline stage i holds its own layers, the first the embedding, the last
the final norm and the head (a tied head keeps its own copy there); expert parallelism divides
the routed experts by ep. Counts here are before ZeRO sharding, which `states.py` applies.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from functools import lru_cache

from .architecture import Architecture
from .formula import Formula, Term
from .params import (
    LayerParams,
    Linear,
    ParamCounts,
    adapted,
    adapter_shapes,
    by_parameter,
    quantised,
    stacked,
)
from .sources import MEGATRON_SPLITS


@dataclass(frozen=True, slots=True, eq=False)  # memoised singletons: hashed by identity
class Stage:
    """Which parts of the model one pipeline rank holds."""

    index: int  # the pipeline rank
    dense_layers: int
    moe_layers: int
    embedding: bool
    head: bool  # final norm + lm_head + loss
    first_layer: int = 0  # the index of its first decoder layer in the model
    # The unit whose micro-batches are counted in flight where it is not the whole rank: one
    # model chunk (interleaved 1F1B), one of DualPipe's two stages; the rank's ends not in it.
    unit: Stage | None = None

    @property
    def layers(self) -> int:
        return self.dense_layers + self.moe_layers


def split_layers(L: int, parts: int) -> list[tuple[int, int]]:
    """(first layer, layers) of each of `parts` contiguous pieces, the first ones a layer longer
    where they do not divide evenly."""
    sizes = [L // parts + (1 if i < L % parts else 0) for i in range(parts)]
    return [(sum(sizes[:i]), sizes[i]) for i in range(parts)]


def _piece(arch: Architecture, index: int, pieces: list[tuple[int, int]], embedding: bool, head: bool,
           unit: Stage | None = None) -> Stage:
    moe = sum(arch.is_moe_layer(j) for start, n in pieces for j in range(start, start + n))
    layers = sum(n for _, n in pieces)
    return Stage(index, layers - moe, moe, embedding, head, pieces[0][0], unit)


def every_nth(first: int, layers: int, n: int) -> tuple[bool, ...]:
    """Which of `layers` layers from `first` on transformers' every_n_layers checkpoints:
    layers 0, n, 2 n..."""
    return tuple((first + i) % n == 0 for i in range(layers))


@lru_cache(maxsize=1024)
def stages(counts: ParamCounts, pp: int, schedule: str = "1f1b", v: int = 1, every: int = 0
           ) -> tuple[Stage, ...]:
    """The pipeline ranks that can set the peak: of ranks holding the same parts, the first
    (it keeps the most micro-batches in flight); under zero bubble and ZBV the last (every
    rank but the first keeps as many, the later ones more of them waiting for their weight
    backward: `Setup.flight`). Every rank's share is considered: DeepSeek-V3's middle ranks
    hold only MoE layers, its first the dense ones and the embedding. Under every `every`th
    layer checkpointed, parts alike but checkpointed unlike each other are not the same (a
    V's rank with its plain chunk first holds that chunk's micro-batches longest).

    - 1F1B, GPipe, zero-bubble: rank i holds the i-th of pp contiguous pieces.
    - interleaved 1F1B (Narayanan et al. 2021, section 2.2): the model in pp x v chunks, rank i
      holding chunks i, i + pp, ...; the embedding on rank 0, the head on rank pp - 1.
    - ZBV and DualPipeV (torch's V-shaped schedules, `generate_rank_to_stage_mapping` style
      "v"): the model in 2 pp chunks, rank i holding chunks i and 2 pp - 1 - i, so rank 0 holds
      both the embedding and the head, and the last rank two neighbouring stages (its own
      entry: the first passes its output to the second on the rank, `_boundary` in peak.py).
    - DualPipe (DeepSeek-V3 report, section 3.2.1): rank i holds stages i and pp - 1 - i of
      both directions, so the first and the last rank each hold the embedding and the head."""
    arch = counts.arch
    L = arch.num_hidden_layers
    out: dict[tuple[Hashable, ...], Stage] = {}
    held: list[list[tuple[int, int]]] = []  # each rank's pieces: (first layer, layers)
    if schedule == "interleaved_1f1b":
        chunks = split_layers(L, pp * v)
        ranks = []
        for i in range(pp):
            mine = chunks[i::pp]
            unit = _piece(arch, i, mine[:1], False, False)  # its first chunk, the longest
            ranks.append(_piece(arch, i, mine, i == 0, i == pp - 1, unit))
            held.append(mine)
    elif schedule in ("zbv", "dualpipev"):
        chunks = split_layers(L, 2 * pp)
        ranks = []
        for i in range(pp):
            mine = [chunks[i], chunks[2 * pp - 1 - i]]
            unit = _piece(arch, i, [max(mine, key=lambda c: c[1])], False, False)
            ranks.append(_piece(arch, i, mine, i == 0, i == 0, unit))
            held.append(mine)
    elif schedule == "dualpipe":
        pieces = split_layers(L, pp)
        ranks = []
        for i in range(pp):
            j = pp - 1 - i
            halves = [_piece(arch, k, [pieces[k]], False, False) for k in (i, j)]
            unit = max(halves, key=lambda st: (st.moe_layers, st.layers))
            ends = i in (0, pp - 1)
            ranks.append(_piece(arch, i, [pieces[i], pieces[j]], ends, ends, unit))
            held.append([pieces[i], pieces[j]])
    else:
        held = [[piece] for piece in split_layers(L, pp)]
        ranks = [_piece(arch, i, mine, i == 0, i == pp - 1) for i, mine in enumerate(held)]
    for st, mine in reversed(list(zip(ranks, held, strict=True))) \
            if schedule in ("zero_bubble", "zbv") else zip(ranks, held, strict=True):
        # a V's last rank holds two neighbouring stages: one passes its output to the other
        neighbours = schedule in ("zbv", "dualpipev") and st.index == pp - 1
        checkpointed = tuple(every_nth(first, n, every) for first, n in mine) if every else ()
        key = (st.dense_layers, st.moe_layers, st.embedding, st.head,
               st.unit.layers if st.unit else 0, neighbours, checkpointed)
        out.setdefault(key, st)
    return tuple(sorted(out.values(), key=lambda st: st.index))


LOCAL_PARAMETERS = Formula(
    "parameters/local", "lambda L_d, P_dl, L_m, P_ml, R, A: L_d * P_dl + L_m * P_ml + R + A",
    id="placement.local_parameters", unit="parameters", source=MEGATRON_SPLITS,
    title="Parameters one GPU of the stage holds (after tp, pp and ep splits)")


@dataclass(frozen=True, slots=True, eq=False)  # memoised singletons: hashed by identity
class LocalParams:
    """Parameter counts on one GPU of a stage, before ZeRO sharding."""

    term: Term  # LOCAL_PARAMETERS: all parameters held, frozen included
    trainable: int
    largest_tensor: int  # the biggest single trainable tensor (for per-tensor temporaries)
    per_layer: int  # one decoder layer with its adapters (FSDP gathers one at a time)
    linear_weights: int  # the nn.Linear weights (QLoRA quantises these; not the routed experts)
    root: int  # embedding + head + final norm (FSDP's root unit)
    factored: int  # Adafactor's second moment: rows + cols per trainable matrix, vectors whole
    per_layer_trainable: int  # the trainable part of `per_layer` (its adapters, with LoRA)
    per_layer_linear: int  # the linear weights of `per_layer` (QLoRA's 4-bit part)
    root_trainable: int  # the trainable part of `root` (none with LoRA)
    per_layer_last: int  # the trainable part of the layer's last projection (backward's first)
    per_layer_mlp: int  # the trainable part of the layer's MLP (experts, shared expert, router)
    experts: int  # the routed experts' parameters held (split by tp and ep), frozen included
    experts_trainable: int  # their trainable part
    per_layer_experts: int  # one MoE layer's routed experts held (FSDP's expert unit)
    per_layer_experts_down: int  # and their down projections (the unit's first gradients)
    head_trainable: int  # the trainable part of `root` the head's backward writes: the head
    # and the final norm (tied weights: the shared matrix); none with LoRA
    tensors: tuple[int, ...] = ()  # the trainable tensors' elements, largest first
    ordered: tuple[int, ...] = ()  # and in the model's order (embedding, layers, norm, head)

    @property
    def total(self) -> int:
        return self.term.bytes


@lru_cache(maxsize=4096)
def local_params(counts: ParamCounts, lora: bool, lora_rank: int, tp: int, ep: int, stage: Stage,
                 targets: frozenset[str]) -> LocalParams:
    """Parameters one GPU of `stage` holds. Independent of batch and sequence, so memoised
    (a batch or sequence search re-estimates the same model many times)."""
    arch = counts.arch
    linear_w = adapters = factored = largest = per_layer = layer_adapters = layer_linear = 0
    layer_last = layer_mlp = experts = experts_trainable = layer_experts = layer_down = 0
    per_kind = {}
    tensors: list[int] = []  # the layers' (then the norm's, the head's)
    first: list[int] = []  # the embedding's
    for name, layer, n in (("dense", counts.dense_layer, stage.dense_layers),
                           ("moe", counts.moe_layer, stage.moe_layers)):
        if layer is None or n == 0:
            per_kind[name] = 0
            continue
        tensors += _layer_tensors(layer, lora, lora_rank, tp, ep, targets) * n
        lt, lw, la, big, fac = _layer_local(layer, lora, lora_rank, tp, ep, targets)
        per_kind[name] = lt
        routed = [lin for lin in layer.linears if lin.group == "experts"]
        if routed:
            layer_experts = sum(sum(lin.local_counts(tp, ep)) for lin in routed)
            layer_down = sum(sum(lin.local_counts(tp, ep)) for lin in routed if lin.tp == "row")
            experts += n * layer_experts
        experts_trainable += n * sum(_trainable(lin, lora, lora_rank, tp, ep, targets)
                                     for lin in routed)
        linear_w += n * lw
        adapters += n * la
        factored += n * fac
        largest = max(largest, big)
        if lt + la > per_layer:
            per_layer, layer_adapters, layer_linear = lt + la, la, lw
            _, layer_mlp, layer_last = layer_trainable(layer, lora, lora_rank, tp, ep, targets)
    root = head = 0
    h = arch.hidden_size
    vocab_part = counts.embedding // tp
    vocab_rows = vocab_part // h
    root_matrices = 0
    if stage.embedding:
        root += vocab_part
        root_matrices += 1
    if stage.head:
        head = counts.final_norm
        if counts.lm_head:  # a classification head is replicated, not split over tp
            head += counts.lm_head // (1 if arch.num_labels else tp)
            root_matrices += 1
        else:  # tied weights: the last stage keeps its own copy, or shares the embedding's
            head += vocab_part
            root_matrices += not stage.embedding
        root += head - vocab_part if not counts.lm_head and stage.embedding else head
    total = LOCAL_PARAMETERS(stage.dense_layers, per_kind["dense"], stage.moe_layers,
                             per_kind["moe"], root, adapters if lora else 0)
    if lora:
        trainable = adapters
    else:
        factored += root_matrices * (vocab_rows + h) + (counts.final_norm if stage.head else 0)
        trainable = total.bytes
        largest = max(largest, vocab_part if (stage.embedding or stage.head) else 0)
        positions = arch.max_position_embeddings * h if arch.traits.learned_positions else 0
        if stage.embedding:  # (GPT-2's position table is a tensor of its own)
            first = [vocab_part - positions // tp, positions // tp] if positions else [vocab_part]
        if stage.head:
            tensors.append(counts.final_norm)
            if counts.lm_head or not stage.embedding:
                tensors.append(head - counts.final_norm)
    ordered = tuple(t for t in first + tensors if t)
    tensors = sorted(ordered, reverse=True)
    return LocalParams(total, trainable, largest, per_layer, linear_w, root, factored,
                       layer_adapters if lora else per_layer, layer_linear, 0 if lora else root,
                       layer_last, layer_mlp, experts, experts_trainable, layer_experts,
                       layer_down, 0 if lora else head, tuple(tensors), ordered)


def layer_trainable(layer: LayerParams, lora: bool, rank: int, tp: int, ep: int,
                    targets: frozenset[str]) -> tuple[int, int, int]:
    """(trainable, its MLP's, its last projection's) parameters of one decoder layer on one
    GPU (`LocalParams.per_layer_trainable`, `per_layer_mlp` and `per_layer_last` are the
    widest layer's)."""
    total, _, adapters, _, _ = _layer_local(layer, lora, rank, tp, ep, targets)
    mlp = sum(_trainable(lin, lora, rank, tp, ep, targets) for lin in layer.linears
              if lin.group != "attention")
    return (adapters if lora else total), mlp, _last_trainable(layer, lora, rank, tp, ep,
                                                               targets)


def _last_trainable(layer: LayerParams, lora: bool, rank: int, tp: int, ep: int,
                    targets: frozenset[str]) -> int:
    """Trainable parameters of the layer's last projection, the first whose weight gradient
    its backward writes (the MLP's down projection)."""
    return _trainable(layer.linears[-1], lora, rank, tp, ep, targets)


def _trainable(lin: Linear, lora: bool, rank: int, tp: int, ep: int,
               targets: frozenset[str]) -> int:
    """One projection's trainable parameters on one GPU: its weight and bias, or its
    adapter (LoRA)."""
    if lora:
        if not adapted(lin, targets):
            return 0
        return sum(rows * cols for rows, cols in adapter_shapes(lin, rank, tp, ep))
    return sum(lin.local_counts(tp, ep))


def linear_spans(layer: LayerParams, tp: int, ep: int) -> tuple[tuple[int, int], ...]:
    """Where each of `layer`'s linears' weight lies among its tensors as DeepSpeed's flat
    parameters lay them out in full training (`local_params`): (offset, elements), the routed
    experts' gate and up stacked in gate_proj's (up_proj's empty)."""
    at, out = layer.norm_count, []
    for lin in layer.linears:
        w, b = lin.local_counts(tp, ep)
        out.append((at, stacked(lin) * w))
        at += stacked(lin) * (w + b)
    return tuple(out)


def registered(layer: LayerParams, arch: Architecture, tp: int, ep: int
               ) -> tuple[tuple[int, bool], ...]:
    """`layer`'s trainable tensors in full training, in the order transformers registers them
    (DeepSpeed's flat groups follow it), each with whether DeepSpeed's torch_autocast reduces
    it in the autocast dtype: an nn.Linear's weight and bias do (its
    LOWER_PRECISION_SAFE_MODULES); the norms, attention sinks, an MoE block's router and
    routed experts (parameters of their own in transformers v5) and GPT-2's Conv1D go in fp32.
    MLA's low-rank norms follow q_a_proj and kv_a_proj_with_mqa, the q/k norms the attention's
    projections, which its sinks, its own parameter, precede (`named_parameters` lists a
    module's own before its children's); a block that builds its experts first lists them
    first; the layer's norms come last (GPT-2's ahead of each sublayer)."""
    t = arch.traits
    gpt2 = t.norm == "layer"

    def tensors(lin: Linear) -> list[tuple[int, bool]]:
        low = not gpt2 and not by_parameter(lin)
        return [(n * stacked(lin), low) for n in lin.local_counts(tp, ep) if n * stacked(lin)]

    norm = arch.hidden_size * (2 if gpt2 else 1)
    out: list[tuple[int, bool]] = []
    placed = 0  # the layer's norm elements placed among its projections

    def among(sizes: list[int]) -> None:
        nonlocal out, placed
        out += [(n, False) for n in sizes if n]
        placed += sum(sizes)

    # a module's own parameters come before its children's: GPT-OSS's sinks before q_proj;
    # a norm among the sublayers comes before the next tensor
    inner = [norm] if gpt2 else [arch.num_attention_heads] * t.sinks
    for lin in layer.linears:
        if lin.group == "attention":
            among(inner)
            out += tensors(lin)
            inner = [arch.q_lora_rank or 0] if lin.name == "q_a_proj" else \
                [arch.kv_lora_rank or 0] if lin.name == "kv_a_proj_with_mqa" else []
    among(inner + [arch.head_size] * (2 if t.qk_norm else 0) + [norm] * gpt2)
    block = [lin for lin in layer.linears if lin.group != "attention"]
    if t.experts_first:
        block.sort(key=lambda lin: lin.group != "experts")
    for lin in block:
        out += tensors(lin)
    among([layer.norm_count - placed])  # the layer's own norms, last
    return tuple(out)


def _layer_tensors(layer: LayerParams, lora: bool, rank: int, tp: int, ep: int,
                   targets: frozenset[str]) -> list[int]:
    """One layer's trainable tensors on one GPU, as transformers holds them: each linear's
    weight and bias, the routed experts stacked (gate and up in one tensor), the norms
    counted as one; or the LoRA matrices."""
    if lora:
        return [m * k for lin in layer.linears if adapted(lin, targets)
                for m, k in adapter_shapes(lin, rank, tp, ep)]
    out = [layer.norm_count]
    for lin in layer.linears:
        w, b = lin.local_counts(tp, ep)
        out += [stacked(lin) * w, stacked(lin) * b]
    return out


def layer_gathered(layer: LayerParams, lora: bool, rank: int, tp: int, ep: int,
                   targets: frozenset[str]) -> tuple[int, int]:
    """(parameters with their adapters, quantisable linear weights) of one decoder layer on
    one GPU: what FSDP gathers of it (`LocalParams.per_layer` and `per_layer_linear` are the
    widest layer's)."""
    total, linear, adapters, _, _ = _layer_local(layer, lora, rank, tp, ep, targets)
    return total + adapters, linear


def _layer_local(layer: LayerParams, lora: bool, rank: int, tp: int, ep: int,
                 targets: frozenset[str]) -> tuple[int, int, int, int, int]:
    """(params, quantisable linear weights, LoRA params, largest tensor, Adafactor factors)
    of one decoder layer on one GPU."""
    total = linear = adapters = largest = factored = 0
    for lin in layer.linears:
        w, b = lin.local_counts(tp, ep)
        total += w + b
        linear += w if quantised(lin) else 0
        copies = lin.copies // (ep if lin.group == "experts" else 1)
        rows, cols = lin.local_shape(tp)
        if lora:
            if adapted(lin, targets):
                for m, k in adapter_shapes(lin, rank, tp, ep):
                    adapters += m * k
                    largest = max(largest, m * k)
                    factored += m + k
        else:  # (the routed experts: one stacked tensor, as `_layer_tensors` counts them)
            largest = max(largest, stacked(lin) * w)
            factored += copies * (rows + cols) + b
    total += layer.norm_count
    if not lora:
        factored += layer.norm_count
    return total, linear, adapters, largest, factored
