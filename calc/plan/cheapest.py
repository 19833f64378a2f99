"""The cheapest GPU type and count to train N tokens: every GPU preset with a price, every
power-of-two count up to `max_gpus`, the scenario as given and (if it does not fit) with
ZeRO-3, ranked by cost.

For each GPU type and count the model-parallel part of the scenario (tp x pp x cp) is kept and
dp = count / (tp x pp x cp). Every option trains the same global batch G (the scenario's
micro-batch x accumulation x dp, or `global_batch`), so options are compared at equal
optimisation settings: each replica gets G / dp sequences, as the scenario's micro-batch (or
its largest divisor of G / dp below it) times the accumulation; counts with dp not dividing G
are skipped. A layout qualifies when it fits (the `calc.plan.fits_target` rule, default
target 0.85) and `calc.plan.training_cost` finishes `tokens` within the deadline.

Under that cost model the GPU-hours of a GPU type do not depend on the count (step time is
FLOPs / (GPUs x peak x mfu): twice the GPUs, half the time), so within a GPU type the ranking
is by cost and then by fewer GPUs: the smallest job that fits and meets the deadline. What
more GPUs really cost (communication, a lower MFU at scale) is in `mfu`, not modelled apart;
`calc.plan.advise` estimates it for one GPU type.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import Field

from ..estimate import estimate, fit_status
from ..operations import SCENARIO_HELP, Cli, Operation, Request
from ..presets import UnknownPreset, resolve_gpu
from ..presets import gpus as gpu_presets
from ..scenario import Scenario, ScenarioError, parse_scenario
from ._common import MAX_TOKENS, MFU, PlanError, ScenarioInput, bounded, changed, gib
from .cost import DEFAULT_MFU, MFU_HELP, TrainingCost, training_cost
from .fit import DEFAULT_TARGET, fits_target

DEFAULT_MAX_GPUS = 512  # 64 nodes of 8


@dataclass(frozen=True, slots=True)
class Option:
    """One GPU type and count that fits and meets the deadline."""

    gpu: str
    gpus: int
    scenario: Scenario  # as estimated: the input with gpu, dp (and perhaps zero) changed
    device_bytes: int
    usable_bytes: int
    cost: TrainingCost
    changes: tuple[str, ...]  # what was changed beyond gpu and dp (e.g. "zero 3")

    def as_dict(self) -> dict[str, Any]:
        c = self.cost
        t = self.scenario.training
        return {"gpu": self.gpu, "gpus": self.gpus, "dp": self.scenario.parallelism.dp,
                "micro_batch_size": t.micro_batch_size,
                "gradient_accumulation_steps": t.gradient_accumulation_steps,
                "status": fit_status(self.device_bytes, self.usable_bytes),
                "zero": self.scenario.parallelism.zero, "changes": list(self.changes),
                "device_bytes": self.device_bytes, "usable_bytes": self.usable_bytes,
                "train_hours": c.train_seconds / 3600, "gpu_hours": c.gpu_hours,
                "price_per_gpu_hour": c.price_per_gpu_hour, "cost_usd": c.cost_usd,
                "step_seconds": c.step_seconds, "tokens_per_step": c.tokens_per_step,
                "scenario": self.scenario.model_dump(mode="json")}


@dataclass(frozen=True, slots=True)
class CheapestResult:
    """`options`: the best layout of each priced GPU type (the fewest GPUs among the
    cheapest), cheapest first; `unpriced`: the same for GPUs without a price, by GPU-hours;
    `all_options`: every qualifying layout, cheapest first; `rejected`: per GPU type with no
    layout, why."""

    tokens: int
    deadline_hours: float | None
    options: tuple[Option, ...]
    unpriced: tuple[Option, ...]
    all_options: tuple[Option, ...]
    rejected: dict[str, str]
    notes: tuple[str, ...] = field(default=())

    @property
    def best(self) -> Option | None:
        return self.options[0] if self.options else None

    def as_dict(self) -> dict[str, Any]:
        return {"tokens": self.tokens, "deadline_hours": self.deadline_hours,
                "options": [o.as_dict() for o in self.options],
                "unpriced": [o.as_dict() for o in self.unpriced],
                "all_options": [o.as_dict() for o in self.all_options],
                "rejected": dict(self.rejected), "notes": list(self.notes)}


def _global_batch(base: Scenario, max_gpus: int) -> int:
    """The scenario's own global batch where it sets micro-batch, accumulation or dp, else the
    advisor's default (about 2M tokens per step)."""
    from .advise import default_global_batch

    t, p = base.training, base.parallelism
    if {"micro_batch_size", "gradient_accumulation_steps"} & t.model_fields_set \
            or "dp" in p.model_fields_set:
        return t.micro_batch_size * t.gradient_accumulation_steps * p.dp
    return default_global_batch(max_gpus, t.seq_len)


def _counts(max_gpus: int, model_parallel: int) -> list[int]:
    counts, n = [], 1
    while n <= max_gpus:
        if n % model_parallel == 0:
            counts.append(n)
        n *= 2
    return counts


