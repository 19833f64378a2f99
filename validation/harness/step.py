"""One traced training step (two, the second reported), as Hugging Face Trainer runs it."""
from __future__ import annotations

import contextlib
import gc
import time

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed._tools.mem_tracker import MemTracker

from . import loss as fused_loss
from . import models, parallel
from .common import (DTYPES, PHASES, TRACE_DEVICE, Untraceable, build_config, fake_cuda,
                     load_hf_config, normalize_scenario)
from .optimizers import make_optimizer
from .tracker import _cats, make_phase_tracker_cls, module_report

# What each mixed_precision mode stores the model in, and whether the forward runs under
# torch.autocast (see validation/README.md).
MODES = {
    "pure": ("precision", False),       # model.to(bf16), no autocast
    "amp": ("fp32", True),              # fp32 model, autocast
    "master": ("precision", False),     # bf16 model + fp32 masters in the optimizer
    "autocast": ("precision", True),    # bf16-loaded model, Trainer(bf16=True): autocast
}


def trace_scenario(scenario: dict, with_modules: bool = False, timeline: bool = False) -> dict:
    sc = normalize_scenario(scenario)
    tr, par = sc["training"], sc["parallelism"]
    t0 = time.time()
    if tr["precision"] not in DTYPES:
        raise Untraceable(f"precision={tr['precision']}")
    if tr["loss"] not in ("standard", "chunked"):
        raise Untraceable(f"loss={tr['loss']}")
    if tr.get("implementation", "hf") != "hf":
        raise Untraceable(f"implementation={tr['implementation']}")
    layout = parallel.kind(par)
    dp = int(par.get("dp", 1))
    pdt = DTYPES[tr["precision"]]
    mp = tr["mixed_precision"]
    if mp not in MODES:
        raise Untraceable(f"mixed_precision={mp}")
    stored, autocast = MODES[mp]
    model_dtype = torch.float32 if stored == "fp32" else pdt
    use_autocast = autocast and pdt != torch.float32
    if mp == "master" and layout in ("ddp", "zero1"):
        raise Untraceable("master weights with DDP")

    hf = load_hf_config(sc["model"])
    cfg, attn_impl = build_config(hf, tr)
    dev = torch.device(TRACE_DEVICE, 0) if TRACE_DEVICE == "cuda" else torch.device("cpu")
    if layout == "ep":
        device_mesh = parallel.ep_mesh(dp, int(par["ep"]), dev)
    else:
        device_mesh = parallel.mesh(dp, dev) if layout != "single" else None
    sharded = layout in ("fsdp", "ep")  # FSDP2 in both

    b, s, gas = int(tr["micro_batch_size"]), int(tr["seq_len"]), int(tr["gradient_accumulation_steps"])
    if TRACE_DEVICE == "cuda":
        fake_cuda.SDPA_CHOICES.clear()

    fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
    with fake_mode:
        model = models.build(cfg, attn_impl, tr, dev, model_dtype, pdt)
        param_count = sum(p.numel() for p in model.parameters())
        if tr["finetuning"] == "qlora":  # what bitsandbytes holds: 4-bit weights, not numel
            param_count = _qlora_param_count(model)
        models.apply_checkpointing(model, tr)
        if tr["loss"] == "chunked":
            fused_loss.apply(model)
        model.train()

        buckets = None
        if layout == "fsdp":
            parallel.shard(model, par, device_mesh, pdt if use_autocast else None)
        elif layout == "ep":
            model = parallel.shard_ep(model, par, device_mesh, pdt if use_autocast else None)
        elif layout in ("ddp", "zero1"):
            buckets = parallel.ddp(model)

        trainable = [p for p in model.parameters() if p.requires_grad]
        trainable_count = sum(p.numel() for p in trainable)
        optimizer, impl_traced = make_optimizer(trainable, tr, zero1=layout == "zero1")

        vocab = cfg.vocab_size
        input_ids = torch.randint(0, vocab, (b, s), device=dev)
        labels = torch.randint(0, vocab, (b, s), device=dev)

        if sharded:
            from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
            mt = make_phase_tracker_cls(FSDPMemTracker)(model, optimizer)
        else:
            mt = make_phase_tracker_cls(MemTracker)()
        mt._phase_init(dev, timeline)
        if timeline:
            _mark_layers(model, mt)
        mt.track_external(model, optimizer, input_ids, labels,
                          *(buckets.buckets if buckets else ()))  # DDP's buckets: other

        # FSDP2 with autocast: MixedPrecisionPolicy casts params; autocast still wraps the
        # forward as Accelerate does.
        def autocast_ctx():
            if use_autocast:
                return torch.autocast(device_type=dev.type, dtype=pdt)
            return contextlib.nullcontext()

        def one_step():
            for mb in range(gas):
                if mb:
                    # MemTracker refuses a second root forward without a reset; module
                    # stats then describe the last micro-batch (phase peaks are ours).
                    mt.reset_mod_stats()
                if buckets is not None:  # DDP syncs on the last micro-batch only (no_sync)
                    buckets.sync = mb == gas - 1
                mt.set_phase("forward")
                with autocast_ctx():
                    outputs = model(input_ids=input_ids, labels=labels)
                loss = outputs.loss
                del outputs            # Trainer.compute_loss returns only the loss
                mt.set_phase("backward")
                (loss / gas).backward()
                del loss
                if buckets is not None and buckets.sync:
                    buckets.finalize(dp)
                mt.set_phase(None)
            mt.set_phase("optimizer_step")
            optimizer.step()
            mt.set_phase(None)
            optimizer.zero_grad(set_to_none=True)

        with mt:
            one_step()
            mt.reset_mod_stats()
            mt.reset_phase_peaks()
            one_step()

        phases = {ph: int(mt.phase_peak.get(ph, 0)) for ph in PHASES}
        peak_phase = max(PHASES, key=lambda ph: phases[ph])
        cats_by_phase, raw_by_phase = {}, {}
        for ph in PHASES:
            c, r = _cats(mt.phase_snap.get(ph, {}), raw=True)
            cats_by_phase[ph] = c
            raw_by_phase[ph] = r
        res = {
            "peak_bytes": phases[peak_phase],
            "peak_phase": peak_phase,
            "phases": phases,
            "categories_at_peak": cats_by_phase[peak_phase],
            "categories_by_phase": cats_by_phase,
            "optimizer_impl_traced": impl_traced,
            "param_count": int(param_count),
            "trainable_param_count": int(trainable_count),
            "device": f"{dev.type}(fake)",
        }
        if sharded:
            res["fsdp_categories_by_phase"] = raw_by_phase
        if layout != "single":
            res["per_rank"] = "rank 0"
            res["data_parallel"] = layout
        if layout == "ep":
            res["expert_parallel"] = {"ep": int(par["ep"]), "routing": "assumed balanced: T*K/ep "
                                      "(token, expert) pairs to each rank"}
        if TRACE_DEVICE == "cuda":
            res["sdpa_backend_calls"] = dict(fake_cuda.SDPA_CHOICES)
        modules = module_report(mt, dev) if with_modules else None
        ops = mt.timeline
        del mt, optimizer, model, buckets
    gc.collect()
    res["seconds"] = round(time.time() - t0, 2)
    if modules is not None:
        res["_modules"] = modules
    if ops is not None:
        res["_timeline"] = ops
    return res


def _qlora_param_count(model) -> int:
    """Parameters as the model defines them: a 4-bit layer counts its weight's elements."""
    n = 0
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if name == "weight" and isinstance(module, models.Linear4bit):
                n += module.in_features * module.out_features
            else:
                n += p.numel()
    return n


def _mark_layers(model, mt) -> None:
    """Timeline markers: which decoder layer (or the head) the forward or backward is in.
    Backward is marked by a hook on the module's output tensor, which keeps nothing alive
    (a module backward hook would wrap the output and hold a gradient)."""
    parts = [(f"layer{i}", layer) for i, layer in enumerate(models.decoder_layers(model))]
    lm = next(m for m in model.modules() if "lm_head" in m._modules)
    parts += [("norm", lm.model.norm), ("head", lm.lm_head)]
    for name, module in parts:
        def forward_pre(m, args, _name=name):
            mt.marker = f"fw:{_name}"

        def forward(m, args, out, _name=name):
            tensor = out[0] if isinstance(out, tuple) else out
            if isinstance(tensor, torch.Tensor) and tensor.requires_grad:
                tensor.register_hook(lambda grad: setattr(mt, "marker", f"bw:{_name}"))
        module.register_forward_pre_hook(forward_pre)
        module.register_forward_hook(forward)
