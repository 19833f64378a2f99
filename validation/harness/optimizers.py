"""The optimizers a traced step runs: torch's, transformers' Adafactor, and the harness's
master-weights wrapper (DeepSpeed/Megatron-style mixed precision)."""
from __future__ import annotations

import torch

from .common import Untraceable

class MasterWeightsOptimizer(torch.optim.Optimizer):
    """DeepSpeed/Megatron-style mixed precision ("master" mode).

    Model weights and grads live in the low precision. This wrapper keeps an fp32 master
    copy of every trainable param (in self.state[p]["master"], so MemTracker counts it
    as optimizer state) and an inner torch optimizer over the masters (fp32 states).
    step(): for each param, master.grad = p.grad.float() and the low-precision grad is
    released right away (p.grad = None); inner.step(); p.copy_(master); master.grad = None.
    So during step the fp32 grads (4 B/param) coexist with masters+states; the low-precision
    grads are gone by the time the inner step runs (except the one being converted).
    """

    def __init__(self, params, inner_factory):
        params = [p for p in params]
        super().__init__(params, {})
        self._pairs = []
        for p in params:
            m = p.detach().to(torch.float32).clone() if p.dtype == torch.float32 else p.detach().to(torch.float32)
            self.state[p]["master"] = m
            self._pairs.append((p, m))
        self.inner = inner_factory([m for _, m in self._pairs])

    @torch.no_grad()
    def step(self, closure=None):
        for p, m in self._pairs:
            if p.grad is None:
                continue
            m.grad = p.grad.to(torch.float32)
            p.grad = None
        self.inner.step()
        for p, m in self._pairs:
            p.copy_(m)
            m.grad = None
        return None


def optimizer_class(tr: dict):
    """(class, keyword arguments, what runs) of the scenario's torch optimizer."""
    name, impl = tr["optimizer"], tr["optimizer_impl"]
    flags = {"fused": {"fused": True}, "foreach": {"foreach": True},
             "for_loop": {"foreach": False}}.get(impl)
    if flags is None:
        raise Untraceable(f"optimizer_impl={impl}")
    lr = 1e-5
    if name == "adamw":
        return torch.optim.AdamW, {"lr": lr, "weight_decay": 0.0, **flags}, impl
    if name == "adam":
        return torch.optim.Adam, {"lr": lr, **flags}, impl
    if name == "sgd":
        return torch.optim.SGD, {"lr": lr, "momentum": 0.0, **flags}, impl
    if name == "sgd_momentum":
        return torch.optim.SGD, {"lr": lr, "momentum": 0.9, **flags}, impl
    if name == "adafactor":
        # What HF Trainer builds for optim="adafactor": transformers' Adafactor with
        # scale_parameter=False, relative_step=False (for-loop implementation only).
        from transformers.optimization import Adafactor
        return Adafactor, {"lr": lr, "scale_parameter": False, "relative_step": False,
                           "warmup_init": False}, "for_loop(transformers.Adafactor)"
    if name == "lion":
        raise Untraceable("no lion implementation in torch 2.13 / transformers")
    if name == "adamw_8bit":
        raise Untraceable("adamw_8bit needs bitsandbytes CUDA kernels")
    raise Untraceable(f"optimizer={name}")


def make_optimizer(params, tr: dict, zero1: bool = False):
    """The optimizer over `params` and what runs; `zero1`: inside torch's
    ZeroRedundancyOptimizer (states of a share of the parameters only)."""
    cls, kwargs, impl = optimizer_class(tr)
    master = tr["mixed_precision"] == "master" and tr["precision"] != "fp32"
    if zero1:
        if master:
            raise Untraceable("master weights with ZeroRedundancyOptimizer")
        from torch.distributed.optim import ZeroRedundancyOptimizer
        return ZeroRedundancyOptimizer(params, optimizer_class=cls, **kwargs), f"zero1[{impl}]"
    if master:
        return MasterWeightsOptimizer(params, lambda ps: cls(ps, **kwargs)), f"master[{impl}]"
    return cls(params, **kwargs), impl
