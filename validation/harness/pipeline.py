"""Pipeline parallelism: the traced rank's stages under torch.distributed.pipelining's own
schedule, run for real in one process on the `fake` process group (send/recv complete at once
and move nothing; the received activations and gradients are fresh fake buffers of the right
shape, as the stage's own recv buffers are on a GPU).

The model is cut as torchtitan's `pipeline_module_split` cuts it: into pp x v stages of as
many decoder layers each, the first stage keeping the embedding, the last the final norm and
lm_head. Which stages a rank holds is the schedule's (`SCHEDULES`, torch's
`generate_rank_to_stage_mapping`): one (1F1B, GPipe), v looped ones, i, i + pp, ...
(interleaved 1F1B, interleaved zero bubble), or two in a V, i and 2 pp - 1 - i (ZBV, DualPipeV:
rank 0 holds both ends of the model). Micro-batches = `gradient_accumulation_steps` (the
schedule's n_microbatches), each of `micro_batch_size` sequences. The loss on the last stage is
cross-entropy on fp32 logits (torchtitan's `cross_entropy_loss`). FSDP2 on a stage:
`reshard_after_forward=False` (torchtitan's default with PP,
`get_fsdp_reshard_after_forward_policy`).
"""
from __future__ import annotations

import inspect

import torch
from torch import nn

from .common import Untraceable
from .models import decoder_layers

# The scenario's `pipeline_schedule` -> (torch's class, how stages are placed on ranks,
# stages a rank holds: None = `virtual_stages`).
SCHEDULES = {
    "1f1b": ("Schedule1F1B", "loop", 1),
    "gpipe": ("ScheduleGPipe", "loop", 1),
    "interleaved_1f1b": ("ScheduleInterleaved1F1B", "loop", None),
    # ZB-H1 (Qi et al. 2023) with one stage a rank: torch's ZB1P, split backward
    "zero_bubble": ("ScheduleInterleavedZeroBubble", "loop", None),
    "zbv": ("ScheduleZBVZeroBubble", "v", 2),
    "dualpipev": ("ScheduleDualPipeV", "v", 2),
}
SINGLE = ("Schedule1F1B", "ScheduleGPipe")  # PipelineScheduleSingle: one stage object


def layout(par: dict) -> tuple[str, str, int]:
    """(torch's schedule class, placement style, stages a rank holds) of a scenario's
    parallelism."""
    name = par.get("pipeline_schedule") or "1f1b"
    if name not in SCHEDULES:
        raise Untraceable(f"pipeline_schedule={name}: no torch.distributed.pipelining schedule")
    cls, style, per_rank = SCHEDULES[name]
    return cls, style, per_rank or int(par.get("virtual_stages") or 1)


def middle_rank(par: dict, pp: int) -> int:
    """The middle rank (neither end of the model's embedding or head) that holds the most:
    the one with the most micro-batches in flight, rank 1, except under zero bubble, where
    every rank but the first keeps as many micro-batches and the later ranks more of them
    waiting for their weight backward."""
    if pp < 3:
        raise ValueError("no middle pipeline rank with pp < 3")
    return pp - 2 if (par.get("pipeline_schedule") or "1f1b") == "zero_bubble" else 1


def rank_stages(rank: int, pp: int, style: str, per_rank: int) -> list[int]:
    """The global stage indices rank `rank` holds (torch's `generate_rank_to_stage_mapping`)."""
    if style == "v":
        return [rank, 2 * pp - 1 - rank]
    return list(range(rank, pp * per_rank, pp))


