"""The estimate: per-GPU memory phase by phase, and the peak as their maximum.

One training step as Hugging Face Trainer runs it, the step `validation/trace.py` traces: for
each of the `gradient_accumulation_steps` micro-batches a forward (the loss computed inside the
model), the outputs dropped, a backward; then `optimizer.step()` and
`zero_grad(set_to_none=True)`. Memory is that of a steady-state step (the second), when the
optimizer states already exist and the gradients start empty.

- forward: states, gradients of earlier micro-batches, every layer's saved activations, and
  the logits and loss buffers at their widest (or the last layer's transients, if wider);
- backward: the worst of its start (the cross-entropy gradient at full width), its first and
  last layer (activations freed while gradients appear) and the embedding's gradient at the end;
- optimizer_step: states, all gradients and the optimizer's temporaries.
With pipeline parallelism the first stage keeps min(pp, micro-batches) micro-batches in flight
(1F1B) and the last stage holds the head; both are estimated and the larger one reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ._version import __version__
from .activations import (
    LayerActivations,
    decoder_layer,
    eager_mask,
    embedding_activations,
    head_activations,
    shape,
)
from .confidence import confidence
from .logits import logits_memory
from .numerics import numerics
from .overhead import overhead
from .params import count_params, lora_targets
from .scenario import Parallelism, Resolved, Scenario, Training, parse_scenario, resolve
from .states import Stage, local_params, model_states, stages

PHASES = ("forward", "backward", "optimizer_step")
COMPONENTS = ("parameters", "gradients", "optimizer_states", "activations", "logits",
              "temporaries")


class Phase:
    """Memory at the worst moment of one phase. The itemised `breakdown` (by path key,
    `activations/attention` ...) is merged from the moment's parts on first use only."""

    __slots__ = ("_breakdown", "_parts", "name", "peak_bytes")

    def __init__(self, name: str, parts: tuple[dict[str, int], ...], peak_bytes: int) -> None:
        self.name = name
        self.peak_bytes = peak_bytes
        self._parts = parts
        self._breakdown: dict[str, int] | None = None

    @property
    def breakdown(self) -> dict[str, int]:
        if self._breakdown is None:
            merged: dict[str, int] = {}
            for part in self._parts:
                for key, value in part.items():
                    if value:
                        merged[key] = merged.get(key, 0) + value
            self._breakdown = merged
        return self._breakdown

    @property
    def components(self) -> dict[str, int]:
        out = dict.fromkeys(COMPONENTS, 0)
        for key, value in self.breakdown.items():
            out[key.split("/", 1)[0]] += value
        return out


@dataclass(frozen=True, slots=True)
class StageEstimate:
    stage: Stage
    phases: dict[str, Phase]
    host: dict[str, int]

    @property
    def peak(self) -> Phase:
        return max(self.phases.values(), key=lambda ph: ph.peak_bytes)


