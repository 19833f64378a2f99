"""DeepSpeed ZeRO-3's parameter coordinator: which parameters are gathered, when.

ZeRO-3 partitions every parameter over the data-parallel ranks and gathers a module's
parameters before it runs (`PartitionedParameterCoordinator`, DeepSpeed 0.19.8,
runtime/zero/partitioned_param_coordinator.py). Every module has hooks: a fetch before its
forward and before its backward, a release after each. The first step records the order of the
fetches; from then on each fetch also prefetches the parameters next in that order, a bucket
at a time (`stage3_prefetch_bucket_size`), while fewer than `stage3_max_live_parameters`
elements are gathered or in flight (the parameter crossing the limit is gathered whole). A
release keeps a module's parameters where a later prefetch already looked past their next use,
or where they are used again within `stage3_max_reuse_distance` elements of the order (the top
layers, from their forward to their backward). Parameters of at most
`stage3_param_persistence_threshold` elements (norms, biases) are never partitioned. A sparse
MoE block DeepSpeed knows (`Traits.moe_leaf`) is one leaf module: all its parameters are
fetched and released together, and a release elsewhere counts none of them towards the reuse
distance (it reads only its modules' own parameters, and the block's are its children's).

`gathered` replays these rules over the module calls of one forward and backward of a
Hugging Face decoder (a checkpointed layer's recomputation between its backward's first fetch
and first release) and reads how many elements are on the GPU at the step's moments: those
the coordinator holds gathered or in flight, and two it does not count. A coalesced prefetch's
flat buffer outlives the first wait on it, which copies every parameter out of it, until the
last of them is waited for; a fetch all-gathers what is neither gathered nor in flight before
it waits for the rest, so a buffer its waits free is still alive beside that all-gather.
transformers' grouped GEMM saves a transposed view of each stacked expert weight, which keeps
a released parameter's storage until that layer's backward. The
replay equals DeepSpeed's own coordinator on every fetch of the recorded cases
(validation/coordinator_log.py, tests/test_coordinator.py), and the estimates built on it the
traced steps of Llama, Mistral, Qwen2.5, Qwen3, Gemma 2, Phi-3, GPT-2, Mixtral, Qwen3-MoE and
DeepSeek-V3 (validation/cases.json), full training, LoRA (peft's lora.Linear modules, and its
ParamWrapper on the stacked experts and router, whose A and B are the wrapped module's own
parameters) and QLoRA (a 4-bit weight a parameter of n / 4 elements of bf16).
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from operator import attrgetter
from typing import NamedTuple

from .architecture import Traits
from .params import (
    LayerParams,
    ParamCounts,
    adapted,
    adapter_shapes,
    by_parameter,
    quantised,
    stacked,
)
from .placement import Stage
from .scenario import ZERO_SIZES, Parallelism

# DeepSpeed's defaults, which calc's DeepSpeed export writes (calc.frameworks.deepspeed)
MAX_LIVE_PARAMETERS = 10**9  # stage3_max_live_parameters
MAX_REUSE_DISTANCE = 10**9  # stage3_max_reuse_distance
SUB_GROUP_SIZE = 10**9  # sub_group_size: the optimizer steps this many elements at a time


class Sizes(NamedTuple):
    """DeepSpeed's zero_optimization sizes, in elements, in the order of their scenario fields
    (`calc.scenario.ZERO_SIZES`)."""

    reduce_bucket: int  # reduce_bucket_size
    prefetch_bucket: int  # stage3_prefetch_bucket_size
    persistence_threshold: int  # stage3_param_persistence_threshold
    max_live: int  # stage3_max_live_parameters
    reuse_distance: int  # stage3_max_reuse_distance
    sub_group: int  # sub_group_size


@lru_cache(maxsize=64)
def default_sizes(h: int) -> Sizes:
    """The sizes calc's export writes where a scenario sets none: the reduce and prefetch
    buckets and the persistence threshold as the HF Trainer fills their "auto" (h^2, 0.9 h^2,
    10 h; transformers' HfDeepSpeedConfig), DeepSpeed's own defaults for the others."""
    return Sizes(h * h, int(0.9 * h * h), 10 * h, MAX_LIVE_PARAMETERS, MAX_REUSE_DISTANCE,
                 SUB_GROUP_SIZE)


_GIVEN = attrgetter(*ZERO_SIZES)


def zero_sizes(h: int, p: Parallelism) -> Sizes:
    """The sizes `p` sets, `default_sizes` for the rest (every estimate asks: kept cheap)."""
    given, defaults = _GIVEN(p), default_sizes(h)
    if given.count(None) == len(given):
        return defaults
    return Sizes._make(default if value is None else value
                       for value, default in zip(given, defaults, strict=True))


def oversized_down(layer: LayerParams, tp: int, bucket: int) -> tuple[int, int] | None:
    """(down, up) projection elements on one GPU of a gated MLP of three projections whose
    down projection is over DeepSpeed's reduce bucket (stage_1_and_2.py's extra-large
    parameter: it waits in its own tensor and is reduced as the next gradient, the up
    projection's, arrives); None for other MLPs (Phi-3's fused gate/up, a plain MLP) or a down
    projection within the bucket."""
    if len(layer.mlp_inputs) != 2:
        return None
    up = layer.mlp_inputs[-1].local_counts(tp, 1)[0]
    down = next(lin for lin in reversed(layer.linears) if lin.group == "mlp").local_counts(tp, 1)[0]
    return (down, up) if down > bucket else None


class Live(NamedTuple):
    """Partitioned parameter elements gathered on one GPU at the step's moments (ZeRO-3)."""

    forward_head: int  # the loss, after the head's forward
    forward_mlp: int  # the last layer's MLP in forward
    backward_head: int  # the loss's backward, before the head's
    backward_top: int  # the top layer's backward (its MLP's)
    backward_first: int  # the first layer's backward
    embedding: int  # the embedding's backward, the last of the step
    backward_moe: tuple[int, ...]  # each MoE layer's backward (its experts'), the stage's
    # layers in order (0 for a dense one)
    backward_moe_done: tuple[int, ...]  # and once both its grouped GEMMs' backwards have run
    forward_router: int  # the last layer in forward before its experts, where a wait copied a
    # coalesced prefetch of them out beside its buffer (at the router, where it is a module of
    # its own, or with LoRA on the attention at the last adapter), or the experts' own fetch
    # all-gathered beside a buffer its waits free, the wider; 0 where neither did
    persistent: int  # never partitioned: whole on every GPU, all step
    router_before_norm: bool = False  # that wait ran before the layer's post-attention norm
    # (the last adapter's), not at the router after it
    forward_copy: int = 0  # a dense last layer in forward, at its down projection: a wait
    # copying a coalesced prefetch (the head's, with that projection's adapters) out of its
    # flat buffer, at the widest member's copy; 0 where no wait there did
    copy_in_adapter: bool = False  # that wait ran at the projection's adapter (QLoRA's lora_A
    # under autocast, fetched on its own), after its frozen base layer
    forward_norm: int = 0  # the final norm in forward (what that copy left, until the head's
    # fetch frees the buffer)