class StageModule(nn.Module):
    """Layers [lo, hi) of a causal LM; the embedding on the first stage, the norm and head on
    the last. Called as each decoder layer is called by the HF model."""

    def __init__(self, lm: nn.Module, lo: int, hi: int, first: bool, last: bool,
                 boundary=None):
        super().__init__()
        self.boundary = boundary
        inner = getattr(lm, "model", None)
        if inner is None or getattr(inner, "rotary_emb", None) is None:  # GPT-2: wpe, no RoPE
            raise Untraceable("pipeline stages are cut from rotary decoder models only")
        self.embed_tokens = inner.embed_tokens if first else None
        self.layers = nn.ModuleList(decoder_layers(lm)[lo:hi])
        self.rotary_emb = inner.rotary_emb
        # Gemma 3 rotates its local and global layers apart: one call per layer type
        self.rotary_by_type = "layer_type" in inspect.signature(inner.rotary_emb.forward).parameters
        self.config = lm.config
        # each layer's type as the model's forward picks its mask: `layer_types`, else (Mistral,
        # Phi-3, Mixtral) a sliding window where the config sets one
        n = len(decoder_layers(lm))
        window = getattr(lm.config, "sliding_window", None)
        types = getattr(lm.config, "layer_types", None) or \
            ["sliding_attention" if window else "full_attention"] * n
        self.all_types = sorted(set(types))  # the model builds a mask for each, every stage
        self.layer_types = list(types[lo:hi])
        if boundary is not None and lm.config._attn_implementation == "eager":
            raise Untraceable("eager attention under sequence parallelism: the stage would run "
                              "without its causal mask")
        self.norm = inner.norm if last else None
        self.lm_head = lm.lm_head if last else None
        # Gemma 2's final soft-capping, which its ForCausalLM applies after lm_head
        self.softcap = getattr(lm.config, "final_logit_softcapping", None) if last else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed_tokens(x) if self.embed_tokens is not None else self._enter(x)
        pos = torch.arange(h.shape[1], device=h.device).unsqueeze(0)
        if self.rotary_by_type:
            rotary = {kind: self.rotary_emb(h, pos, kind) for kind in self.all_types}
        else:
            rotary = dict.fromkeys(self.all_types, self.rotary_emb(h, pos))
        masks = self._masks(h, pos)
        for layer, kind in zip(self.layers, self.layer_types, strict=True):
            out = layer(h, attention_mask=masks.get(kind), position_ids=pos,
                        position_embeddings=rotary[kind])
            h = out[0] if isinstance(out, tuple) else out
        if self.lm_head is not None:
            logits = self.lm_head(self.norm(h))
            if self.softcap is not None:  # as Gemma2ForCausalLM.forward computes it
                logits = torch.tanh(logits / self.softcap) * self.softcap
            return logits
        return h.to_local() if self.boundary is not None else h

    def _masks(self, h: torch.Tensor, pos: torch.Tensor) -> dict:
        """The masks the HF model builds before its layers, by layer type: under eager
        attention a 4-D causal (or sliding-window) mask in the embeddings' dtype, none where
        SDPA's and flash's causal flag suffices. Each stage builds its own, as the model does
        at its start (a sequence-parallel DTensor stream: none, as before)."""
        if self.boundary is not None:
            return {}
        from transformers.masking_utils import (create_causal_mask,
                                                create_sliding_window_causal_mask)
        kwargs = {"config": self.config, "inputs_embeds": h, "attention_mask": None,
                  "past_key_values": None, "position_ids": pos}
        return {kind: (create_sliding_window_causal_mask if kind == "sliding_attention"
                       else create_causal_mask)(**kwargs) for kind in self.all_types}

    def _enter(self, x: torch.Tensor) -> torch.Tensor:
        """A received activation as the layers take it: the sequence-parallel residual stream
        is a DTensor inside the stage (the HF layers' RoPE reads its global length) and its
        local shard between stages, as torchtitan's stages send and receive it."""
        if self.boundary is None:
            return x
        from torch.distributed.tensor import DTensor, Shard
        return DTensor.from_local(x, self.boundary, [Shard(1)], run_check=False)


class RankModule(nn.Module):
    """The stages one rank holds when it holds several (torchtitan's model parts): what the
    optimizer, FSDP2 and the tracker see. Never called itself; the schedule calls each chunk."""

    def __init__(self, chunks: list[StageModule]):
        super().__init__()
        self.chunks = nn.ModuleList(chunks)


def split(lm: nn.Module, indices: list[int], n_stages: int, boundary=None) -> nn.Module:
    """The stages `indices` of `lm` cut into `n_stages`: one StageModule, or a RankModule of
    several. `boundary`: the tp mesh when the residual stream is sequence-parallel (each stage
    sends and receives its local S/tp tokens), else None."""
    n = len(decoder_layers(lm))
    if n % n_stages:
        raise ValueError(f"{n} layers do not split evenly over {n_stages} pipeline stages")
    per = n // n_stages
    chunks = [StageModule(lm, i * per, (i + 1) * per, i == 0, i == n_stages - 1, boundary)
              for i in indices]
    return chunks[0] if len(chunks) == 1 else RankModule(chunks)


def chunks(model: nn.Module) -> list[StageModule]:
    return list(model.chunks) if isinstance(model, RankModule) else [model]


def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())


def schedule(model: nn.Module, indices: list[int], n_stages: int, cls_name: str, dev, group,
             micro_batches: int, shapes):
    """The rank's stages with static shapes and torch's schedule over them. `shapes(i)` gives
    stage i's one-micro-batch (input, output) tensors. Their `requires_grad` is part of the
    static metadata: a received activation is a leaf requiring grad only if its example is
    one (without it the stage computes no input gradient, and zero bubble's split backward,
    which finds the weights' gradients through the input's, none at all).

    The schedule's first step votes with its neighbours on static vs dynamic shapes and reads
    the vote with `.item()`, which a fake tensor cannot answer; every rank passing its shapes
    votes static, so the vote is replaced by its result."""
    from torch.distributed.pipelining import PipelineStage, schedules
    from torch.distributed.pipelining._utils import InferenceMode

    def voted_static(self, stages, has_backward, p2p_done):
        for st in stages:
            st._inference_mode = InferenceMode.STATIC
    schedules._PipelineSchedule._warmup_p2p = voted_static
    # Stage initialisation forks the CUDA RNG (no CUDA generator in the CPU build): a no-op.
    torch.cuda.get_rng_state = lambda *a, **k: torch.zeros(0, dtype=torch.uint8)
    torch.cuda.set_rng_state = lambda *a, **k: None
    stages = []
    for mod, i in zip(chunks(model), indices):
        inputs, outputs = shapes(i)
        stage = PipelineStage(
            mod, i, n_stages, dev, input_args=(inputs,), output_args=(outputs,),
            output_grads=(outputs.detach(),) if i < n_stages - 1 else None,
            input_grads=(inputs.detach(),) if i > 0 else (None,), group=group)
        # check every tensor crossing a stage against the static metadata (torch does only
        # under TORCH_DISTRIBUTED_DEBUG=DETAIL, whose process-group wrapper the fake group
        # lacks): a wrong dtype would size the recv buffers wrong
        stage._runtime_validate = True
        stages.append(stage)
    cls = getattr(schedules, cls_name)
    sched = cls(stages[0] if cls_name in SINGLE else stages, n_microbatches=micro_batches,
                loss_fn=loss_fn)
    return stages, sched
