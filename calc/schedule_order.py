"""The order a V-shaped pipeline schedule runs one rank's actions in, and what the rank holds
at each backward (torch.distributed.pipelining's ScheduleZBVZeroBubble, schedules.py).

ZBV splits every backward into the input's (I, run with retain_graph: the micro-batch's saved
activations stay) and the weights' (W, which frees them with the output gradients it used).
Its cool-down runs a rank's last input backwards before their weight backwards, so a later
rank holds fewer micro-batches there but more of them waiting for W. A closed form of those
counts breaks where the micro-batches are fewer than 2 pp - 1 (torch pads the order and drops
the padding's actions), so the order itself is walked, as torch builds it.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple


class Held(NamedTuple):
    """What one rank holds as one of its input backwards starts."""

    alive: int  # chunk-micro-batches whose activations are alive, the running one included
    waiting: int  # of the others, those whose weight backward is still to run
    written: bool  # a weight backward has run: the rank has gradients


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
    alive = waiting = 0
    written = False
    states = set()
    for _, kind in zbv_order(pp, m, rank):
        if kind == "F":
            alive += 1
        elif kind == "I":
            states.add(Held(alive, waiting, written))
            waiting += 1
        else:
            alive, waiting, written = alive - 1, waiting - 1, True
    return tuple(sorted(
        (s for s in states if not any(o != s and o.alive >= s.alive and o.waiting >= s.waiting
                                      and o.written >= s.written for o in states)),
        key=lambda s: (-s.alive, s.waiting)))
