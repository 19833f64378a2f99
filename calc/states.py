"""Model states per GPU: parameters, gradients, optimizer states, with sharding and offload.

Rajbhandari et al. (2020), "ZeRO: Memory Optimizations Toward Training Trillion Parameter
Models", section 3: with mixed-precision Adam, 2 + 2 + 12 bytes per parameter; stage 1 shards
the 12 (optimizer states, master weights included), stage 2 also the gradients, stage 3 also the
parameters, over the N_d data-parallel ranks (here dp x cp).

Splits applied first (Megatron-LM conventions): tensor parallelism divides column- and
row-parallel weights (and vocabulary-parallel embeddings) by tp, norms and routers are
replicated; pipeline parallelism gives each stage its layers, the embedding to the first stage
and the head to the last; expert parallelism divides the routed experts by ep.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from .architecture import Architecture
from .numerics import Numerics
from .params import LayerParams, ParamCounts, count_params
from .scenario import Parallelism, Training


@dataclass(frozen=True, slots=True)
class Stage:
    """Which parts of the model one pipeline stage holds."""

    index: int
    dense_layers: int
    moe_layers: int
    embedding: bool
    head: bool  # final norm + lm_head + loss


def stages(arch: Architecture, p: Parallelism) -> list[Stage]:
    """The first and last pipeline stages (the two that can hold the most), or the only one."""
    return _stages(arch, p.pp)


@lru_cache(maxsize=1024)
def _stages(arch: Architecture, pp: int) -> list[Stage]:
    L = arch.num_hidden_layers
    per = [L // pp + (1 if i < L % pp else 0) for i in range(pp)]
    picks = sorted({0, pp - 1})
    out = []
    for i in picks:
        start = sum(per[:i])
        layers = range(start, start + per[i])
        moe = sum(arch.is_moe_layer(j) for j in layers)
        out.append(Stage(i, per[i] - moe, moe, embedding=i == 0, head=i == pp - 1))
    return out


@dataclass(frozen=True, slots=True)
class LocalParams:
    """Parameter counts on one GPU of a stage, before ZeRO sharding."""

    total: int  # all parameters held (frozen included)
    trainable: int
    largest_tensor: int  # the biggest single trainable tensor (for per-tensor temporaries)
    per_layer: int  # one decoder layer (FSDP gathers one at a time)
    linear_weights: int  # all linear weights (QLoRA quantises these)
    root: int  # embedding + head + final norm (FSDP's root unit)
    factored: int  # Adafactor's second moment: rows + cols per trainable matrix, vectors whole


def local_params(arch: Architecture, t: Training, p: Parallelism, stage: Stage,
                 targets: frozenset[str]) -> LocalParams:
    """Parameters one GPU of `stage` holds. Independent of batch and sequence, so memoised
    (a batch or sequence search re-estimates the same model many times)."""
    return _local_params(arch, t.finetuning, t.lora_rank, p.tp, p.ep, stage, targets)


@lru_cache(maxsize=4096)
def _local_params(arch: Architecture, finetuning: str, lora_rank: int, tp: int, ep: int,
                  stage: Stage, targets: frozenset[str]) -> LocalParams:
    counts: ParamCounts = count_params(arch)
    lora = finetuning in ("lora", "qlora")
    total = trainable = linear_w = adapters = factored = 0
    largest = 0
    per_layer = 0
    for layer, n in ((counts.dense_layer, stage.dense_layers), (counts.moe_layer, stage.moe_layers)):
        if layer is None or n == 0:
            continue
        lt, lw, la, big, fac = _layer_local(layer, lora, lora_rank, tp, ep, targets)
        total += n * lt
        linear_w += n * lw
        adapters += n * la
        factored += n * fac
        largest = max(largest, big)
        per_layer = max(per_layer, lt + la)
    root = 0
    h = arch.hidden_size
    vocab_part = counts.embedding // tp
    vocab_rows = vocab_part // h
    root_matrices = 0
    if stage.embedding:
        root += vocab_part
        root_matrices += 1
    if stage.head:
        root += counts.final_norm
        if counts.lm_head:
            root += counts.lm_head // tp
            root_matrices += 1
        elif not stage.embedding:
            root += vocab_part  # tied weights: the last stage keeps its own copy
            root_matrices += 1
    total += root
    if not lora:
        factored += root_matrices * (vocab_rows + h) + (counts.final_norm if stage.head else 0)
    if lora:
        trainable = adapters
        total += adapters
        largest = max(largest, 0)
    else:
        trainable = total
        largest = max(largest, vocab_part if (stage.embedding or stage.head) else 0)
    return LocalParams(total, trainable, largest, per_layer, linear_w, root, factored)


def _layer_local(layer: LayerParams, lora: bool, rank: int, tp: int, ep: int,
                 targets: frozenset[str]) -> tuple[int, int, int, int, int]:
    """(params, linear weights, LoRA params, largest tensor, Adafactor factors)
    of one decoder layer on one GPU."""
    total = linear = adapters = largest = factored = 0
    for lin in layer.linears:
        w, b = lin.local_counts(tp, ep)
        total += w + b
        linear += w
        copies = lin.copies // (ep if lin.group == "experts" else 1)
        rows, cols = lin.local_shape(tp)
        if lora:
            size = rank * (rows + cols) * copies if lin.name in targets else 0
            adapters += size
            if size:
                largest = max(largest, rank * max(rows, cols))
                factored += copies * (2 * rank + rows + cols)
        else:
            largest = max(largest, rows * cols)
            factored += copies * (rows + cols) + b
    total += layer.norm_count
    if not lora:
        factored += layer.norm_count
    return total, linear, adapters, largest, factored


# ---------------------------------------------------------------------------------------------
# Bytes
# ---------------------------------------------------------------------------------------------

# bitsandbytes 8-bit blockwise optimizers: 1 byte per state element plus one fp32 absmax per
# block of 256 (bnb.optim defaults: block_wise=True); tensors under 4096 elements stay fp32.
BNB_BLOCK = 256
# QLoRA NF4 (Dettmers et al. 2023, section 3): 4-bit weights, blocksize 64, double-quantised
# absmax (8-bit, plus one fp32 per 256 blocks): 0.5 + 1/64 + 4/(64*256) bytes per weight.
NF4_BYTES_PER_WEIGHT = 0.5 + 1 / 64 + 4 / (64 * 256)


@dataclass(frozen=True, slots=True)
class ModelStates:
    """Bytes on one GPU that do not depend on the batch, by path key."""

    parameters: dict[str, int]
    gradients: dict[str, int]
    optimizer_states: dict[str, int]
    host: dict[str, int]  # offloaded to CPU memory
    step_gradients: dict[str, int]  # gradients as the optimizer step sees them
    step_temporary: int  # extra bytes alive inside optimizer.step()
    gathered_layer: int  # FSDP/ZeRO-3: one layer's parameters gathered for compute
    gathered_grads: int  # FSDP/ZeRO-3: one layer's unsharded gradients during backward
    root_gathered: int  # FSDP2: the root unit (embedding, head) stays gathered fwd+bwd
    grad_bucket: int  # DDP / ZeRO reduce buckets


def model_states(local: LocalParams, n: Numerics, t: Training, p: Parallelism,
                 arch: Architecture) -> ModelStates:
    N = p.shard_group
    zero = p.zero if N > 1 else 0
    lora = t.finetuning in ("lora", "qlora")

    def shard(count: int, stage: int) -> int:
        """Per-GPU share of `count` elements at ZeRO `stage` or above (experts over N/ep)."""
        if zero < stage:
            return count
        return -(-count // N)

    params: dict[str, int] = {}
    frozen = local.total - local.trainable
    if lora:
        base_bytes = n.weight if t.mixed_precision == "amp" else n.compute
        if t.finetuning == "qlora":
            nf4 = int(local.linear_weights * NF4_BYTES_PER_WEIGHT)
            params["parameters/base_nf4"] = nf4
            params["parameters/base"] = (frozen - local.linear_weights) * n.compute
        else:
            params["parameters/base"] = frozen * base_bytes
        params["parameters/adapters"] = local.trainable * 4  # peft upcasts adapters to fp32
    else:
        params["parameters/weights"] = shard(local.total, 3) * n.weight
    trainable = local.trainable
    grad_width = 4 if lora else n.grad
    state_width = 4 if lora else n.state
    gradients = {"gradients/weights": shard(trainable, 2) * grad_width}

    states = _optimizer_states(t, shard(trainable, 1), state_width, local)
    if n.master and not lora:
        states["optimizer_states/master_weights"] = shard(trainable, 1) * n.master

    host: dict[str, int] = {}
    if p.offload_optimizer and zero >= 1:
        host.update({k.replace("optimizer_states/", "host/optimizer_states/"): v
                     for k, v in states.items()})
        # ZeRO-Offload keeps fp32 gradient partitions on the host for the CPU optimizer
        host["host/gradients_fp32"] = shard(trainable, 1) * 4
        states = {}
    if p.offload_params and zero == 3:
        host["host/parameters"] = params.pop("parameters/weights", 0)
        params["parameters/weights"] = 0

    # Temporaries inside optimizer.step()
    step_tmp = 0 if p.offload_optimizer and zero >= 1 else _step_temporary(
        t, n, shard(trainable, 1), local.largest_tensor, state_width, grad_width)

    gathered = gathered_grads = root = bucket = 0
    if zero == 3:
        gathered = local.per_layer * n.gathered_weight  # one layer's all-gather output
        # In a layer's backward FSDP2 holds, beside the layer's gathered parameters: the next
        # layer's prefetched all-gather output, the layer's unsharded gradients as they are
        # produced, and the previous layer's reduce-scatter input in the reduce dtype
        # (traced: an 8B-shaped layer stack, pure bf16 and amp, FSDP2 over 8 ranks)
        gathered_grads = local.per_layer * (2 * n.gathered_weight + n.grad)
        root = local.root * n.gathered_weight  # FSDP2 never reshards the root after forward
    fsdp2 = zero == 3 and t.mixed_precision != "master"  # FSDP2 has no separate reduce bucket
    if N > 1 and p.dp > 1 and not fsdp2:
        # DDP's flat buckets copy every gradient (gradient_as_bucket_view=False); DeepSpeed's
        # reduce bucket is reduce_bucket_size elements, h*h under HF's "auto" config.
        bucket = (trainable if zero == 0 else arch.hidden_size**2) * n.grad
    # With master weights the step works on fp32 gradients: DeepSpeed's bf16 optimizer and
    # Megatron's main_grad keep them in fp32; the harness converts each gradient to fp32 and
    # frees the low-precision one, so at the step's peak all gradients are fp32.
    step_grads = gradients
    if n.master and not lora:
        step_grads = {"gradients/fp32_for_step": shard(trainable, 2) * n.master}
    return ModelStates(params, gradients, states, host, step_grads, step_tmp, gathered,
                       gathered_grads, root, bucket)


def _optimizer_states(t: Training, count: int, width: int, local: LocalParams) -> dict[str, int]:
    o = t.optimizer
    if o in ("adamw", "adam"):
        return {"optimizer_states/exp_avg": count * width,
                "optimizer_states/exp_avg_sq": count * width}
    if o == "sgd":
        return {}
    if o in ("sgd_momentum", "lion"):
        return {"optimizer_states/momentum": count * width}
    if o == "adamw_8bit":
        per_state = count + 4 * (-(-count // BNB_BLOCK))
        return {"optimizer_states/exp_avg_8bit": per_state,
                "optimizer_states/exp_avg_sq_8bit": per_state}
    # Adafactor (Shazeer & Stern 2018, section 3): the second moment of an n x m matrix is kept
    # as n + m fp32 factors, of a vector whole; no first moment (transformers' default beta1=None).
    share = count / max(1, local.trainable)  # the ZeRO share of the trainable parameters
    return {"optimizer_states/factored_second_moment": int(4 * local.factored * share)}


def _step_temporary(t: Training, n: Numerics, count: int, largest: int, state_width: int,
                    grad_width: int) -> int:
    """Peak extra memory inside optimizer.step() (torch.optim implementations)."""
    o, impl = t.optimizer, t.optimizer_impl
    if o in ("adamw", "adam"):
        if impl == "foreach":
            return count * state_width  # _foreach_sqrt(exp_avg_sq): a full copy
        if impl == "for_loop":
            return 2 * largest * state_width  # sqrt, then the division
        return 0
    if o == "adafactor":
        upcast = 2 * largest * 4 if state_width == 4 and grad_width < 4 else 0
        return 2 * largest * 4 + upcast
    if o == "lion":
        return 2 * largest * state_width
    return 0