def one_rank(layers: int) -> Live:
    """ZeRO-3 on one rank: nothing gathered apart from the partitions, at any moment
    (`layers`: the stage's)."""
    return Live(0, 0, 0, 0, 0, 0, (0,) * layers, (0,) * layers, 0, 0)


@dataclass(eq=False)
class Module:
    """An nn.Module as the coordinator sees it: its own parameters, its children in the order
    its forward calls them, and whether it is a leaf (fetched with its children's)."""

    name: str
    own: tuple[Hashable, ...] = ()
    children: tuple[Module, ...] = ()
    leaf: bool = False
    # what its forward reads: its parent's input ("input": q/k/v, gate/up, a LoRA layer's
    # base layer and dropout), the output of the sibling called before it ("previous"), or
    # that input and every earlier sibling's output ("all": a residual stream's modules)
    reads: str = "all"
    # its backward unpacks a tensor its forward saved: bitsandbytes' 4-bit layer keeps its
    # weight out of autograd's saved tensors, so a frozen one unpacks none
    unpacks: bool = True
    every: tuple[Hashable, ...] = field(init=False)

    def __post_init__(self) -> None:
        self.every = self.own + tuple(k for c in self.children for k in c.every)

    @property
    def fetched(self) -> tuple[Hashable, ...]:
        return self.every if self.leaf else self.own

    def calls(self) -> Iterator[Module]:
        """This module and those under it with hooks, depth first."""
        yield self
        if not self.leaf:
            for child in self.children:
                yield from child.calls()


Grads = dict[int, tuple[bool, bool]]  # id(module): (its input, its output) requires grad


def _grads(m: Module, needed: bool, trainable: frozenset[Hashable] | None,
           grads: Grads) -> bool:
    """Record which of `m`'s calls take and give tensors that require grad, its input
    requiring it when `needed`; `trainable`: the parameters that do (all when None).
    Returns whether `m`'s output does."""
    out = needed or any(trainable is None or k in trainable for k in m.fetched)
    before: list[bool] = []
    for child in () if m.leaf else m.children:
        read = {"input": needed, "previous": before[-1] if before else needed,
                "all": needed or any(before)}[child.reads]
        before.append(_grads(child, read, trainable, grads))
        out = out or before[-1]
    grads[id(m)] = (needed, out)
    return out


def _forward(m: Module) -> list[tuple[str, Module]]:
    if m.leaf or not m.children:
        return [("F", m), ("f", m)]
    return [("F", m), *(e for c in m.children for e in _forward(c)), ("f", m)]


def _backward(m: Module, grads: Grads) -> list[tuple[str, Module]]:
    """DeepSpeed's backward hooks: the fetch on the gradient of a module's output, the
    release on that of its input; neither where the tensor needs no gradient (the frozen
    modules ahead of LoRA's first adapter)."""
    needed, out = grads[id(m)]
    if not out:
        return []
    inner = [] if m.leaf else [e for c in reversed(m.children) for e in _backward(c, grads)]
    return [("B", m), *inner, *([("b", m)] if needed else [])]


