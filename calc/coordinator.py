"""DeepSpeed ZeRO-3's parameter coordinator: which parameters are gathered, when.

ZeRO-3 partitions every parameter over the data-parallel ranks and gathers a module's
parameters before it runs (`PartitionedParameterCoordinator`, partitioned_param_coordinator.py).
After the first step it has recorded the order in which the modules use their parameters, and
from then on it prefetches the parameters next in that order, beyond the running module's,
until `stage3_max_live_parameters` elements are gathered or in flight (the parameter that
crosses the limit is gathered whole). A module's parameters are released after it runs, unless
they are used again within `stage3_max_reuse_distance` elements of the order (the top layers
between their forward and their backward). Parameters of at most
`stage3_param_persistence_threshold` elements (norms, biases) are never partitioned.

So at any moment the gathered parameters are those of the modules next in the order, the
running one first, until the limit is reached: every parameter the forward has used comes back
in the backward, and the backward releases each layer for good. Traced (DeepSpeed 0.19.8,
validation/harness/deepspeed_engine.py): the coordinator's own count of gathered and in-flight
elements agrees with this within one parameter; the prefetch reaches the limit a few layers
into the forward and the backward, which this leaves out.
"""

from __future__ import annotations

from collections.abc import Hashable
from functools import lru_cache
from typing import NamedTuple

from .params import LayerParams, ParamCounts
from .placement import Stage

# DeepSpeed's defaults, which calc's DeepSpeed export writes (calc.frameworks.deepspeed)
MAX_LIVE_PARAMETERS = 10**9  # stage3_max_live_parameters
SUB_GROUP_SIZE = 10**9  # sub_group_size: the optimizer steps this many elements at a time


def persistence_threshold(h: int) -> int:
    """stage3_param_persistence_threshold as the HF Trainer fills its "auto": 10 h."""
    return 10 * h


class Live(NamedTuple):
    """Parameter elements gathered on one GPU at the step's moments (ZeRO-3, DeepSpeed)."""

    forward_head: int  # the loss: the head running
    forward_mlp: int  # the last layer's MLP in forward
    backward_head: int  # the head's backward
    backward_top: int  # the top layer's backward (its MLP's)
    backward_first: int  # the first layer's backward
    embedding: int  # the embedding's backward, the last of the step
    persistent: int  # never partitioned: whole on every GPU, all step


Tensor = tuple[Hashable, int]  # (which tensor, its elements)


def _layer(layer: LayerParams, index: int, threshold: int) -> tuple[list[Tensor], int, int]:
    """One layer's partitioned tensors in forward order, where its MLP starts in that list, and
    its persistent elements."""
    tensors: list[Tensor] = []
    persistent = layer.norm_count  # every norm is far below 10 h
    mlp = None
    for j, lin in enumerate(layer.linears):
        if mlp is None and lin.group != "attention":
            mlp = len(tensors)
        for kind, size in (("w", lin.weight_count), ("b", lin.bias_count)):
            if size and size <= threshold:
                persistent += size
            elif size:
                tensors.append(((index, j, kind), size))
    return tensors, len(tensors) if mlp is None else mlp, persistent


@lru_cache(maxsize=256)
def gathered(counts: ParamCounts, stage: Stage, max_live: int = MAX_LIVE_PARAMETERS) -> Live:
    """The coordinator's gathered elements at each moment of the step, for a stage of whole
    tensors (no tp, no ep): the module order of a forward, then its backward in reverse (a
    checkpointed layer's recomputation uses the layer's own parameters again)."""
    arch = counts.arch
    threshold = persistence_threshold(arch.hidden_size)
    layers: list[tuple[list[Tensor], int]] = []
    persistent = counts.final_norm
    for i in range(stage.first_layer, stage.first_layer + stage.layers):
        kind = counts.moe_layer if arch.is_moe_layer(i) and counts.moe_layer else \
            counts.dense_layer
        tensors, mlp, kept = _layer(kind, i, threshold)
        layers.append((tensors, mlp))
        persistent += kept
    embedding: list[Tensor] = [("embedding", counts.embedding)] if stage.embedding else []
    head: list[Tensor] = [("head", counts.lm_head) if counts.lm_head else
                          ("embedding", counts.embedding)] if stage.head else []
    order: list[Tensor] = list(embedding)
    at: dict[str, int] = {}
    for tensors, mlp in layers:
        at["forward_mlp"] = len(order) + mlp
        order += tensors
    if head:
        at["forward_head"] = len(order)
        order += head
        at["backward_head"] = len(order)
        order += head
    for n, (tensors, _) in enumerate(reversed(layers)):
        at.setdefault("backward_top", len(order))
        if n == len(layers) - 1:
            at["backward_first"] = len(order)
        order += reversed(tensors)
    if embedding:
        at["embedding"] = len(order)
        order += embedding
    limit = max_live - persistent

    def live(moment: str) -> int:
        """The tensors used from `moment` on, each once, until `limit` elements."""
        if moment not in at:
            return 0
        held: set[Hashable] = set()
        total = 0
        for key, size in order[at[moment]:]:
            if total >= limit:
                break
            if key not in held:
                held.add(key)
                total += size
        return total

    return Live(live("forward_head"), live("forward_mlp"), live("backward_head"),
                live("backward_top"), live("backward_first"), live("embedding"), persistent)


def sub_group(ordered: tuple[int, ...], N: int, size: int = SUB_GROUP_SIZE) -> int:
    """The largest of the optimizer's sub-groups (`_create_fp16_sub_groups`): the partitions
    of the tensors in order, a group closed once it holds `size` elements."""
    largest = held = 0
    for tensor in ordered:
        held += -(-tensor // N)
        if held >= size:
            largest, held = max(largest, held), 0
    return max(largest, held)
