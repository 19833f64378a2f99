"""The order a pipeline schedule runs one rank's actions in, and what the rank holds at each of
them (torch.distributed.pipelining's schedules.py): ScheduleZBVZeroBubble, ScheduleDualPipeV and
ScheduleInterleaved1F1B, the schedules that put several chunks of the model on one rank.

ZBV splits every backward into the input's (I, run with retain_graph: the micro-batch's saved
activations stay) and the weights' (W, which frees them with the output gradients it used).
Its cool-down runs a rank's last input backwards before their weight backwards, so a later
rank holds fewer micro-batches there but more of them waiting for W. A closed form of those
counts breaks where the micro-batches are fewer than 2 pp - 1 (torch pads the order and drops
the padding's actions), so the order itself is walked, as torch builds it.
"""

from __future__ import annotations

from collections import deque
from functools import lru_cache
from typing import NamedTuple


class Held(NamedTuple):
    """What one rank holds as one of its input backwards starts."""

    alive: int  # chunk-micro-batches whose activations are alive, the running one included
    waiting: int  # of the others, those whose weight backward is still to run
    written: bool  # a weight backward has run: the rank has gradients
    inputs: int = 0  # input backwards run before it: each leaves its input's gradient in the
    # input's .grad (stage_backward_input) until the step ends


def zbv_order(pp: int, m: int, rank: int) -> tuple[tuple[int, str], ...]:
    """Rank `rank`'s actions as (chunk, F | I | W), chunk 0 its stage `rank` and chunk 1 its
    stage 2 pp - 1 - rank: ScheduleZBVZeroBubble._calculate_single_rank_operations, with the
    micro-batches past `m` its padding to 2 pp - 1 dropped as torch drops them."""
    n = max(2 * pp - 1, m)
    ops: list[tuple[int, str]] = [(0, "F")] * (2 * (pp - rank) - 1)  # warm-up
    ops += [(1, "F"), (0, "F")] * rank
    ops += [(1, "F"), (1, "I"), (1, "W")] * (pp - rank)
    f0, f1 = 2 * pp - rank - 1, pp  # forwards run of chunk 0 and chunk 1
    while f1 < f0 or f0 < n:  # steady: a forward, then each chunk's input and weight backward
        if f0 < n:
            ops.append((0, "F"))
            f0 += 1
        ops += [(0, "I"), (0, "W"), (1, "F"), (1, "I"), (1, "W")]
        f1 += 1
    ops += [(0, "I"), (1, "I")] * rank  # cool-down: input backwards, their weights deferred
    ops += [(0, "I"), (0, "W")] * (pp - rank)
    ops += [(1, "W")] * rank + [(0, "W")] * rank  # the deferred weight backwards, in order
    seen: dict[tuple[int, str], int] = {}
    kept = []
    for action in ops:
        index = seen.get(action, 0)
        seen[action] = index + 1
        if index < m:
            kept.append(action)
    return tuple(kept)


@lru_cache(maxsize=256)
def zbv_held(pp: int, m: int, rank: int) -> tuple[Held, ...]:
    """What rank `rank` holds as each of its input backwards starts, of those none of the
    others holds as much or more of (the states that can set its backward's peak)."""
    return _held(zbv_order(pp, m, rank), False)


def zero_bubble_order(pp: int, m: int, rank: int) -> tuple[tuple[int, str], ...]:
    """Rank `rank`'s actions as (0, F | I | W) under torch's zero bubble with one stage a rank
    (ScheduleInterleavedZeroBubble, `_get_1f1b_rank_ops` with enable_zero_bubble): pp - 1 - rank
    warm-up forwards, then a forward and an input backward each step, the weight backwards
    `rank` input backwards behind."""
    warm = min(pp - 1 - rank, m)
    ops: list[tuple[int, str]] = [(0, "F")] * warm
    for k in range(warm, 2 * m):
        if k < m:
            ops.append((0, "F"))
        if k - warm < m:
            ops.append((0, "I"))
            if k - warm >= rank:
                ops.append((0, "W"))
    ops += [(0, "W")] * (m - sum(kind == "W" for _, kind in ops))
    return tuple(ops)


@lru_cache(maxsize=256)
def zero_bubble_held(pp: int, m: int, rank: int) -> tuple[Held, ...]:
    """What rank `rank` of torch's zero bubble holds as each of its input backwards starts
    (`zbv_held`)."""
    return _held(zero_bubble_order(pp, m, rank), True)


