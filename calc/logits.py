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
the forward, which keeps the input gradient and the head's weight gradient instead.
"""

from __future__ import annotations

from .formula import Formula, Term
from .setup import Setup
from .sources import HF_LOSS, LIGER

KEY = "logits/loss"
FORWARD = Formula(KEY, "lambda T, V_t, c, u: T * V_t * (c + u + 4)", id="logits.forward",
                  title="Logits and loss at the forward's loss", source=HF_LOSS,
                  note="the logits (c), their fp32 copy (u = 4, none when c = 4) and "
                       "log_softmax's fp32 output")
FORWARD_SOFTCAP = Formula(
    KEY, "lambda T, V_t, c, u: T * V_t * (c + u + 4) + T * V_t * c", id="logits.forward_softcap",
    title="Logits and loss at the forward's loss, with Gemma 2's soft-capping", source=HF_LOSS,
    note="soft-capping keeps its tanh output (T V c)")
BACKWARD = Formula(KEY, "lambda T, V_t: 12 * T * V_t", id="logits.backward",
                   title="The loss gradients at the start of backward", source=HF_LOSS,
                   note="the saved log_softmax output and the gradients nll_loss and "
                        "log_softmax return, all fp32")
BACKWARD_SOFTCAP = Formula(
    KEY, "lambda T, V_t, c: 12 * T * V_t + T * V_t * c", id="logits.backward_softcap",
    title="The loss gradients at the start of backward, with Gemma 2's soft-capping",
    source=HF_LOSS)
CHUNKED_FORWARD = Formula(
    KEY, "lambda T, H, c, V_t: T * H * (c + 4 + 4) + (T * H * c + V_t * H * 4)",
    id="logits.chunked_forward", title="The fused linear cross-entropy in the forward",
    source=LIGER, note="one chunk of logits (low precision, fp32 and its gradient) and what the "
                       "kernel keeps: the input gradient and the fp32 head-weight gradient")
CHUNKED_KEPT = Formula(
    KEY, "lambda T, H, c, V_t: T * H * c + V_t * H * 4", id="logits.chunked_backward",
    title="What the fused linear cross-entropy kept for backward", source=LIGER)


def logits_memory(x: Setup) -> tuple[Term, Term]:
    """The loss's bytes at the forward's loss and at the start of backward."""
    T, V, c = x.T, x.vocab, x.n.compute
    if x.chunked_loss:
        return CHUNKED_FORWARD(T, x.H, c, V), CHUNKED_KEPT(T, x.H, c, V)
    u = 0 if c == 4 else 4
    if x.arch.final_logit_softcapping:
        return FORWARD_SOFTCAP(T, V, c, u), BACKWARD_SOFTCAP(T, V, c)
    return FORWARD(T, V, c, u), BACKWARD(T, V)
