"""Logits and the cross-entropy loss: often the peak for large vocabularies.

Hugging Face's `ForCausalLMLoss` upcasts the logits (`logits.float()`) and calls
`F.cross_entropy`, i.e. `log_softmax` (which keeps its fp32 output for backward) and `nll_loss`.
Per token, with V the vocabulary (per tensor-parallel rank) and c the logits width:

- during the loss:       c V (logits) + 4 V (fp32 copy, unless c = 4) + 4 V (log-softmax)
- saved after forward:   4 V (log-softmax output); the logits die with the model outputs,
                         which Trainer drops before backward
- backward, at its peak: 12 V: the saved log-softmax output, the gradient `nll_loss` returns
                         and the gradient `log_softmax` returns, all fp32

Gemma 2's final-logit soft-capping (`tanh(x / cap) * cap`) keeps one more c V (the tanh output).

`loss: chunked` models Liger-Kernel's fused linear cross-entropy: the logits are never
materialised; chunks of about T h / V tokens are projected, softmaxed and differentiated during
the forward (the Triton kernel writes the gradient over the chunk's logits), which keeps the
input gradient and the head's weight gradient (in the weight's dtype) instead.
"""

from __future__ import annotations

from .activations import norm_width
from .formula import Formula, Term
from .setup import Setup
from .sources import (
    HF_LOSS,
    LIGER,
    TORCH_LOSS_PARALLEL,
    TORCH_PIPELINING,
    TORCH_SCHEDULES,
    TRACED_DEEPSPEED,
)

KEY = "logits/loss"
FORWARD = Formula(KEY, "lambda T, V_t, c, u: T * V_t * (c + u + 4)", id="logits.forward",
                  title="Logits and loss at the forward's loss", source=HF_LOSS,
                  note="the logits (c), their fp32 copy (u = 4, none when c = 4) and "
                       "log_softmax's fp32 output")
FORWARD_SOFTCAP = Formula(
    KEY, "lambda T, V_t, c, u: T * V_t * (c + u + 4) + T * V_t * c", id="logits.forward_softcap",
    title="Logits and loss at the forward's loss, with Gemma 2's soft-capping", source=HF_LOSS,
    note="soft-capping keeps its tanh output (T V c)")
FORWARD_PARALLEL = Formula(
    KEY, "lambda T, V_t, c, u: T * V_t * (c + u + 8)", id="logits.forward_parallel",
    source=TORCH_LOSS_PARALLEL,
    title="Logits and loss at the forward's loss under tensor parallelism's loss_parallel",
    note="the logits (c) and their fp32 copy (u), beside the DTensor log_softmax's shifted "
         "logits and their exp, both fp32, each T V / tp (traced: every TP case's forward)")
BACKWARD = Formula(KEY, "lambda T, V_t: 12 * T * V_t", id="logits.backward",
                   title="The loss gradients at the start of backward", source=HF_LOSS,
                   note="the saved log_softmax output and the gradients nll_loss and "
                        "log_softmax return, all fp32")
BACKWARD_SOFTCAP = Formula(
    KEY, "lambda T, V_t, c: 12 * T * V_t + T * V_t * c", id="logits.backward_softcap",
    title="The loss gradients at the start of backward, with Gemma 2's soft-capping",
    source=HF_LOSS)
BACKWARD_PARALLEL = Formula(
    KEY, "lambda T, V_t: 16 * T * V_t", id="logits.backward_parallel", source=TORCH_LOSS_PARALLEL,
    title="The loss gradients at the start of backward under tensor parallelism's loss_parallel",
    note="the saved log_softmax output and three fp32 buffers of its DTensor backward "
         "(zeros_like, exp, add), each T V / tp")
STAGE_OUTPUT = Formula(
    KEY, "lambda T, V_t, c: T * V_t * c", id="logits.stage_output", source=TORCH_PIPELINING,
    title="Pipeline parallelism: the last stage's output (the logits), kept by the schedule "
          "until that micro-batch's backward")
KEPT = Formula(
    KEY, "lambda T, V_t, c, k: T * V_t * (c + k)", id="logits.kept", source=TORCH_SCHEDULES,
    title="Pipeline parallelism: each other micro-batch in flight past the loss on the last "
          "stage: its logits (the stage output the schedule keeps) and what its loss saved",
    note="k = 4, log_softmax's fp32 output; with Gemma 2's soft-capping k = 4 + c (the tanh "
         "output) (traced: GPipe, validation/cases.json)")