@dataclass(frozen=True, slots=True)
class Estimate:
    """The report. `as_dict()` is the JSON contract of `calc estimate --json`."""

    scenario: Scenario
    resolved: Resolved
    stage: StageEstimate
    stage_count: int
    overhead: dict[str, int]
    param_count: int
    trainable_param_count: int
    warnings: tuple[dict[str, str], ...] = field(default=())

    @property
    def confidence(self) -> dict[str, Any]:
        return confidence(self.resolved)

    @property
    def peak_bytes(self) -> int:
        return self.stage.peak.peak_bytes

    @property
    def peak_phase(self) -> str:
        return self.stage.peak.name

    @property
    def components(self) -> dict[str, int]:
        """Bytes at the peak by component (they sum to `peak_bytes`)."""
        return self.stage.peak.components

    @property
    def reserved_bytes(self) -> int:
        return self.peak_bytes + self.overhead["overhead/allocator"]

    @property
    def device_bytes(self) -> int:
        return self.peak_bytes + sum(self.overhead.values())

    @property
    def host_bytes(self) -> int:
        return sum(self.stage.host.values())

    @property
    def usable_bytes(self) -> int:
        return self.resolved.gpu.usable_bytes

    @property
    def utilization(self) -> float:
        return self.device_bytes / self.usable_bytes

    @property
    def fits(self) -> bool:
        return self.device_bytes <= self.usable_bytes

    def as_dict(self) -> dict[str, Any]:
        peak = self.stage.peak
        stage = self.stage.stage
        return {
            "calc_version": __version__,
            "scenario": self.scenario.model_dump(mode="json"),
            "gpu": self.resolved.gpu.id,
            "peak_bytes": self.peak_bytes,
            "reserved_bytes": self.reserved_bytes,
            "device_bytes": self.device_bytes,
            "usable_bytes": self.usable_bytes,
            "utilization": round(self.utilization, 6),
            "fits": self.fits,
            "peak_phase": peak.name,
            "peak_rank": {
                "pipeline_stage": stage.index,
                "pipeline_stages": self.stage_count,
                "why": "first stage: most micro-batches in flight" if stage.embedding and
                self.stage_count > 1 else ("last stage: holds the head and the loss"
                                           if self.stage_count > 1 else "all ranks are alike"),
            },
            "components": peak.components,
            "breakdown": dict(sorted(peak.breakdown.items())),
            "phases": {
                name: {"peak_bytes": ph.peak_bytes, "components": ph.components}
                for name, ph in self.stage.phases.items()
            },
            "overhead": self.overhead,
            "host_bytes": self.host_bytes,
            "host_breakdown": self.stage.host,
            "param_count": self.param_count,
            "trainable_param_count": self.trainable_param_count,
            "warnings": list(self.warnings),
            "confidence": self.confidence,
        }


def estimate(scenario: Scenario | dict[str, Any] | str) -> Estimate:
    """Estimate per-GPU training memory for a scenario (a :class:`Scenario`, dict or JSON)."""
    resolved = resolve(parse_scenario(scenario))
    arch, t, p = resolved.arch, resolved.training, resolved.parallelism
    per_stage = [_stage(resolved, st) for st in stages(arch, p)]
    worst = max(per_stage, key=lambda e: e.peak.peak_bytes)
    counts = count_params(arch)
    trainable = counts.total
    if t.finetuning != "full":
        whole = Stage(0, counts.dense_layers, counts.moe_layers, embedding=True, head=True)
        trainable = local_params(arch, t, Parallelism(), whole, lora_targets(t.lora_targets)).trainable
    return Estimate(
        scenario=resolved.scenario,
        resolved=resolved,
        stage=worst,
        stage_count=p.pp,
        overhead=overhead(worst.peak.peak_bytes, p),
        param_count=counts.total,
        trainable_param_count=trainable,
        warnings=tuple(w.as_dict() for w in resolved.warnings),
    )


def checkpointed_layers(t: Training, layers: int) -> int:
    """How many of a stage's `layers` keep only their input under activation checkpointing."""
    if t.activation_checkpointing != "full":
        return 0
    return min(t.recompute_layers or layers, layers)


def micro_batches_in_flight(t: Training, p: Parallelism, stage: Stage) -> int:
    """Micro-batches whose activations a stage holds at once: 1F1B keeps min(pp - i, m) on
    stage i (Narayanan et al. 2021, section 2.2); without pipelining, one."""
    return min(p.pp - stage.index, t.gradient_accumulation_steps) if p.pp > 1 else 1


