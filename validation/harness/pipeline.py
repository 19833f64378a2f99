"""Pipeline parallelism: one stage of torch.distributed.pipelining's Schedule1F1B, run for real
in one process on the `fake` process group (send/recv complete at once and move nothing; the
received activations and gradients are fresh fake buffers of the right shape, as the stage's
own recv buffers are on a GPU).

The stage is the Hugging Face model cut as torchtitan's `pipeline_module_split` cuts it: the
first stage keeps the embedding, the last the final norm and lm_head, and the decoder layers are
split evenly. Micro-batches = `gradient_accumulation_steps` (the schedule's n_microbatches),
each of `micro_batch_size` sequences; with 1F1B stage i holds min(pp - i, m) micro-batches'
activations at its peak. The loss on the last stage is cross-entropy on fp32 logits
(torchtitan's `cross_entropy_loss`). FSDP2 on a stage: `reshard_after_forward=False`
(torchtitan's default with PP, `get_fsdp_reshard_after_forward_policy`).
"""
from __future__ import annotations

import torch
from torch import nn

from .models import decoder_layers


class StageModule(nn.Module):
    """Layers [lo, hi) of a causal LM; the embedding on the first stage, the norm and head on
    the last. Called as each decoder layer is called by the HF model."""

    def __init__(self, lm: nn.Module, lo: int, hi: int, first: bool, last: bool):
        super().__init__()
        inner = lm.model
        self.embed_tokens = inner.embed_tokens if first else None
        self.layers = nn.ModuleList(decoder_layers(lm)[lo:hi])
        self.rotary_emb = inner.rotary_emb
        self.norm = inner.norm if last else None
        self.lm_head = lm.lm_head if last else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed_tokens(x) if self.embed_tokens is not None else x
        pos = torch.arange(h.shape[1], device=h.device).unsqueeze(0)
        cos_sin = self.rotary_emb(h, pos)
        for layer in self.layers:
            out = layer(h, attention_mask=None, position_ids=pos, position_embeddings=cos_sin)
            h = out[0] if isinstance(out, tuple) else out
        if self.lm_head is not None:
            h = self.lm_head(self.norm(h))
        return h


def split(lm: nn.Module, stage: int, pp: int) -> StageModule:
    n = len(decoder_layers(lm))
    if n % pp:
        raise ValueError(f"{n} layers do not split evenly over pp={pp}")
    per = n // pp
    return StageModule(lm, stage * per, (stage + 1) * per, stage == 0, stage == pp - 1)


def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())


def schedule(stage_mod: nn.Module, stage: int, pp: int, dev, group, micro_batches: int,
             inputs: torch.Tensor, outputs: torch.Tensor):
    """The stage with static shapes (`inputs`/`outputs`: one micro-batch's), and its 1F1B.

    The schedule's first step votes with its neighbours on static vs dynamic shapes and reads
    the vote with `.item()`, which a fake tensor cannot answer; every rank passing its shapes
    votes static, so the vote is replaced by its result."""
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, schedules
    from torch.distributed.pipelining._utils import InferenceMode

    def voted_static(self, stages, has_backward, p2p_done):
        for st in stages:
            st._inference_mode = InferenceMode.STATIC
    schedules._PipelineSchedule._warmup_p2p = voted_static
    # Stage initialisation forks the CUDA RNG (no CUDA generator in the CPU build): a no-op.
    torch.cuda.get_rng_state = lambda *a, **k: torch.zeros(0, dtype=torch.uint8)
    torch.cuda.set_rng_state = lambda *a, **k: None
    ps = PipelineStage(stage_mod, stage, pp, dev, input_args=(inputs,), output_args=(outputs,),
                       output_grads=(outputs,) if stage < pp - 1 else None,
                       input_grads=(inputs,) if stage > 0 else (None,),
                       group=group)
    return ps, Schedule1F1B(ps, n_microbatches=micro_batches, loss_fn=loss_fn)
