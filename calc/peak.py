"""The peak: named moments of the training step, each the sum of named parts.

One step as Hugging Face Trainer runs it, the step `validation/trace.py` traces: for each of the
`gradient_accumulation_steps` micro-batches a forward (the loss computed inside the model), the
outputs dropped, a backward; then `optimizer.step()` and `zero_grad(set_to_none=True)`. Memory
is that of a steady-state step (the second), when the optimizer states already exist and the
gradients start empty. The moments where live memory can be largest (`MOMENTS`) are each
the sum of parts (`PARTS`), every part a list of terms; each phase's peak is its worst
moment and the step's peak the worst of all (the first, on a tie).

With pipeline parallelism every rank whose share differs is evaluated (`calc.placement.stages`)
with what its schedule keeps (`Setup.flight`: 1F1B keeps min(pp - i, m) micro-batches on rank i),
and the largest reported; beside the micro-batches' activations a schedule keeps its receive
buffers, autocast's weight copies (once a step) and, by schedule, other micro-batches' logits
and zero bubble's output gradients (`_schedule_holds`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import NamedTuple

from .activations import (
    ATTENTION_BACKWARD_EAGER,
    ATTENTION_BACKWARD_LAYER,
    FORWARD_TRANSIENT_EAGER,
    HEAD_COPY,
    HEAD_INPUT,
    SELECTIVE_KEPT,
    WEIGHT_COPIES,
    LayerActivations,
    after_attention,
    attention_backward,
    before_attention_core,
    decoder_layer,
    down_adapter_forward,
    embedding_activations,
    expert_width,
    experts_combine,
    final_hidden,
    forward_mask,
    head_activations,
    head_norm_backward,
    head_output_grads,
    held_embedding,
    input_norm_backward,
    layer_input,
    norm_forward,
    norm_width,
    output_grads,
    output_grads_at_softmax,
    received_kept,
    ring_attention_backward,
    weight_groups,
)
from .coordinator import oversized_down
from .formula import Formula, Items, Part, Term, add_up, extended, joined, part, part_of, scaled
from .logits import head_matmul, kept_logits, logits_memory, stage_output
from .megatron import megatron_layer
from .params import LayerParams, Linear, adapted, adapter_shapes
from .placement import (
    Stage,
    layer_gathered,
    layer_trainable,
    linear_spans,
    registered,
    split_layers,
)
from .schedule_order import Mix, chunk_mixes, one_f_one_b_casts
from .setup import Flight, Setup
from .sources import (
    DTENSOR_EMBEDDING,
    EXPERT_UNITS,
    TORCH_PIPELINING,
    TORCH_SCHEDULES,
    TRACED_DEEPSPEED,
    TRACED_FSDP,
    TRACED_PEAK,
)
from .states import (
    DS_GATHERED,
    DS_GRAD_PARTITION,
    DS_PENDING,
    GATHERED_GRADS,
    GATHERED_LAYER,
    GATHERED_LAYER_NF4,
    GATHERED_ROOT,
    UNSHARDED_GRADS,
    ModelStates,
    accumulated,
    gathered_layer,
    model_states,
    partition_tensors,
)

PHASES = ("forward", "backward", "optimizer_step")
COMPONENTS = ("parameters", "gradients", "optimizer_states", "activations", "logits",
              "temporaries")

# What each part of a moment holds: (its LaTeX symbol, what it is).
PARTS: dict[str, tuple[str, str]] = {
    "states": ("S", "parameters and optimizer states on the GPU (and DDP's gradient buckets, "
               "a pipeline stage's receive buffers)"),
    "gradients": ("G", "every gradient"),
    "earlier_gradients": ("G_e", "the gradients accumulated by earlier micro-batches"),
    "gradients_written": ("G_w", "the gradients written before the last layers' backward"),
    "gathered": ("F", "FSDP: the gathered layer and the root unit"),
    "backward_gathered": ("F_b", "FSDP in a layer's backward: gathered layers and gradients"),
    "saved": ("A", "the activations saved by every micro-batch in flight (and what a pipeline "
              "schedule keeps beside them)"),
    "saved_layers": ("A_b", "the activations saved, the head's already freed by its backward"),
    "other_micro_batches": ("A_o", "the saved activations of the other micro-batches in flight "
                            "(and what a pipeline schedule keeps beside them)"),
    "forward_extra": ("A_x", "autocast's weight copies of checkpointed layers; the eager mask; "
                      "the embedding's output the model's forward holds; FSDP2's last "
                      "all-gather buffer at stage 2"),
    "loss": ("Z", "the logits and the loss"),
    "stage_output": ("Z_p", "pipeline parallelism: the last stage's logits, kept by the schedule"),
    "schedule_kept": ("K_p", "pipeline parallelism on the head's stage: the logits the schedule "
                      "holds through the stage's backward, and under autocast the head's "
                      "cached copy's gradient waiting for its end"),
    "layer_forward": ("X_f", "the widest layer's forward transient"),
    "all_gather": ("X_g", "FSDP's all-gather outputs: this layer and the prefetched next (the "
                   "last one's alone in its forward)"),
    "layer_backward": ("X_b", "the widest layer's backward transient"),
    "first_layer": ("A_1", "the first layer's activations, last to be freed (under FSDP's "
                    "prefetch the second layer's, beside what the first keeps)"),
    "bucket": ("B", "the reduce bucket"),
    "embedding_grad": ("X_e", "the gradient reaching the embedding"),
    "root_reduce_scatter": ("X_r", "FSDP's root: unsharded gradients and reduce-scatter input"),
    "root_redistribute": ("X_v", "FSDP2 x torch TP: the embedding's whole gradient, its rows "
                          "copied out, the head's unsharded gradient"),
    "stage_reduce": ("X_u", "FSDP2 under pipelining: the reducing unit's reduce-scatter input "
                     "and output"),
    "head_norm": ("X_n", "the final norm's backward temporaries"),
    "norm_backward": ("X_i", "a split input pass at the first layer's input norm: its fp32 "
                      "backward temporaries and the gradients at its output and in the "
                      "residual stream"),
    "head_grad": ("X_h", "the head's new weight gradient (and its cast to the weight's dtype) "
                  "beside the logits' and the head input's gradients"),
    "copy_grad_cast": ("X_c", "the first cached weight copy's gradient in the weight's dtype"),
    "partition": ("G_p", "DeepSpeed ZeRO-1: the gradient partition buffer"),
    "pending": ("G_q", "DeepSpeed ZeRO-3: a whole gradient waiting for its reduce"),
    "offload_clone": ("X_o", "ZeRO-Offload: a gradient larger than the reduce bucket cloned "
                      "(the embedding's as its hook runs)"),
    "offload_norm": ("X_m", "ZeRO-Offload: the head's gradient and its partition piece in fp64"),
    "offload_layer_norm": ("X_d", "ZeRO-Offload: the top layer's MLP backward, its down and up "
                           "projections' gradients, the down's partition piece in fp64"),
    "embedding_norm": ("X_q", "ZeRO-Offload: the embedding's partition piece in fp64"),
    "offload_reduce": ("X_p", "ZeRO-Offload at stage 3: a reduced gradient partition back on "
                       "the GPU, normed in fp64"),
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
    "forward.head_matmul": MomentKind(
        "DeepSpeed ZeRO-3 under torch_autocast: the head's matmul, its fp32 weight cast beside "
        "the logits it makes", (*_FORWARD, "loss")),
    "forward.last_layer": MomentKind(
        "the forward of the widest layer, every earlier layer's activations saved",
        (*_FORWARD, "layer_forward", "all_gather")),
    "forward.experts_combine": MomentKind(
        "expert parallelism: the last MoE layer's experts' outputs back through the all-to-all, "
        "weighted and summed", (*_FORWARD, "layer_forward")),
    "forward.experts_router": MomentKind(
        "DeepSpeed ZeRO-3: the last MoE layer in forward before its experts (at its router, or "
        "with LoRA on the attention its last adapter), the experts' coalesced prefetch copied "
        "out beside its flat buffer (and then the post-attention norm's forward), or the "
        "experts' own fetch all-gathering beside a flat buffer its waits free",
        (*_FORWARD, "layer_forward")),
    "forward.prefetch_copy": MomentKind(
        "DeepSpeed ZeRO-3: the last layer in forward at its down projection (or its adapter), "
        "where a wait copies a coalesced prefetch (the head's, with the projection's adapter) "
        "out of its flat buffer, the widest member's copy cast to its own width beside its "
        "concatenation in the communication width",
        (*_FORWARD, "layer_forward")),
    "forward.final_norm": MomentKind(
        "DeepSpeed ZeRO-3: the final norm in forward, every layer's activations saved, what "
        "the coordinator holds gathered (the head copied out of a coalesced prefetch in the "
        "last layer, beside its flat buffer until the head's fetch)",
        (*_FORWARD, "layer_forward")),
    "forward.fsdp_start": MomentKind(
        "FSDP2 as the forward starts: the root and the first layer gathered, each beside its "
        "all-gather output", ("states", "earlier_gradients", "gathered", "all_gather")),
    "forward.fsdp_prefetch": MomentKind(
        "FSDP between layers: this layer and the next one gathered", (*_FORWARD, "all_gather")),
    "backward.last_layer": MomentKind(
        "the start of backward through the layers, every activation saved",
        ("states", "earlier_gradients", "backward_gathered", "saved_layers", "layer_backward",
         "bucket", "schedule_kept")),
    "backward.layer_reduce": MomentKind(
        "FSDP: the top layer's post-backward, the layer resharded and the next prefetched, its "
        "unsharded gradients copied into the reduce-scatter input beside the layers below's "
        "activations", ("states", "earlier_gradients", "backward_gathered", "saved_layers",
                        "layer_backward")),
    "backward.offload_norm": MomentKind(
        "ZeRO-Offload as the top layer's backward starts: the head's gradient reduced and its "
        "partition's piece normed in fp64 on the GPU, beside every activation",
        ("states", "earlier_gradients", "saved_layers", "offload_norm", "bucket",
         "schedule_kept")),
    "backward.offload_layer_norm": MomentKind(
        "ZeRO-Offload at stage 2 in the top layer's MLP backward: the down projection's "
        "gradient, larger than the reduce bucket, reduced as the up projection's arrives and "
        "its partition's piece normed in fp64 on the GPU",
        ("states", "earlier_gradients", "saved_layers", "offload_layer_norm", "bucket")),
    "backward.offload_reduce": MomentKind(
        "ZeRO-Offload at stage 3, the top layer's first reduce: the gradients in the bucket and "
        "the next one waiting whole, the reduced partition copied back and normed in fp64, "
        "beside every activation",
        ("states", "earlier_gradients", "backward_gathered", "saved_layers", "pending",
         "offload_reduce", "schedule_kept")),
    "backward.fsdp_prefetch": MomentKind(
        "FSDP as the top layer's backward starts: the next layer's all-gather output beside "
        "its input, the local shard cast to the gathered dtype",
        ("states", "earlier_gradients", "gathered", "saved_layers", "all_gather", "bucket",
         "schedule_kept")),
    "backward.recomputed_layer": MomentKind(
        "checkpointing leaves the top layers out: the highest checkpointed layer recomputes "
        "its activations and runs its backward, the layers above it done",
        ("states", "earlier_gradients", "backward_gathered", "saved_layers",
         "layer_backward", "bucket", "schedule_kept")),
    "backward.first_reduce": MomentKind(
        "FSDP: the first layer's post-backward, every layer above reduced and its shard "
        "written, the first's unsharded gradients copied into the reduce-scatter input",
        ("states", "gradients_written", "gathered", "layer_backward")),
    "backward.first_layer": MomentKind(
        "the backward of the first layer (under FSDP's prefetch the second's, the first "
        "gathered beside it), the gradients almost all written",
        ("states", "gradients_written", "backward_gathered", "other_micro_batches",
         "first_layer", "layer_backward", "bucket")),
    "backward.input_norm": MomentKind(
        "a split backward's input pass at its first layer's input norm, in fp32: every output "
        "gradient of the unit kept for the weight pass, every activation retained",
        ("states", "gradients_written", "backward_gathered", "other_micro_batches",
         "first_layer", "norm_backward", "bucket")),
    "backward.weight_pass": MomentKind(
        "a split backward's weight pass after its input's, over checkpointed layers: each "
        "parameter group recomputes the layers, the output gradients kept for it",
        ("states", "gradients_written", "backward_gathered", "other_micro_batches", "bucket")),
    "backward.first_layer_late": MomentKind(
        "the first layer's backward past its MLP: the MLP's gradients written, its "
        "activations freed, the attention's norm backward",
        ("states", "gradients_written", "backward_gathered", "other_micro_batches",
         "first_layer", "layer_backward", "bucket")),
    "backward.below_top_late": MomentKind(
        "FSDP: the layer below the top past its MLP, every layer below it alive, only the "
        "top's gradients written and its reduce-scatter in flight",
        ("states", "gradients_written", "backward_gathered", "first_layer", "layer_backward")),
    "backward.below_top": MomentKind(
        "FSDP: the layer below the top at its widest backward, every layer below it alive, "
        "the next one prefetched, only the top's gradients written and its reduce-scatter in "
        "flight",
        ("states", "gradients_written", "backward_gathered", "first_layer", "layer_backward")),
    "backward.experts_softmax": MomentKind(
        "the first MoE layer's eager softmax backward: every gradient after its attention "
        "core written, its MLP's activations freed, the layers above it done",
        ("states", "gradients_written", "other_micro_batches", "saved_layers",
         "layer_backward")),
    "backward.experts": MomentKind(
        "the first MoE layer's expert backward: its gate/up weight gradient for every local "
        "expert in one tensor, the layers above it done",
        ("states", "gradients_written", "other_micro_batches", "first_layer", "layer_backward")),
    "backward.experts_offload": MomentKind(
        "ZeRO-Offload at stage 2: an MoE layer's expert backward, its gate/up weight gradient "
        "cloned as its hook runs, or, where rank 0's share holds its experts, their pieces "
        "normed in fp64 as they are reduced; every layer below it alive",
        ("states", "first_layer", "layer_backward", "bucket")),
    "backward.experts_fsdp": MomentKind(
        "FSDP: an MoE layer's expert backward, its gate/up weight gradient for every local "
        "expert in one tensor, unsharded, beside the gathered layers and a reduce-scatter",
        ("states", "gradients_written", "backward_gathered", "first_layer", "layer_backward")),
    "backward.experts_partitioned": MomentKind(
        "DeepSpeed ZeRO-3: an MoE layer's expert backward (the heaviest), every layer below "
        "it alive (with, where they ran unchecked, their experts' gathered weights), the down "
        "projections' whole gradient waiting for its reduce (under ZeRO-Offload, both "
        "gradients, one partition's reduce)",
        ("states", "backward_gathered", "other_micro_batches", "pending", "saved_layers",
         "layer_backward")),
    "backward.experts_combine": MomentKind(
        "the first MoE layer's backward as it starts, through its experts' weighted sum: the "
        "layers above it done, its own gradients not yet written, all its activations alive",
        ("states", "gradients_written", "other_micro_batches", "first_layer", "layer_backward")),
    "backward.experts_accumulating": MomentKind(
        "a later micro-batch: the last MoE layer's expert backward, its new gate/up weight "
        "gradient for every local expert beside the gradients earlier backwards wrote, every "
        "layer below it alive",
        ("states", "earlier_gradients", "other_micro_batches", "saved_layers",
         "layer_backward", "schedule_kept")),
    "backward.experts_reduce": MomentKind(
        "FSDP2 with the experts their own unit: the first MoE layer's experts reduce their "
        "gradients, the layers above done",
        ("states", "gradients_written", "backward_gathered", "other_micro_batches",
         "first_layer", "layer_backward")),
    "backward.fsdp_root_redistribute": MomentKind(
        "the end of backward with FSDP2 x torch TP: the root's post-backward redistributes the "
        "embedding's whole gradient to its rows, the root still gathered",
        ("states", "gradients", "gathered", "other_micro_batches", "root_redistribute")),
    "backward.fsdp_root": MomentKind(
        "the end of backward with FSDP: the root unit's post-backward",
        ("states", "gradients", "other_micro_batches", "embedding_grad", "root_reduce_scatter")),
    "backward.embedding": MomentKind(
        "the end of backward: the gradient reaching the embedding",
        ("states", "gradients", "gathered", "other_micro_batches", "embedding_grad", "bucket",
         "offload_clone")),
    "backward.offload_embedding_norm": MomentKind(
        "ZeRO-Offload at stages 1-2, the end of the step's last backward: every gradient whole "
        "(at stage 2 the embedding's), rank 0's piece of the embedding's normed in fp64 (at "
        "stage 1 the widest piece of its share, the gradients before it gone to the host)",
        ("states", "gradients", "other_micro_batches", "bucket", "embedding_norm")),
    "backward.offload_clone": MomentKind(
        "ZeRO-Offload at stage 1, the reduce after the step's last backward: the widest "
        "gradient larger than the reduce bucket (the untied embedding's, the first) cloned "
        "beside every gradient not yet gone to the host",
        ("states", "gradients", "other_micro_batches", "bucket", "offload_clone")),
    "backward.deepspeed_partition": MomentKind(
        "DeepSpeed ZeRO-1, the end of backward: its gradient partition allocated beside every "
        "gradient", ("states", "gradients", "bucket", "partition")),
    "backward.fsdp_stage_reduce": MomentKind(
        "pipelining with FSDP2: after the stage's last backward its units reduce their "
        "accumulated gradients one after another, the root first (the heavier of the root's "
        "and the first layer's)",
        ("states", "gradients", "gathered", "stage_reduce")),
    "backward.weight_copies": MomentKind(
        "pipelined autocast: past the stage's first op, the cached weight copies' gradients "
        "run last, the first converted to the weight's dtype",
        ("states", "gradients", "gathered", "other_micro_batches", "copy_grad_cast",
         "bucket")),
    "backward.loss_grad": MomentKind(
        "the start of backward: the loss gradients at full width",
        ("states", "earlier_gradients", "gathered", "saved", "loss", "stage_output")),
    "backward.head_matmul": MomentKind(
        "DeepSpeed ZeRO-3 under torch_autocast: the head's input gradient, its fp32 weight cast "
        "for the matmul beside the logits' gradient", ("states", "earlier_gradients", "gathered",
                                                       "saved", "loss", "stage_output")),
    "backward.head_weight": MomentKind(
        "a later micro-batch: the head's new weight gradient, before it is added in place to "
        "the one in .grad", ("states", "earlier_gradients", "gathered", "saved", "head_grad",
                             "stage_output")),
    "backward.head_norm": MomentKind(
        "the start of backward: the final norm's backward, every activation saved",
        ("states", "earlier_gradients", "gathered", "saved", "head_norm", "schedule_kept")),
    "optimizer_step": MomentKind(
        "inside optimizer.step(): states, gradients, the step's temporaries",
        ("states", "step_gradients", "bucket", "step_temporary")),
}

LAYER_FORWARD_RECOMPUTE = Formula(
    "temporaries/layer_forward", "lambda X_l, A_l, x_c: X_l + A_l - x_c",
    id="peak.layer_forward_recompute", source=TRACED_PEAK,
    title="A checkpointed layer's forward where `act.checkpointed_mlp` does not describe it "
          "(per-op selective checkpointing, MoE and non-gated layers, sequence parallelism): "
          "its transient beside the activations it would save, a bound (a fully checkpointed "
          "layer keeps none of them)",
    note="x_c: the checkpoint's own input, already counted, when a norm keeps the residual")
LAYER_BACKWARD = Formula(
    "temporaries/layer_backward",
    "lambda X_l, g_i, D_l, W_n: X_l - g_i - D_l + max(0, W_n - D_l)", id="peak.layer_backward",
    source=TRACED_PEAK,
    title="A layer's backward at the wider of two moments: its gating product's backward (its "
          "transient, less the last projection's input, which that projection's backward freed) "
          "and the last projection's own backward (its input alive, its input's gradient, of "
          "the same size, and its new weight gradient before it is added in place); the "
          "incoming gradient not counted where it arrives in a pipeline stage's receive buffer",
    note="D_l: a gated MLP's down_proj input when it trains; W_n: its new weight gradient where "
         "an earlier micro-batch's is accumulated in place in the same dtype (traced op by op: "
         "GPipe, a middle rank; DualPipeV FSDP2 bf16, the last rank); g_i: the gradient a "
         "stage that sends its output receives (traced: 1F1B and GPipe, the first stage)")
LAYER_BACKWARD_RECOMPUTE = Formula(
    "temporaries/layer_backward",
    "lambda X_l, X_f, g_i, A_l, x_c, D_l, W_n: max(X_l - D_l + max(0, W_n - D_l), X_f + g_i) + "
    "A_l - x_c", id="peak.layer_backward_recompute", source=TRACED_PEAK,
    title="A checkpointed layer's backward: its recomputed activations and the wider of its "
          "backward transient and its recomputed forward's, beside the incoming gradient",
    note="D_l, W_n: the backward's two moments (LAYER_BACKWARD); where the stage sends its "
         "output, X_l and g_i without the incoming gradient, which arrives in a receive "
         "buffer; g_i with what the layer's backward computes before its recomputation "
         "(QLoRA's frozen down projection under per-op selective checkpointing: its input's "
         "gradient, bitsandbytes' weight being no saved tensor to unpack)")
SOFTMAX_BACKWARD_RECOMPUTE = Formula(
    "temporaries/layer_backward",
    "lambda X_l, D_l, W_n, A_l, x_c: X_l - D_l + max(0, W_n - D_l) + A_l - x_c",
    id="peak.softmax_backward_recompute", source=TRACED_PEAK,
    title="A checkpointed layer's eager softmax backward: its recomputed activations, less what "
          "its MLP's backward freed by then (X_l: the softmax's moment, net of those); the "
          "recomputed forward's moment, earlier, holds none of the layer's unsharded gradients",
    note="D_l, W_n as in LAYER_BACKWARD_RECOMPUTE (traced: random run 762/3, FSDP2 x CP2 "
         "eager over four checkpointed layers, +2.78% beside the forward's moment)")
ROOT_ALL_GATHER = Formula(
    "temporaries/all_gather_buffers", "lambda R, w_g, G_l: R * w_g + G_l",
    id="peak.root_all_gather", source=TRACED_FSDP,
    title="FSDP2 as the forward starts: the root's all-gather output, held until the next "
          "all-gather is copied out, and the first layer's, beside both gathered",
    note="traced: a 2-layer Qwen3-32B width under FSDP2 x CP2, the step's peak (-4.1% without "
         "it) where the sharded states are small beside the root (embedding and head)")
PREFETCH_CAST = Formula(
    "temporaries/all_gather_buffers", "lambda G_l, N: G_l + ceil(G_l / N)",
    id="peak.prefetch_cast", source=TRACED_FSDP,
    title="FSDP2 as the top layer's backward starts, its parameters stored wider than it "
          "gathers them (fp32 under a bf16 policy): the next layer's all-gather output beside "
          "its input, the local shard cast to the gathered dtype",
    note="traced: Mixtral's width with LoRA under amp on two ranks, the step's peak (-1.9% "
         "without the cast)")
LAST_ALL_GATHER = Formula(
    "temporaries/all_gather_buffers", "lambda G_l: G_l", id="peak.last_all_gather",
    source=TRACED_FSDP,
    title="FSDP2 in the last layer's forward: its all-gather output beside its parameters, held "
          "until the backward's first all-gather",
    note="traced: DeepSeek-V3's width, LoRA, FSDP2 x 4 (the forward's peak, at the routing)")
ALL_GATHER = Formula("temporaries/all_gather_buffers", "lambda G_r, G_l: G_r + G_l",
                     id="peak.all_gather", source=TRACED_FSDP,
                     title="FSDP2's all-gather outputs: the running layer's (G_r) and the next "
                           "one's (G_l)")
FIRST_LAYER = Formula("activations/last_layer", "lambda A_l: A_l", id="peak.first_layer",
                      title="The first layer's saved activations, freed last", source=TRACED_PEAK,
                      note="on a pipeline stage that receives its input, all but that input: "
                           "the receive buffer")
FIRST_LAYER_LATE = Formula(
    "activations/last_layer", "lambda x_l, A_l, A_m, x_c: x_l + A_l - A_m - x_c",
    id="peak.first_layer_late", source=TRACED_PEAK,
    title="The first layer's activations past its MLP's backward: all but the MLP's (A_m); "
          "at eager attention's softmax, later, all but what the layer's backward freed by "
          "then (as in act.attention_backward_layer)",
    note="checkpointed: its kept input and its recomputed activations (x_c: what both count, "
         "under per-op selective checkpointing all it kept: its recomputation takes each "
         "kept output back and frees it once used); else x_l = x_c = 0; on a pipeline stage "
         "that receives its input, that input is the receive buffer, counted there")
LATE_TRANSIENT = Formula(
    "temporaries/layer_backward", "lambda T, h, r, c: T * h * 16 + T * h * max(r, c)",
    id="peak.late_transient", source=TRACED_PEAK,
    title="A layer's backward past its MLP: the norm's four T h fp32 temporaries beside the "
          "incoming gradient")
INPUT_NORM_TRANSIENT = Formula(
    "temporaries/layer_backward", "lambda T, h, r, c: T * h * 16 + T * h * max(r, c)",
    id="peak.input_norm_transient", source=TRACED_FSDP,
    title="A layer's backward at its input norm, past its attention's: the norm's four T h "
          "fp32 temporaries beside the incoming gradient, every gradient of the layer computed "
          "(under FSDP unsharded), every activation of it but the norm's freed",
    note="traced: a Mistral width at 512 tokens under FSDP2 x 2, the second layer's input "
         "norm 54 MiB over its post-attention norm's moment (its attention's weight "
         "gradients outweigh what its attention saved)")
# (one term, not the saved activations less a negative one: no category of a report's
# breakdown goes below zero)
SAVED_BELOW = Formula(
    "activations/last_layer", "lambda A_s, A_a: A_s - A_a", id="peak.saved_below",
    source=TRACED_PEAK,
    title="The activations saved below the layers whose backward has run: all but theirs "
          "(A_a), freed by it",
    note="the top layer's at its post-backward under FSDP; under checkpointing that leaves "
         "the top layers out, those above the highest checkpointed one as it recomputes")
LAYER_REDUCE = Formula(
    "temporaries/layer_backward",
    "lambda P_lt, g_u, g_r, N, g_s, g_n, G_l: P_lt * g_r + max(P_lt * g_u, "
    "ceil(P_lt / N) * (g_r + g_s), ceil(P_lt / N) * g_n + G_l)",
    id="peak.layer_reduce", source=TRACED_FSDP,
    title="FSDP's post-backward of the top layer: the reduce-scatter input beside the "
          "unsharded gradients copied into it; or, once they are released, beside the output "
          "shard (and its cast to the gradients' dtype, g_s, where the reduce runs wider: "
          "bf16 parameters); or, the reduce in flight, beside the written shard (g_n: its "
          "width, 0 accumulating into an earlier one) and the next layer's all-gather output "
          "as it is copied out",
    note="traced: a 2-layer 405B-wide model under FSDP2 x TP2 + SP (at the copy), under "
         "FSDP2 x 2 in bf16 (at the cast, -3.3% without it) and x 4 (at the next layer's "
         "copy-out, -2.9%), each the step's peak")
TOP_GATHERED_GRADS = Formula(
    "temporaries/gathered_grads",
    "lambda G_l, P_lt, P_ll, g_u, g_r, u_r, A_t: G_l + P_ll * g_u + u_r * max(0, P_lt * g_r - A_t)",
    id="peak.top_gathered_grads", source=TRACED_FSDP,
    title="FSDP at the top layer's backward: the next layer prefetched and its last "
          "projection's unsharded gradient; no reduce-scatter in flight above it, but the "
          "top's own in the layer below (u_r = 1 where that layer is not the first), where "
          "the top's activations (A_t) are freed: the wider of the two moments",
    note="traced: a 2-layer 405B-wide model under FSDP2 x TP2 + SP, accumulating (+5.6% with "
         "a reduce-scatter input counted above the top layer)")
TOP_UNSHARDED_GRADS = Formula(
    "temporaries/gathered_grads",
    "lambda P_ll, g_u, u_r, P_lt, g_r, g_n, N, A_t, G_l: "
    "P_ll * g_u + u_r * max(0, P_lt * g_r + ceil(P_lt / N) * g_n - A_t - G_l)",
    id="peak.top_unsharded_grads", source=TRACED_FSDP,
    title="FSDP2 at stage 2 at the top layer's backward: every layer gathered and its last "
          "projection's unsharded gradient, no reduce-scatter in flight above it; in the layer "
          "below (u_r = 1 where that is not the first) the top's reduce-scatter input and its "
          "written shard (g_n: its width, 0 accumulating into an earlier one), where the top's "
          "activations (A_t) are freed and its parameters (G_l) resharded: the wider of the two",
    note="traced: LoRA and full training on an 8B width under FSDP2 x 4 at stage 2, random runs "
         "(+5.9 .. +10.5% with the top's reduce-scatter input counted at its own backward)")
LATE_GATHERED = Formula(
    "temporaries/gathered_grads", "lambda G_l, P_lt, P_lm, g_u, g_r: G_l + P_lt * g_r + P_lm * g_u",
    id="peak.late_gathered", source=TRACED_FSDP,
    title="FSDP in a layer's backward past its MLP: the next layer prefetched, the previous "
          "layer's reduce-scatter input, the MLP's unsharded gradients")
EXPERTS_ALIVE = Formula(
    "activations/last_layer", "lambda A_d, A_l, A_m, t_m, H, x_e: A_d + A_l - A_m + t_m * H * x_e",
    id="peak.experts_alive", source=TRACED_PEAK,
    title="At an MoE layer's expert backward: the layers below it, its own activations but "
          "the MLP's (A_m: not a shared expert computed before the routed ones, Qwen2-MoE's, "
          "whose backward comes after), and the gathered rows the gate/up weight gradient reads")
MOE_LATE_ALIVE = Formula(
    "activations/last_layer", "lambda A_d, A_l, A_m: A_d + A_l - A_m", id="peak.moe_late_alive",
    source=TRACED_PEAK,
    title="Past an MoE layer's expert backward, at its attention's: the layers below it and "
          "its own activations but the MLP's")
OFFLOAD_REDUCE = Formula(
    "temporaries/offload_reduce",
    "lambda M_p, g, g_a: M_p * (g + g_a) + 8 * min(M_p, 250000000)",
    id="peak.offload_reduce", source=TRACED_DEEPSPEED,
    title="ZeRO-Offload at stage 3: a reduced gradient partition copied back to the GPU and its "
          "norm taken in fp64, 250M elements at a time (stage3.py _constant_buffered_norm2); "
          "where the bucket travelled in autocast's dtype, beside the reduced partition cast to "
          "the fp32 accumulation dtype (g_a = 4, __avg_scatter_grads)",
    note="traced: a random run on one rank under amp, -2.2% without the cast")
OFFLOAD_AT_REDUCE = Formula(
    "temporaries/layer_backward",
    "lambda A_r, u, T, f, c, h, z, r: A_r + u * (T * h * (z + r) - 2 * T * f * c)",
    id="peak.offload_at_reduce", source=TRACED_DEEPSPEED,
    title="The top layer where ZeRO-Offload at stage 3 reduces in its MLP's backward: its "
          "recomputed activations where it is checkpointed (A_r, else 0: among the saved "
          "ones); at the up projection's weight gradient (u = 1) the down projection's input "
          "and the gating product's two saved factors freed, the activated gate's gradient "
          "waiting, beside the up projection's input gradient (z: the norm's output width) and "
          "the layer's incoming gradient (r)",
    note="traced: a random run on one rank under amp (+0.57% with the layer's activations "
         "whole at the up projection); the traced cases under master weights read +0.21 .. "
         "+1.81% so; checkpointed over four ranks, -4.1% without the recomputed layer")
OFFLOAD_HEAD_NORM = Formula(
    "temporaries/offload_reduce", "lambda R_h, P_ll, g, M_h: (R_h + P_ll) * g + 8 * M_h",
    id="peak.offload_head_norm", source=TRACED_DEEPSPEED,
    title="ZeRO-Offload at stages 1-2, the head's gradient in the rank's partition: reduced "
          "first, beside every activation, when the top layer's last projection's gradient "
          "overflows the bucket; its piece (M_h) normed in fp64 on the GPU before it goes to "
          "the host (stage_1_and_2.py set_norm_for_param_grad_in_gpu)",
    note="M_h: the head's elements in rank 0's share of the flat parameters, the whole head on "
         "one rank; traced: an 8B-wide stack on one GPU under amp, the step's peak (-11.5% "
         "without it)")
OFFLOAD_LAYER_NORM = Formula(
    "temporaries/offload_reduce",
    "lambda A_r, T, f, h, c, g_i, P_ll, P_u, c_w, g, M_d: A_r - 2 * T * f * c + T * h * c + g_i "
    "- (P_ll + P_u) * c_w + (P_ll + P_u) * g + 8 * M_d", id="peak.offload_layer_norm",
    source=TRACED_DEEPSPEED,
    title="ZeRO-Offload at stage 2, the top layer's down projection's gradient (P_ll elements, "
          "more than the reduce bucket: it waits in its own tensor) reduced as the up "
          "projection's (P_u) arrives: its piece (M_d) normed in fp64 on the GPU beside both "
          "gradients and what the MLP's backward holds then: the layer's activations (A_r, "
          "recomputed where it is checkpointed, else among the saved ones) less the gating "
          "product and its two inputs and, under autocast, the two projections' weight copies "
          "(c_w wide), freed; plus the activated gate's gradient (T f), the up projection's "
          "input gradient (T h) and the incoming gradient (g_i)",
    note="M_d: the down projection's elements in rank 0's share of the flat parameters, all of "
         "them on one rank; every later projection over the bucket is normed so too, with "
         "fewer activations alive; traced: a 4-layer Mistral with a 1K vocabulary on one rank, "
         "checkpointed, the step's peak (-16.2% without it); under autocast, Qwen3 8B's width "
         "(+4.0% without the copies freed)")
OFFLOAD_EMBEDDING_NORM = Formula(
    "temporaries/offload_reduce", "lambda E_p, G_b, g: 8 * E_p - G_b * g",
    id="peak.offload_embedding_norm", source=TRACED_DEEPSPEED,
    title="ZeRO-Offload at stages 1-2 at the end of the step's last backward: every gradient "
          "whole (at stage 2 the embedding's alone), a tensor's replaced by its clone, and its "
          "piece of rank 0's share (E_p) normed in fp64 on the GPU as its reduce runs "
          "(stage_1_and_2.py set_norm_for_param_grad_in_gpu); at stage 1, which norms the "
          "share's tensors in order, the widest piece net of the gradients of those before it "
          "(G_b elements), gone to the host; under torch_autocast the embedding's, reduced in "
          "fp32 in a bucket of its own, waits for the first layer's first fp32 parameter: net "
          "of that layer's leading projections (the last, larger than the bucket, a clone)",
    note="traced: an 8B-wide stack under ZeRO-1 with master weights on two ranks and under amp "
         "on one, the step's peak (-24% and -3.4% without it), the untied embedding first and "
         "the widest; a Qwen2.5 7B width with a 1K vocabulary, its first MLP weight; under amp "
         "the order read off Mistral's and Qwen2.5's widths (+5.2%, +3.0% with every gradient "
         "beside it), held out on Llama's over two ranks, Qwen3's and Phi-3's (+3.0, +0.7, "
         "+2.1% -> 0.0%)")
OFFLOAD_CLONE = Formula(
    "temporaries/offload_clone", "lambda E, g: E * g", id="peak.offload_clone",
    source=TRACED_DEEPSPEED,
    title="ZeRO-Offload: a gradient larger than the reduce bucket cloned into storage of its "
          "own as its hook runs, beside the original (the embedding's: the last of the "
          "backward at stage 2, the first reduced after it at stage 1)")
OFFLOAD_REDUCE_CLONE = Formula(
    "temporaries/offload_clone", "lambda E, G_b, g: (E - G_b) * g", id="peak.offload_reduce_clone",
    source=TRACED_DEEPSPEED,
    title="ZeRO-Offload at stage 1, the reduce after the step's last backward: a gradient larger "
          "than the reduce bucket (E elements) cloned into storage of its own beside every "
          "gradient, less those already sent to the host (G_b elements); the widest such",
    note="traced: Mistral's width on one GPU under amp, the untied embedding's clone the step's "
         "peak (+5.2% counting its fp64 norm beside every gradient instead)")
LAYER_OUTPUT = Formula(
    "activations/residual", "lambda T, h, r: T * h * r", id="peak.layer_output",
    source=TRACED_DEEPSPEED,
    title="The last layer's output while the final norm runs, which keeps an fp32 copy of it, "
          "not it")
ROUTER_ALIVE = Formula(
    "activations/last_layer", "lambda A_d, A_l, A_m: A_d + A_l - A_m", id="peak.router_alive",
    source=TRACED_DEEPSPEED,
    title="Before an MoE layer's experts in forward: the layers below it and its own "
          "activations but the MLP's")
EXPERTS_COMBINE_ALIVE = Formula(
    "activations/last_layer", "lambda A_d, A_l: A_d + A_l", id="peak.experts_combine_alive",
    source=TRACED_PEAK,
    title="As an MoE layer's backward starts: the layers below it and all its own activations")
EXPERTS_BACKWARD = Formula(
    "temporaries/layer_backward", "lambda P_xg, g, t_m, f, H, x_e: P_xg * g + t_m * (2 * f + H) * x_e",
    id="peak.experts_backward", source=TRACED_PEAK,
    title="transformers' grouped_mm backward: the gate/up weight gradient of every local expert "
          "in one tensor, beside the GEMM's output gradient and its input gradient")
EXPERTS_OFFLOAD_CLONE = Formula(
    "temporaries/offload_clone", "lambda P_xg, g, t_m, H, x_e: 2 * P_xg * g + t_m * H * x_e",
    id="peak.experts_offload_clone", source=TRACED_DEEPSPEED,
    title="ZeRO-Offload at stage 2, an MoE layer's expert backward: the gate/up weight gradient "
          "of every local expert in one tensor, over the reduce bucket, cloned into storage of "
          "its own as its hook runs, beside the original and the GEMM's input gradient (its "
          "output gradient and the rows it read freed)",
    note="traced: a 3-layer DeepSeek-V3 with 32 experts over four ranks, the step's peak "
         "(-21.4% without it, a random run)")
EXPERTS_OFFLOAD_NORM = Formula(
    "temporaries/offload_reduce",
    "lambda P_xg, P_dn, g, M_x, M_n: max((P_dn + P_xg) * g + 8 * M_n, P_xg * g + 8 * M_x)",
    id="peak.experts_offload_norm", source=TRACED_DEEPSPEED,
    title="ZeRO-Offload at stage 2, an MoE layer's experts in rank 0's share: each stacked "
          "tensor over the reduce bucket is reduced as the next gradient arrives and its piece "
          "normed in fp64 on the GPU: the down projections' (M_n elements) beside both "
          "gradients as the gate/up one arrives, the gate/up one's (M_x) as the router's does",
    note="traced: Mixtral over two ranks, the first layer's gate/up piece (7 GiB of fp64), the "
         "step's peak")
EXPERTS_FSDP = Formula(
    "temporaries/gathered_grads", "lambda G_l, P_dn, g_u, P_lt, g_r, u_r: "
    "G_l + P_dn * g_u + u_r * P_lt * g_r", id="peak.experts_fsdp", source=TRACED_FSDP,
    title="FSDP at an MoE layer's expert backward: the next layer prefetched, its experts' "
          "down projections' unsharded gradient written, and in the layer below the top "
          "(u_r = 1) the top's reduce-scatter input",
    note="traced: a 4-layer Qwen3-30B-A3B cut under FSDP2 x 4, the step's peak in the layer "
         "below the top (-1.8% without it)")
LAYER_BELOW = Formula(
    "activations/layer_below", "lambda A_0: A_0", id="peak.layer_below", source=TRACED_FSDP,
    title="FSDP prefetching layer by layer: the first-layer moments are the second layer's, "
          "the first gathered beside it and the third's gradients being reduced; the first "
          "keeps what it saved (its checkpointed input, or every activation)",
    note="across ranks the second layer's backward is the higher: the first's has no layer "
         "to prefetch (traced: mistral-7b and llama-3-8b shapes, FSDP2 x 8, full "
         "checkpointing); on one rank nothing is prefetched, and the first layer's own, the "
         "second's shard written whole beside its reduce-scatter input, is the wider of the two")
FIRST_LAYER_INPUT = Formula(
    "activations/last_layer", "lambda x_l: x_l", id="peak.first_layer_input", source=TRACED_PEAK,
    title="The first layer's checkpointed input, freed last",
    note="on a pipeline stage that receives its input, none (the receive buffer) or, under "
         "per-op selective checkpointing, the outputs the policy saves")
EXPERTS_REDUCED_ALIVE = Formula(
    "activations/last_layer", "lambda A_d, x_l, A_l, A_m, x_c: A_d + x_l + A_l - A_m - x_c",
    id="peak.experts_reduced_alive", source=EXPERT_UNITS,
    title="At a MoE layer's expert reduce: the layers below it and its own activations but "
          "the MLP's (A_m: not a shared expert computed before the routed ones, Qwen2-MoE's, "
          "whose backward comes after)",
    note="checkpointed: its kept input and its recomputed activations (x_c: what both count); "
         "else x_l = x_c = 0")
EXPERT_REDUCE = Formula(
    "temporaries/gathered_grads",
    "lambda P_l, E_l, U_n, w_g, X_3, d_1, g_r, P_xd, g_u: (P_l - E_l + U_n) * w_g + "
    "(E_l + ceil(E_l / X_3) + d_1 * E_l) * g_r + P_xd * g_u",
    id="peak.expert_reduce", source=EXPERT_UNITS,
    title="FSDP2's post-backward of a MoE layer's expert unit: the layer's own unit and the next "
          "one gathered, the reduce-scatter's input and output (and on a one-rank expert mesh "
          "the input divided into a new tensor), the experts' down gradient not yet freed")
MOE_GRADS_IN = Formula(
    "temporaries/layer_backward", "lambda T, h, r, c: 2 * T * h * max(r, c)",
    id="peak.moe_grads_in", source=EXPERT_UNITS,
    title="The gradients at the MoE block's output and input, T h each at residual width")
EP_COMBINE = Formula(
    "temporaries/layer_forward", "lambda t_m, H, x_e, T: t_m * H * (3 * x_e + 4) + T * H * 4",
    id="peak.ep_combine", source=EXPERT_UNITS,
    title="transformers' all-to-all expert parallelism at the combine: three rows-wide buffers "
          "at the experts' width (their output, the rows the all-to-all brings back, the "
          "unpermuted copy), the rows weighted in fp32 (the routing weights' dtype) and their "
          "sum per token",
    note="traced: DeepSeek-V3 shapes, ep 2 x FSDP2 4 (the forward's peak)")
HEAD_KEPT = Formula(
    "temporaries/gathered_root", "lambda R_h, w_g: 2 * R_h * w_g", id="peak.head_kept",
    source=EXPERT_UNITS,
    title="FSDP2's head unit at the loss: gathered (never resharded after forward) beside its "
          "all-gather output, freed when backward starts")
HEAD_GATHERED = Formula(
    "temporaries/gathered_root", "lambda R_h, w_g: R_h * w_g", id="peak.head_gathered",
    source=EXPERT_UNITS, title="FSDP2's head unit in its backward: still gathered")
FIRST_WRITTEN = Formula(
    "gradients/weights", "lambda P_ll, R_h, g: (P_ll + R_h) * g", id="peak.first_written",
    source=TRACED_PEAK,
    title="The step's first backward at its top layer's widest moment: the gradients written, "
          "the head's (R_h, on its stage) and the layer's last projection's, whose backward "
          "runs first",
    note="traced op by op: GPipe, a middle rank, no checkpointing (the down projection's "
         "gradient beside the gating product's backward)")
ABOVE_WRITTEN = Formula(
    "gradients/weights", "lambda P_l, L_a, P_ll, R_h, g: (L_a * P_l + P_ll + R_h) * g",
    id="peak.above_written", source=TRACED_PEAK,
    title="The step's first backward at the highest checkpointed layer's widest moment, below "
          "L_a layers that are not: the gradients written, theirs whole (P_l each), the "
          "head's (R_h, on its stage) and the layer's last projection's",
    note="traced: a random run under TP2 with sequence parallelism, every second layer "
         "checkpointed (-2.0% with the last projection's and the head's alone)")
LATE_WRITTEN = Formula(
    "gradients/weights", "lambda P_la, R_h, g: (P_la + R_h) * g", id="peak.late_written",
    source=TRACED_PEAK,
    title="The step's first backward at its top layer's attention softmax: the gradients "
          "written, the head's (R_h, on its stage) and the layer's past the softmax (its MLP, "
          "its output projection and the norms after the attention)",
    note="traced: an 8B-shaped 4-layer stack, eager attention at 4K tokens, bf16 and amp")
GRADIENTS_WRITTEN = Formula(
    "gradients/weights", "lambda M_g, m_e, m_l, g: M_g - (m_e + m_l) * g",
    id="peak.written", source=TRACED_PEAK,
    title="The gradients written at the first layer's backward",
    note="m_e: an untied embedding's gradient (shard), written after the layers; m_l: the "
         "layer gradients not written yet (the first layer's own but its last projection's; "
         "with FSDP the sharded gradients of the last two layers, traced: an 8B-shaped stack, "
         "FSDP2 x 8)")
EMBEDDING_GRAD = Formula(
    "temporaries/embedding_grad", "lambda T, h, r, c: T * h * max(r, c)",
    id="peak.embedding_grad", source=TRACED_PEAK,
    title="The gradient of the embedding's output (T h at residual width)")
EMBEDDING_GRAD_ACCUMULATED = Formula(
    "temporaries/embedding_grad", "lambda E, t, g, T, h, r, c: floor(E / t) * g + "
    "T * h * max(r, c)", id="peak.embedding_grad_accumulated", source=TRACED_PEAK,
    title="Accumulating into an earlier micro-batch's gradients: the embedding's new dense "
          "gradient, before it is added to the one in .grad",
    note="traced: the first pipeline stage, 1F1B and GPipe")
STAGE_INPUT_GRAD = Formula(
    "temporaries/stage_input_grad", "lambda T, h, r_s: T * h * r_s", id="peak.stage_input_grad",
    source=TORCH_SCHEDULES,
    title="Pipeline parallelism: a non-first stage's input gradient, kept (bwd_cache) until "
          "the next backward sends it to the previous stage")
SPLIT_INPUT_GRADS = Formula(
    "temporaries/stage_input_grad", "lambda n_i, T, h, r_s: n_i * T * h * r_s",
    id="peak.split_input_grads", source=TORCH_PIPELINING,
    title="torch's split backward (zero bubble, ZBV): each input backward leaves its "
          "gradient in the stage input's .grad until the step ends",
    note="stage_backward_input sets input.grad and keeps it, where the whole backward "
         "(stage_backward) clears it; clear_runtime_states drops them at the next step "
         "(traced: zero bubble's last rank, 7 of 8 at its last input backward)")
SENT_OUTPUT = Formula(
    "activations/stage_output", "lambda T, h, r_s: T * h * r_s", id="peak.sent_output",
    source=TORCH_PIPELINING,
    title="torch's pipeline schedules: a stage's output (its last layer's hidden states), kept "
          "from the micro-batch's forward until its backward ends; no op of the stage saves it",
    note="PipelineStage.forward_one_chunk keeps it in fwd_cache for stage_backward (traced: "
         "1F1B and GPipe, the first stage; interleaved 1F1B, ZBV and DualPipeV, each chunk's "
         "but the head's, and none where the next stage is on the same rank: there it is that "
         "stage's receive buffer)")
RECV_BUFFERS = Formula(
    "activations/recv_buffers", "lambda n_rb, n_mb, T, h, r_s: n_rb * n_mb * T * h * r_s",
    id="peak.recv_buffers", source=TORCH_SCHEDULES,
    title="torch's pipeline schedules: the receive buffers, one a micro-batch for the "
          "activations a stage receives and one for the gradients, allocated once and kept "
          "(Megatron-LM receives into a tensor per message: none)",
    note="torch's PipelineStage with static shapes (_create_act_recv_info, "
         "_create_grad_recv_info); traced: every pipeline case")
COPY_GRAD_CAST = Formula(
    "temporaries/weight_copy_grads", "lambda W_1, g: W_1 * g", id="peak.copy_grad_cast",
    source=TORCH_SCHEDULES,
    title="Pipeline parallelism under autocast: the first of the waiting copies' gradients "
          "converted to the weight's dtype (ToCopyBackward) beside them all",
    note="W_1: the weight cast last in the forward, whose cast's backward runs first: the "
         "head's on its stage, else the last layer's last projection (traced: GPipe, the last "
         "stage's second backward)")
COPY_GRADS = Formula(
    "temporaries/weight_copy_grads", "lambda W_c, c: W_c * c", id="peak.copy_grads",
    source=TORCH_SCHEDULES,
    title="Pipeline parallelism under autocast: the gradients of the weights' cached copies, "
          "waiting until the end of a later micro-batch's backward",
    note="autocast casts each weight once, in the step's first forward; a later micro-batch's "
         "backward runs that cast's backward (ToCopyBackward) after all its own nodes, the "
         "engine running the latest created first: at a layer's widest moment those of the "
         "layers above wait, and its own last projection's (traced: 1F1B and GPipe, first "
         "stage)")
SPLIT_RECOMPUTED = Formula(
    "activations/recomputed",
    "lambda L_c, n_pg, N_w, k_w, U_w, F_w: (L_c - 1) * n_pg * N_w + k_w * U_w + F_w",
    id="peak.split_recomputed", source=TORCH_SCHEDULES,
    title="A split backward's weight pass over checkpointed layers: one autograd.grad per "
          "parameter group, each a new graph task that recomputes its layer; what no weight's "
          "gradient reads stays, a copy a group, until the pass ends, and what a group reads "
          "until that group runs",
    note="torch's stage_backward_weight and torch.utils.checkpoint's per-graph-task recompute "
         "(frame.recomputed[gid]): a recomputation stores a tensor for every saved-tensor "
         "holder still alive, and a holder dies with its node once the group that runs it "
         "ends (retain_graph off). Groups run in the parameters' order, the layers' one by one: "
         "the layers below the last hold n_pg copies of N_w; the last holds k_w copies of U_w "
         "as group k_w's recomputation ends, and past its MLP's groups no longer its MLP's "
         "(nothing later reads them). F_w: what group k_w's recomputation holds as it stops "
         "beside what it stores (a dense layer's residual where no norm keeps it, the MLP's "
         "input and its gating product once the groups reading them ran), or the group's new "
         "weight gradient as its node computes it (the routed experts' stacked one), the "
         "larger. Traced: zero bubble "
         "and ZBV under full checkpointing, op by op (and every group's copies counted in a "
         "real step on the CPU)")
SPLIT_ATTENTION_BACKWARD = Formula(
    "temporaries/layer_backward", "lambda B_a, b, a, s, c_p: B_a + b * a * s**2 * c_p",
    id="peak.split_attention_backward", source=TORCH_PIPELINING,
    title="A split backward's input pass at the first layer's eager softmax: the attention's "
          "backward transient (B_a) beside the probabilities' cast the values' product saved, "
          "which the pass keeps for the weights' (retain_graph)",
    note="traced: zero bubble's last rank, Llama 3 8B's width at 6K tokens (-6.9% counting the "
         "transient of a backward that frees the probabilities)")
SPLIT_WEIGHT_GRAD = Formula(
    "temporaries/weight_pass", "lambda G_k, R_k: G_k - R_k", id="peak.split_weight_grad",
    source=TORCH_PIPELINING,
    title="A split backward's weight pass over layers that are not checkpointed, at its widest "
          "group (the first layer's, or on the head's stage the head's, last): the group's new "
          "weight gradient (G_k; the head's under autocast beside its cast to the weight's "
          "dtype) less what the groups before it freed (R_k: the saved tensors their nodes "
          "read, their output gradients)",
    note="each group's autograd.grad frees the saved tensors of the nodes it ran (retain_graph "
         "off) and its output gradients (stage_backward_weight deletes them); traced: Qwen3-MoE "
         "under zero bubble, its routed experts' stacked gate_up gradient; ZBV's rank 0, the "
         "head's)")
SPLIT_PLAIN_READS = Formula(
    "temporaries/weight_pass", "lambda R_l: R_l", id="peak.split_plain_reads",
    source=TORCH_SCHEDULES,
    title="A split backward's weight pass past a layer that is not checkpointed: what its "
          "groups read (each projection's input, the norms' inputs and statistics), freed once "
          "they ran; counted negative for each such layer below the one the pass is at",
    note="each group's autograd.grad frees the saved tensors of the nodes it runs (retain_graph "
         "off); where every micro-batch's forward cast the weights anew (checkpointing empties "
         "autocast's cache), the layer's own weight copies go with them (traced: zero bubble's "
         "last rank, every second layer checkpointed, Qwen3 8B's width)")
SPLIT_HEAD_GRAD = Formula(
    "temporaries/head_grad", "lambda V_t, h, c, g_c: V_t * h * (c + g_c)",
    id="peak.split_head_grad", source=TORCH_SCHEDULES,
    title="A split backward's weight pass on the head's stage, at its last group, the head's: "
          "its new weight gradient beside .grad, before it is added in place (under autocast "
          "beside its cast to the weight's dtype, g_c); every layer below still holds each of "
          "its groups' recomputation",
    note="the final norm's and the head's nodes, whose groups run last, reach every layer's "
         "nodes, so no holder dies before (traced: ZBV's rank 0, the peak of its step)")
EMBEDDING_GRAD_TIED = Formula(
    "temporaries/embedding_grad", "lambda E, t, g, T, h, r, c: 2 * floor(E / t) * g + "
    "T * h * max(r, c)", id="peak.embedding_grad_tied", source=TRACED_PEAK,
    title="Tied embeddings: two more vocabulary-sized gradients before the sum",
    note="the head's weight gradient waits in the shared leaf's input buffer; when the "
         "embedding's arrives they are summed out of place (traced: llama-3.2-1b)")
EMBEDDING_GRAD_TIED_ACCUMULATED = Formula(
    "temporaries/embedding_grad", "lambda E, t, g, T, h, r, c: 2 * floor(E / t) * g + "
    "max(floor(E / t) * g, T * h * max(r, c))", id="peak.embedding_grad_tied_accumulated",
    source=TRACED_PEAK,
    title="Tied embeddings, accumulating into an earlier micro-batch's gradient: the head's "
          "waiting gradient and the embedding's, beside the output's gradient as the "
          "embedding's is computed, then beside their sum before it is added to .grad",
    note="traced: a 2-layer Llama with h = 16384 and tied embeddings, pure bf16 and amp, two "
         "micro-batches")
HEAD_WEIGHT_GRAD = Formula(
    "temporaries/head_grad",
    "lambda T, h, V_t, c, g_c, A_h, z: max(T * h * c + T * V_t * c + V_t * h * c, "
    "T * h * z + V_t * h * (c + g_c) - A_h)", id="peak.head_weight_grad", source=TRACED_PEAK,
    title="A later micro-batch's head backward: its new weight gradient beside the logits' "
          "gradient and the head input's, before autograd adds it in place to .grad; under "
          "autocast then its cast to the weight's dtype, the head's saved tensors freed and the "
          "input's gradient cast to the final norm's output width",
    note="g_c: the gradient's bytes where autocast cast the weight (ToCopyBackward; inside "
         "DeepSpeed's ZeRO-3 linear, traced: -11.4% without it on full training), else 0; "
         "A_h: what the head saved (its input, autocast's weight copy); z: the final norm's "
         "output width. The step's first "
         "backward writes the gradient as .grad instead (traced: llama-3.2-1b amp and a "
         "2-layer Llama with h = 16384, pure bf16 and amp, two micro-batches)")
EMBEDDING_GRAD_TIED_FSDP = Formula(
    "temporaries/embedding_grad", "lambda E, t, g_u, T, h, r, c, P_lt, g_r: "
    "3 * floor(E / t) * g_u + T * h * max(r, c) + P_lt * g_r",
    id="peak.embedding_grad_tied_fsdp", source=TRACED_FSDP,
    title="FSDP, tied embeddings: the head's unsharded gradient waiting, the embedding's, and "
          "their sum, beside the first layer's reduce-scatter input, before the root's "
          "post-backward",
    note="g_u: the unsharded gradients' bytes (the gathered dtype under a mixed-precision "
         "policy), g_r the reduce's; the root's parameters are still gathered; the first "
         "layer's reduce-scatter is waited for by the root's (traced: Gemma 3 12B on 6 layers, "
         "FSDP4, the step's peak at a 262K vocabulary)")
EMBEDDING_GRAD_FSDP = Formula(
    "temporaries/embedding_grad",
    "lambda E, t, R_h, g_u, T, h, r, c, P_lt, g_r: (floor(E / t) + R_h) * g_u + "
    "T * h * max(r, c) + P_lt * g_r",
    id="peak.embedding_grad_fsdp", source=TRACED_FSDP,
    title="FSDP, the embedding's backward before the root's post-backward: its unsharded "
          "gradient beside the head's, waiting in the same unit, and the first layer's "
          "reduce-scatter input, the root still gathered",
    note="the step's peak where the root's reduce-scatter needs no wider copy (bf16 "
         "throughout: traced on the whole Qwen3-8B on two ranks, -1.05% without it)")
ROOT_GRADIENTS = Formula(
    "gradients/weights", "lambda M_g, R, N, g: M_g - ceil(R / N) * g", id="peak.root_gradients",
    title="FSDP: every gradient but the root's shard", source=TRACED_FSDP)
ROOT_REDUCE_SCATTER = Formula(
    "temporaries/root_reduce_scatter",
    "lambda R, g_u, g_r, E_k, N, g_s: R * g_r + max(R * g_u, E_k * g_u + ceil(R / N) * (g_r + g_s))",
    id="peak.root_reduce_scatter", source=TRACED_FSDP,
    title="FSDP's root post-backward: the reduce-scatter input (in the reduce dtype) beside "
          "the unsharded gradients it was copied from, or, once they are released, beside the "
          "one still referenced (E_k, the embedding's or the head's) and the reduce-scatter "
          "output, the root's shard (and its cast to the gradients' dtype, g_s, where the "
          "reduce runs wider: bf16 parameters under FSDP2's fp32 reduce_dtype)",
    note="traced: llama-3.1-8b fsdp8, exact at the copy; an 8-layer Llama-3-8B-wide model on "
         "two ranks (-3.8% at the copy alone), at the output")
ROOT_REDISTRIBUTE = Formula(
    "temporaries/root_redistribute",
    "lambda E, t, R_h, g_u, P_lt, g_r: (E + floor(E / t) + R_h) * g_u + P_lt * g_r",
    id="peak.root_redistribute", source=DTENSOR_EMBEDDING,
    title="FSDP2 x torch TP, the root's post-backward: the embedding's whole gradient and the "
          "copy of its rows FSDP2 reduces, beside the head's unsharded gradient and the last "
          "layer's reduce-scatter input",
    note="FSDP2's _get_grad_inner_tensor redistributes the Replicate gradient to the weight's "
         "Shard(0) before the root is resharded (traced: FSDP2 x TP2 + SP and x TP4, exact)")

STAGE_REDUCE_GATHERED = Formula(
    "temporaries/gathered_params", "lambda P, U, w_g: (P - U) * w_g",
    id="peak.stage_reduce_gathered", source=TORCH_PIPELINING,
    title="FSDP2 under pipelining, as a unit reduces after the stage's last backward: the "
          "units after it still gathered (U: the parameters of the units resharded so far, "
          "this one included)")
STAGE_REDUCE_UNREDUCED = Formula(
    "temporaries/gathered_grads", "lambda P_t, E_r, U_r, g_r: (P_t + E_r - U_r) * g_r",
    id="peak.stage_reduce_unreduced", source=TORCH_PIPELINING,
    title="FSDP2 under pipelining: the accumulated unsharded gradients of the units not yet "
          "reduced (U_r: the trainable parameters of the units reduced before this one)")
STAGE_REDUCED = Formula(
    "gradients/sharded", "lambda U_r, N, g: ceil(U_r / N) * g",
    id="peak.stage_reduced", source=TORCH_PIPELINING,
    title="FSDP2 under pipelining: the sharded gradients of the units reduced before this one")
STAGE_REDUCE_SCATTER = Formula(
    "temporaries/reduce_scatter", "lambda U_t, N, g_r: (U_t + ceil(U_t / N)) * g_r",
    id="peak.stage_reduce_scatter", source=TORCH_PIPELINING,
    title="FSDP2 under pipelining: the reducing unit's reduce-scatter input (its gradients "
          "copied, in the reduce dtype) and output",
    note="traced: llama-3.1-70b widths, FSDP2 x PP2, first stage: the embedding, the root, "
         "reduces first, its 3.9 GiB input and 2.0 GiB output beside every other gradient "
         "(the estimate was 3.5% under without this moment)")


class Moment(NamedTuple):
    """One named moment of the step: its parts (in `MOMENTS`' order; a single term
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

    kinds: tuple[tuple[str, LayerActivations, int], ...]  # "dense", "sliding" or "moe", and
    # how many
    kind_of: tuple[str, ...]  # each layer's kind, in order
    flags: tuple[bool, ...]  # each layer: checkpointed (keeps only its input)
    in_flight: int
    ends: tuple[Term, ...]  # what the embedding and the head save
    saved: Part  # one micro-batch's saved activations, the ends of the model included
    body: Part  # the same without the head's (freed before the layers' backward)
    widest: LayerActivations  # the layer kind with the most saved bytes
    # Under a pipeline schedule the step runs in one autocast region: each weight is cast once
    # a step, for every micro-batch in flight (the cache, not in `saved`); else empty.
    cache: Items = ()
    # What of the cache outlives a backward's first recomputation (`cleared`): the copies the
    # graphs of the layers that are not checkpointed, and the head's, keep.
    kept: Items = ()
    # A pipeline stage's input is its receive buffer (`RECV_BUFFERS`): the bytes of it the
    # first layer keeps, not counted again in `saved`; 0 elsewhere.
    received: int = 0

    @property
    def checkpointed(self) -> int:
        """Layers that keep only their input."""
        return sum(self.flags)

    @property
    def first(self) -> LayerActivations:
        """The stage's first layer's kind's activations."""
        return next((act for kind, act, _ in self.kinds if kind == self.kind_of[0]),
                    self.widest) if self.kind_of else self.widest

    @property
    def stored(self) -> tuple[int, ...]:
        """Of each kind (`kinds`' order), the layers checkpointing keeps to their input."""
        return _stored(self.kinds, self.kind_of, self.flags)

    def cached(self, act: LayerActivations) -> bool:
        """Whether the layer's weight copies are the step's cache's (`cache`), not its own."""
        return any(t is c for c, _ in self.cache for t in act.weight_copies)

    def alive(self, act: LayerActivations) -> int:
        """One layer's saved bytes for one micro-batch (its weight copies in the cache)."""
        if not self.cached(act):
            return act.total
        return act.total - sum(t.bytes for t in act.weight_copies)

    def freed_by_softmax(self, act: LayerActivations, recomputed: bool) -> int:
        """What a layer's backward (its `recomputed` one: its weights cast anew where the
        cache is `cleared`) has freed by its eager attention's softmax's: `after_softmax` and
        the values (`softmax_values`), with the copies among them where they are the layer's
        own."""
        own = self.owns_copies(act, recomputed)
        return act.after_softmax + act.softmax_values + (act.after_softmax_copies if own else 0)

    def owns_copies(self, act: LayerActivations, recomputed: bool) -> bool:
        """Whether the layer's weight copies (its `recomputed` one's: cast anew where the cache
        is `cleared`) are its own, freed by each projection's backward, not the step's cache's."""
        return (recomputed and self.cleared) or not self.cached(act)

    @property
    def all_checkpointed(self) -> bool:
        """Every layer checkpointed (the first `checkpointed` are): the last one too."""
        return self.checkpointed == sum(count for _, _, count in self.kinds)

    @property
    def cleared(self) -> bool:
        """The backward's first recomputation empties autocast's cache: the backward runs on
        the device's autograd thread, outside the schedule's autocast region, so leaving the
        autocast that torch.utils.checkpoint re-enters to recompute drops the nesting to 0,
        which clears the cache (one for every thread; traced: 1F1B, amp, full checkpointing,
        the first stage's backward holds no cached copy past its last layer)."""
        return bool(self.checkpointed and self.cache)

    def recomputed(self, act: LayerActivations) -> int:
        """A checkpointed layer's bytes once its backward recomputed it: with autocast's cache
        emptied, the recomputation casts the layer's weights anew."""
        return act.total if self.cleared else self.alive(act)


def _stored(kinds: Sequence[tuple[str, LayerActivations, int]], kind_of: tuple[str, ...],
            flags: tuple[bool, ...]) -> tuple[int, ...]:
    """Of each kind, the checkpointed layers."""
    if len(kinds) == 1:
        return (sum(flags),)
    return tuple(sum(f for f, kind in zip(flags, kind_of, strict=True) if kind == name)
                 for name, _, _ in kinds)


def layers(x: Setup, stage: Stage, detail: bool, receives: bool = False) -> Layers:
    """`receives`: a chunk of a rank of several (`_chunk_mixes`) whose input is received."""
    counts, arch = x.counts, x.arch
    build = megatron_layer if x.megatron else decoder_layer
    # each layer's kind, in order (Gemma 3's sliding-window layers masked under SDPA keep more
    # than its global ones), and which of them checkpointing keeps to their input
    kind_of = tuple("moe" if arch.is_moe_layer(i) else
                    "sliding" if x.sliding_sdpa and arch.is_sliding_layer(i) else "dense"
                    for i in range(stage.first_layer, stage.first_layer + stage.layers)) \
        if arch.is_moe or x.sliding_sdpa else ("dense",) * stage.layers
    flags = x.checkpointed(stage)
    params = [(name, layer, kind_of.count(name)) for name, layer in (
        ("dense", counts.dense_layer), ("sliding", counts.dense_layer),
        ("moe", counts.moe_layer)) if layer is not None and name in kind_of]
    kinds = [(name, decoder_layer(x, layer, sliding=True) if name == "sliding"
              else build(x, layer), count) for name, layer, count in params]
    # the model's first layer, when its input needs no gradient: its own terms, once
    first, frozen = "", None
    if x.frozen_input_layer(stage):
        first = kind_of[0]
        frozen = next((decoder_layer(x, layer, frozen_input=True, sliding=name == "sliding")
                       for name, layer, _ in params if name == first), None)
    cached = x.pp > 1 and x.n.weight_copies  # torch.autocast around the schedule's step
    saved: list[tuple[Term, int]] = []
    cache: list[tuple[Term, int]] = []
    kept: list[tuple[Term, int]] = []
    widest = kinds[0][1]
    received = 0
    for k, ((_, act, count), stored) in enumerate(zip(kinds, _stored(kinds, kind_of, flags),
                                                       strict=True)):
        # checkpointed layers keep only their inputs
        rest = count - stored
        copies = act.weight_copies if cached else ()
        alone = frozen if frozen is not None and kinds[k][0] == first and rest else None
        layer_saved = [(term, rest - (alone is not None)) for term in act.saved
                       if not any(term is c for c in copies)]
        if alone is not None:
            uncached = alone.weight_copies if cached else ()
            layer_saved += [(term, 1) for term in alone.saved
                            if not any(term is c for c in uncached)]
        kept_input = stored
        rest_kept: tuple[Term, ...] = ()
        if k == 0 and (receives or _receives(x, stage)) and (stored or act.saves_residual):
            # the first layer keeps its input as it is: the receive buffer, counted there
            received = layer_input(act.checkpoint_input)
            if stored:
                kept_input -= 1
                rest_kept = received_kept(act.checkpoint_input)
            else:  # the input norm's input: the first residual term
                i = next(i for i, (t, _) in enumerate(layer_saved)
                         if t.key == "activations/residual")
                layer_saved[i] = (layer_saved[i][0], rest - 1)
        saved.append((act.checkpoint_input, kept_input))
        saved += [(term, 1) for term in rest_kept]
        saved += layer_saved
        cache += [(term, count) for term in copies]
        kept += [(term, rest) for term in copies if rest]
        if act.total > widest.total:
            widest = act
    embedding = embedding_activations(x) if stage.embedding else ()
    head = head_activations(x) if stage.head else ()
    if cached:
        cache += [(term, 1) for term in head if term.formula is HEAD_COPY]
        kept += [(term, 1) for term in head if term.formula is HEAD_COPY]
        head = tuple(term for term in head if term.formula is not HEAD_COPY)
    saved += [(term, 1) for term in embedding]
    # the attention mask each stage's model builds at its start (`forward_mask`): where layers
    # are checkpointed they keep it to their backward, each one's recomputation holding its
    # arguments (traced: eager attention, checkpointed, 32 MB at 2 x 2K tokens); else the
    # forward frees it
    mask = forward_mask(x) if any(flags) else None
    if mask is not None:
        saved.append((mask, 1))
    body = part(tuple(saved), detail)
    whole = extended(body, tuple((term, 1) for term in head), detail) if head else body
    return Layers(tuple(kinds), kind_of, flags, x.in_flight(stage), (*embedding, *head), whole,
                  body, widest, tuple(cache), tuple(kept), received)


def _before_last(ly: Layers, saved: Part, detail: bool) -> Part:
    """`saved` without what the last layer keeps: FSDP prefetches the last layer while the
    one before it computes (traced: FSDP2, the last layer's all-gather beside the earlier
    layers' activations only)."""
    act = ly.kinds[-1][1]
    if ly.all_checkpointed:
        last: Items = ((act.checkpoint_input, -1),)
    else:
        cached = tuple(t for t, _ in ly.cache)
        last = tuple((t, -1) for t in act.saved if not any(t is c for c in cached))
    return extended(saved, last, detail)


def _torch_single_stage(x: Setup, stage: Stage) -> bool:
    """A rank holding one stage of torch's schedules, where what a stage receives and sends
    is counted at its boundary (`_receives`, `_sent_output`). Megatron-LM receives into a
    tensor per message, the first layer's saved input, and frees what it sent
    (deallocate_output_tensor); a rank of several chunks is counted by its unit."""
    return x.pp > 1 and not x.megatron and len(x.held_stages(stage)[0]) == 1


def _receives(x: Setup, stage: Stage) -> bool:
    """The stage's input is a receive buffer (`RECV_BUFFERS`): not the first stage."""
    return not stage.embedding and _torch_single_stage(x, stage)


def _sent_output(x: Setup, stage: Stage) -> Term | None:
    """The output kept of each micro-batch (`SENT_OUTPUT`), but on the head's stage (whose
    output is the logits: `stage_output`); on a rank of chunks, of each chunk but the head's
    (`Mix`)."""
    if not ((_torch_single_stage(x, stage) and not stage.head) or _chunk_mixes(x, stage)):
        return None
    return SENT_OUTPUT(x.T, x.h, _hidden_width(x))


def _chunk_mixes(x: Setup, stage: Stage) -> tuple[Mix, ...]:
    """A rank of several chunks under torch's schedules (interleaved 1F1B, ZBV, DualPipeV): the
    states its order walks through (`chunk_mixes`), which chunks' micro-batches it holds in
    each. They differ at the stage's boundary: a micro-batch of the model's first stage keeps
    its input (the embedding's), the others' is a receive buffer (`RECV_BUFFERS`); each keeps
    its output in `fwd_cache` (`SENT_OUTPUT`) but the head's, which keeps the head's
    activations instead. Empty elsewhere."""
    if x.pp == 1 or x.megatron or x.schedule not in ("interleaved_1f1b", "zbv", "dualpipev"):
        return ()
    return chunk_mixes(x.schedule, x.pp, x.virtual_stages, x.micro_batches, stage.index,
                       _chunks_recompute(x, stage) if x.n.weight_copies else ())


def _held_spans(x: Setup, stage: Stage) -> list[tuple[int, int]]:
    """The (first layer, layers) of each chunk a rank of several holds, in `Mix.alive`'s
    order."""
    held, count = x.held_stages(stage)
    spans = split_layers(x.arch.num_hidden_layers, count)
    return [spans[i] for i in held]


def _chunks_recompute(x: Setup, stage: Stage) -> tuple[bool, ...]:
    """By chunk of a rank of several (`Mix.alive`'s order): its layers include a checkpointed
    one, so its backwards recompute and empty autocast's cache."""
    return tuple(any(x.checkpointed(replace(stage.unit or stage, first_layer=first,
                                            dense_layers=n, moe_layers=0)))
                 for first, n in _held_spans(x, stage))


def _heaviest(x: Setup, stage: Stage, ly: Layers, chunks: Chunks,
              mixes: tuple[Mix, ...]) -> list[Mix]:
    """Of the states alike but for the chunks their micro-batches belong to (the same running
    chunk's boundary, kind, gradients and weight backwards waiting), the one whose micro-batches
    keep the most bytes: the rest of their moments is the same."""
    held = x.held_stages(stage)[0]
    kept = [(whole if i == 0 else received).saved.bytes
            for (whole, received), i in zip(chunks, held, strict=True)]
    sent = SENT_OUTPUT(x.T, x.h, _hidden_width(x)).bytes
    first, head = (sum(t.bytes for t in ends) for ends in _ends(x, stage, ly))
    best: dict[tuple[Boundary, bool, bool, bool, tuple[bool, ...], int, int],
               tuple[int, Mix]] = {}
    for mix in mixes:
        b = _boundary(x, stage, mix.alive)
        weight = b.first * first + b.sends * sent + b.heads * head + \
            sum(n * k for n, k in zip(mix.alive, kept, strict=True))
        key = (_boundary(x, stage, _one(mix)), mix.backward, mix.split, mix.weight, mix.wrote,
               mix.waiting, _inputs_kept(x, stage, mix))
        if key not in best or weight > best[key][0]:
            best[key] = (weight, mix)
    return [mix for _, mix in best.values()]


def _inputs_kept(x: Setup, stage: Stage, mix: Mix) -> int:
    """The input gradients a split backward has left in its stage inputs' .grad (`Mix.inputs`):
    of the chunks whose input is received from another rank (a V's last rank passes its second
    chunk's to its first as that one's gradient receive buffer, counted there)."""
    held, _ = x.held_stages(stage)
    return sum(n for n, i in zip(mix.inputs, held, strict=True) if i > 0 and i - 1 not in held)


def _one(mix: Mix) -> tuple[int, ...]:
    """The running chunk-micro-batch alone, as a `Mix.alive`."""
    return tuple(int(c == mix.running) for c in range(len(mix.alive)))


class Boundary(NamedTuple):
    """Chunk-micro-batches of a rank of chunks, by what crosses their stage's boundary."""

    first: int  # of the model's first stage: their input is the embedding's, not received
    sends: int  # their output is kept (`SENT_OUTPUT`): the next stage is on another rank (a
    # V's middle rank passes it to its other chunk, whose receive buffer it becomes)
    heads: int  # of the head's stage: they keep the head's activations


def _boundary(x: Setup, stage: Stage, alive: tuple[int, ...]) -> Boundary:
    held, count = x.held_stages(stage)
    pairs = tuple(zip(alive, held, strict=True))
    return Boundary(sum(a for a, i in pairs if i == 0),
                    sum(a for a, i in pairs if i < count - 1 and i + 1 not in held),
                    sum(a for a, i in pairs if i == count - 1))


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


def stage_peak(x: Setup, stage: Stage, detail: bool = False) -> StagePeak:
    """The moments of `stage`'s step; `detail` keeps every moment and the layers' terms.

    Under a pipeline schedule that runs every forward before the rank's first backward
    (`Flight.drained`) two states of the step are compared: all micro-batches in flight
    before any gradient exists, and one fewer once the first backward wrote the gradients;
    each moment is the worse of the two. ZBV's cool-down adds its backward's states. A rank of
    several chunks under torch's schedules compares the states its order walks through
    (`_chunk_mixes`): a forward's moments in a forward's, a backward's in a backward's."""
    ms = model_states(x, stage)
    ly = layers(x, stage, detail)
    fl = x.flight(stage)
    unit = None if stage.unit is None else (layers(x, stage.unit, detail),
                                            layers(x, stage.unit, detail, receives=True))
    variants: list[tuple[Flight, int, bool, bool, Mix | None]]
    mixes = _chunk_mixes(x, stage)
    chunks = _chunk_units(x, stage, unit, detail) if mixes and unit else None
    if mixes and chunks:
        # the model's first stage splits no backward: with no input gradient to compute, its
        # weight backward is a whole one (torch's backward_weight_one_chunk at stage_index 0)
        held_stages = x.held_stages(stage)[0]
        variants = [(fl._replace(split=held_stages[mix.running] != 0, waiting=mix.waiting,
                                 inputs=_inputs_kept(x, stage, mix))
                     if fl.split or mix.split else fl, sum(mix.alive), mix.written,
                     not mix.backward, mix)
                    for mix in _heaviest(x, stage, ly, chunks, mixes)]
    elif x.micro_batches == 1:
        variants = [(fl, fl.held, False, True, None)]
    elif fl.drained:  # every forward ran before the first backward wrote a gradient
        variants = [(fl, fl.held, False, True, None), (fl, fl.held - 1, True, False, None)]
    else:
        variants = [(fl, fl.held, True, True, None)]
        if ms.per_backward:  # a backward before the last holds what the last does not
            variants.append((fl, fl.held, False, False, None))
    # input backwards with weight backwards waiting, no forward between them (`Flight.deferred`)
    if not mixes:
        variants += [(fl._replace(waiting=s.waiting, inputs=s.inputs), s.alive, s.written,
                      False, None) for s in fl.deferred]
    held = x.held_stages(stage)[0]
    worst: dict[str, Moment] = {}
    for flight, times, accumulating, forwards, mix in variants:
        for m in _stage_moments(x, stage, ms, ly, flight, times, accumulating, detail, unit,
                                mix, chunks):
            if not forwards and m.phase == "forward":
                continue
            if mix is not None and ((forwards and m.phase == "backward") or (
                    m.name == "backward.embedding" and held[mix.running] != 0)):
                continue  # (only the first stage's chunk runs the embedding's backward)
            if mix is not None and mix.split:
                # a split backward's weight pass is read at its own action, with what is alive
                # then (a V's cool-down runs its second chunk's before its first's), its input
                # pass at the input's; the model's first stage splits none (its whole backward
                # is read at its input backward's place)
                weight_pass = m.name == "backward.weight_pass"
                if (weight_pass != mix.weight) if held[mix.running] else mix.weight:
                    continue
            best = worst.get(m.name)
            if best is None or m.bytes > best.bytes:
                worst[m.name] = m
    moments = tuple(worst.values())
    phases: dict[str, Moment] = {}
    for m in moments:  # the worst moment of each phase; the first on a tie
        best = phases.get(m.phase)
        if best is None or m.bytes > best.bytes:
            phases[m.phase] = m
    if detail:
        return StagePeak(stage, ms, phases, moments, ly)
    return StagePeak(stage, ms, phases)


def _schedule_holds(x: Setup, stage: Stage, cache: Items, fl: Flight, times: int,
                    accumulating: bool, sent: Term | None, sends: int
                    ) -> list[tuple[Term, int]]:
    """What a pipeline schedule keeps beside the micro-batches' saved activations (torch's
    schedules.py, traced): autocast's weight cache (once a step), the other micro-batches'
    outputs (`sent`, `_sent_output`, of `sends` of them; the last stage's logits past their
    loss), zero bubble's
    output gradients of the micro-batches waiting for their weight backward, and the stage
    input's gradient (kept in `bwd_cache` until the next backward sends it) on a rank holding
    a non-first stage. `cache`: the weight copies autocast holds (`Layers.cache`, or `kept`
    once cleared)."""
    items = list(cache)
    if sent is not None and sends:
        items.append((sent, sends))
    if stage.head and min(fl.logits, times) > 1:
        kept = kept_logits(x)
        if kept is not None:
            items.append((kept, min(fl.logits, times) - 1))
    waiting = min(fl.waiting, times - 1)
    if waiting:
        items += [(t, n * waiting) for t, n in _output_grads(x, stage)]
    if any(i > 0 for i in x.held_stages(stage)[0]):
        if fl.split and fl.inputs:
            items.append((SPLIT_INPUT_GRADS(fl.inputs, x.T, x.h, _hidden_width(x)), 1))
        elif accumulating and not fl.split:
            items.append((STAGE_INPUT_GRAD(x.T, x.h, _hidden_width(x)), 1))
    return items


def _output_grads(x: Setup, stage: Stage, first_own: bool = True) -> list[tuple[Term, int]]:
    """What a split backward keeps of one micro-batch for its weight backward beside its saved
    activations: the output gradients (of one unit: a V schedule's chunk; the head's where the
    stage holds it); `first_own`: the unit's first layer's too."""
    counts, unit = x.counts, stage.unit or stage
    first = 0 if first_own else 1  # (the first layer: a dense one where the unit has one)
    items = [(output_grads(x, layer), n) for layer, n in (
        (counts.dense_layer, unit.dense_layers - (first if unit.dense_layers else 0)),
        (counts.moe_layer, unit.moe_layers - (0 if unit.dense_layers else first)))
        if layer is not None and n > 0]
    dense = counts.dense_layer
    if _received_top(x, stage):
        assert dense is not None
        top = int(unit.dense_layers > 1 or first_own)  # (a unit of one layer: its first
        # is the received top)
        items = [(output_grads(x, dense), unit.dense_layers - 1 - first * top),
                 (output_grads(x, dense, received=True), top)]
        items = [(t, k) for t, k in items if k > 0]
    if stage.head:
        items.append((head_output_grads(x), 1))
    return items


def _chunk_written(x: Setup, stage: Stage, ms: ModelStates) -> Term | None:
    """A rank of chunks at its first backward, a weight pass (DualPipeV's warm-up runs one of
    its second chunk before any other backward): its chunk's layers' gradients written by the
    time its last groups run, not the other chunk's nor the embedding's and head's."""
    unit, grads = stage.unit or stage, ms.gradients
    if x.pp > 1 and ms.gathered_model is not None:  # (FSDP2 under pipelining: none written)
        return None
    if grads is None or not accumulated(grads) or x.lora:
        return grads
    shards = x.N if x.z >= 2 else 1  # (sharded gradients: this rank's shards)
    m_e = -(-ms.local.root_trainable // shards)
    m_l = (stage.layers - unit.layers) * -(-ms.local.per_layer_trainable // shards)
    m_l = min(m_l, max(0, grads.bytes // x.n.grad - m_e))
    return GRADIENTS_WRITTEN(grads.bytes, min(m_e, grads.bytes // x.n.grad), m_l, x.n.grad)


def _chunks_wrote(x: Setup, stage: Stage, ms: ModelStates, wrote: tuple[bool, ...]
                  ) -> Term | None:
    """The gradients of a rank of chunks some of whose chunks' backwards have run (`Mix.wrote`):
    theirs written, the layers of the others not yet, nor the embedding's where its chunk is one
    of them, nor the head's (the final norm's, a tied matrix's) where its chunk is (traced:
    DualPipeV's rank 0 at a later micro-batch's loss, its second chunk's layers and the tied
    head written, 507 MiB at a Qwen3 0.6B width)."""
    unit, grads = stage.unit or stage, ms.gradients
    if grads is None or not accumulated(grads) or x.lora:
        return grads
    held, count = x.held_stages(stage)
    shards = x.N if x.z >= 2 else 1  # (sharded gradients: this rank's shards)
    local = ms.local
    m_e = m_l = 0
    for done, index in zip(wrote, held, strict=True):
        if done:
            continue
        m_l += unit.layers * -(-local.per_layer_trainable // shards)
        if index == 0:
            m_e += -(-(local.root_trainable - local.head_trainable) // shards)
        if index == count - 1:
            m_e += -(-local.head_trainable // shards)
    m_l = min(m_l, stage.layers * -(-local.per_layer_trainable // shards))
    return GRADIENTS_WRITTEN(grads.bytes, m_e, m_l, x.n.grad)


def _summed(widths: Sequence[tuple[int, int, int, int]]) -> tuple[int, int, int, int]:
    """The output-gradient widths of some parameter groups together (`WeightGroup.width`)."""
    o, n, q, e = (sum(w[i] for w in widths) for i in range(4))
    return o, n, q, e


def _recompute_forward(act: LayerActivations) -> int:
    """A checkpointed layer's recomputation at its widest forward moment: the forward's,
    unless the recomputation stops before it (`LayerActivations.recompute_forward`)."""
    return (act.recompute_forward or act.forward_transient).bytes


def _split_softmax(x: Setup, act: LayerActivations) -> Term:
    """A split backward's input pass at a layer's eager softmax (`SPLIT_ATTENTION_BACKWARD`),
    or nothing where the attention is not eager (or has sinks: not traced)."""
    eager = attention_backward(x) if x.eager and not x.arch.traits.sinks else None
    probs = [t for t in act.saved if t.id == "act.softmax"]
    if eager is None or eager.formula is not ATTENTION_BACKWARD_EAGER or not probs:
        return LAYER_BACKWARD(0, 0, 0, 0)
    return SPLIT_ATTENTION_BACKWARD(eager.bytes, x.b, x.a, x.s, probs[0].values[4])


def _first_output_grads(x: Setup, stage: Stage, first: LayerActivations,
                        split_softmax: bool = False) -> tuple[tuple[Term, int], ...]:
    """The output gradients a split backward has kept of the unit's first layer by that
    layer's widest backward moment: at its eager softmax's (the layer's widest, or
    `split_softmax`: the input pass's, whose probabilities stay), those after the attention
    core (`output_grads_at_softmax`); at its MLP's, the MLP's, in its transient."""
    if first.backward_transient.formula is not ATTENTION_BACKWARD_LAYER and not split_softmax:
        return ()
    unit, counts = stage.unit or stage, x.counts
    layer = counts.dense_layer if unit.dense_layers else counts.moe_layer
    assert layer is not None
    received = _received_top(x, stage) and unit.dense_layers == 1
    return ((output_grads_at_softmax(x, layer, received), 1),)


def _received_top(x: Setup, stage: Stage) -> bool:
    """Whether the stage's top layer's last projection's output gradient is the gradient the
    stage received (a stage that sends its output; one stage a rank, dense, whole tensors)."""
    unit, dense = stage.unit or stage, x.counts.dense_layer
    return (_sent_output(x, stage) is not None and stage.unit is None and not unit.moe_layers
            and dense is not None and x.tp == 1 and x.cp == 1
            and dense.linears[-1].tp == "row" and dense.linears[-1].group == "mlp")


def _weight_pass(x: Setup, stage: Stage, ly: Layers, accumulating: bool, mix: Mix | None,
                 own: bool = False) -> list[tuple[Term, int]]:
    """The weight pass of a split backward over the unit's checkpointed layers
    (`SPLIT_RECOMPUTED`); nothing for a first stage, whose weight pass is a whole backward. On
    a rank of chunks, `mix`: the running chunk's. `own`: each micro-batch holds the weight
    copies its forward cast (`Layers.kept`), the running one's freed as its groups run."""
    unit = stage.unit or stage
    held, count = x.held_stages(stage)
    running = held[mix.running] if mix is not None else held[0]
    if mix is not None:  # the running chunk's own layers (which of them are checkpointed)
        first, layers = split_layers(x.arch.num_hidden_layers, count)[running]
        if layers == unit.layers:
            unit = replace(unit, first_layer=first)
    ckpt = x.checkpointed_layers(unit)
    # the widest layer's parameters with its activations (DeepSeek-V3's first stage: MoE
    # layers above a dense one)
    act = ly.widest
    moe = any(kind == "moe" and a is act for kind, a, _ in ly.kinds)
    layer = x.counts.moe_layer if moe else x.counts.dense_layer
    if layer is None or running == 0:
        return []
    on_head = running == count - 1
    if not ckpt:  # (beside the input pass's whole micro-batch: what it frees as it goes)
        plain = weight_groups(x, act, layer, False)

        def freed(k: int) -> int:
            grads = output_grads(x, layer, widths=_summed(plain.widths[:k])).bytes if k else 0
            return sum(plain.reads[:k]) + grads

        def new(k: int) -> int:  # (accumulating, the group before's, still referenced:
            # stage_backward_weight's `dweights`; else it became that group's .grad)
            return plain.grads[k] + (plain.kept[k - 1] if k and accumulating else 0)

        k = max(range(len(plain.grads)), key=lambda k: new(k) - freed(k))
        widest = (new(k), freed(k))
        if on_head and not x.lora:  # the head's group, last: every layer's groups ran
            n = x.n
            head_grad = x.vocab * x.h * (n.compute + (n.grad if n.weight_copies else 0))
            widest = max(widest, (head_grad, unit.layers * freed(len(plain.grads))),
                         key=lambda gr: gr[0] - gr[1])
        return [(SPLIT_WEIGHT_GRAD(*widest), 1)] if widest[0] > widest[1] else []
    groups = weight_groups(x, act, layer, ly.cleared)
    unread = max(ly.recomputed(act) - act.recomputed_shared - sum(groups.reads), 0)
    # the stage's last layer: past its MLP's groups nothing reads the MLP's (where the final
    # norm and the head follow, their groups do)
    top = all(x.checkpointed(unit)) and not on_head
    copies = [(k + 1) * (sum(groups.reads[k:]) + unread - (
        groups.mlp_unread if top and k > groups.last_mlp else 0))
        for k in range(len(groups.reads))]
    # beside them, what group k's recomputation holds as it stops, at the down projection, or
    # then the group's new weight gradient as its node computes it, the larger
    n, T = x.n, x.T
    residual = 0 if any(t.id == "act.norm_input" for t in act.saved) else T * x.h * n.residual
    casts = any(t.id == "act.input_casts@activations/mlp" for t in act.saved)

    def live(k: int) -> int:
        stops = 0
        if not layer.moe:  # the residual, the MLP's input, the gating product
            stops = residual + (T * x.h * norm_width(x) if casts or k > groups.last_mlp - 1
                                else 0) + (T * (layer.widest_row_input // x.tp) * n.compute
                                           if k > groups.last_mlp else 0)
        # accumulating, beside the group before's new gradients, which stage_backward_weight's
        # `dweights` still references through this group's autograd.grad (else they are its
        # .grad)
        return max(stops, groups.grads[k]) + (groups.kept[k - 1] if k and accumulating else 0)

    n_pg = len(groups.reads)
    # the output gradients of the groups from k on (each group's go once it ran; of the top
    # layer's last projection, the receive buffer's): their bytes, group by group
    received = _received_top(x, stage)
    widths = [(0, 0, 0, 0) if received and g == groups.last_mlp else w
              for g, w in enumerate(groups.widths)]
    kept = [output_grads(x, layer, widths=w).bytes for w in widths]
    k = max(range(n_pg), key=lambda k: copies[k] + live(k) + sum(kept[k:]))
    # the layers that are not checkpointed (every Nth checkpointed): those below the highest
    # checkpointed one have run their groups, those above keep their output gradients (on a
    # rank of chunks, the running chunk's own layers)
    flags = x.checkpointed(unit)
    at = max(i for i, f in enumerate(flags) if f)
    below, above = flags[:at].count(False), flags[at + 1:].count(False)

    def run_past(layers: int) -> list[tuple[Term, int]]:  # what `layers` plain layers freed
        if not layers:
            return []
        reads = sum(weight_groups(x, act, layer, False).reads)
        out = [(SPLIT_PLAIN_READS(reads), -layers)]
        if own:  # (their weight copies, the running micro-batch's own)
            out += [(t, -layers) for t in act.weight_copies if ly.cached(act)]
        return out

    items = [(SPLIT_RECOMPUTED(ckpt, n_pg, unread, k + 1, copies[k] // (k + 1), live(k)), 1),
             (output_grads(x, layer, widths=_summed(widths[k:])), 1), *run_past(below)]
    if above:
        items += [(output_grads(x, layer), above - int(received)),
                  *([(output_grads(x, layer, received=True), 1)] if received else [])]
    if not on_head:
        return items
    head = [(head_output_grads(x), 1)]
    last = [(SPLIT_RECOMPUTED(ckpt, n_pg, unread, n_pg, unread, 0), 1), *head,
            *run_past(below + above)]
    if own:  # the head's group has freed the running micro-batch's copy of its weight
        last += [(t, -1) for t, _ in ly.kept if t.formula is HEAD_COPY]
    if not x.lora:  # (where no earlier backward wrote the head's gradient, this one becomes it)
        last.append((SPLIT_HEAD_GRAD(x.vocab, x.h, x.n.compute,
                                     x.n.grad if x.n.weight_copies else 0), 1))
    return max(items + head, last, key=add_up)


def _stage_moments(x: Setup, stage: Stage, ms: ModelStates, ly: Layers, fl: Flight, times: int,
                   accumulating: bool, detail: bool, unit: tuple[Layers, Layers] | None = None,
                   mix: Mix | None = None, chunks: Chunks | None = None) -> list[Moment]:
    """The moments of `stage` with `times` micro-batches in flight, `accumulating` into
    gradients an earlier backward wrote. `unit`: the layers of the stage's unit, its input kept
    and received; on a rank of chunks, `mix` says of which chunks the micro-batches are, and
    `chunks` what each chunk's keep (`_chunk_units`)."""
    n = x.n
    ckpt, widest = ly.checkpointed, ly.widest
    gradients, gathered, backward_gathered = ms.gradients, ms.gathered, ms.backward_gathered
    states = _with_buffers(x, stage, ms, detail)
    # under pipelining FSDP2 reduces only after the last micro-batch: no sharded gradients yet
    pipelined = x.pp > 1 and ms.gathered_model is not None
    earlier = gradients if accumulating and not pipelined and not ms.per_backward else None
    if mix is not None and not accumulating and any(mix.wrote) and not pipelined \
            and not ms.per_backward:  # some of the rank's chunks have written theirs
        earlier = _chunks_wrote(x, stage, ms, mix.wrote)
    if pipelined and not accumulating:  # the step's first backward: no unsharded gradient yet
        gathered = part_of(ms.gathered_model)
        backward_gathered = part_of(ms.gathered_model, ms.gathered_grads)
    # in the layers' backward below the top one
    below = ms.backward_gathered
    if ms.gathered_model is not None and not pipelined:
        below = _resharded_below(x, ms, ms.gathered_grads)
    if ms.live is not None:  # DeepSpeed's ZeRO-3: its coordinator's, moment by moment
        gathered, backward_gathered = _live(x, ms, "forward_mlp"), _live(x, ms, "backward_top")
        below = _live(x, ms, "backward_first")
    if pipelined and accumulating and not n.fsdp_mixed:
        # no cast between the gradients and their accumulator: autograd adds them in place
        backward_gathered = below = gathered
    # autocast's cache as this backward starts: a drained schedule runs no forward after an
    # earlier backward emptied it; past this backward's first recomputation only `ly.kept`
    at_start = ly.kept if ly.cleared and fl.drained and accumulating else ly.cache
    sent = _sent_output(x, stage)
    sends = times - 1  # the other micro-batches' outputs kept
    if mix is not None:  # the chunk-micro-batches by chunk: all, the running one, the others
        every = _boundary(x, stage, mix.alive)
        run = _boundary(x, stage, _one(mix))
        beside = Boundary(*(a - b for a, b in zip(every, run, strict=True)))
        sends = beside.sends
        assert chunks is not None
        ly = replace(ly, received=0 if run.first else chunks[mix.running][1].received)
    # where backwards that recompute run between the forwards (cleared), each micro-batch's
    # forward cast anew what its graph keeps; a split backward's input pass frees none of it,
    # so every micro-batch in flight holds its own (a whole backward frees the running one's
    # as it goes: one, the others'; a rank of chunks' order is not traced for it)
    own = times if ly.cleared and fl.split and not fl.drained and times > 1 \
        and stage.unit is None else 1
    kept_copies = tuple((t, k * own) for t, k in ly.kept)
    more: Items = tuple((t, k * (own - 1)) for t, k in ly.kept) if own > 1 else ()
    if x.schedule == "1f1b" and ly.cleared and not fl.split and times > 1 and mix is None \
            and stage.unit is None:
        # 1F1B: each forward after a backward casts anew, so as a backward starts its alive
        # micro-batches hold up to `in_flight` copies (one the cache's); past its first
        # recomputation, which empties the cache, those of the others (it frees its own as it
        # goes)
        in_flight, beside_own = one_f_one_b_casts(x.pp, x.micro_batches, stage.index)
        more = tuple((t, k * (in_flight - 1)) for t, k in ly.kept)
        kept_copies = tuple((t, k * max(1, beside_own)) for t, k in ly.kept)
    if mix is not None and mix.copies and chunks is not None:
        # on a rank of chunks, each chunk's micro-batches hold a copy of its plain layers'
        # weights for every cache their forwards cast them in (one counted in `ly.kept`)
        more = tuple((t, k * (n - 1)) for (whole, received), n, i in
                     zip(chunks, mix.copies, x.held_stages(stage)[0], strict=True) if n > 1
                     for t, k in (whole if i == 0 else received).kept)
        kept_copies = (*kept_copies, *more)
    if more:
        at_start = (*at_start, *more)
    holds = tuple(_schedule_holds(x, stage, at_start, fl, times, accumulating, sent, sends))
    holds_after = tuple(_schedule_holds(x, stage, kept_copies, fl, times, accumulating, sent,
                                        sends)) if ly.cleared and at_start is not ly.kept \
        else holds
    other_batches: Part | None = None
    if stage.unit is None:
        one = ly.saved  # one micro-batch's saved activations
        saved = one if times == 1 else scaled(one, times, detail)
    elif mix is None or chunks is None:  # `times` of one unit (a DualPipe stage); the ends once
        one = unit[0].saved if unit else ly.saved
        saved = extended(scaled(one, times, detail), tuple((t, 1) for t in ly.ends), detail)
    else:
        saved = _chunk_batches(x, stage, ly, chunks, mix.alive, detail)
        if times > 1:
            beside_running = tuple(n - (c == mix.running) for c, n in enumerate(mix.alive))
            other_batches = _chunk_batches(x, stage, ly, chunks, beside_running, detail)
    saved_after = saved
    if holds:
        saved = extended(saved_after, holds, detail)
    if holds_after:
        saved_after = extended(saved_after, holds_after, detail)
    # the layers' forward runs before the head's: the running micro-batch's head keeps nothing
    # yet (a frozen fp32 head's autocast copy under LoRA is V h c)
    head_items = tuple((t, -1) for t in _ends(x, stage, ly)[1])
    ahead = extended(saved, head_items, detail) if head_items else saved
    # (held in `saved` where checkpointed layers keep it)
    mask = None if any(ly.flags) else forward_mask(x)
    extra: list[tuple[Term, int]] = []
    # autocast's weight cache lives for the forward: counted apart for every layer
    forward_cache = bool(ckpt) and n.autocast and not ly.cache
    if forward_cache:
        for (_, act, _), stored in zip(ly.kinds, ly.stored, strict=True):
            extra += [(t, stored) for t in act.weight_copies]
    if mask:
        extra.append((mask, 1))
    held = held_embedding(x, ly.first,
                          ly.flags[0]) if stage.embedding else None
    if held is not None:
        extra.append((held, 1))
    if ms.lingering:
        extra.append((ms.lingering, 1))
    forward_extra = part(tuple(extra), detail) if extra else None
    # at the loss the base model has returned: its masks and its embeddings' output are freed,
    # its last hidden state held (traced: llama-3.1-8b-4L eager at 8K tokens frees its 256 MiB
    # mask before the head)
    hidden = final_hidden(x) if stage.head else None
    loss_extra = forward_extra
    if mask or held is not None or hidden is not None:
        at_loss = [(t, k) for t, k in extra if t is not mask and t is not held]
        if hidden is not None:
            at_loss.append((hidden, 1))
        loss_extra = part(tuple(at_loss), detail) if at_loss else None
    loss = logits_memory(x) if stage.head and (mix is None or run.heads) else None
    units = ms.expert_units is not None
    head_fwd = head_bwd = gathered
    if ms.gathered_layer is not None and not x.fsdp_collectives:
        # the layer FSDP counts beside the root at the head is the last one's all-gather output
        # (left behind in forward, prefetched for backward): none on one rank
        head_fwd = head_bwd = part_of(ms.gathered_root)
    if ms.live is not None:
        head_fwd, head_bwd = _live(x, ms, "forward_head"), _live(x, ms, "backward_head")
    if units:
        head = x.counts.lm_head or x.counts.embedding  # tied: the embedding's unit is kept
        R_h = head // x.tp if stage.head else 0
        head_fwd = part_of(HEAD_KEPT(R_h, n.gathered_weight)) if R_h else None
        head_bwd = part_of(HEAD_GATHERED(R_h, n.gathered_weight)) if R_h else None
    # Recomputing a checkpointed layer rebuilds its activations; the residual it saves is the
    # checkpoint's own input, already counted, where the norms keep the residual itself.
    alive = ly.alive(widest)
    residual = x.T * x.h * max(n.residual, n.compute)
    # the top layer's incoming gradient is a receive buffer where the stage sends its output
    incoming = residual if sent is not None and (mix is None or run.sends) else 0
    # the last projection's backward frees its input, unless a split backward's input pass
    # keeps the graph (retain_graph) for the weights'
    freed = 0 if fl.split else widest.last_input
    new = _new_last_grad(x, ms, fl, accumulating, pipelined) if freed else 0
    # the top layer's own checkpointing: every Nth layer or the first N may leave it out
    top_ckpt = bool(ly.flags) and ly.flags[-1]

    def recomputing(transient: int, cleared: bool, act: LayerActivations = widest,
                    freed_at: int = freed, new_at: int = new, softmax: bool = False) -> Term:
        """A layer's backward (the widest's, or `act`'s) over its recomputation at a
        `transient`-byte moment; `cleared`: its weights recast (autocast's cache empty) and no
        incoming gradient; `softmax`: its eager softmax's, not beside the recomputed forward's
        moment (`SOFTMAX_BACKWARD_RECOMPUTE`)."""
        into = 0 if cleared else incoming
        if softmax:
            return SOFTMAX_BACKWARD_RECOMPUTE(
                transient - into, freed_at, new_at,
                ly.recomputed(act) if cleared else ly.alive(act), act.recomputed_shared)
        return LAYER_BACKWARD_RECOMPUTE(
            transient - into, _recompute_forward(act), residual - into + act.before_recompute,
            ly.recomputed(act) if cleared else ly.alive(act), act.recomputed_shared, freed_at,
            new_at)

    recompute = None
    if ckpt:
        # (the layer's weight copies are among the forward cache's, not again with it)
        cached = sum(t.bytes for t in widest.weight_copies) if forward_cache else 0
        # (a dense gated layer's, fully checkpointed: what it holds, saving nothing)
        layer_fwd = widest.checkpointed_forward or LAYER_FORWARD_RECOMPUTE(
            _widest_forward(widest), alive - cached - _scores(widest), widest.kept_in_saved)
        recompute = layer_bwd = recomputing(widest.backward_transient.bytes, False)
        layer_bwd_after = recomputing(widest.backward_transient.bytes, True) \
            if ly.cleared else layer_bwd
    if not top_ckpt:
        layer_fwd = widest.forward_transient
        layer_bwd = LAYER_BACKWARD(widest.backward_transient.bytes, incoming, freed, new)
        if not ckpt:
            layer_bwd_after = LAYER_BACKWARD(widest.backward_transient.bytes, 0, freed, new)
    # the first layer at its own kind's width where it is not the widest (DeepSeek-V3's dense
    # first layer below MoE ones; Gemma 3's first, a sliding layer, below global ones under
    # SDPA's masked kernel): its saved activations, its backward's transient and, where it
    # adds in place, its last projection's new gradient
    first_act = ly.first
    first_bwd = layer_bwd_after
    if first_act is not widest:
        freed_1 = 0 if fl.split else first_act.last_input
        new_1 = _new_last_grad(x, ms, fl, accumulating, pipelined,
                               _layer_trainable_at(x, ms, ly, 0)[2]) if freed_1 else 0
        if ckpt:
            first_bwd = recomputing(first_act.backward_transient.bytes, ly.cleared, first_act,
                                    freed_1, new_1)
        else:
            first_bwd = LAYER_BACKWARD(first_act.backward_transient.bytes, 0, freed_1, new_1)
    split_softmax = False  # the split input pass's widest first-layer moment is its softmax's
    if fl.split:  # the input pass frees nothing: at an eager softmax the probabilities stay
        at_softmax_split = _split_softmax(x, first_act)
        split_softmax = at_softmax_split.bytes > first_bwd.bytes
        first_bwd = max(first_bwd, at_softmax_split, key=lambda t: t.bytes)
    moments = []
    if loss:
        moments.append(_moment("forward.loss", states, earlier, head_fwd, saved, loss_extra,
                               loss[0]))
        matmul = head_matmul(x, False)
        if matmul is not None:
            moments.append(_moment("forward.head_matmul", states, earlier, head_fwd, saved,
                                   loss_extra, matmul))
    # FSDP2's all-gather output of the last layer, held through its forward (no next
    # all-gather copies out before the backward's first)
    last_ag = LAST_ALL_GATHER(_gathered_at(x, ms, ly, len(ly.kind_of) - 1).bytes) \
        if ms.gathered_layer and not units and x.fsdp_collectives and ms.live is None \
        and x.pp == 1 else None
    forward = _moment("forward.last_layer", states, earlier, gathered, ahead, forward_extra,
                      layer_fwd, last_ag)
    at_softmax = _forward_at_softmax(ly, widest, alive - cached, forward_cache, ahead,
                                     forward_extra, detail) if ckpt and top_ckpt else None
    if at_softmax is not None:  # (the wider of the softmax's moment and the MLP's)
        softmax = _moment("forward.last_layer", states, earlier, gathered, *at_softmax, last_ag)
        forward = softmax if softmax.bytes > forward.bytes else forward
    moments.append(forward)
    if x.ep > 1 and not x.megatron and stage.moe_layers:
        moments.append(_moment("forward.experts_combine", states, earlier, gathered, ahead,
                               forward_extra, EP_COMBINE(x.routed, x.H, expert_width(x), x.T)))
    if ms.live is not None and ms.live.forward_router:
        moments.append(_router_zero3(x, ms, ly, states, ahead, forward_extra))
    if ms.live is not None and ms.live.forward_copy:
        # the layer has saved all it keeps (at the down projection's base, its adapter's
        # input too, not made yet)
        top = x.counts.dense_layer
        assert top is not None  # (a dense last layer: the replay records none on an MoE one)
        moments.append(_moment("forward.prefetch_copy", states, earlier,
                               _live(x, ms, "forward_copy"), ahead, forward_extra,
                               down_adapter_forward(x, top, ms.live.copy_in_adapter)))
    if ms.live is not None and stage.head and not x.chunked_loss:
        moments.append(_final_norm(x, stage, ms, ly, states, earlier, saved, forward_extra,
                                   detail))
    flat = x.fsdp_collectives
    if ms.gathered_layer and ms.gathered_root and ms.live is None and x.pp == 1 and not units \
            and flat:
        layer = _gathered_at(x, ms, ly, 0)  # (a dense first layer: gathered at its width)
        moments.append(_moment("forward.fsdp_start", states, earlier,
                               gathered if layer is ms.gathered_layer else
                               part_of(layer, ms.gathered_root),
                               ROOT_ALL_GATHER(ms.local.root, n.gathered_weight, layer.bytes)))
    elif ms.gathered_model and not pipelined and ms.live is None and not units and flat:
        # at stage 2 too: the root resharded by its post-backward, gathered again, and the
        # first layer's all-gather beside its output (traced: QLoRA on a 70B width, +38.9%
        # with every weight at the compute width and this moment missing, random runs)
        layer = _gathered_at(x, ms, ly, 0)
        moments.append(_moment("forward.fsdp_start", states, earlier,
                               part_of(GATHERED_ROOT(ms.local.root, n.gathered_weight), layer),
                               ROOT_ALL_GATHER(ms.local.root, n.gathered_weight, layer.bytes)))
    if ms.gathered_layer and not units and flat:  # the last layer's prefetch: nothing saved yet
        moments.append(_moment("forward.fsdp_prefetch", states, earlier, gathered,
                               _before_last(ly, ahead, detail), forward_extra,
                               ALL_GATHER(_gathered_at(x, ms, ly, max(0, len(ly.kind_of) - 2)).bytes,
                                          _gathered_at(x, ms, ly, len(ly.kind_of) - 1).bytes)))
    elif ms.lingering and not pipelined and ms.live is None and not units and flat:
        # at stage 2 the last layer's all-gather output is copied out beside the one before
        # it, which lingers (`ms.lingering`), every layer gathered (traced: LoRA on an 8B
        # width, FSDP2 x 4 at stage 2, -9.2% without it, found by random runs)
        moments.append(_moment("forward.fsdp_prefetch", states, earlier, gathered,
                               _before_last(ly, ahead, detail), forward_extra,
                               LAST_ALL_GATHER(_gathered_at(x, ms, ly, len(ly.kind_of) - 1).bytes)))
    bucket = ms.reduce_bucket
    # a later micro-batch's backward leaves the cached weight copies' gradients for last: at
    # the first layer those of the layers above it wait, at the end all of them
    late_above: Items = ()
    late_all: Items = ()
    late_head: Items = ()
    unit_cache = unit[0].cache if unit else ly.cache
    if unit_cache and accumulating and not fl.split:  # (zero bubble: the weights' backward)
        copies = sum(t.bytes * k for t, k in unit_cache)
        first_copies = sum(t.bytes for t in widest.weight_copies)
        # at a layer's widest moment its last projection's backward has run: its copy's
        # gradient waits too (a routed expert's grouped_mm is not autocast: no copy)
        dense = any(kind != "moe" and act is widest for kind, act, _ in ly.kinds)
        last = ms.local.per_layer_last if dense and not x.lora else 0
        late_above = ((COPY_GRADS((copies - first_copies) // n.compute + last, n.compute), 1),)
        late_all = ((COPY_GRADS(copies // n.compute, n.compute), 1),)
        head_copy = sum(t.bytes for t, _ in ly.cache if t.formula is HEAD_COPY)
        if head_copy or last:  # at the top layer's backward: the head's and its last projection's
            late_head = ((COPY_GRADS(head_copy // n.compute + last, n.compute), 1),)
    # the schedule holds the stage's output through its backward (the stage's popped
    # `fwd_cache`; on the head's stage the logits, `stage_output`, also the schedule's
    # `output`); a rank of chunks runs its other chunks' backwards apart from the head's
    kept = stage_output(x) if x.pp > 1 and stage.head else None
    # a split backward's input pass keeps its graph (retain_graph) to its end: on the head's
    # stage what the loss saved stays beside the logits past the loss's backward
    retained = kept_logits(x) if kept and fl.split else kept
    if mix is not None:  # the running chunk-micro-batch's: the head's logits or its output
        kept_items: Items = ((retained, 1),) if retained and run.heads else \
            ((sent, 1),) if sent and run.sends else ()
    else:
        kept_items = ((retained, 1),) if retained and stage.unit is None else \
            ((sent, 1),) if sent else ()
    schedule_kept = part((*kept_items, *late_head), detail) if kept_items or late_head \
        else None
    if mix is None and times > 1:
        other_batches = scaled(one, times - 1, detail)
    weight_pass: list[tuple[Term, int]] = []
    # beside the first layer's own: what FSDP's prefetch counts below it, and the mask the
    # checkpointed layers hold to the last one's backward
    layer_below = tuple(term for term in (_layer_below(x, stage, ms, ly, ckpt),
                                          forward_mask(x) if ly.checkpointed else None)
                        if term is not None)
    if fl.split:
        # zero bubble's input backward (retain_graph) frees nothing of the micro-batch it runs:
        # all of it stays beside the others, with its output gradients; the weight pass over
        # checkpointed layers recomputes them after it (`backward.weight_pass`)
        others: Part | None = extended(saved_after, tuple(_output_grads(x, stage)), detail)
        # at the first layer's widest moment its own output gradients are those its backward
        # has kept so far: at its MLP's, the MLP's, in its transient; at its eager softmax's,
        # those after the attention core; those of the layers above it beside them
        above = _output_grads(x, stage, first_own=False)
        others_first: Part | None = extended(saved_after, (*above, *_first_output_grads(
            x, stage, first_act, split_softmax)), detail)
        weight_pass = _weight_pass(x, stage, ly, accumulating, mix, own > 1)
        done = _beside(saved_after if ckpt else others, tuple(weight_pass), detail) \
            if weight_pass else others
        ended = others  # (the weight pass frees its recomputations as it ends)
        first: Term | Part | None = None
    else:
        others = _beside(other_batches, (*holds_after, *late_above), detail)
        done = _beside(other_batches, (*holds_after, *late_all), detail)
        first_own: Term = FIRST_LAYER_INPUT(first_act.checkpoint_input.bytes - ly.received) \
            if ckpt else FIRST_LAYER(ly.alive(first_act) - ly.received)
        first = _with_below(first_own, layer_below, detail)
    # the loss, the head and the final norm have run this micro-batch's backward: its saved
    # tensors are freed, not the other micro-batches' (GPipe's last stage holds them all)
    if times == 1:
        body = extended(ly.body, holds, detail) if holds else ly.body
    elif stage.unit is None:
        body = joined(scaled(one, times - 1, detail), ly.body, detail)
        if holds:
            body = extended(body, holds, detail)
    elif mix is not None and run.heads:  # the head's saved tensors are freed
        assert chunks is not None
        body = _chunk_batches(x, stage, ly, chunks, mix.alive, detail, heads=beside.heads)
        if holds:
            body = extended(body, holds, detail)
    else:
        body = saved
    top_written = earlier or _late_written(x, ms, fl, accumulating, widest) \
        or _first_written(x, ms, fl, accumulating, widest)
    top_gathered = _top_gathered(x, stage, ms, ly, backward_gathered, accumulating, detail)
    variants: list[tuple[Part | None, Term]] = [(top_gathered, layer_bwd)]
    if widest.softmax_backward is not None and top_gathered is not None and not units:
        # the MLP's backward is the layer's widest, but FSDP holds the unsharded gradients of
        # everything after the attention core beside the eager softmax's, later
        softmax_bwd = widest.softmax_backward.bytes
        variants.append((_top_gathered(x, stage, ms, ly, backward_gathered, accumulating, detail,
                                       at_softmax=True),
                         recomputing(softmax_bwd, False, softmax=True) if top_ckpt
                         else LAYER_BACKWARD(softmax_bwd, incoming, freed, new)))
    released = _released_at_softmax(x, ms, widest, top_ckpt)
    if released is not None and widest.mlp_backward is not None and top_gathered is not None:
        # DeepSpeed's ZeRO-3 has released the weights of everything after the attention core
        # by its softmax's backward: that moment without them, the MLP's with them, the wider
        variants = [(top_gathered, LAYER_BACKWARD(widest.mlp_backward.bytes, incoming, freed,
                                                  new)),
                    (extended(top_gathered, ((released, -1),), detail), layer_bwd)]
    moments.append(max((_moment("backward.last_layer", states, top_written, gathered, body,
                                transient, bucket, schedule_kept)
                        for gathered, transient in variants), key=lambda m: m.bytes))
    if recompute is not None and not top_ckpt:
        # the highest checkpointed layer recomputes below the top ones, their backward done
        plain = len(ly.flags) - 1 - max(i for i, c in enumerate(ly.flags) if c)
        moments.append(_moment("backward.recomputed_layer", states,
                               earlier or _first_written(x, ms, fl, accumulating, widest,
                                                         plain),
                               _top_gathered(x, stage, ms, ly, backward_gathered, accumulating, detail),
                               _below_recomputed(ly, body, detail), recompute, bucket,
                               schedule_kept))
    head_norm = _offload_head_norm(x, stage, ms)
    if head_norm is not None and mix is None:
        moments.append(_moment("backward.offload_norm", states, earlier, body, head_norm,
                               bucket, schedule_kept))
    layer_norm = _offload_layer_norm(x, stage, ms, ly, alive - widest.recomputed_shared
                                     if top_ckpt else 0, residual)
    if layer_norm is not None and mix is None:
        moments.append(_moment("backward.offload_layer_norm", states, earlier, body, layer_norm,
                               bucket))
    reduces = _offload_reduces(x, stage, ms) if mix is None else []
    at_reduce: list[Moment] = []
    top = x.counts.dense_layer  # (`_offload_reduces`: a dense top layer, where any)
    for waiting, partition_norm, ran, trigger in reduces:
        assert top is not None
        gathered_top = top_gathered
        if x.N > 1 and gathered_top is not None and ran:  # (the projections that ran their
            # backward: their gathered weights released)
            gathered_top = extended(gathered_top, ((DS_GATHERED(ran, x.n.weight), -1),),
                                    detail)
        at_reduce.append(_moment("backward.offload_reduce", states, earlier, gathered_top, body,
                                 waiting, partition_norm, schedule_kept,
                                 _at_reduce(x, top, trigger, alive - widest.recomputed_shared
                                            if top_ckpt else 0)))
    if at_reduce:
        moments.append(max(at_reduce, key=lambda m: m.bytes))
    prefetch = _prefetch_cast(x, ms, ly)
    if prefetch is not None and mix is None:
        moments.append(_moment("backward.fsdp_prefetch", states, earlier,
                               part_of(ms.gathered_layer, ms.gathered_root, ms.root_grads),
                               body, prefetch, bucket, schedule_kept))
    units_reduce = _layer_reduce(x, stage, ms, ly, accumulating, detail) if mix is None \
        else None
    if units_reduce is not None:
        moments.append(_moment("backward.layer_reduce", states, earlier, *units_reduce))
    first_reduce = _first_reduce(x, stage, ms, accumulating, detail) \
        if mix is None and not units else None
    if first_reduce is not None:
        moments.append(_moment("backward.first_reduce", states, *first_reduce))
    # the layers below the top one: beside the other micro-batches
    # (a split backward's input pass popped it from fwd_cache: gone by the weights' pass)
    others = _beside(others, kept_items, detail)
    if fl.split:
        others_first = _beside(others_first, kept_items, detail)
    done = done if fl.split else _beside(done, kept_items, detail)
    reduce = _experts_reduce(x, stage, ms, states, ly, others, accumulating) if units else None
    written = _written(x, stage, ms, accumulating)
    if reduce is not None:
        moments.append(reduce)
    else:
        firsts: list[tuple[Term | Part | None, Part | None, Term | Part | None]] = [
            (written, _first_gathered(x, stage, ms, ly, below, detail), first)]
        own_first = _first_own(x, stage, ms, ly, accumulating, detail) if first else None
        if own_first is not None:  # (without the layer below: the checkpointed layers' mask
            # stays)
            firsts.append((*own_first, _with_below(first_own, layer_below[1:], detail)))
        moments.append(max((_moment("backward.first_layer", states, w, g,
                                    others_first if fl.split else others, f,
                                    first_bwd, bucket)
                            for w, g, f in firsts), key=lambda m: m.bytes))
        norm = input_norm_backward(x) if fl.split else None
        if norm is not None:  # the input pass ends at the first layer's input norm, in fp32,
            # every output gradient of the unit kept for the weight pass
            moments.append(max((_moment("backward.input_norm", states, w, g, others, f, norm,
                                        bucket) for w, g, f in firsts), key=lambda m: m.bytes))
    if weight_pass:  # after the input's backward: its transient is gone
        moments.append(_moment("backward.weight_pass", states, written if accumulating or (
            mix is None) else _chunk_written(x, stage, ms), below, done, bucket))
    late = None if units else _first_layer_late(x, stage, ms, ly, ckpt, accumulating,
                                                  layer_below)
    if late is not None:
        moments.append(_moment("backward.first_layer_late", states, late[0], late[1], others,
                               late[2], late[3], bucket))
        top_late = _below_top_late(x, stage, ms, ly, accumulating, late, detail) \
            if mix is None and times == 1 else None
        if top_late is not None:
            moments.append(top_late)
    def backward_at(i: int) -> tuple[Term, Term | None]:
        """Layer `i`'s backward at its own checkpointing (every Nth layer: not the top's), and
        its eager softmax's where the MLP's is the wider on its own."""
        recomputed = ckpt and ly.flags[i]
        bwd = layer_bwd_after if recomputed or not ckpt else LAYER_BACKWARD(
            widest.backward_transient.bytes, 0, freed, new)
        softmax = None if widest.softmax_backward is None or units else \
            recomputing(widest.softmax_backward.bytes, ly.cleared, softmax=True) \
            if recomputed else \
            LAYER_BACKWARD(widest.softmax_backward.bytes, 0, freed, new)
        return bwd, softmax

    below_top = _below_top(x, stage, ms, ly, accumulating, backward_at, detail) \
        if mix is None and times == 1 else None
    if below_top is not None:
        moments.append(below_top)
    # accumulating, the last MoE layer's (not traced for a rank of chunks or a split backward)
    experts = None if accumulating and (fl.split or stage.unit is not None) else \
        _experts_backward(x, stage, ms, ly, accumulating)
    if experts is not None and accumulating:
        rest = _beside(other_batches, holds_after if ly.all_checkpointed else holds, detail)
        moments.append(_moment("backward.experts_accumulating", states, experts[0], rest,
                               experts[1], experts[2], schedule_kept))
    elif experts is not None:
        moments.append(_moment("backward.experts", states, experts[0], others, experts[1],
                               experts[2]))
        combine = _experts_combine(x, stage, ms, ly)
        if combine is not None:
            moments.append(_moment("backward.experts_combine", states, combine[0], others,
                                   combine[1], combine[2]))
        experts_softmax = _experts_softmax(x, stage, ms, ly, accumulating)
        if experts_softmax is not None:
            written_above, saved_below, softmax_moment = experts_softmax
            moments.append(_moment("backward.experts_softmax", states, written_above, others,
                                   saved_below, softmax_moment))
    offload_experts = _experts_offload(x, stage, ms, ly) if mix is None and times == 1 \
        else None
    if offload_experts is not None:
        moments.append(_moment("backward.experts_offload", states, *offload_experts, bucket))
    fsdp_experts = _experts_fsdp(x, stage, ms, ly, accumulating, detail) \
        if mix is None and times == 1 else None
    if fsdp_experts is not None:
        moments.append(_moment("backward.experts_fsdp", states, *fsdp_experts))
    if ms.live is not None and stage.moe_layers:
        moments.append(_experts_zero3(x, stage, ms, ly, states, other_batches))
    moments.extend(_end_of_backward(x, stage, ms, states, ended if fl.split else done,
                                    accumulating))
    # (Megatron-LM runs its own schedule, not torch.distributed.pipelining's post-backward)
    if pipelined and mix is None and not units and not x.megatron:
        moments.extend(_stage_reduce(x, ms, states))
    if late_all:
        moments.append(_moment("backward.weight_copies", states,
                               None if pipelined else ms.gradients, ms.gathered, done,
                               COPY_GRAD_CAST(_cast_last(x, stage), n.grad), bucket))
    if loss:  # no layer has gradients yet: only the prefetched layer is gathered
        moments.append(_moment("backward.loss_grad", states, earlier, head_bwd, saved, loss[1],
                               kept))
        matmul = head_matmul(x, True)
        if matmul is not None:
            moments.append(_moment("backward.head_matmul", states, earlier, head_bwd, saved,
                                   matmul, kept))
        head_grad = _head_weight_grad(x, stage, ms, ly, fl, accumulating)
        if head_grad is not None:
            moments.append(_moment("backward.head_weight", states, earlier, head_bwd, saved,
                                   head_grad, kept))
        norm = head_norm_backward(x)
        if norm:
            moments.append(_moment("backward.head_norm", states, earlier, head_bwd, saved, norm,
                                   schedule_kept))
    # (DeepSpeed releases its reduce buckets at the end of backward)
    moments.append(_moment("optimizer_step", states, ms.step_gradients,
                           None if ms.step_gradients.formula is DS_GRAD_PARTITION else bucket,
                           ms.step_temporary))
    if ms.first_reduce is not None:  # DeepSpeed ZeRO-2 (its gradients' extra terms)
        moments = [_deepspeed_pending(x, m, ms, accumulating, detail) for m in moments]
    return moments


_GRADIENT_PARTS = ("earlier_gradients", "gradients_written", "gradients")


def _deepspeed_pending(x: Setup, m: Moment, ms: ModelStates, accumulating: bool,
                       detail: bool) -> Moment:
    """`m` with what DeepSpeed ZeRO-2 holds beside its gradients there: at the top layer's
    backward the gradients waiting at its first reduce (`DS_FIRST_REDUCE`); accumulating, the
    partition allocated again when a later micro-batch's backward first reduces a gradient of
    rank 0's share (`DS_PARTITION_AGAIN`), on one rank from the head's gradient on, over
    several only at the lowest layers' and the embedding's moments, rank 0's share beginning
    at the embedding, which backward reaches last (traced: a 4-layer 7B width at stage 2, at
    the first layer below the top on one rank, at the second layer on two)."""
    terms: list[Term] = []
    if m.name == "backward.last_layer" and ms.first_reduce is not None:
        terms.append(ms.first_reduce)
    if accumulating and ms.partition_again is not None and m.phase == "backward" \
            and m.name not in ("backward.loss_grad", "backward.head_norm") \
            and (x.N == 1 or m.name.startswith(("backward.first_layer", "backward.embedding"))):
        terms.append(ms.partition_again)
    names = MOMENTS[m.name].parts
    i = next((names.index(p) for p in _GRADIENT_PARTS if p in names), None)
    if not terms or i is None:
        return m
    held = m.parts[i]
    items = tuple((t, 1) for t in terms)
    if held is None:
        grads = terms[0] if len(terms) == 1 else part(items, detail)
    else:
        grads = extended(held, items, detail) if isinstance(held, Part) else \
            part(((held, 1), *items), detail)
    return _moment(m.name, *m.parts[:i], grads, *m.parts[i + 1:])


Chunks = tuple[tuple[Layers, Layers], ...]  # each chunk's layers, its input kept and received


def _chunk_units(x: Setup, stage: Stage, unit: tuple[Layers, Layers], detail: bool) -> Chunks:
    """The layers of each of a rank's chunks (in `Mix.alive`'s order), its input kept and
    received: the unit's (one chunk's), but a chunk's own where its layers are checkpointed
    otherwise (every Nth layer over chunks of a number of layers N does not divide)."""
    assert stage.unit is not None
    flags = x.checkpointed(stage.unit)
    out = []
    for first, n in _held_spans(x, stage):
        chunk = replace(stage.unit, first_layer=first)
        if n != stage.unit.layers or x.checkpointed(chunk) == flags:
            out.append(unit)
        else:
            out.append((layers(x, chunk, detail), layers(x, chunk, detail, receives=True)))
    return tuple(out)


def _chunk_batches(x: Setup, stage: Stage, ly: Layers, chunks: Chunks, alive: tuple[int, ...],
                   detail: bool, heads: int | None = None) -> Part:
    """The micro-batches `alive` (by chunk) of a rank's chunks, each with its chunk's saved
    tensors (`chunks`): those of the model's first stage with their input, the others' a
    receive buffer; the embedding's saved tensors with each of the first, the head's with each
    of the head stage's (`heads` of them where the running one's have been freed)."""
    held = x.held_stages(stage)[0]
    counts: dict[int, tuple[Part, int]] = {}  # (alike parts counted together)
    for (whole, received), n, i in zip(chunks, alive, held, strict=True):
        p = (whole if i == 0 else received).saved
        if n:
            counts[id(p)] = (p, counts.get(id(p), (p, 0))[1] + n)
    parts = [scaled(p, n, detail) for p, n in counts.values()]
    out = parts[0]
    for p in parts[1:]:
        out = joined(out, p, detail)
    b = _boundary(x, stage, alive)
    embedding, head = _ends(x, stage, ly)
    ends = tuple((t, k) for t, k in (*((t, b.first) for t in embedding),
                                     *((t, b.heads if heads is None else heads) for t in head))
                 if k)
    return extended(out, ends, detail) if ends else out


def _ends(x: Setup, stage: Stage, ly: Layers) -> tuple[tuple[Term, ...], tuple[Term, ...]]:
    """The rank's ends (`Layers.ends`): what the embedding saves, and what the head saves."""
    start = len(embedding_activations(x)) if stage.embedding else 0
    return ly.ends[:start], ly.ends[start:]


def _beside(p: Part | None, items: Items, detail: bool) -> Part | None:
    """`p` with `items` beside it (either may be empty)."""
    if not items:
        return p
    return extended(p, items, detail) if p else part(items, detail)


def _cast_last(x: Setup, stage: Stage) -> int:
    """Elements of the weight autocast casts last in the stage's forward (`COPY_GRAD_CAST`):
    the head's, else the last layer's last projection."""
    if stage.head:
        return x.vocab * x.H
    layer = x.counts.moe_layer if stage.moe_layers and x.arch.is_moe_layer(
        stage.first_layer + stage.layers - 1) else x.counts.dense_layer
    assert layer is not None  # a stage holds layers
    return sum(layer.linears[-1].local_counts(x.tp, x.ep))


def _head_weight_grad(x: Setup, stage: Stage, ms: ModelStates, ly: Layers, fl: Flight,
                      accumulating: bool) -> Term | None:
    """The head's backward (`HEAD_WEIGHT_GRAD`) where its new weight gradient is a temporary:
    a later micro-batch's, added in place to the one an earlier backward wrote, or under
    DeepSpeed's ZeRO-3, which reduces it into its partition; on a pipeline's last stage too,
    beside the logits the schedule keeps (not FSDP's unsharded gradients, a frozen head, or
    the fused loss's, which it computes in the forward)."""
    later = accumulating and ms.gathered_grads is None and _weights_written(x, ms, fl)
    reduced = ms.live is not None and not x.lora  # (traced: Llama 3.2 1B, ZeRO-3 x 4)
    if not ((later or reduced) and stage.head and not x.chunked_loss):
        return None
    n = x.n
    # autocast cast the weight (its cached copy, or inside DeepSpeed's ZeRO-3 linear): the
    # gradient comes in the compute dtype and is cast to the weight's
    cast = n.grad if n.casts_weights else 0
    head = sum(t.bytes for t in ly.ends if t.formula in (HEAD_INPUT, HEAD_COPY))
    return HEAD_WEIGHT_GRAD(x.T, x.h, x.vocab, n.compute, cast, head, norm_width(x))


def _new_last_grad(x: Setup, ms: ModelStates, fl: Flight, accumulating: bool, pipelined: bool,
                   last: int | None = None) -> int:
    """Bytes of the last projection's new weight gradient at that projection's backward, where
    autograd then adds it in place to the one an earlier backward wrote, in the same dtype (not
    an autocast copy's, whose gradient is cast after; low-precision weights under autocast have
    none): on one rank's own gradients, or FSDP2's
    unsharded ones under pipelining without a mixed-precision policy. FSDP's unsharded
    gradients otherwise are counted as such; a split backward's input pass computes none."""
    n = x.n
    if not accumulating or n.weight_copies or not _weights_written(x, ms, fl):
        return 0
    last = ms.local.per_layer_last if last is None else last  # (the widest layer's)
    if pipelined:
        return 0 if n.fsdp_mixed else last * n.fsdp_grads(n.grad)[0]
    if ms.gathered_grads is not None:
        return 0
    return last * n.grad


def _late_written(x: Setup, ms: ModelStates, fl: Flight, accumulating: bool,
                  act: LayerActivations) -> Term | None:
    """The gradients the step's first backward has written where its top layer's widest
    moment is its attention's softmax (`ATTENTION_BACKWARD_LAYER`), past the MLP's and the
    output projection's backward (`LATE_WRITTEN`)."""
    if (act.backward_transient.formula is not ATTENTION_BACKWARD_LAYER or accumulating
            or ms.gathered_grads is not None or not _weights_written(x, ms, fl)):
        return None
    past = ms.local.per_layer_trainable - _unwritten_at_softmax(x)
    return LATE_WRITTEN(past, ms.local.head_trainable, x.n.grad)


def _unwritten_at_softmax(x: Setup) -> int:
    """A layer's trainable parameters whose gradients its backward writes after its
    attention's softmax's: the projections before the attention core (with LoRA, their
    adapters)."""
    layer = x.counts.dense_layer or x.counts.moe_layer
    assert layer is not None
    before = before_attention_core(layer)
    if x.lora:
        return sum(rows * cols for lin in before if adapted(lin, x.lora_targets)
                   for rows, cols in adapter_shapes(lin, x.lora_rank, x.tp, x.ep))
    return sum(sum(lin.local_counts(x.tp, x.ep)) for lin in before)


def _first_written(x: Setup, ms: ModelStates, fl: Flight, accumulating: bool,
                   act: LayerActivations, above: int = 0) -> Term | None:
    """The gradients the step's first backward has written at its top layer's widest moment,
    its gating product's (`FIRST_WRITTEN`), or at that of a layer `above` layers below the
    top, theirs written whole (`ABOVE_WRITTEN`), where they are tensors of their own
    (`_weights_written`) and not FSDP's (counted unsharded)."""
    if (not act.last_input or accumulating or ms.gathered_grads is not None
            or not _weights_written(x, ms, fl)):
        return None
    local = ms.local
    if above:
        return ABOVE_WRITTEN(local.per_layer_trainable, above, local.per_layer_last,
                             local.head_trainable, x.n.grad)
    return FIRST_WRITTEN(local.per_layer_last, local.head_trainable, x.n.grad)


def _weights_written(x: Setup, ms: ModelStates, fl: Flight) -> bool:
    """The backward writes weight gradients as tensors of their own on the GPU: not a split
    backward's input pass, DeepSpeed's or Megatron-LM's buckets or the host; LoRA's are too
    small to matter."""
    return not (fl.split or x.lora or x.megatron or x.deepspeed) and accumulated(ms.gradients)


def _written(x: Setup, stage: Stage, ms: ModelStates, accumulating: bool, late: bool = False,
             own: bool = False, softmax: bool = False,
             unwritten: tuple[int, ...] | None = None, input_norm: bool = False) -> Term | None:
    """Gradients at the first layer's backward (`late`: past its MLP; `softmax`: at its eager
    attention's softmax, past its output projection too; `input_norm`: at its input norm's,
    past its attention). Under pipelining FSDP2
    writes its sharded gradients only after the last micro-batch's backward (torch's stage
    turns gradient sync off for every backward): none. Unless `accumulating` into gradients an
    earlier backward wrote, an untied embedding's gradient is not written yet, nor the first
    layer's own but for its last projection (its MLP's, `late`); with FSDP, the moment is the
    second layer's: its and the first one's sharded gradients are not written, nor FSDP2's
    root shard, which its post-backward writes at the end (traced: 8B-shaped stacks and
    mistral-7b, FSDP2 x 8)."""
    grads = ms.gradients
    if x.pp > 1 and ms.gathered_model is not None:
        return None
    local = ms.local
    if ms.per_backward:  # ZeRO-Offload: its big tensors', so far, but in the last micro-batch
        if accumulating:  # (the first's stand for any other before the last)
            return None
        m_e = x.counts.embedding if _offload_clone(x, stage, ms) else 0
        m_l = local.per_layer_mlp - (0 if late else local.per_layer_last)
        return GRADIENTS_WRITTEN(grads.bytes, m_e, m_l, x.n.grad)
    if accumulating or x.lora or not accumulated(grads):  # or held on the host
        return grads
    m_e = 0
    if ms.root_grads is not None:  # FSDP2's root post-backward writes its shard last
        m_e = -(-local.root_trainable // x.N)
    elif stage.embedding and not x.arch.tie_word_embeddings:
        m_e = -(-(x.counts.embedding // x.tp) // x.N) if x.z >= 2 else \
            x.counts.embedding // x.vocab_grad_split
    if ms.gathered_layer is not None or ms.gathered_model is not None:
        # the second layer's moment, the first's beside it (prefetched across ranks, or its
        # activations counted below: `_layer_below`), or the first layer's own (`own`: its
        # post-backward; on one rank, nothing prefetched, two layers)
        second = not own and (x.fsdp_collectives or _layer_below_counted(stage, ms))
        m_l = sum(-(-p // x.N) for p in unwritten) if unwritten is not None else \
            (2 if second else 1) * -(-local.per_layer_trainable // x.N)
    else:
        m_l = 0 if input_norm else _unwritten_at_softmax(x) if softmax else \
            local.per_layer_trainable - (local.per_layer_mlp if late else local.per_layer_last)
    if not m_e and not m_l:
        return grads
    # (from the whole: a stage mixing dense and MoE layers has smaller first layers than the
    # widest these count)
    m_l = min(m_l, max(0, grads.bytes // x.n.grad - m_e))
    return GRADIENTS_WRITTEN(grads.bytes, m_e, m_l, x.n.grad)


def _layer_units(x: Setup, ms: ModelStates) -> tuple[int, ...] | None:
    """The values of `GATHERED_GRADS` where FSDP gathers layer by layer in one backward per
    reduce (not DeepSpeed's coordinator, stage 2's whole model or a pipeline), else None."""
    grads = ms.gathered_grads
    if (grads is None or grads.formula is not GATHERED_GRADS or ms.live is not None
            or ms.gathered_model is not None or x.pp > 1 or ms.gathered is None):
        return None
    return tuple(int(v) for v in grads.values)


def _regathered(ms: ModelStates, grads: Term, detail: bool) -> Part:
    assert ms.gathered is not None
    return extended(ms.gathered, tuple((t, 1) for t in (grads, ms.root_grads) if t is not None),
                    detail)


def _late_own(ly: Layers, ckpt: int | bool, softmax: bool = False,
              input_norm: bool = False) -> Term:
    """The widest layer's own activations past its MLP's backward (`FIRST_LAYER_LATE`), or
    at its eager attention's `softmax`, later, or at its `input_norm`'s, last (all but what
    that norm keeps freed); `ckpt`: recomputed."""
    act = ly.widest
    if input_norm:
        freed = (ly.recomputed(act) if ckpt else ly.alive(act)) - ly.received - act.input_norm
    elif softmax:
        freed = ly.freed_by_softmax(act, bool(ckpt))
    else:  # the MLP's activations, and autocast's copies of its weights where they are the
        # layer's own (not the step's cache's)
        freed = act.mlp_bytes + (act.mlp_copies if ly.owns_copies(act, bool(ckpt)) else 0)
    if ckpt:
        return FIRST_LAYER_LATE(act.checkpoint_input.bytes - ly.received, ly.recomputed(act),
                                freed, act.recomputed_shared)
    return FIRST_LAYER_LATE(0, ly.alive(act) - ly.received, freed, 0)


def _scores(act: LayerActivations) -> int:
    """What eager attention saves of its scores: a checkpointed layer's forward, which saves
    nothing for backward, has freed them by its MLP's moment (the attention returned)."""
    return sum(t.bytes for t in act.saved if t.key == "activations/attention_scores")


def _widest_forward(act: LayerActivations) -> int:
    """A checkpointed layer's forward transient at its MLP's moment: eager attention's
    softmax, earlier, is a moment of its own (`_forward_at_softmax`)."""
    fwd = act.forward_transient
    if fwd.formula is not FORWARD_TRANSIENT_EAGER:
        return fwd.bytes
    T, H, h, r = fwd.values[:4]
    return int(T * H * 4 + T * h * r)


def _forward_at_softmax(ly: Layers, act: LayerActivations, built: int, copies: bool,
                        saved: Part, extra: Part | None, detail: bool
                        ) -> tuple[Part, Part | None, Term] | None:
    """A checkpointed layer's forward at eager attention's softmax, its scores beside the
    probabilities (`saved`, `extra` and the layer's term of `forward.last_layer`): of the
    activations it rebuilds (`built`) nothing after the softmax yet (`after_softmax`), of the
    outputs its checkpoint keeps only those before it, and (`copies`: this forward's autocast
    cache) of its weights' copies only those of the projections before it. None where the
    layer's attention is not eager."""
    fwd = act.softmax_forward
    if fwd is None:
        return None
    # the formula's softmax branch alone, with the layer's saved tensors counted apart (A_l)
    at_softmax = FORWARD_TRANSIENT_EAGER(0, 0, 0, 0, *fwd.values[4:11], 0).bytes
    layer = LAYER_FORWARD_RECOMPUTE(at_softmax, built - act.after_softmax,
                                    act.kept_in_saved - act.kept_saved_after_softmax)
    kept = act.checkpoint_input
    if act.kept_after_softmax and kept.formula is SELECTIVE_KEPT and not ly.received:
        T, h, r, K_o = kept.values
        saved = extended(saved, ((kept, -1),
                                 (SELECTIVE_KEPT(T, h, r, K_o - act.kept_after_softmax), 1)),
                         detail)
    base = next((t for t in act.weight_copies if t.formula is WEIGHT_COPIES), None)
    if copies and act.after_softmax_copies and base is not None and extra is not None:
        w, W_l = base.values
        extra = extended(extra, ((base, -1),
                                 (WEIGHT_COPIES(w, W_l - act.after_softmax_copies // w), 1)),
                         detail)
    return saved, extra, layer


def _below_recomputed(ly: Layers, body: Part, detail: bool) -> Part:
    """`body` at the highest checkpointed layer's backward: the layers above it (not
    checkpointed) have run theirs and freed what they saved (`SAVED_BELOW`)."""
    top = max(i for i, flag in enumerate(ly.flags) if flag)
    acts = {kind: act for kind, act, _ in ly.kinds}
    above = sum(ly.alive(acts[kind]) for kind in ly.kind_of[top + 1:])
    return part(((SAVED_BELOW(body.bytes, above), 1),), detail)


def _kept(ly: Layers, checkpointed: bool, act: LayerActivations | None = None) -> int:
    """What one layer (`act`, or the widest) keeps in `Layers.body`: its input where
    checkpointed, else its saved activations."""
    act = act or ly.widest
    return act.checkpoint_input.bytes if checkpointed else ly.alive(act)


def _top_shard_written(x: Setup, stage: Stage, ms: ModelStates, accumulating: bool,
                       layers: int = 1) -> Term | None:
    """The gradients written when only the top `layers` layers' shards are
    (`GRADIENTS_WRITTEN`), or all of them, accumulating into an earlier backward's."""
    grads = ms.gradients
    if accumulating or x.lora or not accumulated(grads):
        return grads if accumulating else None
    local, g = ms.local, x.n.grad
    shard = -(-local.per_layer_trainable // x.N)
    root = -(-local.root_trainable // x.N) if local.root_trainable else 0
    # unwritten: all but the top's shard (counted from the whole, so that stages mixing
    # dense and MoE layers, whose layers differ in size, count the top's only)
    return GRADIENTS_WRITTEN(grads.bytes, root, max(0, grads.bytes // g - root - layers * shard),
                             g)


def _below_top_late(x: Setup, stage: Stage, ms: ModelStates, ly: Layers,
                    accumulating: bool, late: tuple[Term | Part | None, Part | None,
                                                    Term | Part, Term], detail: bool
                    ) -> Moment | None:
    """FSDP's layer-by-layer units: the late moment of a layer under the top, every layer
    below it alive, the shards of the layers above it written (or all, accumulating) and the
    reduce-scatter of the one above in flight. Each layer down writes its shard and frees its
    activations, so the widest late moment is the layer below the top's or the first layer's;
    under every Nth layer checkpointed, the highest recomputed one below a plain layer's too
    (`_widest_candidates`: random run 769/2)."""
    stage2 = _stage2_units(x, ms)
    layers = (stage.unit or stage).layers
    if (_layer_units(x, ms) or stage2) is None or layers < 3 or ly.kinds[0][0] != "dense" \
            or len(ly.kinds) > 1:
        return None
    states = _with_buffers(x, stage, ms, detail)
    # the first layer's widest late moment: past its MLP, at its softmax or at its input norm
    softmax = late[3].formula not in (LATE_TRANSIENT, INPUT_NORM_TRANSIENT)
    input_norm = late[3].formula is INPUT_NORM_TRANSIENT
    # at stage 2 every layer below gathered, the one above's gradients unsharded
    unsharded = None if stage2 is None else LATE_GATHERED(
        0, stage2[1], ms.local.per_layer_trainable if input_norm else ms.local.per_layer_mlp,
        *stage2[3:])
    best: Moment | None = None
    for at in _widest_candidates(ly.flags):
        above = range(at + 1, layers)
        gathered = late[1] if unsharded is None else extended(
            _stage2_held(x, ms, ly, detail, len(above)),
            tuple((t, 1) for t in (unsharded, ms.root_grads) if t is not None), detail)
        below = SAVED_BELOW(ly.body.bytes, sum(_kept(ly, ly.flags[i]) for i in range(at, layers)))
        # (the layer's own at the late moment's transient: a norm's, or eager's softmax's)
        own = _late_own(ly, ly.flags[at], softmax, input_norm)
        moment = _moment("backward.below_top_late", states,
                         _top_shard_written(x, stage, ms, accumulating, len(above)), gathered,
                         part(((below, 1), (own, 1)), detail), late[3])
        if best is None or moment.bytes > best.bytes:
            best = moment
    return best


def _below_top(x: Setup, stage: Stage, ms: ModelStates, ly: Layers, accumulating: bool,
               backward_at: Callable[[int], tuple[Term, Term | None]], detail: bool
               ) -> Moment | None:
    """FSDP's layer-by-layer units at stage 3: a layer under the top at its widest backward
    moment (its gating product's, or its last projection's; where the MLP's is the wider on
    its own, its eager softmax's too, the unsharded gradients of everything after the
    attention core beside it), every layer below it alive, the next one prefetched, the
    shards of the layers above it written and the reduce-scatter of the one above in flight.
    Each layer down writes one more shard and frees its activations, so the widest is the
    layer below the top where a layer's activations outweigh its shard (traced: a Qwen3-8B
    width on four layers under FSDP2 x CP2, -2.95% without it, random runs), else the second
    (checkpointed layers keep only their input; the first prefetches nothing: moments of its
    own). `backward_at`: a layer's backward and its softmax's, by its index."""
    values = _layer_units(x, ms)
    L = (stage.unit or stage).layers
    if values is None or L < 3 or ly.kinds[0][0] != "dense" or len(ly.kinds) > 1:
        return None
    G_l, P_lt, _, g_u, g_r = values
    states = _with_buffers(x, stage, ms, detail)
    best: Moment | None = None
    for at in _widest_candidates(ly.flags):
        above = range(at + 1, L)
        saved = part(((SAVED_BELOW(ly.body.bytes, sum(_kept(ly, ly.flags[i]) for i in above)),
                       1),), detail)
        written = _top_shard_written(x, stage, ms, accumulating, len(above))
        layer_bwd, softmax_bwd = backward_at(at)
        moment = _moment("backward.below_top", states, written, ms.backward_gathered, saved,
                         layer_bwd)
        if softmax_bwd is not None:
            after_core = ms.local.per_layer_trainable - _unwritten_at_softmax(x)
            moment = max(moment, _moment(
                "backward.below_top", states, written, _regathered(
                    ms, GATHERED_GRADS(G_l, P_lt, after_core, g_u, g_r), detail), saved,
                softmax_bwd), key=lambda m: m.bytes)
        if best is None or moment.bytes > best.bytes:
            best = moment
    return best


@lru_cache(maxsize=256)
def _widest_candidates(flags: tuple[bool, ...]) -> tuple[int, ...]:
    """The layers between the first and the top (by `flags`: checkpointed or not) whose
    backward may be the widest below the top. A layer's moment differs from the one a
    checkpointing period below it by what the period keeps less its shards, the same down
    the stack, so among layers of one pattern (the layer's flag and its neighbours') the
    widest is the highest or the lowest: with every layer alike, the layer below the top and
    the second; with every Nth, the highest recomputed layer below a plain one too (random run
    769/2, five layers, every second: -3.48% without it)."""
    ends: dict[tuple[bool, ...], tuple[int, int]] = {}
    for i in range(1, len(flags) - 1):
        low, high = ends.get(flags[i - 1:i + 2], (i, i))
        ends[flags[i - 1:i + 2]] = (min(low, i), max(high, i))
    return tuple(sorted({i for pair in ends.values() for i in pair}, reverse=True))


def _stage2_units(x: Setup, ms: ModelStates) -> tuple[int, ...] | None:
    """`_layer_units` for FSDP2 at stage 2 (`UNSHARDED_GRADS`), nothing prefetched: every
    layer is gathered from its forward to its own post-backward, on one rank too (random run
    761/8: the top's reduce beside the layers below, gathered, -5.21% without it); else None."""
    grads = ms.gathered_grads
    if (grads is None or grads.formula is not UNSHARDED_GRADS or ms.live is not None
            or x.pp > 1):
        return None
    return (0, *(int(v) for v in grads.values))


def _stage2_held(x: Setup, ms: ModelStates, ly: Layers, detail: bool, above: int = 1) -> Part:
    """FSDP2 at stage 2 once the post-backwards of the top `above` layers have resharded
    them: the whole model gathered but those."""
    assert ms.gathered_model is not None
    L = len(ly.kind_of)
    return part(((ms.gathered_model, 1),
                 *((_gathered_at(x, ms, ly, i), -1) for i in range(L - above, L))), detail)


def _top_gathered(x: Setup, stage: Stage, ms: ModelStates, ly: Layers,
                  backward_gathered: Part | None, accumulating: bool, detail: bool,
                  at_softmax: bool = False) -> Part | None:
    """FSDP's layer-by-layer units at the top layer's backward: no layer above it has a
    reduce-scatter in flight (the root reduces last); the layer below it has the top's, the
    top's activations freed by then (`TOP_GATHERED_GRADS`: the wider of the two moments; on
    a stage of two layers the one below the top is the first, with moments of its own). At
    stage 2 every layer is gathered, the top's resharded below it (`TOP_UNSHARDED_GRADS`)."""
    u_r = int((stage.unit or stage).layers > 2)
    stage2 = _stage2_units(x, ms)
    if stage2 is not None:
        _, P_lt, P_ll, g_u, g_r = stage2
        top = TOP_UNSHARDED_GRADS(P_ll, g_u, u_r, P_lt, g_r, 0 if accumulating else x.n.grad,
                                  x.N, _kept(ly, ly.flags[-1]),
                                  _gathered_at(x, ms, ly, len(ly.kind_of) - 1).bytes)
        return part_of(ms.gathered_model, top, ms.root_grads)
    values = _layer_units(x, ms)
    if values is None:
        return backward_gathered
    G_l, P_lt, P_ll, g_u, g_r = values
    G_l = _prefetched_below_top(x, ms, ly, G_l)
    if at_softmax or (ly.widest.backward_transient.formula is ATTENTION_BACKWARD_LAYER
                      and (x.cp == 1 or x.eager)):
        # its widest moment is its eager attention's softmax: the gradients of everything
        # after the attention core (a MoE layer's experts' too) are unsharded beside it,
        # waiting for the layer's reduce-scatter (under CP too: eager attention is no ring;
        # SDPA's ring attention's moment is read apart)
        P_ll = ms.local.per_layer_trainable - _unwritten_at_softmax(x)
    # the top's activations freed by the layer below's moment, which rebuilds as much where it
    # is checkpointed too; where it is not (every Nth layer), what the top's recomputation
    # rebuilt is freed with nothing rebuilt in its place (its saved ones counted all along)
    freed = _kept(ly, ly.flags[-1]) + (ly.alive(ly.widest) - ly.widest.kept_in_saved
                                       if ly.flags[-1] and not ly.flags[-2] else 0)
    return _regathered(ms, TOP_GATHERED_GRADS(G_l, P_lt, P_ll, g_u, g_r, u_r, freed), detail)


def _layer_reduce(x: Setup, stage: Stage, ms: ModelStates, ly: Layers, accumulating: bool,
                  detail: bool) -> tuple[Part, Part, Term] | None:
    """FSDP's post-backward of the top layer (`LAYER_REDUCE`): resharded, the next layer
    prefetched in its place, its gradients' reduce-scatter input beside them (accumulating,
    the output is added into the shard an earlier backward wrote: no new one); the top's
    activations freed (`SAVED_BELOW`)."""
    values = _layer_units(x, ms) or _stage2_units(x, ms)
    if values is None or not values[1] or (stage.unit or stage).layers < 2:
        return None
    G_l, P_lt, _, g_u, g_r = values
    # (on one rank nothing is prefetched: the next layer is gathered as its backward starts;
    # the next layer's all-gather output at its own width: DeepSeek-V3's dense first layer
    # below a MoE one, traced under FSDP2 x CP2, +9.2% at the MoE width, random runs)
    below = _gathered_at(x, ms, ly, max(0, len(ly.kind_of) - 2))
    held = _stage2_held(x, ms, ly, detail) if ms.gathered_model is not None else \
        part_of(ms.gathered_root) if not x.fsdp_collectives else \
        ms.gathered if below is ms.gathered_layer else part_of(below, ms.gathered_root)
    assert held is not None
    gathered = extended(held, ((ms.root_grads, 1),), detail) if ms.root_grads else held
    saved = part(((SAVED_BELOW(ly.body.bytes, _kept(ly, ly.flags[-1])), 1),), detail)
    g = x.n.grad
    return gathered, saved, LAYER_REDUCE(P_lt, g_u, g_r, x.N, g if g != g_r else 0,
                                         0 if accumulating else g,
                                         _prefetched_below_top(x, ms, ly, G_l))


def _prefetched_below_top(x: Setup, ms: ModelStates, ly: Layers, G_l: int) -> int:
    """The layer FSDP prefetches below the top one, of the `G_l` bytes it prefetches (0: none,
    on one rank): at its own width (`_gathered_at`)."""
    return _gathered_at(x, ms, ly, len(ly.kind_of) - 2).bytes if G_l and len(ly.kind_of) >= 2 \
        else G_l


def _offload_share(x: Setup, ms: ModelStates, zero: int, tied: bool = False) -> int | None:
    """Rank 0's share of the flat parameters (`partition_tensors`) where DeepSpeed's
    ZeRO-Offload at stage `zero` norms each gradient's piece of it in fp64 on the GPU
    (stage_1_and_2.py set_norm_for_param_grad_in_gpu): full training, untied embeddings (or
    `tied` ones, where the caller counts them), no pipeline; else None."""
    if not (x.deepspeed and x.offload_optimizer and x.z == zero and not x.lora and x.pp == 1
            and (tied or not x.arch.tie_word_embeddings) and ms.local.ordered):
        return None
    return partition_tensors(ms.local.ordered, x.N)[0]


def _offload_embedding_norm(x: Setup, stage: Stage, ms: ModelStates, accumulating: bool
                            ) -> tuple[Term, Term | None] | None:
    """ZeRO-Offload at stages 1-2, the step's last backward: (`OFFLOAD_EMBEDDING_NORM`, at stage
    1 the widest clone of its reduce, `OFFLOAD_REDUCE_CLONE`, if any), else None. At stage 2 the
    embedding's gradient, tied or not, is the last to be reduced, with or without accumulation
    (traced: Gemma 3's tied 262K vocabulary on one rank, 5 GiB of fp64 at the end of its one
    backward); at stage 1 a tied embedding is the first reduced after the backward, as an
    untied one (traced: Gemma 3 1B on one rank, a random run)."""
    share = _offload_share(x, ms, x.z, tied=True) if x.z in (1, 2) else None
    if share is None or not stage.embedding or not (accumulating or x.micro_batches == 1):
        return None
    g = x.n.grad
    if x.z == 2:  # (its earlier gradients went to the host during the backward)
        return OFFLOAD_EMBEDDING_NORM(min(ms.local.ordered[0], share), 0, g), None
    clone, norm = _stage_1_reduce(x, stage, share)
    return OFFLOAD_EMBEDDING_NORM(*norm, g), OFFLOAD_REDUCE_CLONE(*clone, g) if clone[0] else None


def _stage_1_reduce(x: Setup, stage: Stage, share: int
                    ) -> tuple[tuple[int, int], tuple[int, int]]:
    """DeepSpeed's ZeRO-Offload at stage 1 reduces after the step's last backward, tensor by
    tensor in the flat group's order (`registered`; stage_1_and_2.py
    reduce_independent_p_g_buckets_and_remove_grads): ((the widest clone, the gradients gone
    then), (the widest piece of rank 0's share normed in fp64, the gradients gone then)), in
    elements. A gradient up to the reduce bucket's size is copied into the bucket and freed; a
    larger one is cloned, its original freed, and reduced alone. A bucket is reduced when the
    next tensor would overflow it: each tensor's piece of rank 0's share normed in fp64 and sent
    to the host, a clone freed with it (another rank's stays). Under torch_autocast nn.Linear's
    gradients and the rest fill a bucket each, the low one reduced first at the end: the
    embedding, reduced in fp32, waits for the first layer's first fp32 parameter."""
    counts, arch, g = x.counts, x.arch, x.n.grad
    size = x.zero_sizes.reduce_bucket
    order: list[tuple[int, bool]] = []
    if stage.embedding:  # (GPT-2's position table is a tensor of its own)
        positions = arch.max_position_embeddings * arch.hidden_size \
            if arch.traits.learned_positions else 0
        # (a tied matrix is the head's nn.Linear weight too: reduced low under torch_autocast)
        order += [(counts.embedding - positions, arch.tie_word_embeddings), (positions, False)]
    for layer, n in ((counts.dense_layer, stage.dense_layers),
                     (counts.moe_layer, stage.moe_layers)):
        if layer is not None and n:
            order += list(registered(layer, arch, x.tp, x.ep)) * n
    if stage.head:
        order += [(counts.final_norm, False), (counts.lm_head, True)]
    waiting: dict[bool, list[tuple[int, int]]] = {True: [], False: []}
    filled = {True: 0, False: 0}
    clone = norm = (0, 0)
    gone = at = 0

    def reduce(low: bool) -> None:
        nonlocal gone, norm
        for start, tensor in waiting[low]:
            piece = max(0, min(start + tensor, share) - start)
            if 8 * piece - g * gone > 8 * norm[0] - g * norm[1]:
                norm = (piece, gone)
            if piece and tensor > size:
                gone += tensor
        waiting[low], filled[low] = [], 0

    for tensor, low in order:
        if not tensor:
            continue
        low = low and x.n.autocast
        if filled[low] + tensor > size:
            reduce(low)
        if tensor <= size:
            gone += tensor
        elif tensor - gone > clone[0] - clone[1]:
            clone = (tensor, gone)
        waiting[low].append((at, tensor))
        filled[low] += tensor
        at += tensor
    reduce(True)
    reduce(False)
    return clone, norm


def _offload_head_norm(x: Setup, stage: Stage, ms: ModelStates) -> Term | None:
    """ZeRO-Offload at stage 2 where rank 0's share holds part of an untied head
    (`OFFLOAD_HEAD_NORM`), else None."""
    share = _offload_share(x, ms, 2)
    if share is None or not stage.head:
        return None
    ordered = ms.local.ordered
    head = ordered[-1]
    piece = max(0, min(head, share - (sum(ordered) - head)))
    if not piece:
        return None
    return OFFLOAD_HEAD_NORM(head, ms.local.per_layer_last, x.n.grad, piece)


def _offload_layer_norm(x: Setup, stage: Stage, ms: ModelStates, ly: Layers, A_r: int,
                        g_i: int) -> Term | None:
    """ZeRO-Offload at stage 2 in the top layer's gated MLP (`OFFLOAD_LAYER_NORM`), where its
    down projection's gradient is over the reduce bucket (stage_1_and_2.py: an extra-large
    parameter, reduced from its own tensor when the next gradient arrives), rank 0's share
    holding part of it; else None. A_r: the layer's recomputed activations (0 where they are
    saved); g_i: its incoming gradient."""
    share = _offload_share(x, ms, 2, tied=True)
    if share is None or not stage.layers or ly.kind_of[-1] == "moe":
        return None
    layer = x.counts.dense_layer
    sizes = oversized_down(layer, x.tp, x.zero_sizes.reduce_bucket)
    if sizes is None:
        return None
    down, up = sizes
    piece = _in_share(x, stage, share, lambda lin: lin.group == "mlp" and lin.tp == "row")[-1]
    if not piece:
        return None
    n = x.n
    return OFFLOAD_LAYER_NORM(A_r, x.T, down // x.h, x.h, n.compute, g_i, down, up,
                              n.compute if n.weight_copies else 0, n.grad, piece)


def _released_at_softmax(x: Setup, ms: ModelStates, act: LayerActivations, ckpt: bool
                         ) -> Term | None:
    """DeepSpeed ZeRO-3's gathered weights of the top (dense) layer's output projection and
    MLP, released once their backward ran, before the eager softmax's (its widest moment,
    `ATTENTION_BACKWARD_LAYER`); None elsewhere."""
    layer = x.counts.dense_layer
    if ms.live is None or act.mlp_backward is None or ckpt or layer is None \
            or x.counts.moe_layer is not None:
        return None
    return DS_GATHERED(sum(lin.local_counts(x.tp, x.ep)[0] for lin in after_attention(layer)),
                       x.n.weight)


def _offload_reduces(x: Setup, stage: Stage, ms: ModelStates
                          ) -> list[tuple[Term, Term, int, Linear]]:
    """ZeRO-Offload at stage 3, the reduces of the top (dense) layer's backward (stage3.py):
    gradients enter the reduce bucket in backward order (an untied head's first, then the
    layer's last projection's) until the next one would overflow it; then the bucket is
    reduced, its partition copied back to the GPU and normed in fp64 (`OFFLOAD_REDUCE`),
    beside the bucket's gradients and the next one, waiting whole (`DS_PENDING`), and that one
    starts the bucket again. Each reduce with the layer's elements whose backward ran before
    it (over several ranks their gathered weights released) and the projection whose gradient
    overflows it; those at the down and the up projection, where the layer's activations are
    modelled (`_at_reduce`; later ones, with more of the MLP freed, are not). Full
    training; none elsewhere (an MoE top layer: `_experts_zero3`)."""
    layer = x.counts.dense_layer
    if not (x.deepspeed and x.z == 3 and x.offload_optimizer and ms.live is not None
            and layer is not None and stage.unit is None and not x.lora) or stage.moe_layers:
        return []  # (LoRA's adapters: small gradients, not traced for it)
    # an untied head's gradient enters the bucket first (a tied one waits for the embedding's)
    held = x.counts.lm_head if stage.head and x.counts.lm_head else 0
    bucket, ran = x.zero_sizes.reduce_bucket, 0
    reduces = []
    for lin in list(reversed(layer.linears))[:2]:
        numel = lin.local_counts(x.tp, x.ep)[0]
        if held and held + numel > bucket:
            reduces.append((DS_PENDING(held + numel, x.n.grad),
                            OFFLOAD_REDUCE(-(-held // x.N), x.n.grad, 4 if x.n.autocast else 0),
                            ran, lin))
            held = 0
        held += numel
        ran += numel
    return reduces


def _at_reduce(x: Setup, layer: LayerParams, lin: Linear, A_r: int) -> Term | None:
    """The top layer where ZeRO-Offload's reduce runs at `lin`'s gradient
    (`OFFLOAD_AT_REDUCE`): `A_r`, its recomputed activations (0 where not checkpointed), and
    at a gated MLP's up projection what its backward has freed and made; None where neither."""
    up = len(layer.mlp_inputs) == 2 and lin is layer.mlp_inputs[-1]
    if not (up or A_r):
        return None
    f = lin.local_counts(x.tp, x.ep)[0] // x.h
    return OFFLOAD_AT_REDUCE(A_r, int(up), x.T, f, x.n.compute, x.h, norm_width(x),
                             x.n.residual)


def _prefetch_cast(x: Setup, ms: ModelStates, ly: Layers) -> Term | None:
    """FSDP2's prefetch of the next layer as the top layer's backward starts, where the
    all-gather casts the local shard first (`PREFETCH_CAST`), else None."""
    values = _layer_units(x, ms)
    n = x.n
    if values is None or not values[0] or not n.fsdp_mixed or n.weight <= n.gathered_weight:
        return None
    return PREFETCH_CAST(_prefetched_below_top(x, ms, ly, values[0]), x.N)


def _first_reduce(x: Setup, stage: Stage, ms: ModelStates, accumulating: bool, detail: bool
                  ) -> tuple[Term | None, Part, Term] | None:
    """FSDP's post-backward of the first layer (`LAYER_REDUCE`, nothing left to prefetch):
    every layer above reduced, its shard written, the layers' activations all freed, only
    the root gathered (at stage 2 too: each unit's post-backward reshards it). On one rank
    the shards are whole and nothing is prefetched in their place: the first layer's reduce
    outweighs the top's where the parameters outweigh the activations. (Not on a stage
    mixing dense and MoE layers, whose first layer is not the widest these count.)"""
    values = _layer_units(x, ms)
    local = ms.local
    if values is not None:
        P_lt, g_u, g_r = values[1], values[3], values[4]
    elif ms.gathered_model is not None and x.pp == 1 and ms.live is None:
        P_lt = local.per_layer_trainable
        g_u, g_r = x.n.fsdp_grads(x.n.grad)
    else:
        return None
    if not P_lt or (stage.unit or stage).layers < 2 or (stage.dense_layers and stage.moe_layers):
        return None
    gathered = part_of(ms.gathered_root or GATHERED_ROOT(local.root, x.n.gathered_weight),
                       ms.root_grads)
    assert gathered is not None
    g = x.n.grad
    return (_written(x, stage, ms, accumulating, own=True), gathered,
            LAYER_REDUCE(P_lt, g_u, g_r, x.N, g if g != g_r else 0, 0 if accumulating else g, 0))


def _first_gathered(x: Setup, stage: Stage, ms: ModelStates, ly: Layers, below: Part | None,
                    detail: bool) -> Part | None:
    """FSDP's layer-by-layer units at the first layer's backward on a stage of one or two
    layers: the last unit the backward gathers, so none prefetched, and on two the top's
    reduce-scatter in flight; on more, the first-layer moments are the second layer's, the
    first prefetched (`_layer_below`) at its own width (`_gathered_at`)."""
    values = _layer_units(x, ms)
    layers = (stage.unit or stage).layers
    if values is None:
        return below
    G_l, P_lt, P_ll, g_u, g_r = values
    if layers > 2:
        first = _gathered_at(x, ms, ly, 0).bytes if G_l else 0
        if first == G_l:
            return below
        return _regathered(ms, GATHERED_GRADS(first, P_lt, P_ll, g_u, g_r), detail)
    return _first_layer_gathered(ms, values, layers == 2, detail)


def _first_layer_gathered(ms: ModelStates, values: tuple[int, ...], above: bool, detail: bool
                          ) -> Part:
    """FSDP's layer-by-layer units at the first layer's own backward, nothing prefetched in
    its place: its last projection's unsharded gradient and, where a layer is `above` it, that
    layer's reduce-scatter input."""
    _, P_lt, P_ll, g_u, g_r = values
    return _regathered(ms, GATHERED_GRADS(0, P_lt if above else 0, P_ll, g_u, g_r), detail)


def _first_own(x: Setup, stage: Stage, ms: ModelStates, ly: Layers, accumulating: bool,
               detail: bool) -> tuple[Term | None, Part] | None:
    """(written, gathered) at the first layer's own backward, where FSDP's first-layer moment
    is the second layer's (`_layer_below_counted`) but nothing is prefetched in the first's
    place (one rank): the layer above has written its shard, whole, and its reduce-scatter
    input is held until the next reduce-scatter, so the first layer's moment outweighs the
    second's by that shard less what the first saved below it (traced: a Llama 3.2 1B width
    on one rank, four layers, every one or every second checkpointed: -5.09%, -3.09% without
    it). Across ranks the first layer prefetched at the second's is the wider. (Not on a stage
    mixing dense and MoE layers, whose first layer is not the widest these count.)"""
    values = _layer_units(x, ms)
    if values is None or values[0] or not _layer_below_counted(stage, ms) \
            or (stage.dense_layers and stage.moe_layers):
        return None
    written = _written(x, stage, ms, accumulating,
                       unwritten=(_layer_trainable_at(x, ms, ly, 0)[0],))
    return written, _first_layer_gathered(ms, values, True, detail)


def _first_layer_late(x: Setup, stage: Stage, ms: ModelStates, ly: Layers, ckpt: int,
                      accumulating: bool, below: tuple[Term, ...]
                      ) -> tuple[Term | Part | None, Part | None, Term | Part, Term] | None:
    """The first layer's backward once its MLP is done: the MLP's weight gradients written,
    its activations freed, the attention's norm running its fp32 backward (llama-style
    layers, an RMSNorm upcast to fp32, trained weights) or eager attention its softmax's
    (any). It sets the peak where a layer's parameters are large beside its activations
    (FSDP, checkpointing, routed experts) or the attention's scores beside the rest."""
    local = ms.local
    norm = (not x.lora and x.arch.traits.norm_upcast in ("llama", "fp32_weight")
            and local.per_layer_mlp)
    eager = attention_backward(x, bool(ly.kind_of) and ly.kind_of[0] == "sliding")
    if x.megatron or not (norm or eager):
        return None
    n = x.n
    grads = ms.gradients
    fsdp = ms.gathered_layer is not None or ms.gathered_model is not None
    if fsdp:
        g_u, g_r = n.fsdp_grads(n.grad)
        # the second layer's moment, the first prefetched, where a third reduces above it
        second = ms.gathered_layer is not None and (stage.unit or stage).layers > 2 \
            and x.fsdp_collectives
        prefetched = _gathered_at(x, ms, ly, 0).bytes if second else 0
        # each at its own width (DeepSeek-V3's dense first layer below MoE layers): the
        # running layer gathered, its MLP's gradients, the reduce-scatter of the layer above
        running = int(second)
        P_lm = _layer_trainable_at(x, ms, ly, running)[1]
        P_lt = _layer_trainable_at(x, ms, ly, min(running + 1, len(ly.kind_of) - 1))[0]
        unsharded = LATE_GATHERED(prefetched, P_lt, P_lm, g_u, g_r)
        # at the input norm every gradient of the running layer is unsharded
        everything = LATE_GATHERED(prefetched, P_lt, _layer_trainable_at(x, ms, ly, running)[0],
                                   g_u, g_r)
        # not written yet: the running layer's sharded gradients and the first's below it
        # (the second layer's moment, or where the first's activations are counted beside
        # it); on two layers the top's post-backward has written its shard by the first
        # layer's late moment (traced: DeepSeek-V3 under FSDP2 x CP2, the MoE layer's shard)
        n_u = min(2 if second or _layer_below_counted(stage, ms) else 1, len(ly.kind_of))
        written: Term | Part | None = _written(x, stage, ms, accumulating, unwritten=tuple(
            _layer_trainable_at(x, ms, ly, i)[0] for i in range(n_u)))
        if ms.gathered_model is not None and x.pp == 1:  # (resharded after its backward)
            gathered, at_input = (_resharded_below(x, ms, t) for t in (unsharded, everything))
        else:
            own_layer = _gathered_at(x, ms, ly, running) if ms.gathered_layer is not None \
                else None
            gathered, at_input = (part_of(own_layer, ms.gathered_root, ms.gathered_model, t,
                                          ms.root_grads) for t in (unsharded, everything))
    else:
        if accumulating or not accumulated(grads):
            return None
        gathered = at_input = None
    # the widest of three moments: the norm after the attention running its fp32 backward;
    # later the softmax's, the norm's and the output projection's saved tensors freed, its
    # gradient written
    candidates = []
    # under CP (SDPA: `eager` is the ring attention's backward), later than the norm's: the
    # unsharded gradients of everything after the attention core beside it, where FSDP holds
    # them layer by layer
    ring = eager if eager is not None and x.cp > 1 and not x.eager and fsdp \
        and ms.gathered_layer is not None and ms.gathered_model is None else None
    # and last the input norm's fp32 backward, the attention's gradients computed and its
    # activations freed: the wider where its weights outweigh what it saves (short sequences)
    for softmax, input_norm, transient in (
            (False, False, LATE_TRANSIENT(x.T, x.h, n.residual, n.compute) if norm else None),
            (True, False, eager),
            (False, True, INPUT_NORM_TRANSIENT(x.T, x.h, n.residual, n.compute) if norm
             and ly.widest.input_norm else None)):
        if transient is None:
            continue
        at = at_input if fsdp and input_norm else gathered
        if not fsdp:
            written = _written(x, stage, ms, accumulating, late=True, softmax=softmax,
                               input_norm=input_norm)
        elif transient is ring and ring is not None:
            after_core = _layer_trainable_at(x, ms, ly, running)[0] - _unwritten_at_softmax(x)
            at = part_of(own_layer, ms.gathered_root, LATE_GATHERED(
                prefetched, P_lt, after_core, g_u, g_r), ms.root_grads)
        candidates.append((written, at, _late_own(ly, ckpt, softmax, input_norm), transient))
    written, gathered, own, transient = max(candidates, key=lambda moment: sum(
        term.bytes for term in moment if term is not None))
    return (written, gathered, _with_below(own, below, True), transient)


def _narrower_at(x: Setup, ly: Layers, i: int) -> LayerParams | None:
    """The stage's `i`th layer where it is narrower than the widest the stage's states count:
    a dense one beside MoE layers (DeepSeek-V3's first); None where it is the widest."""
    dense = x.counts.dense_layer
    if ly.kind_of[i] == "moe" or "moe" not in ly.kind_of or dense is None:
        return None
    return dense


def _layer_trainable_at(x: Setup, ms: ModelStates, ly: Layers, i: int
                        ) -> tuple[int, int, int]:
    """(trainable, its MLP's, its last projection's) parameters of the stage's `i`th layer at
    its own width."""
    layer = _narrower_at(x, ly, i)
    if layer is None:
        local = ms.local
        return local.per_layer_trainable, local.per_layer_mlp, local.per_layer_last
    return layer_trainable(layer, x.lora, x.lora_rank, x.tp, x.ep, x.lora_targets)


def _gathered_at(x: Setup, ms: ModelStates, ly: Layers, i: int) -> Term:
    """The stage's `i`th layer as FSDP gathers it (the widest layer, `ms.gathered_layer` at
    stage 3), at its own width (`_narrower_at`), QLoRA's linear weights packed."""
    widest = ms.gathered_layer or gathered_layer(ms.local, x.n.gathered_weight, x.qlora)
    layer = _narrower_at(x, ly, i)
    if layer is None:
        return widest
    P, L = layer_gathered(layer, x.lora, x.lora_rank, x.tp, x.ep, x.lora_targets)
    return GATHERED_LAYER_NF4(P, L, x.n.gathered_weight) if x.qlora \
        else GATHERED_LAYER(P, x.n.gathered_weight)


def _resharded_below(x: Setup, ms: ModelStates, grads: Term | None) -> Part | None:
    """FSDP2 at stage 2 (reshard_after_forward=False) below the top layer: each unit's
    post-backward reshards it whatever reshard_after_forward says, so only the running layer
    stays gathered beside the root, not the whole model (traced: the whole Llama 3.1 70B,
    FSDP2 x 4 at 512 tokens, +13.7% when every layer was counted to the end). `grads`: the
    running layer's unsharded gradients at the moment."""
    return part_of(gathered_layer(ms.local, x.n.gathered_weight, x.qlora), ms.gathered_root,
                   grads, ms.root_grads)


def _layer_below_counted(stage: Stage, ms: ModelStates) -> bool:
    """Whether FSDP's first-layer moments are the second layer's, the first's activations
    beside it (`_layer_below`): layer-by-layer units, three layers or more."""
    return ms.gathered_layer is not None and (stage.unit or stage).layers >= 3


def _layer_below(x: Setup, stage: Stage, ms: ModelStates, ly: Layers, ckpt: int
                 ) -> Term | None:
    """Under FSDP's layer-by-layer prefetch the first-layer moments are the second layer's
    (`LAYER_BELOW`): what the first keeps beside it, at its own width (DeepSeek-V3's dense
    first layer below MoE ones keeps its own activations, not a MoE layer's)."""
    if not _layer_below_counted(stage, ms):  # (two: the first layer's moments are its own,
        return None  # the layer above it the top one)
    act = ly.first
    return LAYER_BELOW((act.checkpoint_input.bytes if ckpt else ly.alive(act)) - ly.received)


def _with_below(first: Term, below: tuple[Term, ...], detail: bool) -> Term | Part:
    """The first layer's own (`first`) beside what the moment holds below it."""
    return part(((first, 1), *((term, 1) for term in below)), detail) if below else first


def _moe_own_gradients(x: Setup, ms: ModelStates, ly: Layers) -> LayerActivations | None:
    """The stage's MoE layer kind where full training writes one rank's own gradients (no
    FSDP gathering, not Megatron-LM's buffers), else None."""
    moe = next((act for kind, act, _ in ly.kinds if kind == "moe"), None)
    if (moe is None or x.lora or x.megatron or not accumulated(ms.gradients)
            or ms.gathered_layer is not None or ms.gathered_model is not None):
        return None
    return moe


def _experts_backward(x: Setup, stage: Stage, ms: ModelStates, ly: Layers, accumulating: bool
                      ) -> tuple[Term, Term, Term] | None:
    """An MoE layer's expert backward (transformers' grouped_mm, traced on Mixtral, Qwen3-MoE
    and DeepSeek-V3): its experts' down weights' gradient written, the gate/up one being
    computed for every local expert at once. The step's first backward: the first MoE layer's,
    the layers above done (dense layers below it keep their activations and have no gradients
    yet). `accumulating` into the gradients an earlier backward wrote (every one written): the
    stage's last MoE layer's, the first the backward reaches, every layer below it alive, its
    new gate/up gradient beside the one it is added to. Full training on one rank's own
    gradients (no FSDP gathering)."""
    moe = _moe_own_gradients(x, ms, ly)
    if moe is None:
        return None
    arch = x.arch
    layer = x.counts.moe_layer
    assert layer is not None  # the stage has MoE layers
    routed = [lin for lin in layer.linears if lin.group == "experts"]
    gate_up = sum(sum(lin.local_counts(x.tp, x.ep)) for lin in routed if lin.tp != "row")
    n = x.n
    written: Term = ms.gradients
    if accumulating:  # the last layer is checkpointed only when every layer is
        if ly.all_checkpointed:
            A_d, A_l = ly.body.bytes - moe.checkpoint_input.bytes, ly.recomputed(moe)
        else:
            A_d, A_l = ly.body.bytes - ly.alive(moe), ly.alive(moe)
    else:
        below, A_d = _below_first_moe(x, stage, ly)
        A_l = ly.recomputed(moe)
        down = sum(sum(lin.local_counts(x.tp, x.ep)) for lin in routed if lin.tp == "row")
        symbols = ms.local.term.symbols
        m_e = _embedding_unwritten(x, stage)
        m_l = symbols["P_ml"] - down + below * symbols["P_dl"]
        written = GRADIENTS_WRITTEN(ms.gradients.bytes, m_e, m_l, n.grad)
    x_e = expert_width(x)
    f = arch.expert_intermediate_size // x.tp
    alive = EXPERTS_ALIVE(A_d, A_l, moe.experts_freed, x.routed, x.H, x_e)
    return written, alive, EXPERTS_BACKWARD(gate_up, n.grad, x.routed, f, x.H, x_e)


def _experts_softmax(x: Setup, stage: Stage, ms: ModelStates, ly: Layers, accumulating: bool
                     ) -> tuple[Term, Term, Term] | None:
    """The first MoE layer's eager softmax backward where it is wider than the MLP's on its own
    (`LayerActivations.softmax_backward`, net of what the MLP's backward freed): every
    gradient after its attention core written, the layers above done, those below alive. A
    MoE layer's gradients outweigh its activations, so the first MoE layer's moment is the
    widest of them (random run 778/6, DeepSeek-V3's dense first layer below two MoE ones on
    one GPU: -1.95% at its experts' moment). The step's first backward, full training on one
    rank's own gradients, the layer not checkpointed."""
    moe = _moe_own_gradients(x, ms, ly)
    if moe is None or moe.softmax_backward is None or accumulating:
        return None
    below, _ = _below_first_moe(x, stage, ly)
    if ly.flags[below]:
        return None
    kinds = {kind: act for kind, act, _ in ly.kinds}
    above = sum(_kept(ly, ly.flags[i], kinds[ly.kind_of[i]])
                for i in range(below + 1, len(ly.kind_of)))
    m_l = _unwritten_at_softmax(x) + below * ms.local.term.symbols["P_dl"]
    written = GRADIENTS_WRITTEN(ms.gradients.bytes, _embedding_unwritten(x, stage), m_l,
                                x.n.grad)
    return written, SAVED_BELOW(ly.body.bytes, above), moe.softmax_backward


def _experts_offload(x: Setup, stage: Stage, ms: ModelStates, ly: Layers
                     ) -> tuple[Term, Term] | None:
    """ZeRO-Offload at stage 2 (DeepSpeed), an MoE layer's expert backward, the widest of the
    stage's: its experts' gate/up weight gradient, one tensor over the reduce bucket, cloned
    as its hook runs (`EXPERTS_OFFLOAD_CLONE`); and where rank 0's share of the flat
    parameters holds some of its experts, their pieces normed in fp64 as each tensor is
    reduced (`EXPERTS_OFFLOAD_NORM`): a lower layer's, with fewer activations alive, on
    several ranks. Every layer below it alive. Full training; None elsewhere."""
    moe = next((act for kind, act, _ in ly.kinds if kind == "moe"), None)
    layer = x.counts.moe_layer
    if not (x.deepspeed and x.offload_optimizer and x.z == 2) or x.lora or moe is None \
            or layer is None or x.pp > 1:
        return None
    routed = [lin for lin in layer.linears if lin.group == "experts"]
    gate_up = sum(sum(lin.local_counts(x.tp, x.ep)) for lin in routed if lin.tp != "row")
    down = sum(sum(lin.local_counts(x.tp, x.ep)) for lin in routed if lin.tp == "row")
    if gate_up <= x.zero_sizes.reduce_bucket:
        return None
    g, x_e = x.n.grad, expert_width(x)
    clone = EXPERTS_OFFLOAD_CLONE(gate_up, g, x.routed, x.H, x_e)
    share = _offload_share(x, ms, 2, tied=True) or 0
    pieces = list(zip(_in_share(x, stage, share, lambda lin: lin.group == "experts"
                                and lin.tp != "row"),
                      _in_share(x, stage, share, lambda lin: lin.group == "experts"
                                and lin.tp == "row"), strict=True))
    kinds = {kind: act for kind, act, _ in ly.kinds}
    above, best = 0, None
    for i in reversed(range(stage.layers)):
        act = kinds[ly.kind_of[i]]
        ckpt = ly.flags[i]
        above += act.checkpoint_input.bytes if ckpt else ly.alive(act)
        if ly.kind_of[i] != "moe":
            continue
        A_l = ly.recomputed(moe) if ckpt else ly.alive(moe)
        alive = MOE_LATE_ALIVE(ly.body.bytes - above, A_l, moe.mlp_bytes)
        M_x, M_n = pieces[i]
        transient = max((clone, EXPERTS_OFFLOAD_NORM(gate_up, down, g, M_x, M_n)),
                        key=lambda t: t.bytes) if M_x or M_n else clone
        if best is None or alive.bytes + transient.bytes > best[0].bytes + best[1].bytes:
            best = (alive, transient)
    return best


def _in_share(x: Setup, stage: Stage, share: int, pick: Callable[[Linear], bool]) -> list[int]:
    """By layer of the stage: the elements of the weights of its linears `pick` selects in rank
    0's `share` of DeepSpeed's flat parameters (`partition_tensors`), laid out in the model's
    order (the embedding, then each layer's tensors, `linear_spans`)."""
    start = x.counts.embedding // x.tp if stage.embedding else 0
    out = []
    for i in range(stage.layers):
        layer = x.counts.moe_layer if x.arch.is_moe_layer(stage.first_layer + i) \
            else x.counts.dense_layer
        assert layer is not None
        out.append(sum(max(0, min(size, share - start - at)) for lin, (at, size) in
                       zip(layer.linears, linear_spans(layer, x.tp, x.ep), strict=True)
                       if pick(lin)))
        start += layer_trainable(layer, False, 0, x.tp, x.ep, frozenset())[0]
    return out


def _experts_fsdp(x: Setup, stage: Stage, ms: ModelStates, ly: Layers,
                  accumulating: bool, detail: bool
                  ) -> tuple[Term | None, Part, Term, Term] | None:
    """FSDP's layer-by-layer units at an MoE layer's expert backward (`EXPERTS_BACKWARD` in
    the gradients' unsharded width): the top layer's, or the one below it, the top's
    activations freed, its shard written and its reduce-scatter in flight, the larger
    (accumulating: beside every shard an earlier backward wrote). At stage 2 nothing is
    prefetched and every layer stays gathered to its own post-backward, the top resharded by
    the one below's moment (`_stage2_held`). Full training, the top two layers MoE."""
    values = _layer_units(x, ms)
    stage2 = _stage2_units(x, ms) if values is None else None
    units = values or stage2
    moe = next((act for kind, act, _ in ly.kinds if kind == "moe"), None)
    layers = (stage.unit or stage).layers
    if units is None or moe is None or x.lora or x.megatron or ly.kind_of[-1] != "moe":
        return None
    G_l, P_lt, _, g_u, g_r = units
    layer = x.counts.moe_layer
    assert layer is not None
    routed = [lin for lin in layer.linears if lin.group == "experts"]
    gate_up = sum(sum(lin.local_counts(x.tp, x.ep)) for lin in routed if lin.tp != "row")
    down = sum(sum(lin.local_counts(x.tp, x.ep)) for lin in routed if lin.tp == "row")
    x_e = expert_width(x)
    below = layers > 1 and ly.kind_of[-2] == "moe"
    candidates = []
    for n_r in (0, 1) if below else (0,):
        # (on two layers the one below the top is the first: nothing left to prefetch)
        G_n = 0 if n_r and layers == 2 else G_l
        if G_n and layers >= 2 + n_r:  # (the layer below the running one, at its own width)
            G_n = _gathered_at(x, ms, ly, len(ly.kind_of) - 2 - n_r).bytes
        recomputed = ly.flags[-1 - n_r]  # the running layer's
        A_l = ly.recomputed(moe) if recomputed else ly.alive(moe)
        A_d = ly.body.bytes - _kept(ly, ly.flags[-1], moe) - n_r * _kept(ly, recomputed, moe)
        written = _top_shard_written(x, stage, ms, accumulating) if n_r or accumulating \
            else None
        grads = EXPERTS_FSDP(G_n, down, g_u, P_lt, g_r, n_r)
        if stage2 is None:
            gathered = _regathered(ms, grads, detail)
        else:
            held = _stage2_held(x, ms, ly, detail) if n_r else part_of(ms.gathered_model)
            assert held is not None
            gathered = extended(held, tuple((t, 1) for t in (grads, ms.root_grads)
                                            if t is not None), detail)
        alive = EXPERTS_ALIVE(A_d, A_l, moe.experts_freed, x.routed, x.H, x_e)
        transient = EXPERTS_BACKWARD(gate_up, g_u, x.routed,
                                     x.arch.expert_intermediate_size // x.tp, x.H, x_e)
        candidates.append((written, gathered, alive, transient))
        ring = ring_attention_backward(x)
        if ring is not None:  # later its attention's ring backward, every expert's gradient
            # unsharded and the MLP's activations freed (traced: DeepSeek-V3 under FSDP2 x CP2)
            late = _regathered(ms, LATE_GATHERED(G_n, n_r * P_lt, ms.local.per_layer_mlp, g_u,
                                                 g_r), detail)
            candidates.append((written, late, MOE_LATE_ALIVE(A_d, A_l, moe.mlp_bytes), ring))
    return max(candidates, key=lambda c: sum(t.bytes for t in c if t is not None))


def _final_norm(x: Setup, stage: Stage, ms: ModelStates, ly: Layers, states: Part | None,
                earlier: Part | Term | None, saved: Part, extra: Part | None,
                detail: bool) -> Moment:
    """Under DeepSpeed's ZeRO-3 the final norm's forward at its weight multiply
    (`NORM_FORWARD`): every layer's activations saved and the norm's own (its fp32 input,
    rsqrt), not yet the head's; the last layer's output beside them where the norm keeps an
    fp32 copy of it. What the coordinator holds then: what a wait in the last layer copied out
    of the head's coalesced prefetch stays, with its buffer, until the head's fetch (traced:
    QLoRA in bf16 on a 70B width, the forward's peak)."""
    head = [(t, -1) for t in _ends(x, stage, ly)[1] if t.formula in (HEAD_INPUT, HEAD_COPY)]
    if x.n.residual != 4:
        head.append((LAYER_OUTPUT(x.T, x.h, x.n.residual), 1))
    return _moment("forward.final_norm", states, earlier, _live(x, ms, "forward_norm"),
                   extended(saved, tuple(head), detail), extra, norm_forward(x))


def _router_zero3(x: Setup, ms: ModelStates, ly: Layers, states: Part | None, saved: Part,
                  extra: Part | None) -> Moment:
    """Under DeepSpeed's ZeRO-3 the last MoE layer in forward before its experts' fetch: where
    the router is a module of its own (DeepSeek-V3), or with LoRA on the attention only at its
    last adapter (o_proj's lora_B), waiting for a weight completes the coalesced prefetch that
    gathered the experts with it, which are copied out beside the flat buffer until the
    experts' own fetch (traced: the forward's peak). That fetch all-gathers what the prefetch
    did not (GPT-OSS's down projections, past stage3_max_live_parameters) before its waits free
    such a buffer: the wider of the two. The layer has saved all but its MLP's (the experts'
    folded LoRA weights among them)."""
    moe = next(act for kind, act, _ in ly.kinds if kind == "moe")
    if ly.all_checkpointed:
        A_l, A_m = moe.checkpoint_input.bytes, 0
    else:
        A_l, A_m = ly.alive(moe), moe.mlp_bytes
    assert ms.live is not None
    # a wait before the post-attention norm (the last adapter's) holds the copies through it
    norm = norm_forward(x) if ms.live.router_before_norm and x.lora \
        and x.arch.traits.norm_upcast == "llama" else None
    return _moment("forward.experts_router", states, None, _live(x, ms, "forward_router"),
                   ROUTER_ALIVE(saved.bytes - A_l, A_l, A_m), extra, norm)


def _experts_zero3(x: Setup, stage: Stage, ms: ModelStates, ly: Layers, states: Part | None,
                   others: Part | None) -> Moment:
    """Under DeepSpeed's ZeRO-3 an MoE layer's expert backward (traced: Mixtral, Qwen3-MoE,
    DeepSeek-V3), the heaviest of them: its gradients go to the partitions as they are written,
    so a lower layer holds no more of them, but fewer activations; what the coordinator holds
    gathered differs from layer to layer (`coordinator`: with, for every layer below that ran
    its forward unchecked, its experts' weights). Beside the gate/up weight gradient being
    computed, the down projections' whole gradient waits for its reduce. With LoRA the experts
    write no gradient of their own (frozen, or folded into their adapters'): the layer's
    activations and its backward's transient beside what is gathered, which a coalesced
    prefetch's flat buffer can swell below the top layer (traced: Qwen3-MoE checkpointed)."""
    assert ms.live is not None
    moe = next(act for kind, act, _ in ly.kinds if kind == "moe")
    layer = x.counts.moe_layer
    assert layer is not None
    routed = [lin for lin in layer.linears if lin.group == "experts"]
    gate_up = sum(sum(lin.local_counts(x.tp, x.ep)) for lin in routed if lin.tp != "row")
    down = sum(sum(lin.local_counts(x.tp, x.ep)) for lin in routed if lin.tp == "row")
    x_e, n = expert_width(x), x.n
    f = x.arch.expert_intermediate_size // x.tp
    pending = DS_PENDING(down, n.grad)
    transient = EXPERTS_BACKWARD(gate_up, n.grad, x.routed, f, x.H, x_e)
    # ZeRO-Offload: once the gate/up gradient is written, a reduce copies a partition back to
    # the GPU and takes its norm in fp64, beside both whole gradients: the down projections',
    # waiting since, or a leaf block's, reduced together in their order (gate/up first)
    reduced = gate_up if x.arch.traits.moe_leaf else down
    offload = (DS_PENDING(down + gate_up, n.grad), OFFLOAD_REDUCE(-(-reduced // x.N), n.grad, 0)) \
        if ms.host else None
    # each layer's activations, as kept, in the stage's order (its MoE layers where they are)
    kinds = {kind: act for kind, act, _ in ly.kinds}
    checkpointed = ly.flags
    kept = [kinds[kind] for kind in ly.kind_of]
    above = 0
    best: Moment | None = None
    for i in reversed(range(stage.layers)):
        above += kept[i].checkpoint_input.bytes if checkpointed[i] else ly.alive(kept[i])
        if ly.kind_of[i] != "moe":
            continue
        gathered = ms.live.backward_moe[i]
        ckpt = checkpointed[i]
        A_l = ly.recomputed(moe) if ckpt else ly.alive(moe)
        live = part_of(DS_GATHERED(gathered, n.weight))
        if x.lora:
            frozen = _moment("backward.experts_partitioned", states, live, others, None,
                             EXPERTS_COMBINE_ALIVE(ly.body.bytes - above, A_l),
                             moe.backward_transient)
            if best is None or frozen.bytes > best.bytes:
                best = frozen
            continue
        alive = EXPERTS_ALIVE(ly.body.bytes - above, A_l, moe.experts_freed, x.routed, x.H, x_e)
        done = part_of(DS_GATHERED(ms.live.backward_moe_done[i], n.weight))
        for moment in (_moment("backward.experts_partitioned", states, live, others, pending,
                               alive, transient),
                       offload and _moment("backward.experts_partitioned", states, done,
                                           others, offload[0], alive, offload[1])):
            if moment and (best is None or moment.bytes > best.bytes):
                best = moment
    assert best is not None
    return best


def _experts_combine(x: Setup, stage: Stage, ms: ModelStates, ly: Layers
                     ) -> tuple[Term, Term, Term] | None:
    """The first MoE layer's backward as it starts, in its experts' combine (traced:
    DeepSeek-V3 at micro-batch 4, whose step peaks there): the gradients of the layers above
    written, none of its own nor of the dense layers below, every activation of it and below
    alive. The step's first backward, as `_experts_backward`; not under EP (`experts_combine`)."""
    moe = next((act for kind, act, _ in ly.kinds if kind == "moe"), None)
    if moe is None or x.ep > 1:
        return None
    below, A_d = _below_first_moe(x, stage, ly)
    symbols = ms.local.term.symbols
    written = GRADIENTS_WRITTEN(ms.gradients.bytes, _embedding_unwritten(x, stage),
                                symbols["P_ml"] + below * symbols["P_dl"], x.n.grad)
    return written, EXPERTS_COMBINE_ALIVE(A_d, ly.recomputed(moe)), experts_combine(x)


def _embedding_unwritten(x: Setup, stage: Stage) -> int:
    """An untied embedding's gradient elements, written after the layers' (whole in .grad
    without FSDP, its tp rows under it): 0 on a stage without one."""
    if not stage.embedding or x.arch.tie_word_embeddings:
        return 0
    return x.counts.embedding // (x.tp if x.z >= 2 else x.vocab_grad_split)


def _below_first_moe(x: Setup, stage: Stage, ly: Layers) -> tuple[int, int]:
    """The stage's dense layers below its first MoE layer, and their saved activations (their
    checkpointed inputs, when checkpointed)."""
    arch = x.arch
    below = 0
    while stage.first_layer + below < arch.num_hidden_layers and \
            not arch.is_moe_layer(stage.first_layer + below):
        below += 1
    kinds = {kind: act for kind, act, _ in ly.kinds}
    acts = [(kinds[kind], ckpt) for kind, ckpt in zip(ly.kind_of[:below], ly.flags, strict=False)]
    return below, sum(act.checkpoint_input.bytes if ckpt else ly.alive(act) for act, ckpt in acts)


def _experts_reduce(x: Setup, stage: Stage, ms: ModelStates, states: Part | None, ly: Layers,
                    others: Part | None, accumulating: bool) -> Moment | None:
    """FSDP2 with the experts their own unit (transformers' plan; traced on Mixtral, Qwen3-MoE
    and DeepSeek-V3 with ep): each MoE layer's expert unit reduces its gradients once its
    backward is done. Its reduce-scatter input and output coexist; on a one-rank expert mesh
    FSDP2 writes the input divided by dp into a new tensor (foreach_reduce), a third copy. The
    wider of the first MoE layer's, every layer above written, and the top's, every layer
    below alive and only the head's own unit written (random run 775/5, a one-rank expert mesh
    beside eager attention's scores: -2.22% at the first's)."""
    moe = next((act for kind, act, _ in ly.kinds if kind == "moe"), None)
    if moe is None:
        return None
    local, n = ms.local, x.n
    below, A_d = _below_first_moe(x, stage, ly)
    symbols = local.term.symbols
    E_l, P_l = local.per_layer_experts, local.per_layer
    X_3 = x.N // x.ep
    g_u, g_r = n.fsdp_grads(n.grad)
    grads = ms.gradients
    written: Term = grads
    top_written: Term = grads
    embedding = x.counts.embedding // x.tp if stage.embedding else 0
    if not accumulating and accumulated(grads):
        m_e = 0 if x.arch.tie_word_embeddings else -(-embedding // x.N)
        m_l = -(-(P_l - E_l) // x.N) + -(-E_l // X_3) + below * -(-symbols["P_dl"] // x.N)
        written = GRADIENTS_WRITTEN(grads.bytes, m_e, m_l, n.grad)
        head = 0 if x.arch.tie_word_embeddings else -(-local.head_trainable // x.N)
        top_written = GRADIENTS_WRITTEN(grads.bytes, 0, grads.bytes // n.grad - head, n.grad)
    # the next unit gathered: the dense layer below the first MoE layer, or the embedding; the
    # layer below the top's own unit
    U_n = int(symbols["P_dl"]) if below else embedding
    grads_in = MOE_GRADS_IN(x.T, x.h, n.residual, n.compute)

    def at(U_n: int, A_d: int, written: Term) -> Moment:
        reduce = EXPERT_REDUCE(P_l, E_l, U_n, n.gathered_weight, X_3, int(X_3 == 1), g_r,
                               local.per_layer_experts_down, g_u)
        if ly.checkpointed:
            alive = EXPERTS_REDUCED_ALIVE(A_d, moe.checkpoint_input.bytes, ly.recomputed(moe),
                                          moe.experts_freed, moe.recomputed_shared)
        else:
            alive = EXPERTS_REDUCED_ALIVE(A_d, 0, ly.alive(moe), moe.experts_freed, 0)
        return _moment("backward.experts_reduce", states, written, reduce, others, alive,
                       grads_in)

    first = at(U_n, A_d, written)
    if len(ly.kind_of) - below < 2 or ly.kind_of[-1] != "moe" or ly.kind_of[-2] != "moe":
        return first
    top = at(P_l - E_l, ly.body.bytes - _kept(ly, ly.flags[-1], moe), top_written)
    return max(first, top, key=lambda m: m.bytes)


def _end_of_backward(x: Setup, stage: Stage, ms: ModelStates, states: Part | None,
                     others: Part | None, accumulating: bool) -> tuple[Moment, ...]:
    """The end of the stage's backward: the gradient reaching its first op (the embedding's,
    or the stage input's); accumulating, an untied embedding's new dense gradient beside the
    one in .grad it is added to. With FSDP, the root's post-backward; under torch TP, first
    the redistribution of the embedding's whole gradient."""
    n = x.n
    # (a rank of two chunks holding both ends, ZBV's and DualPipeV's rank 0, runs the head's
    # backward and the embedding's apart: the head's gradient is written before, not summed)
    tied = stage.embedding and stage.head and x.arch.tie_word_embeddings and not x.lora and \
        len(x.held_stages(stage)[0]) == 1
    fsdp = ms.gathered_layer is not None or ms.gathered_model is not None
    pipelined = x.pp > 1 and ms.gathered_model is not None
    # the sum of the two is a temporary where it does not become .grad: added in place to an
    # earlier micro-batch's, or reduced into DeepSpeed ZeRO-3's partition
    if tied and ((accumulating and not fsdp and accumulated(ms.gradients))
                 or ms.live is not None):
        incoming = EMBEDDING_GRAD_TIED_ACCUMULATED(x.counts.embedding, x.tp, n.grad, x.T, x.h,
                                                   n.residual, n.compute)
    elif tied:
        incoming = EMBEDDING_GRAD_TIED(x.counts.embedding, x.tp, n.grad, x.T, x.h, n.residual,
                                       n.compute)
    elif (stage.embedding and accumulating and not x.lora and not fsdp
          and accumulated(ms.gradients)):
        incoming = EMBEDDING_GRAD_ACCUMULATED(x.counts.embedding, x.vocab_grad_split, n.grad,
                                              x.T, x.h, n.residual, n.compute)
    elif stage.embedding and pipelined and accumulating and not x.lora:
        # added to the unsharded gradient an earlier micro-batch left (the first one's becomes it)
        incoming = EMBEDDING_GRAD_ACCUMULATED(x.counts.embedding, x.vocab_grad_split,
                                              n.fsdp_grads(n.grad)[0], x.T, x.h, n.residual,
                                              n.compute)
    else:
        incoming = EMBEDDING_GRAD(x.T, x.h, n.residual, n.compute)
    if pipelined:  # no reduce until the last micro-batch: every unsharded gradient is kept
        return (_moment("backward.embedding", states, None, ms.gathered, others, incoming,
                        ms.reduce_bucket, None),)
    root = ms.local.root_trainable  # a frozen root (LoRA) has no gradients to reduce
    if ms.expert_units is not None:  # the embedding is its own unit, the head reduced before
        root = x.counts.embedding // x.tp if stage.embedding else 0
    if (ms.gathered_layer or ms.gathered_model) and root:
        # FSDP2's last post-backward is the root's: its parameters are resharded, its
        # unsharded gradients and the reduce-scatter input (in the reduce dtype) coexist
        # (offloaded: not on the GPU; accumulating, an earlier backward wrote the root's shard)
        rest = ROOT_GRADIENTS(ms.gradients.bytes, root, x.N, n.grad) \
            if accumulated(ms.gradients) and not accumulating else ms.gradients
        # the root's last parameter's unsharded gradient stays referenced past the copy: an
        # untied head's (tied, the final norm's), or a first stage's embedding (traced on one
        # rank and on two: a tied Llama 3.2 3B on one rank was +0.8% with its embedding's
        # counted); with the experts their own units, the root is the embedding alone. Under
        # torch TP the head's local gradient is kept as well (-1.7% without it: Qwen3's width
        # under FSDP2 x TP2, found by random runs); the embedding's, redistributed to its rows
        # into new tensors, is released
        if ms.expert_units is not None:
            last = root
        elif stage.head:
            last = 0 if x.arch.tie_word_embeddings else x.counts.lm_head // x.tp
        else:
            last = x.counts.embedding if stage.embedding and x.tp == 1 else 0
        kept = min(root, last)
        g_u, g_r = n.fsdp_grads(n.grad)
        scatter = ROOT_REDUCE_SCATTER(root, g_u, g_r, kept, x.N, n.grad if n.grad != g_r else 0)
        # (every other unit resharded by its post-backward, ZeRO-2's too; the root not)
        gathered_root = ms.gathered_root or GATHERED_ROOT(ms.local.root, n.gathered_weight)
        if tied and (not x.whole_embedding_grad(stage) or ms.expert_units is not None):
            # the sum of the head's and the embedding's gradients comes first, apart (under
            # torch TP the whole gradient's redistribution below: not traced tied)
            summed = _moment("backward.embedding", states, rest, gathered_root, others,
                             EMBEDDING_GRAD_TIED_FSDP(
                                 x.counts.embedding, x.tp, g_u, x.T, x.h, n.residual,
                                 n.compute, ms.local.per_layer_trainable, g_r), None, None)
            return summed, _moment("backward.fsdp_root", states, rest, others,
                                   EMBEDDING_GRAD(x.T, x.h, n.residual, n.compute), scatter)
        reduce = _moment("backward.fsdp_root", states, rest, others, incoming, scatter)
        if ms.expert_units is not None:
            return (reduce,)
        if not x.whole_embedding_grad(stage):
            if not stage.embedding:
                return (reduce,)
            # the embedding's gradient computed beside the head's, both unsharded, before the
            # root's post-backward
            computed = _moment("backward.embedding", states, rest, gathered_root, others,
                               EMBEDDING_GRAD_FSDP(
                                   x.counts.embedding, x.tp, x.counts.lm_head // x.tp
                                   if stage.head else 0, g_u, x.T, x.h, n.residual, n.compute,
                                   ms.local.per_layer_trainable, g_r), None, None)
            return computed, reduce
        whole = ROOT_REDISTRIBUTE(x.counts.embedding, x.tp, x.counts.lm_head // x.tp, g_u,
                                  ms.local.per_layer_trainable, g_r)
        return (_moment("backward.fsdp_root_redistribute", states, rest, ms.gathered_root,
                        others, whole), reduce)
    held = None if ms.per_backward and accumulating else ms.gradients
    clone = OFFLOAD_CLONE(x.counts.embedding, n.grad) \
        if _offload_clone(x, stage, ms) and not accumulating else None
    end = _moment("backward.embedding", states, held,
                  ms.gathered if ms.live is None else _live(x, ms, "embedding"), others,
                  incoming, ms.reduce_bucket, clone)
    normed = _offload_embedding_norm(x, stage, ms, accumulating)
    if normed is not None:  # (the clone in the gradient's place, the incoming one gone; at stage
        # 2, whose earlier gradients went to the host, the embedding's whole beside its piece,
        # accumulating or not)
        norm, clone = normed
        grads = OFFLOAD_CLONE(x.counts.embedding, n.grad) if x.z == 2 else held
        at_norm = _moment("backward.offload_embedding_norm", states, grads, others,
                          ms.reduce_bucket, norm)
        if clone is None:
            return (end, at_norm)
        # stage 1 reduces after the backward (the incoming gradient gone), cloning each
        # gradient larger than the bucket beside the rest
        return (end, _moment("backward.offload_clone", states, held, others, ms.reduce_bucket,
                             clone), at_norm)
    if ms.partition_copy is None:
        return (end,)
    return (end, _moment("backward.deepspeed_partition", states, ms.gradients,
                         ms.reduce_bucket, ms.partition_copy))


def _offload_clone(x: Setup, stage: Stage, ms: ModelStates) -> bool:
    """Under ZeRO-Offload's gradient accumulation, whether the embedding's gradient is the last
    kept whole (an untied embedding larger than the reduce bucket, the first tensor of rank
    0's share): DeepSpeed clones it into storage of its own as its hook runs."""
    return (ms.per_backward and stage.embedding and not x.arch.tie_word_embeddings
            and x.counts.embedding > x.zero_sizes.reduce_bucket)


def _live(x: Setup, ms: ModelStates, moment: str) -> Part | None:
    """DeepSpeed ZeRO-3's gathered parameters at `moment` (a `coordinator.Live` field)."""
    assert ms.live is not None
    return part_of(DS_GATHERED(getattr(ms.live, moment), x.n.weight))


def _stage_reduce(x: Setup, ms: ModelStates, states: Part | None) -> tuple[Moment, ...]:
    """Under pipelining FSDP2 reduces a stage's gradients only after its last backward
    (torch.distributed.pipelining's run_post_backward): unit after unit in module order, the
    root first, then the layers, each resharded, then its accumulated gradient copied into the
    reduce-scatter input beside every gradient not yet reduced. Later layers free what earlier
    ones held, so the heavier of the root's and the first layer's is the moment. (A rank of
    several chunks reduces each chunk at its own last backward: not modelled.)"""
    n, loc, g = x.n, ms.local, ms.grad_width
    g_r = n.fsdp_grads(g)[1]
    on_gpu = accumulated(ms.gradients)  # not offloaded: the reduced shards stay on the GPU
    best: Moment | None = None
    resharded = reduced = 0
    for params, trainable in ((loc.root, loc.root_trainable),
                              (loc.per_layer, loc.per_layer_trainable)):
        resharded += params
        if trainable:
            moment = _moment("backward.fsdp_stage_reduce", states,
                             STAGE_REDUCED(reduced, x.N, g) if reduced and on_gpu else None,
                             part_of(STAGE_REDUCE_GATHERED(loc.total, resharded, n.gathered_weight),
                                     STAGE_REDUCE_UNREDUCED(loc.trainable, ms.embedding_rows,
                                                            reduced, g_r)),
                             STAGE_REDUCE_SCATTER(trainable, x.N, g_r))
            if best is None or moment.bytes > best.bytes:
                best = moment
        reduced += trainable
    return () if best is None else (best,)


def _with_buffers(x: Setup, stage: Stage, ms: ModelStates, detail: bool) -> Part | None:
    """The stage's states and, under torch's pipeline schedules, its receive buffers
    (`RECV_BUFFERS`), alive all step like them: a micro-batch in flight keeps its activation
    as its first layer's input and its gradient as its last layer's incoming gradient, counted
    here, not with the layers (`Layers.received`). Megatron-LM allocates what it receives per
    message (p2p_communication's torch.empty): the activation received is the stage's input,
    counted with the first layer's saved tensors, and the gradient lives for one backward."""
    if x.pp == 1 or x.megatron:
        return ms.on_device
    held, count = x.held_stages(stage)
    sets = sum(i > 0 for i in held) + sum(i < count - 1 for i in held)
    buffers = ((RECV_BUFFERS(sets, x.micro_batches, x.T, x.h, _hidden_width(x)), 1),)
    if ms.on_device is None:
        return part(buffers, detail)
    return extended(ms.on_device, buffers, detail)


def _hidden_width(x: Setup) -> int:
    """Bytes of the hidden states between pipeline stages: FSDP2's param dtype under its
    mixed-precision policy, else the residual stream's."""
    return x.n.compute if x.n.fsdp_mixed else x.n.residual


__all__ = ["COMPONENTS", "MOMENTS", "PARTS", "PHASES", "Moment", "MomentKind", "StagePeak",
           "stage_peak"]