def _gpu_ids(names: list[str] | tuple[str, ...] | None) -> list[str]:
    if names is None:  # every GPU preset with a list price
        return [g.id for g in gpu_presets().values() if g.price is not None]
    ids = []
    for name in names:
        try:
            ids.append(resolve_gpu(name).id)
        except UnknownPreset as exc:
            raise PlanError("gpus", str(exc)) from None
    return list(dict.fromkeys(ids))


def cheapest(
    scenario: ScenarioInput, tokens: int, *, deadline_hours: float | None = None,
    gpus: list[str] | tuple[str, ...] | None = None, max_gpus: int = DEFAULT_MAX_GPUS,
    mfu: float = DEFAULT_MFU, target: float = DEFAULT_TARGET, global_batch: int | None = None,
) -> CheapestResult:
    """The cheapest GPU type and count that fits and trains `tokens` within the deadline.

    `gpus`: GPU preset ids to consider (default: every GPU preset with a list `price`, in
    preset id order); the scenario's own `gpu` and `dp` are replaced.

        >>> r = cheapest({"model": "llama-3.2-1b", "training": {"seq_len": 2048}}, 10**9,
        ...              gpus=["h100-sxm-80gb", "a100-80gb"], max_gpus=8)
        >>> r.best.gpus, sorted({o.gpu for o in r.options})
        (1, ['a100-80gb', 'h100-sxm-80gb'])
    """
    base = parse_scenario(scenario)
    bounded("tokens", tokens, 1, MAX_TOKENS, integer=True)
    if deadline_hours is not None:
        bounded("deadline_hours", deadline_hours, 0, 1e6, low_open=True)
    bounded("max_gpus", max_gpus, 1, 1 << 20, integer=True)
    bounded("target", target, 0, 1, low_open=True)
    bounded("mfu", mfu, *MFU)
    p, t = base.parallelism, base.training
    if global_batch is None:
        global_batch = _global_batch(base, max_gpus)
    bounded("global_batch", global_batch, 1, 1 << 30, integer=True)
    model_parallel = p.tp * p.pp * p.cp
    counts = [n for n in _counts(max_gpus, model_parallel) if global_batch % (n // model_parallel) == 0]
    if not counts:
        raise PlanError("max_gpus", f"no power of two up to {max_gpus} is a multiple of "
                        f"tp x pp x cp ({model_parallel}) with dp dividing the global batch "
                        f"({global_batch})")
    priced: list[Option] = []
    unpriced: list[Option] = []
    rejected: dict[str, str] = {}
    for gpu in _gpu_ids(gpus):
        found, reason = _options_on(base, gpu, counts, tokens, deadline_hours, mfu, target,
                                    global_batch)
        if not found:
            rejected[gpu] = reason
        for option in found:
            (priced if option.cost.cost_usd is not None else unpriced).append(option)
    priced.sort(key=lambda o: (o.cost.cost_usd, o.gpus, o.cost.train_seconds))
    unpriced.sort(key=lambda o: (o.cost.gpu_hours, o.gpus))
    best: dict[str, Option] = {}
    for option in priced:
        best.setdefault(option.gpu, option)
    fewest: dict[str, Option] = {}
    for option in unpriced:
        fewest.setdefault(option.gpu, option)
    notes = [f"dp = GPUs / (tp x pp x cp = {model_parallel}); every option trains the same "
             f"global batch of {global_batch} sequences ({global_batch * t.seq_len:,} tokens "
             "per step): micro-batch x accumulation = global batch / dp",
             "prices are list prices (unverified, vary by provider and month); the cost model "
             f"assumes {mfu:.0%} of peak at every GPU count"]
    return CheapestResult(tokens, deadline_hours, tuple(best.values()),
                          tuple(fewest.values()), tuple(priced), rejected, tuple(notes))


def _options_on(
    base: Scenario, gpu: str, counts: list[int], tokens: int, deadline_hours: float | None,
    mfu: float, target: float, global_batch: int,
) -> tuple[list[Option], str]:
    """The qualifying counts on one GPU type, or why there are none."""
    p = base.parallelism
    model_parallel = p.tp * p.pp * p.cp
    out: list[Option] = []
    zero3 = p.zero != 3  # the fallback
    reason = f"does not fit {target:.0%} of the GPU at up to {counts[-1]} GPUs, even with ZeRO-3"
    fastest: float | None = None
    for count in counts:
        dp = count // model_parallel
        seqs = global_batch // dp
        mb = max(k for k in range(1, min(seqs, base.training.micro_batch_size) + 1)
                 if seqs % k == 0)
        batch = {"micro_batch_size": mb, "gradient_accumulation_steps": seqs // mb}
        tries: list[tuple[dict[str, int], tuple[str, ...]]] = [({"dp": dp}, ())]
        if zero3:
            tries.append(({"dp": dp, "zero": 3}, ("zero 3",)))
        for par, changes in tries:
            try:
                s = changed(base, training=batch, parallelism=par, gpu=gpu)
                report = estimate(s)
            except ScenarioError as exc:
                reason = str(exc)
                continue
            if not fits_target(report, target):
                continue
            try:
                cost = training_cost(s, tokens, mfu=mfu)
            except PlanError as exc:
                reason = str(exc)
                break
            hours = cost.train_seconds / 3600
            fastest = hours if fastest is None else min(fastest, hours)
            if deadline_hours is None or hours <= deadline_hours:
                out.append(Option(gpu, count, s, report.device_bytes, report.usable_bytes, cost,
                                  changes))
            break  # the scenario as given fits: ZeRO-3 is not needed
    if not out and fastest is not None:
        reason = (f"misses the deadline: the fastest layout that fits takes {fastest:,.1f} h "
                  f"at up to {counts[-1]} GPUs")
    return out, reason


# ---------------------------------------------------------------------------------------------
# The operation: calc cheapest
# ---------------------------------------------------------------------------------------------

class CheapestRequest(Request):
    scenario: dict[str, Any] = Field(description=SCENARIO_HELP)
    tokens: Annotated[int, Cli(count=True)] = Field(
        title="Tokens to train", description="training tokens (1e12 is fine)",
        examples=[10**10])
    deadline_hours: float | None = Field(None, title="Deadline (hours)",
                                         description="wall-clock limit (default: none)")
    gpus: Annotated[list[str] | None, Cli(comma=True)] = Field(
        None, description="GPU preset ids to consider, comma-separated on the command line "
                          "(default: every GPU with a list price, or `gpu`)")
    gpu: str | None = Field(None, description="one GPU preset to consider, where `gpus` is not "
                                              "given (the command line's --gpu)")
    max_gpus: int = Field(DEFAULT_MAX_GPUS, title="Maximum GPUs",
                          description="largest count tried, powers of two")
    mfu: float = Field(DEFAULT_MFU, description=MFU_HELP)
    target: float = Field(DEFAULT_TARGET, description="fraction of the GPU's usable memory")
    global_batch: int | None = Field(None, title="Global batch (sequences per step)",
                                     description="sequences per step, the same for every option "
                                     "(default: the scenario's micro-batch × accumulation × dp where it sets one, else "
                                     "about 2M tokens)")
    top: int = Field(10, ge=1, le=10_000, description="options to list (the text; the JSON has "
                     "all)")

    def gpu_ids(self) -> list[str] | None:
        """The GPU types to consider: `gpus`, else `gpu`, else None (every priced one)."""
        return self.gpus or ([self.gpu] if self.gpu else None)


def _run(q: CheapestRequest) -> CheapestResult:
    return cheapest(q.scenario, q.tokens, deadline_hours=q.deadline_hours, gpus=q.gpu_ids(),
                    max_gpus=q.max_gpus, mfu=q.mfu, target=q.target, global_batch=q.global_batch)


def _text(r: CheapestResult, request: CheapestRequest) -> str:
    deadline = "" if r.deadline_hours is None else f" within {r.deadline_hours:g} h"
    lines = [f"{r.tokens:,} tokens{deadline}, cheapest first:"]
    for i, o in enumerate(r.options[: request.top], 1):
        c = o.cost
        extra = f" ({', '.join(o.changes)})" if o.changes else ""
        lines.append(f"{i:>3}. {o.gpus} x {o.gpu}{extra}: ${c.cost_usd:,.0f}, "
                     f"{c.train_seconds / 3600:,.1f} h, {c.gpu_hours:,.0f} GPU-hours, "
                     f"{gib(o.device_bytes)} of {gib(o.usable_bytes)}")
    if not r.options:
        lines.append("  none")
    if r.unpriced:
        lines.append("no list price (by GPU-hours):")
        lines += [f"     {o.gpus} x {o.gpu}: {o.cost.train_seconds / 3600:,.1f} h, "
                  f"{o.cost.gpu_hours:,.0f} GPU-hours" for o in r.unpriced[: request.top]]
    lines += [f"  {gpu}: {why}" for gpu, why in r.rejected.items()]
    lines += [f"  note: {n}" for n in r.notes]
    return "\n".join(lines)


def _page(r: CheapestResult, request: CheapestRequest) -> dict[str, Any]:
    """The page's answer: each option with its `price_source`, without `all_options` (every
    qualifying count: not shown, and the bulk of the JSON)."""
    answer = r.as_dict()
    del answer["all_options"]
    for key in ("options", "unpriced"):
        for shown, option in zip(answer[key], getattr(r, key), strict=True):
            shown["price_source"] = option.cost.price_source
    return answer


OPERATIONS: tuple[Operation[CheapestRequest, CheapestResult], ...] = (
    Operation("cheapest", "cheapest GPU type and count to train N tokens", CheapestRequest,
              run=_run, text=_text, browser=_page),
)

__all__ = ["DEFAULT_MAX_GPUS", "CheapestRequest", "CheapestResult", "Option", "cheapest"]
