"""Model states per GPU: parameters, gradients, optimizer states; ZeRO sharding and offload.

Rajbhandari et al. (2020), "ZeRO: Memory Optimizations Toward Training Trillion Parameter
Models", section 3: with mixed-precision Adam, 2 + 2 + 12 bytes per parameter; stage 1 shards
the 12 (optimizer states, master weights included), stage 2 also the gradients, stage 3 also the
parameters, over the N = dp x cp data-parallel ranks. A shard is a ceiling division:
\\(N_d^{[z\\ge k]}\\) is N when the stage in effect is at least k, else 1.

Frozen weights (LoRA, QLoRA) have no gradients or optimizer states; peft keeps the adapters and
their gradients and states in fp32. ZeRO-Offload keeps the optimizer states and fp32 gradient
partitions in host memory and steps on the CPU; ZeRO-Infinity also the parameter shards.
"""

from __future__ import annotations

import heapq
import re
from dataclasses import dataclass
from functools import lru_cache

from . import coordinator
from .formula import Formula, Part, Term, part_of
from .numerics import Numerics
from .optimizers import BNB_BLOCK, OPTIMIZERS, Optimizer, OptimizerImpl
from .params import adapted, by_parameter
from .placement import LocalParams, Stage, local_params
from .setup import Setup
from .sources import (
    DDP_BUCKETS,
    DTENSOR_EMBEDDING,
    EXPERT_DP,
    EXPERT_UNITS,
    LORA,
    MEGATRON_CODE,
    QLORA,
    TORCH_PIPELINING,
    TORCH_ZERO1,
    TRACED_DEEPSPEED,
    TRACED_FSDP,
    TRACED_OPTIMIZER_STEP,
    ZERO,
    ZERO3_COORDINATOR,
    ZERO_OFFLOAD,
)

WEIGHTS = Formula("parameters/weights", "lambda P, N_3, w: ceil(P / N_3) * w", id="states.weights",
                  title="Weights held by one GPU", source=ZERO)
LORA_BASE = Formula("parameters/base", "lambda P_f, N_3, w: ceil(P_f / N_3) * w",
                    id="states.lora_base", title="The frozen base (LoRA), sharded under ZeRO-3",
                    source=LORA, note="FSDP2 and DeepSpeed ZeRO-3 shard frozen parameters too")
QLORA_PACKED = Formula(
    "parameters/base_nf4", "lambda P_q, N_3: ceil(ceil(P_q / 2) / N_3)", id="states.qlora_nf4",
    title="The frozen linear weights packed two 4-bit values a byte (QLoRA), sharded under "
          "ZeRO-3", source=QLORA)
QLORA_QUANT_STATE = Formula(
    "parameters/nf4_quant_state", "lambda P_q: ceil(P_q / 64) + 4 * ceil(P_q / 16384)",
    id="states.qlora_quant_state", source=QLORA,
    title="NF4 double quantisation's statistics: an 8-bit absmax per 64 weights and an fp32 "
          "one per 256 blocks",
    note="bitsandbytes keeps them as QuantState attributes, not parameters: never sharded")
QLORA_BASE_REST = Formula(
    "parameters/base", "lambda P_f, P_q, N_3, w: ceil((P_f - P_q) / N_3) * w",
    id="states.qlora_rest", source=QLORA,
    title="The other frozen weights (embedding, norms, head) in the stored dtype (QLoRA)")
ADAPTERS = Formula("parameters/adapters", "lambda P_t, N_3, w_a: ceil(P_t / N_3) * w_a",
                   id="states.adapters", source=LORA,
                   title="LoRA adapters, fp32 (peft upcasts them; DeepSpeed's bf16/fp16 mode "
                         "casts them down), sharded under ZeRO-3")
MAIN_GRAD = Formula(
    "gradients/main_grad", "lambda P_t: P_t * 4", id="states.main_grad", source=MEGATRON_CODE,
    title="Megatron-LM's main_grad: an fp32 gradient buffer the size of the model, alive all "
          "step (bf16 training forces fp32 gradient accumulation unless --grad-reduce-in-bf16)")
OFFLOAD_ACCUMULATING = Formula(
    "gradients/offload_accumulating", "lambda G_o, g: G_o * g",
    id="states.offload_accumulating", source=TRACED_DEEPSPEED,
    title="ZeRO-Offload (stages 1-2) under gradient accumulation: through each backward before "
          "the last, the gradients of the partition's tensors larger than the reduce bucket "
          "stay whole in .grad, until that backward's end sends them to the host",
    note="G_o: the tensors rank 0's share touches with more than reduce_bucket_size (h^2) "
         "elements; smaller ones are copied into the bucket (traced: DeepSpeed 0.19.8)")
OFFLOAD_GRAD_BUFFER = Formula(
    "gradients/offload_buffer", "lambda n_max, g: n_max * g", id="states.offload_grad_buffer",
    source=ZERO_OFFLOAD,
    title="ZeRO-Offload (stages 1-2): the gradients go to the host; the GPU keeps one buffer "
          "the size of the largest parameter (temp_grad_buffer_for_gpu_offload), all step")
NO_GRADIENTS = Formula(
    "gradients/weights", "lambda: 0", id="states.no_gradients", source=ZERO_OFFLOAD,
    title="Gradients on the GPU between steps: none (offloaded to the host, where the optimizer "
          "steps)")
GRADIENTS = Formula("gradients/weights", "lambda P_t, N_2, g: ceil(P_t / N_2) * g",
                    id="states.gradients", title="Gradients", source=ZERO)
GRADIENTS_WHOLE_VOCAB = Formula(
    "gradients/weights", "lambda P_t, E_r, g: (P_t + E_r) * g", id="states.gradients_whole_vocab",
    source=DTENSOR_EMBEDDING,
    title="Gradients under torch TP: the vocabulary-parallel embedding's whole on every rank",
    note="DTensor's embedding backward has no row-wise strategy: the Shard(0) weight gets a "
         "Replicate V x h gradient on every tp rank, kept in .grad until the optimizer step "
         "(traced: TP, TP+SP and TP x PP first stages)")
