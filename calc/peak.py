"""The peak: named moments of the training step, each the sum of named parts.

One step as Hugging Face Trainer runs it, the step `validation/trace.py` traces: for each of the
`gradient_accumulation_steps` micro-batches a forward (the loss computed inside the model), the
outputs dropped, a backward; then `optimizer.step()` and `zero_grad(set_to_none=True)`. Memory
is that of a steady-state step (the second), when the optimizer states already exist and the
gradients start empty. The moments where live memory can be largest (:data:`MOMENTS`) are each
the sum of parts (:data:`PARTS`), every part a list of terms; each phase's peak is its worst
moment and the step's peak the worst of all (the first, on a tie).

With pipeline parallelism the first stage keeps min(pp, micro-batches) micro-batches in flight
(1F1B) and the last stage holds the head; both are evaluated and the larger one reported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from .activations import (
    LayerActivations,
    decoder_layer,
    eager_mask,
    embedding_activations,
    head_activations,
)
from .formula import Formula, Part, Term, part, scaled
from .logits import logits_memory
from .megatron import megatron_layer
from .placement import Stage
from .setup import Setup
from .sources import TRACED_FSDP, TRACED_PEAK
from .states import ModelStates, model_states

PHASES = ("forward", "backward", "optimizer_step")
COMPONENTS = ("parameters", "gradients", "optimizer_states", "activations", "logits",
              "temporaries")

# What each part of a moment holds: (its LaTeX symbol, what it is).
PARTS: dict[str, tuple[str, str]] = {
    "states": ("S", "parameters and optimizer states on the GPU (and DDP's gradient buckets)"),
    "gradients": ("G", "every gradient"),
    "earlier_gradients": ("G_e", "the gradients accumulated by earlier micro-batches"),
    "gradients_written": ("G_w", "the gradients written before the last layers' backward"),
    "gathered": ("F", "FSDP: the gathered layer and the root unit"),
    "backward_gathered": ("F_b", "FSDP in a layer's backward: gathered layers and gradients"),
    "saved": ("A", "the activations saved by every micro-batch in flight"),
    "other_micro_batches": ("A_o", "the saved activations of the other micro-batches in flight"),
    "forward_extra": ("A_x", "autocast's weight copies of checkpointed layers; the eager mask"),
    "loss": ("Z", "the logits and the loss"),
    "layer_forward": ("X_f", "the widest layer's forward transient"),
    "all_gather": ("X_g", "FSDP's all-gather outputs: this layer and the prefetched next"),
    "layer_backward": ("X_b", "the widest layer's backward transient"),
    "first_layer": ("A_1", "the first layer's activations, last to be freed"),
    "bucket": ("B", "the reduce bucket"),
    "embedding_grad": ("X_e", "the gradient reaching the embedding"),
    "root_reduce_scatter": ("X_r", "FSDP's root: unsharded gradients and reduce-scatter input"),
    "step_gradients": ("G_s", "the gradients as the optimizer step sees them"),
    "step_temporary": ("X_s", "the optimizer step's temporaries"),
}
# Each moment, in the order candidates are compared (the first wins a tie), and what it is.

class MomentKind(NamedTuple):
    what: str
    parts: tuple[str, ...]  # the names (in PARTS) of its parts, in order


_FORWARD = ("states", "earlier_gradients", "gathered", "saved", "forward_extra")
# Each moment, in the order candidates are compared (the first wins a tie): what it is and
# its parts.
MOMENTS: dict[str, MomentKind] = {
    "forward.loss": MomentKind("the end of the forward, at the loss", (*_FORWARD, "loss")),
    "forward.last_layer": MomentKind(
        "the forward of the widest layer, every earlier layer's activations saved",
        (*_FORWARD, "layer_forward")),
    "forward.fsdp_prefetch": MomentKind(
        "FSDP between layers: this layer and the next one gathered", (*_FORWARD, "all_gather")),
    "backward.last_layer": MomentKind(
        "the start of backward through the layers, every activation saved",
        ("states", "earlier_gradients", "backward_gathered", "saved", "layer_backward",
         "bucket")),
    "backward.first_layer": MomentKind(
        "the backward of the first layer, the gradients almost all written",
        ("states", "gradients_written", "backward_gathered", "other_micro_batches",
         "first_layer", "layer_backward", "bucket")),
    "backward.fsdp_root": MomentKind(
        "the end of backward with FSDP: the root unit's post-backward",
        ("states", "gradients", "other_micro_batches", "embedding_grad", "root_reduce_scatter")),
    "backward.embedding": MomentKind(
        "the end of backward: the gradient reaching the embedding",
        ("states", "gradients", "gathered", "other_micro_batches", "embedding_grad", "bucket")),
    "backward.loss_grad": MomentKind(
        "the start of backward: the loss gradients at full width",
        ("states", "earlier_gradients", "gathered", "saved", "loss")),
    "optimizer_step": MomentKind(
        "inside optimizer.step(): states, gradients, the step's temporaries",
        ("states", "step_gradients", "bucket", "step_temporary")),
}

LAYER_FORWARD_RECOMPUTE = Formula(
    "temporaries/layer_forward", "lambda X_l, A_l, x_c: X_l + A_l - x_c",
    id="peak.layer_forward_recompute", source=TRACED_PEAK,
    title="A checkpointed layer's forward: its transient and its rebuilt activations",
    note="x_c: the checkpoint's own input, already counted, when a norm keeps the residual")
LAYER_BACKWARD_RECOMPUTE = Formula(
    "temporaries/layer_backward", "lambda X_l, A_l, x_c: X_l + A_l - x_c",
    id="peak.layer_backward_recompute", source=TRACED_PEAK,
    title="A checkpointed layer's backward: its transient and its recomputed activations")
ALL_GATHER = Formula("temporaries/all_gather_buffers", "lambda G_l: 2 * G_l", id="peak.all_gather",
                     title="FSDP2's all-gather outputs: this layer's and the next one's",
                     source=TRACED_FSDP)
FIRST_LAYER = Formula("activations/last_layer", "lambda A_l: A_l", id="peak.first_layer",
                      title="The first layer's saved activations, freed last", source=TRACED_PEAK)
FIRST_LAYER_INPUT = Formula(
    "activations/last_layer", "lambda x_l: x_l", id="peak.first_layer_input", source=TRACED_PEAK,
    title="The first layer's checkpointed input, freed last")
_WRITTEN = ("gradients/weights", TRACED_PEAK,
            "The gradients written at the first layer's backward")
GRADIENTS_WRITTEN = {
    "embedding": Formula(
        _WRITTEN[0], "lambda M_g, E, t, N_e, g: M_g - ceil(floor(E / t) / N_e) * g",
        id="peak.written_embedding", source=_WRITTEN[1], title=_WRITTEN[2],
        note="the untied embedding's gradient shard is not written yet"),
    "fsdp": Formula(
        _WRITTEN[0], "lambda M_g, P_l, N, g: M_g - 2 * ceil(P_l / N) * g",
        id="peak.written_fsdp", source=TRACED_FSDP, title=_WRITTEN[2],
        note="FSDP: the last prefetching layer's and the next one's sharded gradients are not "
             "written yet (traced: an 8B-shaped stack, FSDP2 x 8)"),
    "both": Formula(
        _WRITTEN[0], "lambda M_g, E, t, N_e, P_l, N, g: M_g - (ceil(floor(E / t) / N_e) + "
        "2 * ceil(P_l / N)) * g", id="peak.written_embedding_fsdp", source=TRACED_FSDP,
        title=_WRITTEN[2], note="the untied embedding's gradient shard and FSDP's last two "
                                "layers' sharded gradients are not written yet"),
}
EMBEDDING_GRAD = Formula(
    "temporaries/embedding_grad", "lambda T, h, r, c: T * h * max(r, c)",
    id="peak.embedding_grad", source=TRACED_PEAK,
    title="The gradient of the embedding's output (T h at residual width)")
EMBEDDING_GRAD_TIED = Formula(
    "temporaries/embedding_grad", "lambda E, t, g, T, h, r, c: 2 * floor(E / t) * g + "
    "T * h * max(r, c)", id="peak.embedding_grad_tied", source=TRACED_PEAK,
    title="Tied embeddings: two more vocabulary-sized gradients before the sum",
    note="the head's weight gradient waits in the shared leaf's input buffer; when the "
         "embedding's arrives they are summed out of place (traced: llama-3.2-1b)")
ROOT_GRADIENTS = Formula(
    "gradients/weights", "lambda M_g, R, N, g: M_g - ceil(R / N) * g", id="peak.root_gradients",
    title="FSDP: every gradient but the root's shard", source=TRACED_FSDP)
ROOT_REDUCE_SCATTER = Formula(
    "temporaries/root_reduce_scatter", "lambda R, w_g, g: R * (w_g + g)",
    id="peak.root_reduce_scatter", source=TRACED_FSDP,
    title="FSDP's root post-backward: unsharded gradients and the reduce-scatter input "
          "(traced: llama-3.1-8b fsdp8, exact)")


class Moment(NamedTuple):
    """One named moment of the step: its parts (in :data:`MOMENTS`' order; a single term
    stands for a part of one, None for an empty one) and their bytes."""

    name: str
    phase: str
    parts: tuple[Part | Term | None, ...]
    bytes: int

    @property
    def breakdown(self) -> dict[str, int]:
        """Bytes by breakdown path (`activations/attention` ...); zeros left out."""
        out: dict[str, int] = {}
        for p in self.parts:
            if p is None:
                continue
            if isinstance(p, Part):
                for key, value in p.breakdown.items():
                    out[key] = out.get(key, 0) + value
            elif p.bytes:
                out[p.key] = out.get(p.key, 0) + p.bytes
        return out

    @property
    def components(self) -> dict[str, int]:
        return components(self.breakdown)


def components(breakdown: dict[str, int]) -> dict[str, int]:
    """Bytes by component (`parameters`, `activations`, ...) of a breakdown."""
    out = dict.fromkeys(COMPONENTS, 0)
    for key, value in breakdown.items():
        out[key.split("/", 1)[0]] += value
    return out


def _moment(name: str, *parts: Part | Term | None) -> Moment:
    total = 0
    for p in parts:
        if p is not None:
            total += p.bytes
    return tuple.__new__(Moment, (name, name.partition(".")[0], parts, total))


@dataclass(frozen=True, slots=True)
class Layers:
    """The decoder layers one GPU of a stage holds, as activations see them."""

    kinds: tuple[tuple[str, LayerActivations, int], ...]  # "dense" or "moe", and how many
    checkpointed: int
    in_flight: int
    ends: tuple[Term, ...]  # what the embedding and the head save
    saved: Part  # one micro-batch's saved activations, the ends of the model included
    widest: LayerActivations  # the layer kind with the most saved bytes


@dataclass(frozen=True, slots=True)
class StagePeak:
    """Each phase's worst moment on one pipeline stage; with `detail`, every moment and the
    layers too (what the explanation renders)."""

    stage: Stage
    states: ModelStates
    phases: dict[str, Moment]
    moments: tuple[Moment, ...] = ()  # every candidate, in order (detail only)
    layers: Layers | None = None  # (detail only)

    @property
    def peak(self) -> Moment:
        return max(self.phases.values(), key=lambda m: m.bytes)

    @property
    def host(self) -> dict[str, int]:
        return {t.key: t.bytes for t in self.states.host}


def layers(x: Setup, stage: Stage, detail: bool) -> Layers:
    counts = x.counts
    build = megatron_layer if x.megatron else decoder_layer
    kinds = [(name, build(x, layer), count) for name, layer, count in (
        ("dense", counts.dense_layer, stage.dense_layers),
        ("moe", counts.moe_layer, stage.moe_layers)) if layer is not None and count]
    ckpt = x.checkpointed_layers(stage)
    saved: list[tuple[Term, int]] = []
    remaining = ckpt
    widest = kinds[0][1]
    for _, act, count in kinds:  # checkpointed layers keep only their inputs
        stored = min(remaining, count)
        remaining -= stored
        saved.append((act.checkpoint_input, stored))
        rest = count - stored
        saved += [(term, rest) for term in act.saved]
        if act.total > widest.total:
            widest = act
    ends = (*(embedding_activations(x) if stage.embedding else ()),
            *(head_activations(x) if stage.head else ()))
    saved += [(term, 1) for term in ends]
    return Layers(tuple(kinds), ckpt, x.in_flight(stage), ends, part(tuple(saved), detail),
                  widest)


def stage_peak(x: Setup, stage: Stage, detail: bool = False) -> StagePeak:
    """The moments of `stage`'s step; `detail` keeps every moment and the layers' terms."""
    ms = model_states(x, stage)
    ly = layers(x, stage, detail)
    n = x.n
    times, ckpt, widest = ly.in_flight, ly.checkpointed, ly.widest
    states, gradients, gathered = ms.on_device, ms.gradients, ms.gathered
    earlier = gradients if x.micro_batches > 1 else None
    saved = ly.saved if times == 1 else scaled(ly.saved, times, detail)
    mask = eager_mask(x) if stage.embedding or x.pp == 1 else None
    extra: list[tuple[Term, int]] = []
    if ckpt and n.autocast:  # autocast's weight cache lives for the whole forward
        remaining = ckpt
        for _, act, count in ly.kinds:
            stored = min(remaining, count)
            remaining -= stored
            extra += [(t, stored) for t in act.weight_copies]
    if mask:
        extra.append((mask, 1))
    forward_extra = part(tuple(extra), detail) if extra else None
    loss = logits_memory(x) if stage.head else None
    # Recomputing a checkpointed layer rebuilds its activations; the residual it saves is the
    # checkpoint's own input, already counted, where the norms keep the residual itself.
    if ckpt:
        shared = widest.checkpoint_input.bytes if widest.saves_residual else 0
        layer_fwd = LAYER_FORWARD_RECOMPUTE(widest.forward_transient.bytes, widest.total, shared)
        layer_bwd = LAYER_BACKWARD_RECOMPUTE(widest.backward_transient.bytes, widest.total, shared)
    else:
        layer_fwd, layer_bwd = widest.forward_transient, widest.backward_transient
    moments = []
    if loss:
        moments.append(_moment("forward.loss", states, earlier, gathered, saved, forward_extra,
                               loss[0]))
    moments.append(_moment("forward.last_layer", states, earlier, gathered, saved, forward_extra,
                           layer_fwd))
    if ms.gathered_layer:
        moments.append(_moment("forward.fsdp_prefetch", states, earlier, gathered, saved,
                               forward_extra, ALL_GATHER(ms.gathered_layer.bytes)))
    bucket = ms.reduce_bucket
    others = scaled(ly.saved, times - 1, detail) if times > 1 else None
    first = FIRST_LAYER_INPUT(widest.checkpoint_input.bytes) if ckpt else FIRST_LAYER(widest.total)
    moments.append(_moment("backward.last_layer", states, earlier, ms.backward_gathered, saved,
                           layer_bwd, bucket))
    moments.append(_moment("backward.first_layer", states, _written(x, stage, ms),
                           ms.backward_gathered, others, first, layer_bwd, bucket))
    moments.append(_end_of_backward(x, stage, ms, others))
    if loss:  # no layer has gradients yet: only the prefetched layer is gathered
        moments.append(_moment("backward.loss_grad", states, earlier, gathered, saved, loss[1]))
    moments.append(_moment("optimizer_step", states, ms.step_gradients, bucket,
                           ms.step_temporary))
    phases: dict[str, Moment] = {}
    for m in moments:  # the worst moment of each phase; the first on a tie
        best = phases.get(m.phase)
        if best is None or m.bytes > best.bytes:
            phases[m.phase] = m
    if detail:
        return StagePeak(stage, ms, phases, tuple(moments), ly)
    return StagePeak(stage, ms, phases)


def _written(x: Setup, stage: Stage, ms: ModelStates) -> Term:
    """Gradients at the first layer's backward: without accumulation, an untied embedding's
    gradient is not written yet; with FSDP, the last prefetching layer's and the next one's
    sharded gradients neither (traced: an 8B-shaped stack, FSDP2 x 8)."""
    grads = ms.gradients
    if x.micro_batches > 1 or x.lora:
        return grads
    embedding = stage.embedding and not x.arch.tie_word_embeddings
    fsdp = ms.gathered_layer is not None
    E, N_e, P_l = x.counts.embedding, x.N if x.zero >= 2 else 1, ms.local.per_layer
    if embedding and fsdp:
        return GRADIENTS_WRITTEN["both"](grads.bytes, E, x.tp, N_e, P_l, x.N, x.n.grad)
    if embedding:
        return GRADIENTS_WRITTEN["embedding"](grads.bytes, E, x.tp, N_e, x.n.grad)
    if fsdp:
        return GRADIENTS_WRITTEN["fsdp"](grads.bytes, P_l, x.N, x.n.grad)
    return grads


def _end_of_backward(x: Setup, stage: Stage, ms: ModelStates, others: Part | None) -> Moment:
    n = x.n
    tied = stage.embedding and stage.head and x.arch.tie_word_embeddings and not x.lora
    if tied:
        incoming = EMBEDDING_GRAD_TIED(x.counts.embedding, x.tp, n.grad, x.T, x.h, n.residual,
                                       n.compute)
    else:
        incoming = EMBEDDING_GRAD(x.T, x.h, n.residual, n.compute)
    root = ms.local.root
    if ms.gathered_layer and root:
        # FSDP2's last post-backward is the root's: its parameters are resharded, its
        # unsharded gradients and the reduce-scatter input (in the reduce dtype) coexist
        rest = ROOT_GRADIENTS(ms.gradients.bytes, root, x.N, n.grad)
        scatter = ROOT_REDUCE_SCATTER(root, n.gathered_weight, n.grad)
        return _moment("backward.fsdp_root", ms.on_device, rest, others, incoming, scatter)
    return _moment("backward.embedding", ms.on_device, ms.gradients, ms.gathered, others,
                   incoming, ms.reduce_bucket)


__all__ = ["COMPONENTS", "MOMENTS", "PARTS", "PHASES", "Moment", "MomentKind", "StagePeak",
           "stage_peak"]