def _with_params(m: Module) -> bool:
    return bool(m.fetched)


def _layer_backward(layer: Module, checkpointed: bool, grads: Grads
                    ) -> list[tuple[str, Module]]:
    """A layer's backward; checkpointed, its recomputation runs after the fetch of the first
    module whose backward needs a saved tensor, up to that module's own forward (early stop:
    the modules above it are not released). Where that module is a frozen 4-bit layer, which
    unpacks nothing, its backward runs whole first, and the op before it (a gated MLP's
    product, an activation) needs the recomputation: up to the forward of the module called
    just before it."""
    events = _backward(layer, grads)
    if not checkpointed:
        return events
    first = next(i for i, (kind, m) in enumerate(events)
                 if kind == "B" and _with_params(m) and (m.leaf or not m.children))
    target = events[first][1]
    calls = [m for kind, m in _forward(layer) if kind == "F"]
    if not target.unpacks:  # (its release, then the module called before it in forward)
        first = events.index(("b", target))
        target = calls[calls.index(target) - 1]
    redo: list[tuple[str, Module]] = []
    for kind, m in _forward(layer)[1:]:  # (not the layer's own fetch: it already holds it)
        redo.append((kind, m))
        if kind == "F" and m is target:
            break
    return events[:first + 1] + redo + events[first + 1:]


Lora = tuple[int, frozenset[str]]  # peft's rank and the projections it adapts


class _Model(NamedTuple):
    root: Module
    chain: tuple[Module, ...]  # from the root to the causal LM (peft's wrappers above it)
    body: Module  # the decoder (its embedding, layers and final norm)
    embedding: Module
    head: Module
    layers: tuple[Module, ...]
    widest: tuple[Module, ...]  # the module of each layer's widest forward moment
    numel: dict[Hashable, int]
    persistent: frozenset[Hashable]
    # what a saved tensor keeps past its release (see `_Replay.release`): the routed experts'
    # stacked weights, and the factors of peft's ParamWrapper folds
    viewed: frozenset[Hashable]
    trainable: frozenset[Hashable] | None  # the parameters that require grad (all when None)
    hidden: int  # h: the prefetch bucket's and the persistence threshold's scale
    # bytes of each tensor gathered, and as its all-gather delivers it (`Widths`; its elements
    # where all are alike)
    size: dict[Hashable, int]
    comm: dict[Hashable, int]


class Widths(NamedTuple):
    """Bytes per element where DeepSpeed's ZeRO-3 gathers tensors of different widths
    (torch_autocast): the parameters as stored, QLoRA's packed 4-bit weights (stored in the
    compute dtype, transformers' recipe for ZeRO-3), and what nn.Linear weights are all-gathered
    in (autocast's dtype: DeepSpeed's get_allgather_dtype), cast to their own at the wait."""

    weight: int
    packed: int
    comm: int


def _tensor(key: Hashable, size: int, numel: dict[Hashable, int], keep: set[Hashable],
            threshold: int) -> Hashable:
    numel[key] = size
    if size <= threshold:
        keep.add(key)
    return key


# MLA's projections whose output a norm of its own reads (q_a_layernorm, kv_a_layernorm)
NORMED = frozenset({"q_a_proj", "kv_a_proj_with_mqa"})
# what each projection's forward reads (see `Module.reads`; "all" otherwise)
READS = dict.fromkeys(("q_proj", "k_proj", "v_proj", "qkv_proj", "q_a_proj",
                       "kv_a_proj_with_mqa", "gate_proj", "up_proj", "gate_up_proj", "fc_in",
                       "router"), "input") | dict.fromkeys(("q_b_proj", "kv_b_proj", "fc_out"),
                                                        "previous")


