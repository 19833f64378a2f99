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

from dataclasses import dataclass

from .architecture import Architecture
from .numerics import Numerics
from .scenario import Parallelism, Training


@dataclass(frozen=True, slots=True)
class LogitsMemory:
    forward_peak: int  # alive while the loss is computed
    saved: int  # kept for backward after forward
    backward_peak: int  # alive while the loss backward runs (before the head's matmul)


def logits_memory(arch: Architecture, n: Numerics, t: Training, p: Parallelism,
                  tokens: int) -> LogitsMemory:
    T = tokens
    V = -(-arch.vocab_size // p.tp)
    c = n.compute
    if t.loss == "chunked":
        h = arch.hidden_size
        chunk = T * h * (c + 4 + 4)  # one chunk of logits: low precision, fp32, its gradient
        kept = T * h * c + V * h * 4  # input gradient and fp32 head-weight gradient
        return LogitsMemory(forward_peak=chunk + kept, saved=kept, backward_peak=kept)
    upcast = 0 if c == 4 else 4
    softcap = T * V * c if arch.final_logit_softcapping else 0
    return LogitsMemory(
        forward_peak=T * V * (c + upcast + 4) + softcap,
        saved=T * V * 4 + softcap,
        backward_peak=T * V * 12 + softcap,
    )
