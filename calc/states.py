"""Model states per GPU: parameters, gradients, optimizer states; ZeRO sharding and offload.

Rajbhandari et al. (2020), "ZeRO: Memory Optimizations Toward Training Trillion Parameter
Models", section 3: with mixed-precision Adam, 2 + 2 + 12 bytes per parameter; stage 1 shards
the 12 (optimizer states, master weights included), stage 2 also the gradients, stage 3 also the
parameters, over the N = dp x cp data-parallel ranks. A shard is a ceiling division:
:math:`N_d^{[z\\ge k]}` is N when the stage in effect is at least k, else 1.

Frozen weights (LoRA, QLoRA) have no gradients or optimizer states; peft keeps the adapters and
their gradients and states in fp32. ZeRO-Offload keeps the optimizer states and fp32 gradient
partitions in host memory and steps on the CPU; ZeRO-Infinity also the parameter shards.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .formula import Formula, Part, Term, part_of
from .numerics import Numerics
from .optimizers import BNB_BLOCK, OPTIMIZERS, Optimizer, OptimizerImpl
from .placement import LocalParams, Stage, local_params
from .setup import Setup
from .sources import (
    DDP_BUCKETS,
    LORA,
    QLORA,
    TRACED_FSDP,
    TRACED_OPTIMIZER_STEP,
    ZERO,
    ZERO_OFFLOAD,
)

# QLoRA NF4 (Dettmers et al. 2023, section 3): 4-bit weights, blocksize 64, double-quantised
# absmax (8-bit, plus one fp32 per 256 blocks): 0.5 + 1/64 + 4/(64*256) bytes per weight.
NF4_BYTES_PER_WEIGHT = 0.5 + 1 / 64 + 4 / (64 * 256)

WEIGHTS = Formula("parameters/weights", "lambda P, N_3, w: ceil(P / N_3) * w", id="states.weights",
                  title="Weights held by one GPU", source=ZERO)
HOST_WEIGHTS = Formula(
    "host/parameters", "lambda P, N_3, w: ceil(P / N_3) * w", id="states.host_weights",
    title="Weight shards offloaded to the host (ZeRO-Infinity)", source=ZERO_OFFLOAD)
HOST_NO_WEIGHTS = Formula(
    "host/parameters", "lambda: 0", id="states.host_no_weights", source=ZERO_OFFLOAD,
    title="Weights offloaded to the host (none: the frozen LoRA base is not offloaded here)")
LORA_BASE = Formula("parameters/base", "lambda P_f, w_b: P_f * w_b", id="states.lora_base",
                    title="The frozen base (LoRA)", source=LORA)
QLORA_BASE_NF4 = Formula(
    "parameters/base_nf4", "lambda P_q, q_4: floor(P_q * q_4)", id="states.qlora_nf4",
    title="The frozen linear weights in NF4 (QLoRA)", source=QLORA)
QLORA_BASE_REST = Formula(
    "parameters/base", "lambda P_f, P_q, c: (P_f - P_q) * c", id="states.qlora_rest",
    title="The other frozen weights (embedding, norms) in the compute dtype (QLoRA)",
    source=QLORA)
ADAPTERS = Formula("parameters/adapters", "lambda P_t: P_t * 4", id="states.adapters",
                   title="LoRA adapters, fp32 (peft upcasts them)", source=LORA)
GRADIENTS = Formula("gradients/weights", "lambda P_t, N_2, g: ceil(P_t / N_2) * g",
                    id="states.gradients", title="Gradients", source=ZERO)
STEP_GRADIENTS = Formula(
    "gradients/fp32_for_step", "lambda P_t, N_2, w_m: ceil(P_t / N_2) * w_m",
    id="states.step_gradients", source=ZERO,
    title="fp32 gradients at the optimizer step (beside master weights)",
    note="DeepSpeed's bf16 optimizer and Megatron's main_grad keep them in fp32")
MASTER_WEIGHTS = Formula(
    "optimizer_states/master_weights", "lambda P_t, N_1, w_m: ceil(P_t / N_1) * w_m",
    id="states.master_weights", title="fp32 master weights", source=ZERO)
HOST_GRADIENTS = Formula(
    "host/gradients_fp32", "lambda P_t, N_1: ceil(P_t / N_1) * 4", id="states.host_gradients",
    title="fp32 gradient partitions on the host for the CPU optimizer (ZeRO-Offload)",
    source=ZERO_OFFLOAD)

_STATE_EXPR = {
    "dense": "lambda P_t, N_1, w_s: ceil(P_t / N_1) * w_s",
    # bitsandbytes: 1 byte per element plus one fp32 absmax per block
    "blockwise_8bit": "lambda P_t, N_1, B_q: ceil(P_t / N_1) + 4 * ceil(ceil(P_t / N_1) / B_q)",
    # Adafactor: rows + cols fp32 factors per matrix, vectors whole; the ZeRO share of them
    "factored": "lambda F, P_t, N_1: floor(4 * F * (ceil(P_t / N_1) / max(1, P_t)))",
}
STATES: dict[str, Formula] = {}  # by state name, from the optimizer table
for optimizer in OPTIMIZERS.values():
    for state in optimizer.states:
        if state.name not in STATES:
            STATES[state.name] = Formula(
                f"optimizer_states/{state.name}", _STATE_EXPR[state.kind],
                id=f"states.{state.name}", title=state.title.capitalize(), source=optimizer.source)
# ZeRO-Offload moves every optimizer state, master weights included, to the host.
OFFLOADED: dict[Formula, Formula] = {
    f: f.booked(f"host/{f.key}") for f in (*STATES.values(), MASTER_WEIGHTS)}

STEP_TEMPORARIES = {
    "state_copy": Formula(
        "temporaries/optimizer_step", "lambda P_t, N_1, w_s: ceil(P_t / N_1) * w_s",
        id="states.step_state_copy", source=TRACED_OPTIMIZER_STEP,
        title="foreach Adam's step: torch._foreach_sqrt copies every second moment"),
    "two_largest": Formula(
        "temporaries/optimizer_step", "lambda n_max, w_s: 2 * n_max * w_s",
        id="states.step_two_largest", source=TRACED_OPTIMIZER_STEP,
        title="The step's two temporaries the size of the largest tensor (for-loop Adam, Lion)"),
    "adafactor": Formula(
        "temporaries/optimizer_step", "lambda u_a, n_max: (2 + u_a) * n_max * 4",
        id="states.step_adafactor", source=TRACED_OPTIMIZER_STEP,
        title="Adafactor's step: fp32 temporaries the size of the largest tensor",
        note="two more when a low-precision gradient is upcast (u_a = 2)"),
}
GATHERED_LAYER = Formula(
    "temporaries/gathered_params", "lambda P_l, w_g: P_l * w_g", id="states.gathered_layer",
    title="FSDP: one layer's parameters gathered", source=TRACED_FSDP)
GATHERED_GRADS = Formula(
    "temporaries/gathered_grads", "lambda P_l, w_g, g: P_l * (2 * w_g + g)",
    id="states.gathered_grads", source=TRACED_FSDP,
    title="FSDP in a layer's backward: the next layer prefetched, the unsharded gradients, "
          "the previous layer's reduce-scatter input")
GATHERED_ROOT = Formula(
    "temporaries/gathered_root", "lambda R, w_g: R * w_g", id="states.gathered_root",
    title="FSDP2's root unit (embedding, head), never resharded after forward",
    source=TRACED_FSDP)
DDP_BUCKET = Formula(
    "gradients/ddp_buckets", "lambda P_t, g_b: P_t * g_b", id="states.ddp_buckets",
    title="DDP's flat buckets: a copy of every gradient", source=DDP_BUCKETS)
REDUCE_BUCKET = Formula(
    "temporaries/grad_buckets", "lambda H, g_b: H**2 * g_b", id="states.reduce_bucket",
    title="DeepSpeed's reduce bucket: reduce_bucket_size = h^2 elements under HF's 'auto'",
    source=DDP_BUCKETS)


@dataclass(frozen=True, slots=True)
class ModelStates:
    """One stage's batch-independent terms on one GPU."""

    local: LocalParams
    parameters: tuple[Term, ...]  # on the GPU
    gradients: Term  # as they accumulate in backward
    optimizer_states: tuple[Term, ...]  # on the GPU (none when offloaded)
    host: tuple[Term, ...]  # offloaded to CPU memory
    step_gradients: Term  # the gradients as the optimizer step sees them
    step_temporary: Term | None  # what optimizer.step() allocates
    gathered_layer: Term | None  # ZeRO-3: one layer's parameters gathered for compute
    gathered_grads: Term | None  # ZeRO-3: in a layer's backward
    gathered_root: Term | None  # FSDP2: the root unit stays gathered
    ddp_buckets: Term | None  # DDP (zero 0): flat gradient buckets, alive all step
    reduce_bucket: Term | None  # ZeRO 1-3 without FSDP2: DeepSpeed's reduce bucket
    # The same terms as the parts of the step's moments (`calc.peak`)
    on_device: Part | None  # parameters, optimizer states and DDP's buckets: alive all step
    gathered: Part | None  # FSDP's gathered layer and root unit
    backward_gathered: Part | None  # and, in a layer's backward, its gathered gradients


