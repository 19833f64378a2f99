"""`loss: chunked`: Liger-Kernel's fused linear cross-entropy, as Trainer(use_liger_kernel=True)
patches a causal LM's forward (liger_kernel/transformers/model/loss_utils.py and
ops/fused_linear_cross_entropy.py @ead96b6).

The logits are never materialised whole: the tokens are cut into chunks of
next_power_of_2(ceil(BT / ceil(V / H))) rows; for each chunk the forward computes its logits,
lets the Triton kernel write the loss and, in place, the logits' gradient, then adds the chunk's
input gradient (chunk @ W) into a (BT, H) buffer and its weight gradient into a (V, H) buffer
(zeros_like the weight; on sm80+ with an fp32 accumulator and 16-bit logits by addmm(out_dtype=
fp32) in place, else mm(...).float()). Both buffers are saved for backward, which only scales
them by the incoming gradient. The Triton kernel itself allocates nothing; here the chunk's
gradient is the chunk itself, as in the kernel.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from transformers.modeling_outputs import CausalLMOutputWithPast

IGNORE = -100


def _next_power_of_2(n: int) -> int:
    return 1 << (n - 1).bit_length()


class FusedLinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, target):
        bt, h = x.shape
        v = weight.shape[0]
        chunk = _next_power_of_2(-(-bt // -(-v // h)))
        grad_input = torch.zeros_like(x)
        grad_weight = torch.zeros_like(weight) if weight.requires_grad else None
        loss_1d = torch.zeros(bt, dtype=torch.float32, device=x.device)
        for start in range(0, bt, chunk):
            x_chunk = x[start:start + chunk]
            logits = (x_chunk @ weight.t()).contiguous()  # the kernel overwrites it with its grad
            grad_input[start:start + chunk] = logits @ weight
            if grad_weight is not None:
                if grad_weight.dtype == torch.float32 and logits.dtype in (torch.float16,
                                                                           torch.bfloat16):
                    x_cast = x_chunk.to(logits.dtype)
                    torch.addmm(grad_weight, logits.t(), x_cast, out_dtype=torch.float32,
                                out=grad_weight)
                    del x_cast
                else:
                    grad_weight += torch.mm(logits.t(), x_chunk.to(logits.dtype)).float()
            del logits
        loss = loss_1d.sum()
        ctx.save_for_backward(grad_input, grad_weight)
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        grad_input, grad_weight = ctx.saved_tensors
        grad_input.mul_(grad_output)  # element_mul_kernel: in place
        if grad_weight is not None:
            grad_weight.mul_(grad_output)
        return grad_input, grad_weight, None


def apply(model) -> None:
    """Patch the causal LM (under any PEFT wrapper) so that a forward with labels returns the
    fused loss and no logits."""
    lm = next(m for m in model.modules() if "lm_head" in m._modules)
    decoder = lm.model

    def forward(input_ids=None, labels=None, **kwargs):
        hidden = decoder(input_ids=input_ids, **kwargs).last_hidden_state
        target = F.pad(labels, (0, 1), value=IGNORE)[..., 1:]
        h = hidden.shape[-1]
        loss = FusedLinearCrossEntropy.apply(hidden.reshape(-1, h), lm.lm_head.weight,
                                             target.reshape(-1))
        return CausalLMOutputWithPast(loss=loss)

    lm.forward = forward