def _decoder_layer(layer: LayerParams, i: int, traits: Traits, numel: dict[Hashable, int],
                   keep: set[Hashable], viewed: set[Hashable], threshold: int,
                   lora: Lora | None = None, packed: int = 0,
                   kinds: dict[Hashable, str] | None = None, autocast: bool = False
                   ) -> tuple[Module, Module]:
    """(the layer's module tree, its widest forward module), as transformers v5 builds a
    decoder layer: norms, the attention's projections (and their norms: MLA's latents, q/k
    norms), the MLP (gate, act_fn, up, down; Gemma's sandwiched between two more norms) or the
    MoE block (router, stacked experts, shared experts). Norm weights persist: their calls
    fetch nothing, but each call prefetches. `packed`: QLoRA's 4-bit weights per element of
    the tensor bitsandbytes packs them in (0 without QLoRA). `kinds`: filled with each
    tensor of an nn.Linear ("linear") or QLoRA's packed weight ("packed"). `autocast`: the
    forward runs under torch.autocast."""
    kinds = {} if kinds is None else kinds
    arch_leaf, gated, qk_norm = traits.moe_leaf, traits.mlp == "gated", traits.qk_norm
    sandwich = traits.norms_per_layer == 4
    def weights(j: int) -> tuple[Hashable, ...]:
        lin = layer.linears[j]
        size = stacked(lin) * lin.weight_count
        four = bool(packed and quantised(lin))
        if four:
            size = -(-size // packed)
        tensors = [_tensor((i, j, "w"), size, numel, keep, threshold)]
        if lin.bias_count:
            tensors.append(_tensor((i, j, "b"), stacked(lin) * lin.bias_count, numel, keep,
                                   threshold))
        if lin.group not in ("experts", "router"):  # (modules of their own, not nn.Linear)
            kinds.update(dict.fromkeys(tensors, "linear"))
            if four:
                kinds[tensors[0]] = "packed"
        return tuple(k for k in tensors if numel[k])

    def factors(j: int) -> tuple[Hashable, ...]:
        """peft's A and B for the projection (none where it is not adapted)."""
        lin = layer.linears[j]
        shapes = adapter_shapes(lin, lora[0]) if lora and adapted(lin, lora[1]) else ()
        made = tuple(_tensor((i, j, part), rows * cols, numel, keep, threshold)
                     for part, (rows, cols) in zip("AB" if shapes else "", shapes, strict=True))
        if not by_parameter(lin):  # peft's lora_A and lora_B are nn.Linear
            kinds.update(dict.fromkeys(made, "linear"))
        return made

    def linear(j: int, name: str) -> Module:
        own, reads = weights(j), READS.get(layer.linears[j].name, "all")
        adapter = factors(j)
        if not adapter:
            return Module(name, own, reads=reads,
                          unpacks=not (packed and quantised(layer.linears[j])))
        if by_parameter(layer.linears[j]):  # peft's ParamWrapper: A and B are its own, and
            viewed.update(adapter)  # the fold's product B A saves both for their gradients
            return Module(name, own + adapter, reads=reads)
        # peft's lora.Linear: its base layer, then the dropout, lora_A and lora_B it calls.
        # Its forward reads lora_A's weight (the dtype to cast x to) before lora_A runs: in the
        # first step that partitioned weight becomes an external parameter of the lora.Linear
        # (ZeROOrderedDict), which fetches it with its own and releases it at its own release.
        # Its 4-bit layer (QLoRA) under autocast casts nothing and reads no weight of lora_A
        # (peft's bnb.Linear4bit): lora_A is fetched at its own call, after the base layer
        a, b = adapter
        external = (a,) if not (autocast and packed and quantised(layer.linears[j])) else ()
        return Module(name, external, children=(
            Module("base_layer", own, reads="input"), Module("lora_dropout", reads="input"),
            Module("lora_A", (a,), reads="previous"), Module("lora_B", (b,), reads="previous")),
            reads=reads)

    norms = [Module(f"norm{n}", (_tensor((i, "norm", n), layer.norm_count // 2, numel, keep,
                                         threshold),)) for n in range(2)]
    groups: dict[str, list[int]] = {}
    for j, lin in enumerate(layer.linears):
        if stacked(lin):
            groups.setdefault(lin.group, []).append(j)
    calls: list[Module] = []
    for j in groups.get("attention", []):
        name = layer.linears[j].name
        calls.append(linear(j, name))
        if name in NORMED or (qk_norm and name in ("q_proj", "k_proj")):
            calls.append(Module(f"{name}_norm", reads="previous"))  # its weight persists
    attention = Module("self_attn", children=tuple(calls))

    def mlp_of(indices: list[int], name: str) -> Module:
        parts = [linear(j, layer.linears[j].name) for j in indices]
        if len(parts) >= 2:  # act_fn(gate_proj(x)) * up_proj(x), or a plain MLP's activation
            parts.insert(1, Module("act_fn", reads="previous"))
        return Module(name, children=tuple(parts))

    if layer.moe:  # built in the family's order (its parameters' ds_id order), run router first
        def routed() -> Module:
            """The stacked weights, then each ParamWrapper's adapter. grouped_mm saves a view
            of the weight it multiplies: the gathered one, unless peft folds an adapter into
            it (then the folded copy, an activation) or the weight is multiplied as stored
            (`Traits.experts_transposed`: autograd saves the parameter itself, whose data the
            release empties)."""
            js = groups.get("experts", [])
            own: list[Hashable] = []
            for j in js:
                tensors = weights(j)
                own += tensors
                if not ((lora and adapted(layer.linears[j], lora[1]))
                        or traits.experts_transposed):
                    viewed.update(tensors[:1])  # (a bias is added, not multiplied: not saved)
            adapters = [k for j in js for k in factors(j)]
            viewed.update(adapters)  # the fold's product saves both factors for their gradients
            return Module("experts", (*own, *adapters), (Module("act_fn"),))
        experts = routed() if traits.experts_first else None
        router = [linear(j, "gate") for j in groups.get("router", [])]
        experts = experts or routed()
        shared = [mlp_of(groups["shared_expert"], "shared_experts")] \
            if "shared_expert" in groups else []
        mlp = Module("mlp", children=(*router, experts, *shared), leaf=arch_leaf)
        widest = mlp if arch_leaf else experts
    else:
        mlp = mlp_of(groups.get("mlp", []), "mlp")
        with_params = [c for c in mlp.children if c.every]
        widest = with_params[1] if gated and len(with_params) == 3 else with_params[0]
    around = (Module("pre_feedforward_layernorm"), mlp, Module("post_feedforward_layernorm")) \
        if sandwich else (mlp,)
    return Module(f"layers.{i}", children=(norms[0], attention, norms[1], *around)), widest


def _model(counts: ParamCounts, stage: Stage, lora: Lora | None = None,
           threshold: int | None = None, packed: int = 0, widths: Widths | None = None,
           autocast: bool = False, fused_head: bool = False) -> _Model:
    """`threshold`: stage3_param_persistence_threshold (`default_sizes`' when None);
    `packed`, `autocast`: as `_decoder_layer`'s; `widths`: where the tensors' widths differ
    (else each tensor's size is its elements); `fused_head`: a fused loss (Liger's) reads the
    head's weight in the causal LM's own forward, not through lm_head's: an external
    parameter of that module (ZeROOrderedDict), fetched as its forward starts and released
    with it, at the end of the step's backward."""
    arch = counts.arch
    if threshold is None:
        threshold = default_sizes(arch.hidden_size).persistence_threshold
    numel: dict[Hashable, int] = {}
    keep: set[Hashable] = set()
    viewed: set[Hashable] = set()
    kinds: dict[Hashable, str] = {}
    layers, widest = [], []
    for i in range(stage.first_layer, stage.first_layer + stage.layers):
        kind = counts.moe_layer if arch.is_moe_layer(i) and counts.moe_layer else \
            counts.dense_layer
        layer, wide = _decoder_layer(kind, i, arch.traits, numel, keep, viewed, threshold, lora,
                                     packed, kinds, autocast)
        layers.append(layer)
        widest.append(wide)
    embedding = Module("embed_tokens", (_tensor("embedding", counts.embedding, numel, keep,
                                                threshold),) if stage.embedding else ())
    head_key = _tensor("head", counts.lm_head, numel, keep, threshold) if counts.lm_head \
        else "embedding"
    if counts.lm_head:
        kinds["head"] = "linear"
    numel.setdefault("embedding", counts.embedding)
    head = Module("lm_head", (head_key,) if stage.head and not fused_head else ())
    norm = Module("norm", (_tensor("final_norm", counts.final_norm, numel, keep, threshold),))
    rotary = Module("rotary_emb", reads="input")  # of the positions: no gradient
    body = Module("model", children=(embedding, rotary, *layers, norm))
    external = (head_key,) if stage.head and fused_head else ()
    chain = [Module("", external, children=(body, head))]
    if lora is not None:  # PeftModelForCausalLM and its LoraModel around the causal LM
        chain[:0] = [Module("peft", children=(Module("base_model", children=(chain[0],)),))]
        chain.insert(1, chain[0].children[0])
    trainable = None if lora is None else \
        frozenset(k for k in numel if isinstance(k, tuple) and k[-1] in ("A", "B"))
    if widths is None:
        size = comm = numel
    else:
        stored = {"packed": widths.packed}
        size = {k: v * stored.get(kinds.get(k, ""), widths.weight) for k, v in numel.items()}
        sent = {"packed": widths.packed, "linear": widths.comm}
        comm = {k: v * sent.get(kinds.get(k, ""), widths.weight) for k, v in numel.items()}
    return _Model(chain[0], tuple(chain), body, embedding, head, tuple(layers), tuple(widest),
                  numel, frozenset(keep), frozenset(viewed), trainable, arch.hidden_size,
                  size, comm)


def _step(m: _Model, checkpointed: tuple[bool, ...]) -> list[tuple[str, Module]]:
    """The fetches and releases of one forward and backward, as the hooks fire them: the root
    first, the loss's backward, the head's, the final norm's, the layers' from the top, the
    embedding's (whose input needs no gradient: its release comes with the leftovers)."""
    grads: Grads = {}
    sources = m.trainable
    if sources is not None and any(checkpointed):  # transformers' checkpointing enables
        sources = sources | set(m.embedding.own)  # enable_input_require_grads: the
        # embedding's output requires grad, frozen or not
    _grads(m.root, False, sources, grads)
    events = _forward(m.root)
    events += [("B", mod) for mod in m.chain]
    events += [*_backward(m.head, grads), ("B", m.body)]
    events += _backward(m.body.children[-1], grads)  # the final norm
    for layer, ckpt in zip(reversed(m.layers), reversed(checkpointed), strict=True):
        events += _layer_backward(layer, ckpt, grads)
    return events + _backward(m.embedding, grads)


class _Replay:
    """The coordinator's state through the recorded step (a trace complete, as from the second
    step on)."""

    def __init__(self, m: _Model, events: list[tuple[str, Module]], max_live: int,
                 reuse: int, bucket: int) -> None:
        self.m, self.max_live, self.reuse, self.bucket = m, max_live, reuse, bucket
        self.order = [mod for kind, mod in events if kind in "FB"]
        made = {k: i for i, k in enumerate(m.numel)}  # creation order: DeepSpeed's ds_id
        self.queue = deque((k, s) for s, mod in enumerate(self.order)
                           for k in sorted(set(mod.fetched), key=made.__getitem__))
        self.status = dict.fromkeys(m.numel, 0)  # 0 partitioned, 1 in flight, 2 gathered
        for k in m.persistent:
            self.status[k] = 2
        self.recent: dict[Hashable, int] = {}
        self.available = self.gathered = self.step = 0
        self.backward = False  # the step's backward has begun (`played`)
        self.held: set[Hashable] = set()  # released, but a saved view keeps the storage
        # prefetched in a coalesced all-gather (the fetch's step, its parameters), not waited for
        self.group: dict[Hashable, tuple[int, tuple[Hashable, ...]]] = {}
        self.copied: set[tuple[int, tuple[Hashable, ...]]] = set()
        self.flat = 0  # elements of flat buffers whose parameters were copied out
        self.surge = 0  # the latest fetch's most on the GPU, before its waits or within them
        self.copying = 0  # its most while a wait copied a coalesced prefetch out (0: none did)
        # the modules whose backward has fetched and not yet released (DeepSpeed's
        # __active_backward_submodules), and the frozen parameters a checkpoint's recompute
        # fetched while each was the latest: released with it (ds_recompute_parameters)
        self.active: dict[int, set[Hashable]] = {}
        # the modules whose fetch of a tensor has not been released (ds_active_sub_modules):
        # a tensor is partitioned again only once none holds it
        self.users: dict[Hashable, set[int]] = {k: set() for k in m.numel}
        # where each tensor is met by a release's reuse walk, and the elements walked so far:
        # a leaf's release reads every module's parameters whole, any other its own
        self.walks = {}
        for leaf in (False, True):
            seen: dict[Hashable, list[int]] = {}
            walked = [0]
            for s, mod in enumerate(self.order):
                tensors = mod.every if leaf else mod.own
                for k in tensors:
                    seen.setdefault(k, []).append(s)
                walked.append(walked[-1] + sum(m.numel[k] for k in tensors))
            self.walks[leaf] = (seen, walked)

    def _gather(self, k: Hashable) -> None:
        if self.status[k] == 0:
            self.status[k] = 1
            self.available += self.m.numel[k]
            self.gathered += self.m.comm[k]

    def _land(self, k: Hashable) -> None:
        """`k` waited for: its all-gather output cast to its own width where they differ."""
        if self.status[k] == 1:
            self.gathered += self.m.size[k] - self.m.comm[k]
        self.status[k] = 2

    def fetch(self, mod: Module, hook: str = "F", backward: bool = False) -> None:
        """`hook`: the forward's ("F") or the backward's ("B"); `backward`: during backward
        (a forward hook's there is a checkpointed layer's recomputation)."""
        tensors = set(mod.fetched)
        self.copying = 0
        for k in tensors:
            self.users[k].add(id(mod))
        if hook == "B":
            self.active[id(mod)] = set()
        elif backward and self.m.trainable is not None and self.active:
            latest = next(reversed(self.active))  # (which holds them too: ds_active_sub_modules)
            frozen = tensors - self.m.trainable
            self.active[latest] |= frozen
            for k in frozen:
                self.users[k].add(latest)
        # fetch_sub_module all-gathers what is not yet gathered or in flight first, then waits
        # for the rest: a flat buffer the waits free is still alive beside the new all-gather
        demand = [k for k in tensors if self.status[k] == 0]
        for k in demand:
            self._gather(k)
        self.surge = self.memory
        for k in tensors:
            self._wait(k)
            self._land(k)
        if len(demand) > 1:  # one coalesced all-gather, copied out of its flat buffer at the
            # first wait, the buffer freed at the last (within this fetch)
            self.surge = max(self.surge, self.memory + sum(self.m.comm[k] for k in demand))
        fresh = {k for k in tensors if self.recent.get(k, -1) < self.step}
        popped: set[Hashable] = set()
        while self.queue and len(popped) < len(fresh):
            k, s = self.queue.popleft()
            self.recent[k] = s
            popped.add(k)
        limit = min(self.max_live - self.available, self.bucket)
        ahead: list[Hashable] = []
        elements = 0
        while self.queue and elements < limit:
            k, s = self.queue.popleft()
            self.recent[k] = max(self.recent.get(k, -1), s)
            if self.status[k] == 0 and k not in ahead:
                ahead.append(k)
                elements += self.m.numel[k]
        for k in ahead:
            self._gather(k)
        if len(ahead) > 1:  # one coalesced all-gather into one flat buffer
            group = (self.step, tuple(ahead))
            for k in ahead:
                self.group[k] = group
        self.step += 1

    def _wait(self, k: Hashable) -> None:
        """A module needs `k`, prefetched in a coalesced all-gather: the first wait on the
        group copies every parameter of it out of the flat buffer (`AllGatherCoalescedHandle`,
        torch.cat), which lives on until the last of them is waited for. The copies are made
        in the group's order, each concatenated in the communication width and, where its own
        differs, cast to it beside that concatenation (`copying`)."""
        group = self.group.pop(k, None)
        if group is None:
            return
        members = group[1]
        if group not in self.copied:
            self.copied.add(group)
            for other in members:
                self._land(other)
            self.flat += sum(self.m.comm[other] for other in members)
            later = 0  # the members copied after the one at hand
            for other in reversed(members):
                size, comm = self.m.size[other], self.m.comm[other]
                self.copying = max(self.copying,
                                   self.memory - later + (comm if size != comm else 0))
                later += size
        if not any(self.group.get(other) == group for other in members):
            self.flat -= sum(self.m.comm[other] for other in members)

    def flat_holds(self, tensors: frozenset[Hashable]) -> bool:
        """Whether a coalesced all-gather's flat buffer still alive (copied out, not waited out)
        holds any of `tensors`."""
        return bool(self.flat) and any(
            tensors.intersection(members) for step, members in self.copied
            if any(self.group.get(other) == (step, members) for other in members))

    @property
    def memory(self) -> int:
        """Elements of partitioned parameters on the GPU: gathered, released but held, and
        the flat buffers of coalesced all-gathers not yet waited out."""
        return self.gathered + self.flat + sum(self.m.size[k] for k in self.held)

    def release(self, mod: Module, forward: bool = False, saving: bool = True) -> None:
        """`forward`: the release after a forward, whose autograd graph keeps what it saved
        unless the layer is checkpointed (`saving` False). The grouped GEMM of transformers'
        experts saves a transposed view of each stacked weight for the input's gradient, and
        peft's fold of a ParamWrapper's adapter (W + B A) both factors: what is saved keeps the
        gathered storage alive after DeepSpeed swaps `param.data` for an empty tensor, until
        that module's backward has run."""
        forced: set[Hashable] = set()
        if not forward:
            self.held -= set(mod.fetched)
            forced = self.active.pop(id(mod), set()) - self.m.persistent
        tensors = set(mod.fetched) - self.m.persistent
        seen, walked = self.walks[mod.leaf]
        # the modules walked: from the next fetch on, until the walk has passed `reuse`
        end = bisect.bisect_left(walked, walked[self.step] + self.reuse, lo=self.step)
        for k in tensors | forced:
            self.users[k].discard(id(mod))
            if self.status[k] != 2 or self.users[k]:
                continue
            if k not in forced:
                if self.recent.get(k, -1) > self.step:
                    continue
                uses = seen.get(k, [])
                i = bisect.bisect_left(uses, self.step)
                if i < len(uses) and uses[i] < end:
                    continue
            self.status[k] = 0
            self.available -= self.m.numel[k]
            self.gathered -= self.m.size[k]
            if forward and saving and k in self.m.viewed:
                self.held.add(k)


def played(m: _Model, checkpointed: tuple[bool, ...], sizes: Sizes | None = None
           ) -> Iterator[tuple[str, Module, _Replay]]:
    """The replay of a step of `m` (`_step`), after each of its events; `sizes`: the
    coordinator's (calc's export's when None)."""
    events = _step(m, checkpointed)
    sizes = sizes or default_sizes(m.hidden)
    replay = _Replay(m, events, sizes.max_live, sizes.reuse_distance, sizes.prefetch_bucket)
    recomputed = {id(mod) for layer, ck in zip(m.layers, checkpointed, strict=True) if ck
                  for mod in layer.calls()}
    for kind, mod in events:
        replay.backward = replay.backward or (kind == "B" and mod is m.root)
        if kind in "FB":
            replay.fetch(mod, kind, replay.backward)
        else:  # a checkpointed layer's first forward saves nothing; its recomputation does
            replay.release(mod, forward=kind == "f",
                           saving=replay.backward or id(mod) not in recomputed)
        yield kind, mod, replay


@lru_cache(maxsize=256)
def gathered(counts: ParamCounts, stage: Stage, checkpointed: tuple[bool, ...] | None = None,
             lora: Lora | None = None, sizes: Sizes | None = None, packed: int = 0,
             widths: Widths | None = None, autocast: bool = False,
             fused_head: bool = False) -> Live:
    """The coordinator's gathered elements at each moment of a micro-batch's forward and
    backward, for a stage of whole tensors (no tp, no ep). `checkpointed`: which of the
    stage's layers recompute in backward (none when None); `sizes`: DeepSpeed's (calc's
    export's when None); `packed`: QLoRA's 4-bit weights per element of the dtype they are
    stored in (bnb_4bit_quant_storage); `widths`: where tensors differ in width, the moments
    are bytes counted as elements of the stored parameters' width (`Widths.weight`);
    `autocast`: the forward runs under torch.autocast; `fused_head`: as `_model`'s."""
    m = _model(counts, stage, lora, sizes.persistence_threshold if sizes else None, packed,
               widths, autocast, fused_head)
    ckpt = checkpointed if checkpointed is not None else (False,) * len(m.layers)
    top, first = m.layers[-1], m.layers[0]
    inside = {id(mod): layer for layer in m.layers for mod in layer.calls()}
    block = next(c for c in top.children if c.name == "mlp")
    router = next((c for c in block.children if c.name == "gate"), None) \
        if not block.leaf and any(c.name == "experts" for c in block.children) else None
    at: dict[str, int] = {}
    experts = {id(layer): next((c for c in block.children if c.name == "experts"), None)
               for layer in m.layers for block in layer.children if block.name == "mlp"}
    moe = {layer: (0, 0) for layer in m.layers if experts[id(layer)] is not None}
    top_routed = experts[id(top)]
    top_experts = frozenset(top_routed.own) if top_routed is not None else frozenset()
    # a dense last layer's down projection, and its adapter's modules (peft's lora_A, lora_B)
    top_down = None if top in moe else block.children[-1]
    down_calls = {id(mod): mod.name in ("lora_A", "lora_B") for mod in top_down.calls()} \
        if top_down is not None else {}
    opened: dict[int, bool] = {}  # a layer's backward: open until its first release
    before_norm = in_adapter = False
    for kind, mod, replay in played(m, ckpt, sizes):
        layer = inside.get(id(mod))
        if kind == "F" and mod is m.widest[-1] and top in moe and not replay.backward \
                and replay.surge > at.get("forward_router", 0):
            # the experts' own fetch: what it all-gathers beside a prefetch's flat buffer its
            # waits free, before the experts run (their input alone beside the router's)
            at["forward_router"], before_norm = replay.surge, False
        if kind == "F" and mod is m.widest[-1] and "forward_mlp" not in at:
            at["forward_mlp"] = replay.memory
        elif kind == "F" and layer is top and top in moe and not replay.backward \
                and "forward_mlp" not in at and (mod is router or replay.flat_holds(top_experts)):
            # before the experts' fetch, a wait that completed a coalesced prefetch of them
            # (the router's, or with LoRA on the attention its last adapter's): copied out
            if replay.memory >= at.get("forward_router", 0):  # (with the widest wait's)
                at["forward_router"] = replay.memory
                before_norm = mod is not router
        elif kind == "F" and id(mod) in down_calls and not replay.backward \
                and replay.copying > at.get("forward_copy", 0):
            at["forward_copy"], in_adapter = replay.copying, down_calls[id(mod)]
        elif kind == "F" and mod is m.body.children[-1]:  # the final norm
            at["forward_norm"] = replay.memory
        elif kind == "f" and mod is m.head:
            at["forward_head"] = replay.memory
        elif kind == "B" and mod is m.chain[-1]:  # the loss's backward runs next
            at["backward_head"] = replay.memory
        elif kind == "B" and mod is m.embedding:
            at["embedding"] = replay.memory
        if layer is None or not (kind in "Bb" or opened.get(id(layer))):
            continue
        if kind == "B" and _with_params(mod):
            opened.setdefault(id(layer), True)
        if kind in "FB" and opened.get(id(layer)):
            # the layer's widest backward moment: its first releases are still to come
            if layer is top:
                at["backward_top"] = replay.memory
            if layer is first:
                at["backward_first"] = replay.memory
            if layer in moe:  # at the gate/up weight gradient: the down projections' grouped
                # GEMM has run its backward, freeing the view it saved; then the gate/up one's
                routed = experts[id(layer)]
                assert routed is not None
                freed = [m.size[k] for k in routed.own if k in replay.held]
                # the down projections' stacked weight: the last weight (their adapters follow)
                down_key = [k for k in routed.own if k not in (m.trainable or ())][-1]
                down = m.size[down_key] if down_key in replay.held else 0
                moe[layer] = (replay.memory - down, replay.memory - sum(freed))
        elif kind == "b" and _with_params(mod):
            opened[id(layer)] = False
    persistent = sum(m.size[k] for k in m.persistent)
    unit = widths.weight if widths else 1
    def own(v: int) -> int:
        return -(-v // unit)
    return Live(own(at.get("forward_head", 0)), own(at.get("forward_mlp", 0)),
                own(at.get("backward_head", 0)), own(at.get("backward_top", 0)),
                own(at.get("backward_first", 0)), own(at.get("embedding", 0)),
                tuple(own(moe.get(layer, (0, 0))[0]) for layer in m.layers),
                tuple(own(moe.get(layer, (0, 0))[1]) for layer in m.layers),
                own(at.get("forward_router", 0)), own(persistent), before_norm,
                own(at.get("forward_copy", 0)), in_adapter, own(at.get("forward_norm", 0)))


def sub_group(ordered: tuple[int, ...], N: int, size: int = SUB_GROUP_SIZE) -> int:
    """The largest of the optimizer's sub-groups (`_create_fp16_sub_groups`): the partitions
    of the tensors in order, a group closed once it holds `size` elements."""
    largest = held = 0
    for tensor in ordered:
        held += -(-tensor // N)
        if held >= size:
            largest, held = max(largest, held), 0
    return max(largest, held)
