"""Tensor, sequence and context parallelism on a Hugging Face decoder, rank 0 of a `fake`
process group, as torchtitan's llama `apply_tp` / `apply_cp` express them with DTensor
(torchtitan @1786292^, torchtitan/models/llama3/parallelize.py).

Tensor parallel (Megatron-style, `parallelize_module`):
- embed_tokens: RowwiseParallel(input Replicate, output Shard(1) with SP, else Replicate): the
  vocabulary rows are split; the output is reduce-scattered (SP) or all-reduced.
- per layer: q/k/v/gate/up ColwiseParallel, o/down RowwiseParallel(output Shard(1) with SP, else
  Replicate); with SP the two norms are SequenceParallel and PrepareModuleInput all-gathers the
  attention's and the MLP's input (Shard(1) -> Replicate). HF calls `self_attn` with keyword
  arguments, so its input layout is given for the `hidden_states` keyword.
- the final norm SequenceParallel (SP), lm_head ColwiseParallel with output Shard(-1) and
  `loss_parallel()` around forward and backward (torchtitan's default: each rank keeps V/tp of
  the logits and cross-entropy runs on the shards).
Without SP the norms' weights become replicated DTensors (torchtitan's NoParallel) so that
every parameter is a DTensor: torch's fused/foreach optimizers reject mixed lists.

Context parallel: torch's `context_parallel()` (experimental) shards the sequence of the
inputs and the RoPE tables over the cp mesh and replaces SDPA by ring attention
(`torch.distributed.tensor.experimental._context_parallel`), as torchtitan's
`get_train_context` enters it around forward and backward.
"""
from __future__ import annotations

import contextlib

import torch
from torch import nn

from .models import decoder_layers


def apply_tp(model: nn.Module, tp_mesh, sequence_parallel: bool) -> None:
    from torch.distributed.tensor import Replicate, Shard, distribute_module
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                                   RowwiseParallel, SequenceParallel,
                                                   parallelize_module)
    sp = Shard(1) if sequence_parallel else Replicate()
    norm = (lambda: SequenceParallel(use_local_output=False)) if sequence_parallel else None
    lm = _causal_lm(model)
    if lm.get_input_embeddings().weight is lm.get_output_embeddings().weight:
        raise ValueError("tied embeddings: the harness's TP plan needs separate weights")
    parallelize_module(lm, tp_mesh, {
        "model.embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=sp,
                                              use_local_output=not sequence_parallel),
        "lm_head": ColwiseParallel(input_layouts=sp, output_layouts=Shard(-1),
                                   use_local_output=False),  # loss parallel
    })
    for layer in decoder_layers(model):
        plan = {
            "self_attn": PrepareModuleInput(input_kwarg_layouts={"hidden_states": sp},
                                            desired_input_kwarg_layouts={
                                                "hidden_states": Replicate()}),
            **{f"self_attn.{p}_proj": ColwiseParallel() for p in "qkv"},
            "self_attn.o_proj": RowwiseParallel(output_layouts=sp,
                                                use_local_output=not sequence_parallel),
            "mlp": PrepareModuleInput(input_layouts=(sp,), desired_input_layouts=(Replicate(),)),
            "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(),
            "mlp.down_proj": RowwiseParallel(output_layouts=sp,
                                             use_local_output=not sequence_parallel),
        }
        if sequence_parallel:
            plan["input_layernorm"] = norm()
            plan["post_attention_layernorm"] = norm()
        parallelize_module(layer, tp_mesh, plan)
    if sequence_parallel:
        parallelize_module(lm.model.norm, tp_mesh, norm())
    # NoParallel: every remaining parameter (the norms without SP) a replicated DTensor,
    # its input wrapped as a replicated DTensor and its output unwrapped.
    for module in list(lm.modules()):
        if any(not _is_dtensor(p) for p in module.parameters(recurse=False)):
            distribute_module(module, tp_mesh, input_fn=_replicate_inputs,
                              output_fn=_local_output)


def _replicate_inputs(module, inputs, mesh):
    from torch.distributed.tensor import DTensor, Replicate
    return tuple(DTensor.from_local(x, mesh, [Replicate()], run_check=False)
                 if isinstance(x, torch.Tensor) and not _is_dtensor(x) else x for x in inputs)


def _local_output(module, output, mesh):
    return output.to_local() if _is_dtensor(output) else output


def loss_parallel():
    from torch.distributed.tensor.parallel import loss_parallel as lp
    return lp()


def _is_dtensor(t: torch.Tensor) -> bool:
    from torch.distributed.tensor import DTensor
    return isinstance(t, DTensor)


def _causal_lm(model: nn.Module) -> nn.Module:
    return next(m for m in model.modules() if "lm_head" in m._modules)


# ----------------------------------------------------------------------------- context parallel
def cp_context(model: nn.Module, cp_mesh, buffers: list[torch.Tensor]):
    """torch's context_parallel() over `buffers` (input_ids, labels, position_ids: sharded on
    the sequence in place), round-robin load balancing as torchtitan, and the SDPA ring."""
    from torch.distributed.tensor.experimental import context_parallel
    return context_parallel(cp_mesh, buffers=buffers, buffer_seq_dims=[1] * len(buffers),
                            no_restore_buffers=set(buffers))


@contextlib.contextmanager
def nothing():
    yield