def _stage(r: Resolved, stage: Stage) -> StageEstimate:
    arch, t, p = r.arch, r.training, r.parallelism
    n = numerics(t, p)
    s = shape(arch, t, p)
    lora = t.finetuning != "full"
    targets = lora_targets(t.lora_targets) if lora else frozenset()
    local = local_params(arch, t, p, stage, targets)
    ms = model_states(local, n, t, p, arch)
    counts = count_params(arch)

    kinds: list[tuple[LayerActivations, int]] = []
    for layer, count in ((counts.dense_layer, stage.dense_layers),
                         (counts.moe_layer, stage.moe_layers)):
        if layer is not None and count:
            act = decoder_layer(arch, layer, n, t, p, s, trainable_weights=not lora)
            kinds.append((act, count))
    layer_count = stage.dense_layers + stage.moe_layers
    ckpt = checkpointed_layers(t, layer_count)
    in_flight = micro_batches_in_flight(t, p, stage)

    # Saved activations of one micro-batch: checkpointed layers keep only their inputs.
    saved: dict[str, int] = {}
    remaining = ckpt
    biggest = kinds[0][0]
    for act, count in kinds:
        stored = min(remaining, count)
        remaining -= stored
        key = "activations/checkpointed_inputs"
        saved[key] = saved.get(key, 0) + stored * act.checkpoint_input
        for key, value in act.saved.items():
            saved[key] = saved.get(key, 0) + (count - stored) * value
        if act.total > biggest.total:
            biggest = act
    if ckpt and n.autocast:  # autocast's weight cache lives for the whole forward
        cache = sum(count * act.saved.get("activations/weight_copies", 0) for act, count in kinds)
        forward_cache = cache - saved.get("activations/weight_copies", 0)
    else:
        forward_cache = 0
    extra = {**embedding_activations(arch, s)} if stage.embedding else {}
    if stage.head:
        for key, value in head_activations(arch, n, t, p, s).items():
            extra[key] = extra.get(key, 0) + value
    for key, value in extra.items():
        saved[key] = saved.get(key, 0) + value
    saved_all = saved if in_flight == 1 else {k: v * in_flight for k, v in saved.items()}

    base = {**ms.parameters, **ms.optimizer_states}
    grads = ms.gradients
    if ms.grad_bucket and p.zero == 0:
        base["gradients/ddp_buckets"] = ms.grad_bucket
    gathered = {"temporaries/gathered_params": ms.gathered_layer,
                "temporaries/gathered_root": ms.root_gathered}
    earlier_grads = grads if t.gradient_accumulation_steps > 1 else {}
    logits = logits_memory(arch, n, t, p, s.tokens) if stage.head else None
    # Recomputing a checkpointed layer rebuilds its activations; the residual it saves is the
    # checkpoint's own input, already counted, where the norms keep the residual itself.
    shared_input = biggest.checkpoint_input if biggest.saved.get("activations/residual") else 0
    recompute = biggest.total - shared_input if ckpt else 0

    # Each phase: candidate moments, scored by their totals; only the worst one is itemised.
    # forward: at the loss, or at the last layer's widest moment
    fwd = (base, earlier_grads, gathered, saved_all, {
        "activations/weight_copies": forward_cache,
        "activations/attention_mask": eager_mask(t, n, s) if stage.embedding or p.pp == 1 else 0,
    })
    forward_moments: list[tuple[dict[str, int], ...]] = [
        (*fwd, {"logits/loss": logits.forward_peak} if logits else {}),
        (*fwd, {"temporaries/layer_forward": biggest.forward_transient + recompute}),
    ]
    if ms.gathered_layer:
        # FSDP2 between layers: the current layer's unsharded parameters plus the all-gather
        # outputs of it and of the prefetched next layer (traced: 8B-shaped stack, FSDP2 x 8)
        forward_moments.append((*fwd, {"temporaries/all_gather_buffers": 2 * ms.gathered_layer}))
    forward = _worst("forward", forward_moments)
    # backward: at the loss gradient, at the first and the last layer, at the embedding
    bw_gathered = {**gathered, "temporaries/gathered_grads": ms.gathered_grads}
    bucket = {"temporaries/grad_buckets": ms.grad_bucket} if ms.grad_bucket and p.zero else {}
    layer_tmp = {"temporaries/layer_backward": biggest.backward_transient + recompute}
    others_in_flight = {k: v * (in_flight - 1) for k, v in saved.items()} if in_flight > 1 else {}
    last_layer = {"activations/last_layer": biggest.checkpoint_input if ckpt else biggest.total}
    # Tied embeddings: the head's weight gradient waits in the shared leaf's input buffer for
    # the whole backward; when the embedding's gradient arrives the two are summed out of
    # place, so three vocabulary-sized gradients coexist before AccumulateGrad takes the sum
    # (traced: llama-3.2-1b, 3 x V h x 4 bytes of temporaries at the end of backward).
    tied = stage.embedding and stage.head and arch.tie_word_embeddings and not lora
    end_tmp = 2 * (counts.embedding // p.tp) if tied else 0
    # At the first layer's backward an untied embedding has no gradient yet; it appears last,
    # while the gradient of its output (T h at residual width) is still alive.
    untied_embedding = stage.embedding and not arch.tie_word_embeddings and not lora
    before_embedding = grads
    if t.gradient_accumulation_steps == 1:
        missing = 0  # gradients not yet written at the last layers' backward
        if untied_embedding:
            missing += -(-(counts.embedding // p.tp) // (p.shard_group if p.zero >= 2 else 1))
        if ms.gathered_layer and not lora:
            # FSDP2's worst layer is the last that still prefetches: that layer's and the
            # next one's sharded gradients are not written yet
            missing += 2 * -(-local.per_layer // p.shard_group)
        if missing:
            before_embedding = {**grads, "gradients/weights": grads["gradients/weights"]
                                - missing * n.grad}
    incoming = {"temporaries/embedding_grad": end_tmp * n.grad
                + s.tokens * s.hidden * max(n.residual, n.compute)}
    end: tuple[dict[str, int], ...] = (base, grads, gathered, others_in_flight, incoming, bucket)
    if ms.gathered_layer and local.root:
        # FSDP2's last post-backward is the root's: its parameters are resharded, its
        # unsharded gradients and the reduce-scatter input (in the reduce dtype) coexist
        # (traced: llama-3.1-8b fsdp8, exact)
        root_shard = -(-local.root // p.shard_group) * n.grad
        end = (base, {**grads, "gradients/weights": grads["gradients/weights"] - root_shard},
               others_in_flight, incoming,
               {"temporaries/root_reduce_scatter": local.root * (n.gathered_weight + n.grad)})
    candidates = [
        (base, earlier_grads, bw_gathered, saved_all, layer_tmp, bucket),
        (base, before_embedding, bw_gathered, others_in_flight, last_layer, layer_tmp, bucket),
        end,
    ]
    if logits:  # no layer has gradients yet: only the prefetched layer is gathered
        candidates.append((base, earlier_grads, gathered, saved_all,
                           {"logits/loss": logits.backward_peak}))
    backward = _worst("backward", candidates)
    step = _worst("optimizer_step", [
        (base, ms.step_gradients, bucket, {"temporaries/optimizer_step": ms.step_temporary})])
    return StageEstimate(stage, {"forward": forward, "backward": backward,
                                 "optimizer_step": step}, ms.host)


def _worst(name: str, candidates: list[tuple[dict[str, int], ...]]) -> Phase:
    """The candidate moment with the most bytes. Parts shared between candidates are summed
    once, keyed by identity: safe only within one call, while `candidates` keeps them alive."""
    sums: dict[int, int] = {}
    best, worst = -1, candidates[0]
    for parts in candidates:
        total = 0
        for part in parts:
            ident = id(part)
            value = sums.get(ident)
            if value is None:
                value = sums[ident] = sum(part.values())
            total += value
        if total > best:
            best, worst = total, parts
    return Phase(name, worst, best)


__all__ = ["COMPONENTS", "PHASES", "Estimate", "Phase", "estimate"]