STEP_VOCAB_SHARD = Formula(
    "temporaries/optimizer_step", "lambda S_o, E, t, g: max(S_o, floor(E / t) * g)",
    id="states.step_vocab_shard", source=DTENSOR_EMBEDDING,
    title="The step under torch TP: each op reading the gradients redistributes the "
          "embedding's whole gradient to the weight's rows, a copy of its shard",
    note="S_o: the optimizer's own step temporary, allocated after the ops that read the "
         "gradients have returned (traced: fused AdamW, TP without FSDP)")
STEP_GRADIENTS = Formula(
    "gradients/fp32_for_step", "lambda P_t, N_2, w_m: ceil(P_t / N_2) * w_m",
    id="states.step_gradients", source=ZERO,
    title="fp32 gradients at the optimizer step (beside master weights)",
    note="DeepSpeed's bf16 optimizer and Megatron's main_grad keep them in fp32")
STEP_GRADIENTS_BESIDE = Formula(
    "gradients/fp32_for_step", "lambda P_t, w_m, g: P_t * (w_m + g)",
    id="states.step_gradients_beside", source=TRACED_DEEPSPEED,
    title="DeepSpeed's bf16 or fp16 optimizer without ZeRO at the step: the fp32 gradients it "
          "made beside the 16-bit ones, cleared only after the step",
    note="traced: DeepSpeed 0.19.8's engine at stage 0, bf16 and fp16 weights (-10.0% without "
         "the 16-bit gradients, random runs, both)")
MASTER_WEIGHTS = Formula(
    "optimizer_states/master_weights", "lambda P_t, N_1, w_m: ceil(P_t / N_1) * w_m",
    id="states.master_weights", title="fp32 master weights", source=ZERO)
HOST_GRADIENTS = Formula(
    "host/gradients_fp32", "lambda P_t, N_1: ceil(P_t / N_1) * 4", id="states.host_gradients",
    title="fp32 gradient partitions on the host for the CPU optimizer (ZeRO-Offload)",
    source=ZERO_OFFLOAD)

# ZeRO-Infinity / FSDP2's CPUOffloadPolicy keep the parameter shards in host memory.
HOST_PARAMETERS: dict[Formula, Formula] = {
    f: f.booked(key) for f, key in ((WEIGHTS, "host/parameters"), (LORA_BASE, "host/base"),
                                    (QLORA_PACKED, "host/base_nf4"),
                                    (QLORA_BASE_REST, "host/base"), (ADAPTERS, "host/adapters"))}

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
        "temporaries/optimizer_step", "lambda u_a, n_max, n_prev: (2 + u_a) * n_max * 4 + "
        "n_prev * 4", id="states.step_adafactor", source=TRACED_OPTIMIZER_STEP,
        title="Adafactor's step (transformers'): fp32 temporaries the size of a tensor "
              "(grad ** 2 and its sum with eps), beside the update the step of the tensor "
              "before it left (a Python variable until reassigned)",
        note="two more when low-precision weights and gradients are upcast (u_a = 2); the "
             "tensor and its predecessor in the parameters' order where this is largest "
             "(traced: an 8B-wide 4-layer stack in bf16 and amp)"),
}

# Expert parallelism: the routed experts, already split over ep ranks, are sharded only over the
# expert-data-parallel ranks N_x = N_d / ep (Megatron's expert-data-parallel group, DeepSpeed's
# expert parameter groups, torchtitan's dp_shard x cp / ep); the other parameters over N_d.
# Each sharded formula has an expert form: ceil(P / N) becomes the two shards' sum.
_SHARD = re.compile(r"ceil\((P_t|P) / N_([123])\)")
_EXPERT_PART = {"P": "P_x", "P_t": "P_tx"}
EXPERT_FORMS: dict[Formula, Formula] = {}
"""Each sharded formula's expert form (`sharded`)."""


def _expert_form(f: Formula) -> Formula:
    body = f.expr.partition(":")[2]
    new = [a for m in _SHARD.finditer(body) for a in (_EXPERT_PART[m[1]], f"X_{m[2]}")]
    args = list(f.args) + [a for a in dict.fromkeys(new) if a not in f.args]
    body = _SHARD.sub(lambda m: f"(ceil(({m[1]} - {_EXPERT_PART[m[1]]}) / N_{m[2]}) + "
                                f"ceil({_EXPERT_PART[m[1]]} / X_{m[2]}))", body)
    form = Formula(f.key, f"lambda {', '.join(args)}:{body}", id=f"{f.id}.experts",
                   title=f"{f.title}, the routed experts over the expert-data-parallel ranks",
                   source=EXPERT_DP, unit=f.unit, note=f.note)
    EXPERT_FORMS[f] = form
    return form


for _f in (WEIGHTS, GRADIENTS, STEP_GRADIENTS, MASTER_WEIGHTS, HOST_GRADIENTS, *STATES.values(),
           STEP_TEMPORARIES["state_copy"]):
    _expert_form(_f)
for _moved in (OFFLOADED, HOST_PARAMETERS):
    for _f, _host in list(_moved.items()):
        if _f in EXPERT_FORMS:
            _moved[EXPERT_FORMS[_f]] = _expert_form(_host)

# torch's ZeroRedundancyOptimizer (zero 1 without DeepSpeed) shards whole parameters: the
# heaviest rank's share P_z (`heaviest_share`) replaces ceil(P_t / N_1).
_EVEN = "ceil(P_t / N_1)"
WHOLE_FORMS: dict[Formula, Formula] = {}
"""Each optimizer-sharded formula's whole-parameter form (`_state`, `_step_temporary`)."""


def _whole_form(f: Formula) -> None:
    body = f.expr.partition(":")[2].replace(_EVEN, "P_z")
    args = [a for a in f.args if a != "N_1" and (a != "P_t" or "P_t" in body)]
    args.insert(args.index("P_t") + 1 if "P_t" in args else 0, "P_z")
    WHOLE_FORMS[f] = Formula(f.key, f"lambda {', '.join(args)}:{body}", id=f"{f.id}.whole",
                             title=f"{f.title}, of the rank holding the most whole parameters",
                             source=TORCH_ZERO1, unit=f.unit, note=f.note)