CHUNKED_FORWARD = Formula(
    KEY, "lambda T, H, q, V_t, w, n_c, c, u_w, m_w: 2 * T * H * q + V_t * H * w + n_c * V_t * c "
    "+ u_w * V_t * H * c + m_w * V_t * H + 4 * T", id="logits.chunked_forward", source=LIGER,
    title="The fused linear cross-entropy in the forward: its input (the final norm's "
          "output, alive through the call), the input and weight gradient buffers it fills, "
          "one chunk of logits (their gradient written over them), the loss per token",
    note="n_c = next_power_of_2(ceil(T / ceil(V / H))) tokens a chunk; the weight gradient is "
         "zeros_like(weight) (w = 0 for a frozen head); under autocast an fp32 weight is cast "
         "twice (u_w = 2): autocast caches its cast for chunk @ W, and casts W.t() per chunk; "
         "a frozen one (LoRA) once at a time (u_w = 1: autocast caches no cast of it); "
         "a weight gradient that is not fp32 is accumulated as mm(...).float() (m_w = c + 4 "
         "bytes per weight), an fp32 one by addmm(out_dtype=fp32) in place (m_w = 0) "
         "(traced: validation/harness/loss.py, Liger's ops @ead96b6)")
CHUNKED_KEPT = Formula(
    KEY, "lambda T, H, q, V_t, w: T * H * q + V_t * H * w", id="logits.chunked_backward",
    title="What the fused linear cross-entropy kept for backward: the input and weight "
          "gradients", source=LIGER)


HEAD_MATMUL = Formula(
    KEY, "lambda T, V_t, H, c, u: V_t * H * c + T * V_t * c + T * H * u",
    id="logits.head_matmul", source=TRACED_DEEPSPEED,
    title="DeepSpeed ZeRO-3's head under torch_autocast, at its matmul: the fp32 weight cast to "
          "the compute dtype inside LinearFunctionForZeroStage3 (cached nowhere, made again in "
          "backward), beside the logits (forward) or their gradient (backward) in that dtype "
          "and the input's cast (u: c where the input is wider) or its gradient (u = c)",
    note="traced: QLoRA on the attention of a 405B width over four ranks, -10.6% with the "
         "loss's moments alone")


def head_matmul(x: Setup, backward: bool) -> Term | None:
    """`HEAD_MATMUL` in forward or `backward`, where the head's weight is cast for its matmul
    and freed after it: DeepSpeed's ZeRO-3 linear under torch_autocast over fp32 weights (else
    the cast is autocast's cached copy, kept with the head's saved tensors, or none)."""
    n = x.n
    if not (x.frozen_linear_inputs and n.casts_weights) or x.chunked_loss:
        return None
    c = n.compute
    return HEAD_MATMUL(x.T, x.vocab, x.H, c, c if backward or norm_width(x) != c else 0)


def logits_memory(x: Setup) -> tuple[Term, Term]:
    """The loss's bytes at the forward's loss and at the start of backward."""
    T, V, c = x.T, x.vocab, x.n.compute
    if x.chunked_loss:
        n, H = x.n, x.H
        q = 4 if n.residual == 4 else c  # the final norm's output: fp32 with an fp32 residual
        w = 0 if x.lora else n.gathered_weight if n.fsdp_mixed else n.weight
        tokens = 1 << (-(-T // -(-V // H)) - 1).bit_length()
        # autocast caches its cast of a trained fp32 weight and casts W.t() per chunk; a
        # frozen one (LoRA) is cast per use, one cast alive at a time. DeepSpeed's ZeRO-3
        # caches none, but two of its casts are alive at once as well (traced: a random run,
        # -16.7% without them)
        u_w = 0 if not n.casts_weights else 1 if x.lora else 2
        # no weight gradient, or an fp32 one filled in place by addmm(out_dtype=fp32) from
        # 16-bit logits; else mm(...).float(): the product and its fp32 copy
        m_w = 0 if w == 0 or (w == 4 and c < 4) else c + 4
        return (CHUNKED_FORWARD(T, H, q, V, w, tokens, c, u_w, m_w), CHUNKED_KEPT(T, H, q, V, w))
    u = 0 if c == 4 else 4
    if x.arch.final_logit_softcapping:
        return FORWARD_SOFTCAP(T, V, c, u), BACKWARD_SOFTCAP(T, V, c)
    if x.tp > 1 and not x.megatron:  # torchtitan's loss_parallel on the vocab-sharded logits
        return FORWARD_PARALLEL(T, V, c, u), BACKWARD_PARALLEL(T, V)
    return FORWARD(T, V, c, u), BACKWARD(T, V)


def stage_output(x: Setup) -> Term | None:
    """torch.distributed.pipelining keeps each stage's output for its backward: on the last
    stage the logits, until the loss's backward (transformers' hf layers; Megatron computes the
    loss inside the stage)."""
    return None if x.megatron or x.chunked_loss else STAGE_OUTPUT(x.T, x.vocab, x.n.compute)


def kept_logits(x: Setup) -> Term | None:
    """What one more micro-batch in flight past its loss keeps on the last pipeline stage
    (`KEPT`; the fused chunked loss keeps its gradients instead; Megatron's stage computes its
    loss inside)."""
    if x.megatron:
        return None
    if x.chunked_loss:
        return logits_memory(x)[1]
    c = x.n.compute
    return KEPT(x.T, x.vocab, c, 4 + (c if x.arch.final_logit_softcapping else 0))