def local(x: Setup, stage: Stage) -> LocalParams:
    """The parameters one GPU of `stage` holds (calc.placement, memoised)."""
    return local_params(x.counts, x.lora, x.lora_rank, x.tp, x.ep, stage, x.lora_targets)


def model_states(x: Setup, stage: Stage) -> ModelStates:
    return _model_states(local(x, stage), x.n, x.lora, x.qlora, x.amp, x.master, x.optimizer,
                         x.optimizer_impl, x.N, x.z, x.dp, x.offload_optimizer, x.offload_params,
                         x.H)


@lru_cache(maxsize=4096)
def _model_states(local: LocalParams, n: Numerics, lora: bool, qlora: bool, amp: bool,
                  master: bool, opt: Optimizer, impl: OptimizerImpl, N: int, z: int, dp: int,
                  offload_optimizer: bool, offload_params: bool, H: int) -> ModelStates:
    """Memoised: a batch or sequence search re-estimates the same states many times."""
    N_1, N_2, N_3 = (N if z >= k else 1 for k in (1, 2, 3))
    P, P_t = local.total, local.trainable
    params: list[Term] = []
    host: list[Term] = []
    if lora:
        frozen = P - P_t
        if qlora:
            params += [QLORA_BASE_NF4(local.linear_weights, NF4_BYTES_PER_WEIGHT),
                       QLORA_BASE_REST(frozen, local.linear_weights, n.compute)]
        else:
            params.append(LORA_BASE(frozen, n.weight if amp else n.compute))
        params.append(ADAPTERS(P_t))
    elif not (offload_params and z == 3):
        params.append(WEIGHTS(P, N_3, n.weight))
    g = 4 if lora else n.grad  # adapter gradients and states are fp32
    w_s = 4 if lora else n.state
    gradients = GRADIENTS(P_t, N_2, g)

    states = [_state(s.name, s.kind, local, N_1, w_s) for s in opt.states]
    if n.master and not lora:
        states.append(MASTER_WEIGHTS(P_t, N_1, n.master))
    offloaded = offload_optimizer and z >= 1
    if offloaded:
        host += [OFFLOADED[t.formula](*t.values) for t in states]
        host.append(HOST_GRADIENTS(P_t, N_1))
        states = []
    if offload_params and z == 3:
        host.append(HOST_WEIGHTS(P, N_3, n.weight) if not lora else HOST_NO_WEIGHTS())

    step = None if offloaded else _step_temporary(opt, impl, local, N_1, w_s, g)
    gathered = gathered_grads = root = None
    if z == 3:
        gathered = GATHERED_LAYER(local.per_layer, n.gathered_weight)
        gathered_grads = GATHERED_GRADS(local.per_layer, n.gathered_weight, n.grad)
        root = GATHERED_ROOT(local.root, n.gathered_weight)
    ddp = reduce = None
    fsdp2 = z == 3 and not master  # FSDP2 has no separate reduce bucket
    if N > 1 and dp > 1 and not fsdp2:
        # n.grad, the training dtype's gradient width, even for fp32 LoRA adapters (issue 10)
        if z == 0:
            ddp = DDP_BUCKET(P_t, n.grad)
        else:
            reduce = REDUCE_BUCKET(H, n.grad)
    step_grads = STEP_GRADIENTS(P_t, N_2, n.master) if n.master and not lora else gradients
    return ModelStates(local, tuple(params), gradients, tuple(states), tuple(host), step_grads,
                       step, gathered, gathered_grads, root, ddp, reduce,
                       part_of(*params, *states, ddp), part_of(gathered, root),
                       part_of(gathered, root, gathered_grads))


def _state(name: str, kind: str, local: LocalParams, N_1: int, w_s: int) -> Term:
    f = STATES[name]
    if kind == "dense":
        return f(local.trainable, N_1, w_s)
    if kind == "blockwise_8bit":
        return f(local.trainable, N_1, BNB_BLOCK)
    return f(local.factored, local.trainable, N_1)


def _step_temporary(opt: Optimizer, impl: OptimizerImpl, local: LocalParams, N_1: int, w_s: int,
                    g: int) -> Term | None:
    """Peak extra memory inside optimizer.step() (torch.optim implementations, traced)."""
    rule = opt.step_rule(impl)
    if rule == "none":
        return None
    f = STEP_TEMPORARIES[rule]
    if rule == "state_copy":
        return f(local.trainable, N_1, w_s)
    if rule == "two_largest":
        return f(local.largest_tensor, w_s)
    return f(2 if w_s == 4 and g < 4 else 0, local.largest_tensor)