for _f in (*STATES.values(), STEP_TEMPORARIES["state_copy"]):
    _whole_form(_f)


def partition_tensors(ordered: tuple[int, ...], N: int) -> tuple[int, tuple[int, ...]]:
    """Rank 0's share of DeepSpeed's flat parameters (stage_1_and_2.py: the flat padded to a
    multiple of 2N, split in N equal shares): its elements, and the tensors it touches, in the
    model's order."""
    share = -(-sum(ordered) // (2 * N)) * 2
    touched: list[int] = []
    held = 0
    for size in ordered:
        if held >= share:
            break
        touched.append(size)
        held += size
    return share, tuple(touched)


def deepspeed_partition(ordered: tuple[int, ...], N: int) -> tuple[int, int, int, int]:
    """Rank 0's share (`partition_tensors`): (its elements, the elements of the tensors it
    touches, whole; its largest piece; how many tensors it touches)."""
    share, touched = partition_tensors(ordered, N)
    before = largest = 0
    for size in touched:
        largest = max(largest, min(size, share - before))
        before += size
    return share, before, largest, len(touched)


def heaviest_share(tensors: tuple[int, ...], N: int) -> int:
    """The elements of the rank ZeroRedundancyOptimizer gives the most: `tensors` (largest
    first) each to the rank holding the fewest so far (TORCH_ZERO1)."""
    loads = [0] * N
    for size in tensors:
        heapq.heapreplace(loads, loads[0] + size)
    return max(loads)


Experts = tuple[int, int, int, int, int] | None
"""(P_x, P_tx, X_1, X_2, X_3) under expert parallelism, else None."""


def sharded(f: Formula, experts: Experts, *values: int) -> Term:
    """`f` of `values`, in its expert form under expert parallelism."""
    if experts is None:
        return f(*values)
    form = EXPERT_FORMS[f]
    given = dict(zip(("P_x", "P_tx", "X_1", "X_2", "X_3"), experts, strict=True))
    return form(*values, *(given[a] for a in form.args[len(values):]))


GATHERED_LAYER = Formula(
    "temporaries/gathered_params", "lambda P_l, w_g: P_l * w_g", id="states.gathered_layer",
    title="FSDP: one layer's parameters gathered", source=TRACED_FSDP)
GATHERED_LAYER_NF4 = Formula(
    "temporaries/gathered_params", "lambda P_l, L_l, w_g: (P_l - L_l) * w_g + ceil(L_l / 2)",
    id="states.gathered_layer_nf4", source=TRACED_FSDP,
    title="FSDP: one QLoRA layer gathered, its linear weights still packed in 4 bits")
GATHERED_GRADS = Formula(
    "temporaries/gathered_grads", "lambda G_l, P_lt, P_ll, g_u, g_r: G_l + P_lt * g_r + P_ll * g_u",
    id="states.gathered_grads", source=TRACED_FSDP,
    title="FSDP in a layer's backward: the next layer prefetched, the previous layer's "
          "reduce-scatter input and, at the layer's widest moment (its MLP), the unsharded "
          "gradient of its last projection, the first written",
    note="gradients only for trainable parameters (P_lt): a frozen LoRA base has none")
GATHERED_ROOT = Formula(
    "temporaries/gathered_root", "lambda R, w_g: R * w_g", id="states.gathered_root",
    title="FSDP2's root unit (embedding, head), never resharded after forward",
    source=TRACED_FSDP)
ROOT_UNSHARDED_GRADS = Formula(
    "temporaries/root_grads", "lambda R_h, g_u: R_h * g_u", id="states.root_unsharded_grads",
    source=TRACED_FSDP,
    title="FSDP2's root unit in the layers' backward: the head's and the final norm's "
          "unsharded gradients, from their backward until the root's post-backward reduces "
          "them at the end of backward",
    note="R_h: the head and the final norm (tied weights: the shared matrix); traced: "
         "mistral-7b, full checkpointing, FSDP2 x 8 (250 MiB at every layer's backward)")
GATHERED_MODEL = Formula(
    "temporaries/gathered_params", "lambda P, w_g: P * w_g",
    id="states.gathered_model", source=TRACED_FSDP,
    title="FSDP2 with reshard_after_forward=False (ZeRO-2): every layer gathered from its "
          "forward to its own backward, whose post-backward reshards it")
EXPERT_UNITS_GATHERED = Formula(
    "temporaries/gathered_params", "lambda P_l, E_l, w_g: (P_l + E_l) * w_g",
    id="states.expert_units_gathered", source=EXPERT_UNITS,
    title="FSDP2, the experts their own unit: at a MoE layer's expert forward, the layer and its "
          "experts gathered, the experts' all-gather output kept until the next all-gather")
EXPERT_UNIT_GRADS = Formula(
    "temporaries/gathered_grads", "lambda E_l, g_u: E_l * g_u", id="states.expert_unit_grads",
    source=EXPERT_UNITS,
    title="FSDP2, the experts their own unit: in a MoE layer's backward, its experts' unsharded "
          "gradients")
LINGERING_ALL_GATHER = Formula(
    "temporaries/all_gather_buffers", "lambda P_l, w_g: P_l * w_g",
    id="states.lingering_all_gather", source=TRACED_FSDP,
    title="FSDP2 in forward: the last layer's all-gather buffer, freed when backward starts")
LINGERING_ALL_GATHER_NF4 = Formula(
    "temporaries/all_gather_buffers", "lambda P_l, L_l, w_g: (P_l - L_l) * w_g + ceil(L_l / 2)",
    id="states.lingering_all_gather_nf4", source=TRACED_FSDP,
    title="FSDP2 in forward, QLoRA: the last layer's all-gather buffer, its linear weights "
          "packed in 4 bits, freed when backward starts")
GATHERED_MODEL_NF4 = Formula(
    "temporaries/gathered_params", "lambda P, L, w_g: (P - L) * w_g + ceil(L / 2)",
    id="states.gathered_model_nf4", source=TRACED_FSDP,
    title="FSDP2 with reshard_after_forward=False (ZeRO-2), QLoRA: every layer gathered, its "
          "linear weights still packed in 4 bits",
    note="traced: a 4-layer Llama 3.1 70B width, FSDP2 x 4 at stage 2 (+38.9% with every "
         "weight gathered at the compute width, found by random runs)")
UNSHARDED_GRADS = Formula(
    "temporaries/gathered_grads", "lambda P_lt, P_ll, g_u, g_r: P_lt * g_r + P_ll * g_u",
    id="states.unsharded_grads", source=TRACED_FSDP,
    title="FSDP2 in a layer's backward, the layers already gathered: the previous layer's "
          "reduce-scatter input and the unsharded gradient of the layer's last projection")
PIPELINED_GRADS = Formula(
    "temporaries/gathered_grads", "lambda P_t, E_r, g_r: (P_t + E_r) * g_r",
    id="states.pipelined_grads", source=TORCH_PIPELINING,
    title="FSDP2 under pipeline parallelism: every micro-batch's unsharded gradients, "
          "accumulated (in the reduce dtype) until the stage's last backward",
    note="torch.distributed.pipelining turns off gradient sync and resharding after backward "
         "until the last micro-batch (stage.py, perform_reduce_grad); E_r: the embedding's "
         "gradient is whole under torch TP (traced: FSDP2 x TP x PP, first stage)")
PIPELINED_LAYER_GRADS = Formula(
    "temporaries/gathered_grads", "lambda P_ll, g_u: P_ll * g_u",
    id="states.pipelined_layer_grads", source=TORCH_PIPELINING,
    title="FSDP2 under pipeline parallelism, at a layer's backward: the new unsharded gradient "
          "of its last projection (the first it computes), in the parameters' dtype, before "
          "it is added in",
    note="the layer above's were cast into FSDP2's fp32 accumulator after it (traced: amp "
         "FSDP2 x PP, 1F1B and interleaved, first and middle ranks were 1.4-3.6% over with the "
         "whole layer's). In the step's first backward, and under a mixed-precision policy; "
         "otherwise a later micro-batch's are added in place by autograd (traced: DualPipeV, "
         "FSDP2 x PP4, bf16)")
DDP_BUCKET = Formula(
    "gradients/ddp_buckets", "lambda P_t, g_b: P_t * g_b", id="states.ddp_buckets",
    title="DDP's flat buckets: a copy of every gradient", source=DDP_BUCKETS)
DS_GRAD_PARTITION = Formula(
    "gradients/partition", "lambda G_p, g: G_p * g", id="states.deepspeed_grad_partition",
    title="DeepSpeed ZeRO-1/2's gradient partition: every tensor its share of the flat "
          "parameters touches, whole, in the gradients' dtype",
    note="copy_grads_in_partition sizes grads_in_partition by the tensors in the partition, not "
         "by the partition: rank 0's holds the whole embedding where the embedding is wider than "
         "1/N of the parameters. ZeRO-1 keeps every other gradient whole until the end of "
         "backward too",
    source=TRACED_DEEPSPEED)
DS_PARTITION_AGAIN = Formula(
    "gradients/partition", "lambda G_p, g: G_p * g", id="states.deepspeed_partition_again",
    title="DeepSpeed ZeRO-2 accumulating: the gradient partition's buffer (as "
          "`states.deepspeed_grad_partition`) allocated again at a later micro-batch's first "
          "reduce, beside the earlier micro-batches' gradients it copied out "
          "(all_grad_tensors) and released at the end of the previous backward",
    note="stage_1_and_2.py independent_gradient_partition_epilogue, _release_ipg_buffers "
         "(traced: DeepSpeed 0.19.8, a 4-layer 7B width at stage 2 under torch_autocast, "
         "-10.1% without it, random runs)",
    source=TRACED_DEEPSPEED)
DS_FIRST_REDUCE = Formula(
    "gradients/pending", "lambda R_h, P_ll, g: (R_h + P_ll) * g",
    id="states.deepspeed_first_reduce",
    title="DeepSpeed ZeRO-2 at the top layer's backward: the head's gradient, larger than a "
          "reduce bucket and so reduced alone at the next reduce, waiting in .grad beside the "
          "top layer's last projection's, whose arrival triggers that reduce",
    note="R_h: 0 where the head fits a bucket or is tied (its gradient completes at the "
         "embedding). stage_1_and_2.py reduce_independent_p_g_buckets_and_remove_grads "
         "(extra_large_param_to_reduce; traced: DeepSpeed 0.19.8, a 4-layer 7B width at "
         "stage 2 under torch_autocast, 800 MiB of .grad at that reduce)",
    source=TRACED_DEEPSPEED)
DS_STEP = Formula(
    "temporaries/deepspeed_step", "lambda M_p, P_s, w_f, w_k, S_o, B_g: max(8 * M_p, w_f * P_s, "
    "w_k * P_s + S_o - B_g)", id="states.deepspeed_step",
    title="DeepSpeed ZeRO-1/2's step: the gradient norm in fp64, piece by piece; the partition's "
          "gradients flattened and in fp32; those fp32 gradients beside the optimizer's own "
          "temporary, the gradient partition (B_g) released by then",
    note="the flattening copies where the partition spans several tensors; fp32 gradients are "
         "not copied again (traced: torch's foreach Adam, torch_adam, at ZeRO-1 and 2)",
    source=TRACED_DEEPSPEED)
REDUCE_BUCKET = Formula(
    "temporaries/grad_buckets", "lambda B_r, g_b, n_b: n_b * B_r * g_b", id="states.reduce_bucket",
    title="DeepSpeed's reduce buckets: reduce_bucket_size elements (h^2 under HF's 'auto'), one "
          "per communication dtype; in the parameters' dtype at stages 1 and 2, in the "
          "communication dtype at stage 3",
    note="torch_autocast reduces nn.Linear gradients in its dtype and the rest in fp32: two "
         "buckets, or one where every trainable parameter is an nn.Linear's (LoRA's adapters). "
         "stage_1_and_2.py allocates each in its fp32 accumulator's dtype, stage3.py in the "
         "bucket's own (traced: 32 MiB on LoRA at a 4096 width under ZeRO-3, 64 MiB under "
         "ZeRO-2)",
    source=DDP_BUCKETS)
DS_PERSISTENT = Formula(
    "parameters/persistent", "lambda P_p, w: P_p * w", id="states.deepspeed_persistent",
    title="DeepSpeed ZeRO-3's persistent parameters: those of at most "
          "stage3_param_persistence_threshold elements (10 h under HF's 'auto'), never "
          "partitioned", source=ZERO3_COORDINATOR)
DS_Z3_REDUCED = Formula(
    "gradients/weights", "lambda: 0", id="states.deepspeed_z3_reduced", source=TRACED_DEEPSPEED,
    title="Gradients beside the partitions: none kept (DeepSpeed ZeRO-3 reduces each into its "
          "partition as backward writes it; the partitions live all step, with the states)")
DS_GATHERED = Formula(
    "temporaries/gathered_params", "lambda G_z, w: G_z * w", id="states.deepspeed_gathered",
    title="DeepSpeed ZeRO-3's gathered parameters: those of the modules next in the recorded "
          "order, until stage3_max_live_parameters elements are live",
    note="G_z at each moment from calc.coordinator's replay of DeepSpeed's coordinator over "
         "the step's module calls: what it holds gathered or in flight (the running module's, "
         "the top layers' kept for their backward, the prefetched ones, the one crossing the "
         "limit whole), with the experts' weights a grouped GEMM's saved view keeps and a "
         "coalesced prefetch's flat buffer", source=ZERO3_COORDINATOR)
DS_PENDING = Formula(
    "gradients/pending", "lambda W_d, g: W_d * g", id="states.deepspeed_pending",
    title="DeepSpeed ZeRO-3: a gradient larger than the reduce bucket waits whole in .grad "
          "until the next parameter's is ready (the experts' down projections, at their gate/up "
          "weight gradient)", source=TRACED_DEEPSPEED)
DS_Z3_STEP = Formula(
    "temporaries/deepspeed_step",
    "lambda M_p, S_g, w_f, w_k, w_t: max(8 * M_p, (w_f + w_k) * S_g, (max(w_f, w_k) + w_t) * S_g)",
    id="states.deepspeed_z3_step",
    title="DeepSpeed ZeRO-3's step: the gradient norm in fp64, partition by partition; then, "
          "one sub-group at a time, its gradients flattened and cast to fp32, then its Adam "
          "step beside the fp32 gradients",
    note="S_g: the largest sub-group (sub_group_size elements of partitions, 1e9 by default); "
         "w_k is 0 where the gradients are fp32 already; w_t: torch's foreach Adam "
         "(torch_adam) keeps one fp32 temporary the size of the flat partition (sqrt of "
         "exp_avg_sq), DeepSpeed's FusedAdam none (traced: a Qwen2.5-72B-wide 2-layer stack, "
         "ZeRO-3 x 2, foreach)", source=TRACED_DEEPSPEED)


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
    root_grads: Term | None  # FSDP2: and its unsharded gradients, from the head's backward on
    ddp_buckets: Term | None  # DDP (zero 0): flat gradient buckets, alive all step
    reduce_bucket: Term | None  # ZeRO 1-3 without FSDP2: DeepSpeed's reduce bucket
    # The same terms as the parts of the step's moments (`calc.peak`)
    on_device: Part | None  # parameters, optimizer states and DDP's buckets: alive all step
    gathered: Part | None  # FSDP's gathered layer and root unit (ZeRO-2: every layer)
    backward_gathered: Part | None  # and, in a layer's backward, its gathered gradients
    gathered_model: Term | None  # FSDP2 at stage 2: every layer gathered, fwd to its bwd
    lingering: Term | None  # and the last layer's all-gather buffer, alive through forward
    # FSDP2 with the experts their own unit (transformers' plan): a MoE layer's forward gathers
    # both; the root is not kept (the embedding is resharded, the head gathered at the loss)
    expert_units: Term | None = None
    # The widths its gradients are counted at: g (fp32 for LoRA adapters), and E_r, the
    # embedding gradient's elements beyond its tp shard where torch computes it whole
    grad_width: int = 0
    embedding_rows: int = 0
    # DeepSpeed ZeRO-1: its gradient partition, allocated at the end of backward beside every
    # gradient (ZeRO-2 accumulates into it from the start: it is `gradients`)
    partition_copy: Term | None = None
    # and, accumulating, its partition allocated again beside the earlier micro-batches'
    # gradients from a later backward's first reduce on; at stage 2 the gradients waiting at
    # the top layer's first reduce
    partition_again: Term | None = None
    first_reduce: Term | None = None
    # DeepSpeed ZeRO-3: the parameters its coordinator holds gathered, by moment; its
    # gradient partitions and reduce bucket, alive all step (in `on_device`)
    live: coordinator.Live | None = None
    resident: tuple[Term, ...] = ()
    # the gradients live through one backward only (ZeRO-Offload sends them to the host at its
    # end): none of an earlier micro-batch's is left at a later one's start
    per_backward: bool = False


def local(x: Setup, stage: Stage) -> LocalParams:
    """The parameters one GPU of `stage` holds (calc.placement, memoised)."""
    return local_params(x.counts, x.lora, x.lora_rank, x.tp, x.ep, stage, x.lora_targets)


def model_states(x: Setup, stage: Stage) -> ModelStates:
    return _model_states(local(x, stage), x.n, x.lora, x.qlora, x.deepspeed, x.optimizer,
                         x.optimizer_impl, x.N, x.z, x.dp, x.offload_optimizer, x.offload_params,
                         x.zero_sizes, x.megatron, x.ep, x.pp,
                         x.counts.embedding if x.whole_embedding_grad(stage) else 0, x.tp,
                         coordinated(x, stage), x.micro_batches > 1, x.plain_optimizer,
                         0 if x.lora or not stage.head else x.counts.lm_head // x.tp,
                         _bucket_widths(x))


def _bucket_widths(x: Setup) -> tuple[int, ...]:
    """Bytes per element of DeepSpeed ZeRO-3's reduce buckets, one per communication dtype of
    the trainable parameters (stage3.py's ipg_buckets, allocated in that dtype): under
    torch_autocast an nn.Linear's parameters travel in autocast's dtype (peft's lora_A and
    lora_B among them; init_autocast_params marks those exact classes), every other in its own
    (norms, embeddings, stacked experts, and peft's ParamWrapper factors on them); otherwise
    all in the gradients' dtype."""
    n = x.n
    g = n.adapter if x.lora else n.grad
    if not n.autocast:
        return (g,)
    layers = (x.counts.dense_layer, x.counts.moe_layer)
    others = not x.lora or any(by_parameter(lin) and adapted(lin, x.lora_targets)
                               for layer in layers if layer for lin in layer.linears)
    return (n.compute, g) if others and g != n.compute else (n.compute,)


def coordinated(x: Setup, stage: Stage) -> coordinator.Live | None:
    """What DeepSpeed's ZeRO-3 coordinator holds gathered, where calc models it: DeepSpeed's
    own stage 3 over data parallelism alone. On one rank every parameter it gathers is its
    own partition (DeepSpeed's _no_gather_coalesced points the parameter at it): none is held
    apart, at any moment (`coordinator.one_rank`), unless the partition lies on the host
    (offload_params), where that is a copy to the GPU."""
    if not (x.deepspeed and x.z == 3 and x.tp == x.pp == x.ep == 1
            and not x.megatron):
        return None
    if x.N == 1 and not x.offload_params:
        return coordinator.one_rank(stage.layers)
    lora, packed = replayed(x)
    return coordinator.gathered(x.counts, stage, x.checkpointed(stage), lora, x.zero_sizes,
                                packed, replay_widths(x), x.n.autocast, x.chunked_loss)


def replayed(x: Setup) -> tuple[coordinator.Lora | None, int]:
    """What the coordinator's replay takes of the scenario beyond the stage: the adapters
    (rank, targets), and QLoRA's 4-bit weights per element of the dtype they are stored in
    (the compute dtype, as transformers' recipe for ZeRO-3 sets bnb_4bit_quant_storage: bf16
    under torch_autocast too, whose other parameters are fp32)."""
    return (x.lora_rank, x.lora_targets) if x.lora else None, 2 * x.n.compute if x.qlora else 0


def replay_widths(x: Setup) -> coordinator.Widths | None:
    """The replay's tensor widths where they differ: under torch_autocast the parameters are
    fp32, QLoRA's 4-bit weights stored in the compute dtype, and nn.Linear weights all-gathered
    in it (DeepSpeed's get_allgather_dtype) and cast to fp32 at the wait; None where every
    tensor is gathered as stored."""
    n = x.n
    if not n.autocast or n.gathered_weight == n.compute:
        return None
    return coordinator.Widths(n.gathered_weight, n.compute, n.compute)


@lru_cache(maxsize=4096)
def _model_states(local: LocalParams, n: Numerics, lora: bool, qlora: bool,
                  deepspeed: bool, opt: Optimizer, impl: OptimizerImpl, N: int, z: int, dp: int,
                  offload_optimizer: bool, offload_params: bool, sizes: coordinator.Sizes,
                  megatron: bool = False, ep: int = 1, pp: int = 1, whole: int = 0,
                  tp: int = 1, live: coordinator.Live | None = None,
                  accumulating: bool = False, plain_optimizer: bool = False,
                  head: int = 0, buckets: tuple[int, ...] = ()) -> ModelStates:
    """Memoised: a batch or sequence search re-estimates the same states many times.

    Which framework a stage means (`deepspeed`: parallelism.framework, by default DeepSpeed
    with master weights): DeepSpeed's ZeRO (its optimizer keeps an fp32 copy of its
    partition: the master weights, or a clone of fp32 parameters under torch_autocast);
    otherwise torch's forms: DDP (zero 0), DDP with
    ZeroRedundancyOptimizer (zero 1), FSDP2 with reshard_after_forward=False (zero 2,
    Accelerate's SHARD_GRAD_OP) and FSDP2 (zero 3). FSDP2 shards the parameters at stage 2
    too, and keeps every layer gathered from its forward to the end of backward; so does
    FSDP2 at stage 3 under pipeline parallelism (torchtitan). Under expert
    parallelism the routed experts are sharded over N / ep ranks (`sharded`). `whole`: the
    embedding's elements E where its gradient is whole on each of the `tp` ranks
    (`Setup.vocab_grad_split`), else 0. `live`: DeepSpeed's ZeRO-3, whose coordinator holds
    these parameters gathered (`coordinated`). `head`: an untied head's trainable elements on
    the stage (a gradient DeepSpeed may reduce alone, `DS_FIRST_REDUCE`); `buckets`: the
    widths of ZeRO-3's reduce buckets (`_bucket_widths`)."""
    fsdp2 = z >= 2 and not deepspeed
    buffered = N > 1  # FSDP2 gathers through a flat buffer, prefetched (`Setup.fsdp_collectives`)
    N_1, N_2 = (N if z >= k else 1 for k in (1, 2))
    N_3 = N if z == 3 or fsdp2 else 1
    P, P_t = local.total, local.trainable
    ex: Experts = None
    g = n.adapter if lora else n.grad  # adapter gradients: fp32, or DeepSpeed's cast
    g_u, g_r = n.fsdp_grads(g)
    if ep > 1 and local.experts and not lora:  # LoRA with ep: adapters sharded over N (assumed)
        X = N // ep
        X_1, X_2, X_3 = (X if n_k > 1 else 1 for n_k in (N_1, N_2, N_3))
        ex = (local.experts, local.experts_trainable, X_1, X_2, X_3)
    params: list[Term] = []
    host: list[Term] = []
    if lora:
        frozen = P - P_t
        if qlora:
            params += [QLORA_PACKED(local.linear_weights, N_3),
                       QLORA_BASE_REST(frozen, local.linear_weights, N_3, n.weight)]
        else:
            params.append(LORA_BASE(frozen, N_3, n.weight))
        params.append(ADAPTERS(P_t, N_3, n.adapter))
    else:
        params.append(sharded(WEIGHTS, ex, P, N_3, n.weight))
    if offload_params and z == 3:  # FSDP2's CPUOffloadPolicy: every shard on the host
        host += [HOST_PARAMETERS[t.formula](*t.values) for t in params]
        params = []
    if qlora:
        params.append(QLORA_QUANT_STATE(local.linear_weights))
    w_s = 4 if lora else n.state
    E_r = whole - whole // tp
    whole_vocab = E_r > 0 and not fsdp2  # FSDP2 redistributes it to the rows in its reduce
    if whole_vocab:  # torch's DDP/ZeroRedundancyOptimizer: N_2 = 1, experts unsharded too
        gradients = GRADIENTS_WHOLE_VOCAB(P_t, E_r, g)
    else:
        gradients = sharded(GRADIENTS, ex, P_t, N_2, g)

    # torch's zero 1 is ZeroRedundancyOptimizer: whole parameters to each rank
    P_z = heaviest_share(local.tensors, N_1) if z == 1 and N_1 > 1 and not deepspeed \
        and ex is None and not offload_optimizer else None
    states = [_state(s.name, s.kind, local, N_1, w_s, ex, P_z) for s in opt.states]
    if n.master and (not lora or n.adapter < 4):  # (peft's fp32 adapters need none)
        states.append(sharded(MASTER_WEIGHTS, ex, P_t, N_1, n.master))
    offloaded = offload_optimizer and z >= 1
    if offloaded:
        host += [OFFLOADED[t.formula](*t.values) for t in states]
        host.append(sharded(HOST_GRADIENTS, ex, P_t, N_1))
        states = []
        # the gradient partitions go to the host as they are reduced: DeepSpeed's stages 1
        # and 2 keep one largest-parameter gradient buffer on the GPU, ZeRO-3 and FSDP2's
        # CPUOffloadPolicy nothing between steps
        gradients = NO_GRADIENTS()

    step = None if offloaded else _step_temporary(opt, impl, local, N_1, w_s, g, ex, P_z)
    if whole_vocab and not offloaded:
        step = STEP_VOCAB_SHARD(step.bytes if step else 0, whole, tp, g)
    gathered = gathered_grads = root = everything = lingering = accumulated = units = None
    # FSDP2's root unit (the whole model's fully_shard) reduces only in its post-backward, at
    # the end of backward: until then the head's gradients stay unsharded (not under
    # pipelining, which keeps every gradient unsharded, nor under expert units, whose head is
    # a unit of its own, reduced after its backward)
    root_grads = None
    head_grads = ROOT_UNSHARDED_GRADS(local.head_trainable, g_u) \
        if fsdp2 and local.head_trainable and not megatron else None
    w_g = n.gathered_weight
    # (QLoRA's linear weights are gathered as they are stored, packed in 4 bits)
    model = GATHERED_MODEL_NF4(P, local.linear_weights, w_g) if qlora else GATHERED_MODEL(P, w_g)
    if fsdp2 and pp > 1:
        # torchtitan under pipeline parallelism: reshard_after_forward=False, and the schedule
        # keeps every layer gathered and its gradients unsharded until the last micro-batch
        everything = model
        accumulated = PIPELINED_GRADS(P_t, E_r, g_r)
        gathered_grads = PIPELINED_LAYER_GRADS(local.per_layer_last, g_u)
    elif z == 3 and fsdp2 and ex is not None and not megatron:
        gathered = GATHERED_LAYER(local.per_layer, w_g)
        gathered_grads = EXPERT_UNIT_GRADS(local.per_layer_experts, g_u)
        units = EXPERT_UNITS_GATHERED(local.per_layer, local.per_layer_experts, w_g)
    elif z == 3:
        gathered = gathered_layer(local, w_g, qlora)
        gathered_grads = GATHERED_GRADS(gathered.bytes if buffered else 0, local.per_layer_trainable,
                                        local.per_layer_last, g_u, g_r)
        root = GATHERED_ROOT(local.root, w_g)
        root_grads = head_grads
    elif fsdp2:  # every layer stays gathered; one all-gather buffer lingers
        root_grads = head_grads
        everything = model
        lingering = None if not buffered else LINGERING_ALL_GATHER_NF4(
            local.per_layer, local.per_layer_linear, w_g) if qlora else \
            LINGERING_ALL_GATHER(local.per_layer, w_g)
        gathered_grads = UNSHARDED_GRADS(local.per_layer_trainable, local.per_layer_last, g_u,
                                         g_r)
    ddp = reduce = None
    if ((N > 1 and dp > 1) or (deepspeed and z)) and not fsdp2:
        # buckets hold the gradients in their own dtype: fp32 for LoRA adapters
        if z <= 1 and not deepspeed:  # DDP, under ZeroRedundancyOptimizer too
            ddp = DDP_BUCKET(P_t, g)
        elif z:  # torch_autocast: nn.Linear's gradients travel low, the rest in fp32, a
            # bucket each in the parameters' dtype (LoRA's adapters are all nn.Linear)
            reduce = REDUCE_BUCKET(sizes.reduce_bucket, g, 2 if n.autocast and not lora else 1)
    step_grads = sharded(STEP_GRADIENTS, ex, P_t, N_2, n.master) \
        if n.master and not lora and not offloaded else gradients  # (offloaded: none here)
    if plain_optimizer and not lora and ex is None:  # (its step_grads: not a ZeRO partition)
        step_grads = STEP_GRADIENTS_BESIDE(P_t, n.master, g)
    partition_copy = partition_again = first_reduce = None
    if deepspeed and z in (1, 2) and ex is None and not offloaded:
        # DeepSpeed's stage_1_and_2.py (traced): the gradients reduced in backward are copied
        # into the rank's partition buffer, which the step reads (the norm, the fp32 copy)
        share, held, largest, pieces = deepspeed_partition(local.ordered, N)
        partition = DS_GRAD_PARTITION(held, g)
        if z == 2:
            gradients = partition
            partition_again = DS_PARTITION_AGAIN(held, g)
            # (`head`: an untied head's trainable elements on the stage)
            first_reduce = DS_FIRST_REDUCE(head if head > sizes.reduce_bucket else 0,
                                           local.per_layer_last, g)
        else:
            partition_copy = partition
        step_grads = partition
        # the step's copies of the partition's gradients: flattened where it spans several
        # tensors, then in fp32 (the same tensor when they are fp32 already)
        flat = g if pieces > 1 else 0
        fp32 = 4 if g != 4 else 0
        step = DS_STEP(largest, share, flat + fp32, fp32 or flat, step.bytes if step else 0,
                       partition.bytes)
    resident: tuple[Term, ...] = ()
    per_backward = False
    if offloaded and z <= 2:  # allocated with the optimizer (traced: DeepSpeed 0.19.8)
        resident = (OFFLOAD_GRAD_BUFFER(local.largest_tensor, g),)
        if z == 1:  # ZeRO-1 keeps every gradient whole to its last backward, as without offload
            gradients = GRADIENTS(P_t, 1, g)
        elif accumulating:
            big = sum(t for t in partition_tensors(local.ordered, N)[1]
                      if t > sizes.reduce_bucket)
            gradients, per_backward = OFFLOAD_ACCUMULATING(big, g), True
    if live is not None:
        # DeepSpeed's stage3.py (traced): the gradient partitions and the reduce bucket are
        # allocated with the optimizer and live all step; each gradient is reduced into its
        # partition as backward writes it; the step casts one sub-group's gradients at a time
        params.append(DS_PERSISTENT(live.persistent, n.weight))
        reduce, gathered = None, None
        resident = tuple(REDUCE_BUCKET(sizes.reduce_bucket, w, 1) for w in buckets)
        if not offloaded:  # (ZeRO-Offload: the partitions and the step on the host)
            resident = (GRADIENTS(P_t, N, g), *resident)
            gradients = step_grads = DS_Z3_REDUCED()
            step = DS_Z3_STEP(-(-local.largest_tensor // N),
                              coordinator.sub_group(local.ordered, N, sizes.sub_group), g,
                              4 if g != 4 else 0, 4 if impl == "foreach" else 0)
        gathered_grads = root = root_grads = None
    if megatron and n.compute < 4 and not lora and not offloaded:
        # Megatron-LM's DDP accumulates every gradient into one persistent fp32 buffer
        # (main_grad, allocated with the model; the optimizer steps from it), whatever the
        # distributed optimizer shards: the parameters' own .grad stays empty
        params.append(MAIN_GRAD(P_t))
        gradients = step_grads = NO_GRADIENTS()
        ddp = reduce = None
    return ModelStates(local, tuple(params), gradients, tuple(states), tuple(host), step_grads,
                       step, gathered, gathered_grads, root, root_grads, ddp, reduce,
                       part_of(*params, *states, ddp, *resident),
                       part_of(units or gathered, root, everything, accumulated),
                       part_of(gathered, root, everything, accumulated, gathered_grads,
                               root_grads),
                       everything, lingering, units, g, E_r, partition_copy, partition_again,
                       first_reduce, live, resident, per_backward)


def gathered_layer(local: LocalParams, w_g: int, qlora: bool) -> Term:
    """One decoder layer FSDP gathered (QLoRA's linear weights as they are stored, packed in
    4 bits)."""
    if qlora:
        return GATHERED_LAYER_NF4(local.per_layer, local.per_layer_linear, w_g)
    return GATHERED_LAYER(local.per_layer, w_g)


def accumulated(gradients: Term) -> bool:
    """Whether `gradients` are the GPU's own, accumulated in backward (not offloaded to the
    host, not Megatron's main_grad)."""
    return gradients.formula in (GRADIENTS, EXPERT_FORMS[GRADIENTS], GRADIENTS_WHOLE_VOCAB)


def _state(name: str, kind: str, local: LocalParams, N_1: int, w_s: int, ex: Experts,
           P_z: int | None = None) -> Term:
    f = STATES[name]
    if P_z is not None:  # whole parameters (ZeroRedundancyOptimizer)
        whole = WHOLE_FORMS[f]
        if kind == "dense":
            return whole(P_z, w_s)
        if kind == "blockwise_8bit":
            return whole(P_z, BNB_BLOCK)
        return whole(local.factored, local.trainable, P_z)
    if kind == "dense":
        return sharded(f, ex, local.trainable, N_1, w_s)
    if kind == "blockwise_8bit":
        return sharded(f, ex, local.trainable, N_1, BNB_BLOCK)
    return sharded(f, ex, local.factored, local.trainable, N_1)


def _step_temporary(opt: Optimizer, impl: OptimizerImpl, local: LocalParams, N_1: int, w_s: int,
                    g: int, ex: Experts, P_z: int | None = None) -> Term | None:
    """Peak extra memory inside optimizer.step() (torch.optim implementations, traced)."""
    rule = opt.step_rule(impl)
    if rule == "none":
        return None
    f = STEP_TEMPORARIES[rule]
    if rule == "state_copy":
        if P_z is not None:
            return WHOLE_FORMS[f](P_z, w_s)
        return sharded(f, ex, local.trainable, N_1, w_s)
    if rule == "two_largest":
        return f(local.largest_tensor, w_s)
    u_a = 2 if g < 4 else 0
    ordered = local.ordered or (local.largest_tensor,)
    n_max, n_prev = max(zip(ordered, (0, *ordered[:-1]), strict=True),
                        key=lambda pair: (2 + u_a) * pair[0] + pair[1])
    return f(u_a, n_max, n_prev)
