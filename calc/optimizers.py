"""The optimizers calc knows, as one table: their states, what their step allocates, sources.

The estimator (states per parameter, step temporaries), the explanation and the formula
reference, the published-formula baselines, the confidence check and the framework import and
export all read this table; none of them lists optimizers of its own.

    >>> OPTIMIZERS["adamw"].state_names
    ('exp_avg', 'exp_avg_sq')
    >>> OPTIMIZERS["adafactor"].implementations
    ()
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from .sources import ADAFACTOR, ADAM, ADAMW, BNB_8BIT, LION, SGD, Source

OptimizerId = Literal["adamw", "adam", "sgd", "sgd_momentum", "adafactor", "lion", "adamw_8bit"]
OptimizerImpl = Literal["fused", "foreach", "for_loop"]
StateKind = Literal["dense", "blockwise_8bit", "factored"]
# What optimizer.step() allocates beside the states (torch.optim implementations, traced):
#   none          fused kernels and plain SGD: nothing measurable
#   state_copy    foreach Adam: torch._foreach_sqrt(exp_avg_sq) copies every second moment
#   two_largest   for-loop Adam, Lion: two temporaries the size of the largest tensor
#   adafactor     two fp32 temporaries the size of the largest tensor (two more when a
#                 low-precision gradient is upcast)
StepRule = Literal["none", "state_copy", "two_largest", "adafactor"]
ALL_IMPLEMENTATIONS: tuple[OptimizerImpl, ...] = get_args(OptimizerImpl)


@dataclass(frozen=True, slots=True)
class State:
    """One optimizer state tensor per parameter (`optimizer_states/<name>` in the report)."""

    name: str
    title: str
    kind: StateKind


@dataclass(frozen=True, slots=True, eq=False)  # memoised singletons: hashed by identity
class Optimizer:
    id: OptimizerId
    name: str
    states: tuple[State, ...]
    implementations: tuple[OptimizerImpl, ...]  # () when optimizer_impl means nothing
    step: tuple[tuple[OptimizerImpl, StepRule], ...]  # per implementation, or one ("fused", r)
    source: Source
    traced: bool  # covered by validation/cases.json (checked by tests/test_validation.py)
    # Bytes per parameter of optimizer states with mixed precision as EleutherAI's Transformer
    # Math 101 counts them: the fp32 master copy plus the states (baselines.py)
    paper_bytes_per_param: int

    @property
    def state_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.states)

    def step_rule(self, implementation: OptimizerImpl) -> StepRule:
        rules = dict(self.step)
        return rules.get(implementation, self.step[0][1])


_MOMENTS = (State("exp_avg", "first moment", "dense"),
            State("exp_avg_sq", "second moment", "dense"))
_ADAM_STEP: tuple[tuple[OptimizerImpl, StepRule], ...] = (
    ("fused", "none"), ("foreach", "state_copy"), ("for_loop", "two_largest"))

OPTIMIZERS: dict[OptimizerId, Optimizer] = {o.id: o for o in (
    Optimizer("adamw", "AdamW", _MOMENTS, ALL_IMPLEMENTATIONS, _ADAM_STEP, ADAMW, True, 12),
    Optimizer("adam", "Adam", _MOMENTS, ALL_IMPLEMENTATIONS, _ADAM_STEP, ADAM, False, 12),
    Optimizer("sgd", "SGD", (), ALL_IMPLEMENTATIONS, (("fused", "none"),), SGD, True, 4),
    Optimizer("sgd_momentum", "SGD with momentum", (State("momentum", "momentum", "dense"),),
              ALL_IMPLEMENTATIONS, (("fused", "none"),), SGD, True, 8),
    Optimizer("adafactor", "Adafactor",
              (State("factored_second_moment", "factored second moment", "factored"),), (),
              (("fused", "adafactor"),), ADAFACTOR, True, 4),
    Optimizer("lion", "Lion", (State("momentum", "momentum", "dense"),), (),
              (("fused", "two_largest"),), LION, False, 8),
    Optimizer("adamw_8bit", "8-bit AdamW (bitsandbytes)",
              (State("exp_avg_8bit", "8-bit first moment", "blockwise_8bit"),
               State("exp_avg_sq_8bit", "8-bit second moment", "blockwise_8bit")), (),
              (("fused", "none"),), BNB_8BIT, False, 6),
)}
"""By the scenario's `training.optimizer`."""

assert tuple(OPTIMIZERS) == get_args(OptimizerId)

# bitsandbytes 8-bit blockwise optimizers: 1 byte per state element plus one fp32 absmax per
# block of 256 (bnb.optim defaults: block_wise=True).
BNB_BLOCK = 256