def _held(order: tuple[tuple[int, str], ...], inputs_count: bool) -> tuple[Held, ...]:
    """The states at the input backwards, but those another holds as much or more of; with
    `inputs_count`, the input gradients left count too (a rank of several chunks weighs them
    by chunk: `chunk_mixes`)."""
    alive = waiting = inputs = 0
    written = False
    states = set()
    for _, kind in order:
        if kind == "F":
            alive += 1
        elif kind == "I":
            states.add(Held(alive, waiting, written, inputs if inputs_count else 0))
            waiting, inputs = waiting + 1, inputs + 1
        else:
            alive, waiting, written = alive - 1, waiting - 1, True
    return tuple(sorted(
        (s for s in states if not any(o != s and o.alive >= s.alive and o.waiting >= s.waiting
                                      and o.written >= s.written and o.inputs >= s.inputs
                                      for o in states)),
        key=lambda s: (-s.alive, s.waiting, -s.inputs)))


def interleaved_order(pp: int, v: int, m: int, rank: int) -> tuple[tuple[int, str], ...]:
    """Rank `rank`'s actions as (chunk, F | B), chunk c its stage c pp + rank:
    ScheduleInterleaved1F1B._calculate_single_rank_operations (`_get_warmup_ops`,
    `_get_1f1b_rank_ops`). The micro-batches go in rounds of m // max(1, m // pp): each chunk
    runs a round's forwards before the next chunk does, and the backwards go the other way, the
    last chunk first."""
    per_round = m // max(1, m // pp)
    warm = min((v - 1) * per_round + 2 * (pp - 1 - rank), m * v)
    ops: list[tuple[int, str]] = [((k // per_round) % v, "F") for k in range(warm)]
    for k in range(warm, m * v):
        ops += [((k // per_round) % v, "F"), (v - 1 - ((k - warm) // per_round) % v, "B")]
    ops += [(v - 1 - ((k - warm) // per_round) % v, "B") for k in range(m * v, m * v + warm)]
    return tuple(ops)


def dualpipev_order(pp: int, m: int, rank: int) -> tuple[tuple[int, str], ...]:
    """Rank `rank`'s actions as (chunk, F | B | I | W), chunk 0 its stage `rank` and chunk 1 its
    stage 2 pp - 1 - rank: ScheduleDualPipeV._calculate_single_rank_operations, an overlapped
    forward-backward pair run as its forward then its backward (m >= 2 pp)."""
    ops: list[tuple[int, str]] = []
    inputs: list[int] = []  # chunks of the input backwards whose weight backward waits

    def weights() -> None:
        if inputs:
            ops.append((inputs.pop(0), "W"))

    ops += [(0, "F")] * (2 * (pp - rank - 1))
    ops += [(0, "F"), (1, "F")] * (rank + 1)
    for _ in range(pp - rank - 1):
        ops.append((1, "I"))
        inputs.append(1)
        weights()
        ops.append((1, "F"))
    ops += [(0, "F"), (1, "B"), (1, "F"), (0, "B")] * (m - 2 * pp + rank + 1)
    ops += [(1, "B"), (1, "F"), (0, "B")] * (pp - rank - 1)
    split = False
    for k in range(rank + 1):
        split = split or (k == (rank + 1) // 2 and rank % 2 == 1)
        ops.append((1, "I" if split else "B"))
        if split:
            inputs.append(1)
        split = split or (k == (rank + 1) // 2 and rank % 2 == 0)
        ops.append((0, "I" if split else "B"))
        if split:
            inputs.append(0)
    for _ in range(pp - rank - 1):
        weights()
        ops.append((0, "I" if split else "B"))
        if split:
            inputs.append(0)
    for _ in range(rank + 1):
        weights()
    return tuple(ops)


@lru_cache(maxsize=256)
def one_f_one_b_casts(pp: int, m: int, rank: int) -> tuple[int, int]:
    """Under torch's Schedule1F1B, on rank `rank` whose backwards recompute (and so empty
    autocast's cache, one for all threads): the most distinct casts of its weights its alive
    micro-batches hold as a backward starts, and the most the others than the backward's own
    hold. Its first min(pp - rank, m) forwards run before any backward and share a cast; every
    later one follows a backward and casts anew."""
    warm = min(pp - rank, m)
    casts = deque([0] * warm)  # each alive micro-batch's cast, oldest first
    alive = others = 0
    for forward in range(warm, m + warm):
        alive = max(alive, len(set(casts)))
        others = max(others, len(set(list(casts)[1:])))
        casts.popleft()  # (the backward: its recomputation empties the cache)
        if forward < m:
            casts.append(forward - warm + 1)
    return alive, others


class Mix(NamedTuple):
    """What a rank of several chunks holds as one of its actions runs."""

    alive: tuple[int, ...]  # chunk-micro-batches alive, by chunk, the running one included
    running: int  # the running action's chunk
    backward: bool  # the action is a backward (an input backward under a split schedule)
    wrote: tuple[bool, ...]  # by chunk: its backward has written its gradients before it (a
    # later chunk's backward runs first: a V's second chunk writes before its first)
    waiting: int  # of the others, those whose weight backward is still to run
    inputs: tuple[int, ...]  # input backwards run before it, by chunk (`Held.inputs`)
    split: bool = False  # the backward is an input backward, its weight backward to follow
    # (every backward of ZBV, DualPipeV's in its warm-up and cool-down)
    weight: bool = False  # the action is a split backward's weight pass (its input pass ran)
    copies: tuple[int, ...] = ()  # by chunk: the autocast caches its alive micro-batches cast
    # their weights in, a copy each (a recomputing backward empties the cache: the forwards after
    # it cast anew, those before it share one), a running backward's own micro-batch left out
    # (a weight pass's groups free its plain layers' as they run); empty where no chunk `clears`

    @property
    def written(self) -> bool:
        """Every chunk's backward has written its gradients before it."""
        return all(self.wrote)


@lru_cache(maxsize=256)
def chunk_mixes(schedule: str, pp: int, v: int, m: int, rank: int,
                clears: tuple[bool, ...] = ()) -> tuple[Mix, ...]:
    """Every distinct state rank `rank` of a `schedule` of several chunks a rank
    ("interleaved_1f1b", "zbv", "dualpipev") is in as one of its forwards or backwards runs, but
    those another state holds as much or more of (same running chunk and kind). `clears`, by
    chunk: its backwards recompute checkpointed layers and so empty autocast's cache (one for
    all threads; `Mix.copies`). A chunk's micro-batches run their backwards in the order of
    their forwards."""
    if schedule == "interleaved_1f1b":
        order, chunks = interleaved_order(pp, v, m, rank), v
    else:
        order, chunks = (zbv_order if schedule == "zbv" else dualpipev_order)(pp, m, rank), 2
    alive, inputs = [0] * chunks, [0] * chunks
    waiting = 0
    unwritten = set(range(chunks))
    states = set()
    emptied = 0  # how many times a recomputation has emptied autocast's cache
    casts: list[deque[int]] = [deque() for _ in range(chunks)]  # each alive forward's cache
    split = [0] * chunks  # alive micro-batches whose input backward has run
    for chunk, kind in order:
        if kind == "F":
            alive[chunk] += 1
            casts[chunk].append(emptied)
        wrote = tuple(c not in unwritten for c in range(chunks))
        # (a backward's own micro-batch: the copy `Layers.kept` counts for the rank)
        own = split[chunk] if kind == "I" else 0 if kind in "BW" else None
        copies = tuple(len({e for j, e in enumerate(c) if i != chunk or j != own})
                       for i, c in enumerate(casts)) if any(clears) else ()
        if kind != "W":
            states.add(Mix(tuple(alive), chunk, kind != "F", wrote, waiting, tuple(inputs),
                           kind == "I", copies=copies))
        else:  # (its own weight backward is not among those waiting)
            states.add(Mix(tuple(alive), chunk, True, wrote, waiting - 1, tuple(inputs), True,
                           weight=True, copies=copies))
        waiting += (kind == "I") - (kind == "W")
        inputs[chunk] += kind == "I"
        split[chunk] += (kind == "I") - (kind == "W")
        if kind in "BW":
            alive[chunk] -= 1
            casts[chunk].popleft()
            unwritten.discard(chunk)
        if kind != "F" and clears and clears[chunk]:
            emptied += 1
    return tuple(sorted(
        (s for s in states if not any(
            o != s and o.running == s.running and o.backward == s.backward
            and o.split == s.split and o.weight == s.weight and o.waiting >= s.waiting
            and all(a >= b for a, b in zip(o.alive + o.inputs + o.wrote + o.copies,
                                           s.alive + s.inputs + s.wrote + s.copies, strict=True))
            for o in states)),
        key=lambda s: (-sum(s.alive), s)))
