"""One traced training step (two, the second reported), as Hugging Face Trainer runs it."""
from __future__ import annotations

import contextlib
import gc
import time

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed._tools.mem_tracker import MemTracker

from . import loss as fused_loss
from . import masking
from . import deepspeed_engine, models, parallel, pipeline, tensor_parallel
from .common import (DTYPES, PHASES, TRACE_DEVICE, Untraceable, build_config, fake_cuda,
                     gpu_sm, load_hf_config, normalize_scenario)
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


def trace_scenario(scenario: dict, with_modules: bool = False, timeline: bool = False,
                   pp_stage: str = "first") -> dict:
    """`pp_stage`: with pp > 1, which pipeline rank to trace: the first (rank 0), a middle
    one (`pipeline.middle_rank`) or the last (the first rank of the last stage)."""
    sc = normalize_scenario(scenario)
    tr, par = sc["training"], sc["parallelism"]
    t0 = time.time()
    if tr["precision"] not in DTYPES:
        raise Untraceable(f"precision={tr['precision']}")
    if tr["loss"] not in ("standard", "chunked"):
        raise Untraceable(f"loss={tr['loss']}")
    if tr.get("implementation", "hf") != "hf":
        raise Untraceable(f"implementation={tr['implementation']}")
    mp = tr["mixed_precision"]
    n = parallel.sizes(par)
    dp, tp, cp = n["dp"], n["tp"], n["cp"]
    meshed = tp > 1 or cp > 1 or n["pp"] > 1
    ds_cfg = None
    if deepspeed_engine.uses_deepspeed(tr, par) and int(par.get("zero", 0)) \
            and not meshed and int(par.get("ep", 1) or 1) == 1:
        layout = "deepspeed"  # DeepSpeed's own engine, its ZeRO-Offload too (one GPU too)
        ds_cfg = deepspeed_engine.ds_config(scenario)
    else:
        layout = parallel.kind(par)
        if deepspeed_engine.uses_deepspeed(tr, par) and layout == "ep":
            # calc means DeepSpeed's engine here (master weights' default); FSDP2 with the
            # stand-in optimizer would be traced in its place, another engine's memory
            raise Untraceable("expert parallelism under DeepSpeed's engine (calc's default "
                              "for master weights): traced with FSDP2 only")
        if deepspeed_engine.uses_deepspeed(tr, par) and layout in ("ddp", "single") \
                and not meshed:
            # DeepSpeed's engine without ZeRO (its bf16 optimizer), on one GPU too: what calc
            # means by master weights (the stand-in in optimizers.py frees the low-precision
            # gradients as it casts them; DeepSpeed's optimizer keeps them through the step).
            # On one GPU an optimizer the engine is not traced with keeps the stand-in.
            try:
                ds_cfg = deepspeed_engine.ds_config(scenario)
                layout = "deepspeed"
            except Untraceable:
                if layout != "single":
                    raise
    if meshed and (tr["finetuning"] != "full" or tr["loss"] != "standard" or mp == "master"):
        raise Untraceable("tp/cp/pp are traced for full fine-tuning, the standard loss and "
                          "pure/amp/autocast precision")
    pp = n["pp"]
    if pp > 1 and cp > 1:
        raise Untraceable("pp with cp")
    stage = 0  # the traced pipeline rank
    if pp > 1:
        sched_cls, style, per_rank = pipeline.layout(par)
        stage = (0 if pp_stage == "first" else pp - 1 if pp_stage == "last"
                 else pipeline.middle_rank(par, pp))
        n_stages = pp * per_rank
        held = pipeline.rank_stages(stage, pp, style, per_rank)
    pdt = DTYPES[tr["precision"]]
    if mp not in MODES:
        raise Untraceable(f"mixed_precision={mp}")
    stored, autocast = MODES[mp]
    model_dtype = torch.float32 if stored == "fp32" else pdt
    use_autocast = autocast and pdt != torch.float32
    if mp == "master" and layout in ("ddp", "zero1"):
        raise Untraceable("master weights with DDP")
    if mp == "master" and layout == "fsdp" and int(par.get("zero", 0)) == 2:
        # master weights mean DeepSpeed's engine (calc's default framework for them), whose
        # stage 2 keeps the weights whole; FSDP2's stage 2 shards them: not the same layout
        raise Untraceable("master weights with ZeRO-2 (DeepSpeed keeps the weights whole, "
                          "FSDP2 shards them)")

    hf = load_hf_config(sc["model"])
    cfg, attn_impl = build_config(hf, tr)
    dev = torch.device(TRACE_DEVICE, 0) if TRACE_DEVICE == "cuda" else torch.device("cpu")
    if layout == "ep":
        device_mesh = parallel.ep_mesh(dp, int(par["ep"]), dev)
    elif meshed:
        device_mesh = parallel.mesh_nd(par, dev, rank=stage * dp * cp * tp)
    elif layout == "deepspeed":
        deepspeed_engine.setup(dp)
        device_mesh = None
    else:
        device_mesh = parallel.mesh(dp, dev) if layout != "single" else None
    sharded = layout in ("fsdp", "ep")  # FSDP2 in both

    b, s, gas = int(tr["micro_batch_size"]), int(tr["seq_len"]), int(tr["gradient_accumulation_steps"])
    if TRACE_DEVICE == "cuda":
        fake_cuda.SDPA_CHOICES.clear()
        fake_cuda.SM = gpu_sm(sc["gpu"])

    fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
    with fake_mode:
        # DeepSpeed's ZeRO-3 partitions the 4-bit weights as parameters: stored in the compute
        # dtype (bnb_4bit_quant_storage), as transformers' recipe for it sets
        storage = pdt if layout == "deepspeed" and int(par.get("zero", 0)) == 3 else torch.uint8
        model = models.build(cfg, attn_impl, tr, dev, model_dtype, pdt, storage)
        param_count = sum(p.numel() for p in model.parameters())
        if tr["finetuning"] == "qlora":  # what bitsandbytes holds: 4-bit weights, not numel
            param_count = _qlora_param_count(model)
        sp = tp > 1 and bool(par.get("sequence_parallel"))
        if tp > 1:  # torchtitan's order: TP, checkpointing, FSDP
            tensor_parallel.apply_tp(model, device_mesh["tp"], sp)
        models.apply_checkpointing(model, tr)
        if pp > 1:
            model = pipeline.split(model, held, n_stages,
                                   boundary=device_mesh["tp"] if sp else None)
        if tr["loss"] == "chunked":
            fused_loss.apply(model)
        model.train()

        buckets = None
        if layout == "fsdp":  # each stage its own FSDP2 root, as torchtitan shards model parts
            for part in pipeline.chunks(model) if pp > 1 else (model,):
                parallel.shard(part, par, device_mesh, pdt if use_autocast else None,
                               reshard_after_forward=False if pp > 1 else None)
        elif layout == "ep":
            model = parallel.shard_ep(model, par, device_mesh, pdt if use_autocast else None)
        elif layout in ("ddp", "zero1"):
            buckets = parallel.ddp(model)

        trainable = [p for p in model.parameters() if p.requires_grad]
        trainable_count = sum(p.numel() for p in trainable)
        if layout == "deepspeed":  # the plain optimizer: DeepSpeed's keeps the master weights
            optimizer, impl_traced = make_optimizer(trainable, {**tr, "mixed_precision": "pure"})
            impl_traced = f"deepspeed[{impl_traced}]"
        else:
            optimizer, impl_traced = make_optimizer(trainable, tr, zero1=layout == "zero1")

        vocab = cfg.vocab_size
        input_ids = torch.randint(0, vocab, (b, s), device=dev)
        labels = torch.randint(0, vocab, (b, s), device=dev)
        batch = {"input_ids": input_ids, "labels": labels}
        if tr.get("padded"):  # the first sequence padded over its last eighth (a collator's
            # padding: an attention mask with zeros, the labels ignored there)
            if pp > 1 or cp > 1:
                raise Untraceable("padded batches with pp or cp")
            mask = torch.ones(b, s, dtype=torch.long, device=dev)
            mask[0, s - s // 8:] = 0
            labels[0, s - s // 8:] = -100
            batch["attention_mask"] = mask
            masking.pad()
        if pp > 1:  # the schedule splits the whole batch into gas micro-batches
            input_ids = torch.randint(0, vocab, (b * gas, s), device=dev)
            labels = torch.randint(0, vocab, (b * gas, s), device=dev)
            act = pdt if use_autocast else model_dtype  # the logits' dtype
            # the hidden states between stages: the residual stream's dtype, or FSDP2's
            # param_dtype under its mixed-precision policy (the layers compute in it)
            hid = pdt if layout == "fsdp" and use_autocast else model_dtype
            h, v = cfg.hidden_size, cfg.vocab_size
            s_sent = s // tp if sp else s  # the local sequence shard crosses stages under SP

            def shapes(i):
                """Stage i's one-micro-batch input and output (static shapes), requiring grad
                as the stage's forward makes them in training."""
                return (torch.empty(b, s, dtype=torch.long, device=dev) if i == 0
                        else torch.empty(b, s_sent, h, dtype=hid, device=dev,
                                         requires_grad=True),
                        torch.empty(b, s, v, dtype=act, device=dev, requires_grad=True)
                        if i == n_stages - 1 else
                        torch.empty(b, s_sent, h, dtype=hid, device=dev, requires_grad=True))
            stage_objs, sched = pipeline.schedule(model, held, n_stages, sched_cls, dev,
                                                  device_mesh["pp"].get_group(), gas, shapes)
        if cp > 1:  # the sequence is sharded in place: position_ids must be explicit
            batch["position_ids"] = torch.arange(s, device=dev).expand(b, s).contiguous()

        if sharded:
            from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
            if isinstance(model, pipeline.RankModule):  # several FSDP2 roots: instrument all
                mt = make_phase_tracker_cls(FSDPMemTracker)(model.chunks[0], optimizer)
                mt._root_mod = model
            else:
                mt = make_phase_tracker_cls(FSDPMemTracker)(model, optimizer)
        else:
            mt = make_phase_tracker_cls(MemTracker)()
        mt._phase_init(dev, timeline)
        if timeline:
            _mark_layers(model, mt)
        if pp > 1:
            _pipeline_phases(stage_objs, mt)
        mt.track_external(model, optimizer, input_ids, labels,
                          *(buckets.buckets if buckets else ()))  # DDP's buckets: other

        # FSDP2 with autocast: MixedPrecisionPolicy casts params; autocast still wraps the
        # forward as Accelerate does.
        def autocast_ctx():
            if use_autocast and layout != "deepspeed":  # DeepSpeed's engine enters its own
                return torch.autocast(device_type=dev.type, dtype=pdt)
            return contextlib.nullcontext()

        def train_ctx():
            """torchtitan's train context around forward and backward: loss parallel
            (tp), context parallel (cp)."""
            stack = contextlib.ExitStack()
            if tp > 1:
                stack.enter_context(tensor_parallel.loss_parallel())
            if cp > 1:  # each micro-batch's buffers are sharded in place (a fresh batch)
                local = {k: v.clone() for k, v in batch.items()}
                stack.enter_context(tensor_parallel.cp_context(
                    model, device_mesh["cp"], list(local.values())))
                return stack, local
            return stack, batch

        engine = None

        def deepspeed_step():
            """DeepSpeed's calls on every micro-batch; the last one's `step` is the optimizer's
            (the engine counts the micro-batches and scales the loss itself)."""
            for mb in range(gas):
                if mb:
                    mt.reset_mod_stats()
                mt.set_phase("forward")
                loss = engine(**batch).loss
                mt.set_phase("backward")
                engine.backward(loss)
                del loss
                mt.set_phase("optimizer_step" if mb == gas - 1 else None)
                engine.step()
                mt.set_phase(None)

        def one_step():
            if engine is not None:
                deepspeed_step()
                return
            if pp > 1:
                ctx, _ = train_ctx()  # torchtitan steps the schedule inside it
                with ctx, autocast_ctx():
                    # torchtitan's call: the last stage keeps no micro-batch's output
                    args = (input_ids,) if 0 in held else ()
                    target = labels if n_stages - 1 in held else None
                    sched.step(*args, target=target, return_outputs=False)
                mt.set_phase(None)
                mt.set_phase("optimizer_step")
                optimizer.step()
                mt.set_phase(None)
                optimizer.zero_grad(set_to_none=True)
                return
            for mb in range(gas):
                if mb:
                    # MemTracker refuses a second root forward without a reset; module
                    # stats then describe the last micro-batch (phase peaks are ours).
                    mt.reset_mod_stats()
                if buckets is not None:  # DDP syncs on the last micro-batch only (no_sync)
                    buckets.sync = mb == gas - 1
                ctx, inputs = train_ctx()
                with ctx:
                    mt.set_phase("forward")
                    with autocast_ctx():
                        outputs = model(**inputs)
                    loss = outputs.loss
                    del outputs            # Trainer.compute_loss returns only the loss
                    mt.set_phase("backward")
                    (loss / gas).backward()
                    del loss, inputs
                if buckets is not None and buckets.sync:
                    buckets.finalize(dp)
                mt.set_phase(None)
            mt.set_phase("optimizer_step")
            optimizer.step()
            mt.set_phase(None)
            optimizer.zero_grad(set_to_none=True)

        with mt:
            if layout == "deepspeed":  # its buffers are allocated here, inside the tracker
                engine, _ = deepspeed_engine.initialize(model, optimizer, ds_cfg)
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
        if layout != "single" or meshed:
            res["per_rank"] = "rank 0"
            res["data_parallel"] = layout
        if ds_cfg is not None:
            res["deepspeed_config"] = ds_cfg
        if layout == "ep":
            res["expert_parallel"] = {"ep": int(par["ep"]), "routing": "assumed balanced: T*K/ep "
                                      "(token, expert) pairs to each rank"}
        if meshed:
            res["mesh"] = {k: v for k, v in n.items() if v > 1}
        if pp > 1:
            where = f"pipeline stage {stage} of {pp}" if n_stages == pp else \
                f"pipeline rank {stage} of {pp}, stages {', '.join(map(str, held))} of {n_stages}"
            res["per_rank"] = f"rank {stage * dp * cp * tp} ({where}, {sched_cls}, " \
                f"{gas} micro-batches)"
        if TRACE_DEVICE == "cuda":
            res["sdpa_backend_calls"] = dict(fake_cuda.SDPA_CHOICES)
        modules = module_report(mt, dev) if with_modules else None
        ops = mt.timeline
        del mt, optimizer, model, buckets, engine
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


def _pipeline_phases(stage_objs, mt) -> None:
    """Phases inside the schedule: forward_one_chunk is `forward` (loss included on the last
    stage), backward_one_chunk (the whole backward, or the input gradients of a split one) and
    backward_weight_one_chunk (zero bubble's weight gradients) are `backward`. MemTracker
    refuses a second forward of its root module before backward; a schedule runs several, so
    the stage module's stats are dropped first."""
    for stage_obj in stage_objs:
        fwd, bwd = stage_obj.forward_one_chunk, stage_obj.backward_one_chunk
        bwd_w = stage_obj.backward_weight_one_chunk

        def forward_one_chunk(*a, _fwd=fwd, _mod=stage_obj.submod, **k):
            mt.memory_tracking.pop(_mod, None)
            mt._idx_len = -1
            mt.set_phase("forward")
            return _fwd(*a, **k)

        def backward_one_chunk(*a, _bwd=bwd, **k):
            mt.set_phase("backward")
            return _bwd(*a, **k)

        def backward_weight_one_chunk(*a, _bwd_w=bwd_w, **k):
            mt.set_phase("backward")
            return _bwd_w(*a, **k)
        stage_obj.forward_one_chunk = forward_one_chunk
        stage_obj.backward_one_chunk = backward_one_chunk
        stage_obj.backward_weight_one_chunk = backward_weight_one_chunk


def _mark_layers(model, mt) -> None:
    """Timeline markers: which decoder layer (or the head) the forward or backward is in.
    Backward is marked by a hook on the module's output tensor, which keeps nothing alive
    (a module backward hook would wrap the output and hold a gradient)."""
    if isinstance(model, (pipeline.StageModule, pipeline.RankModule)):
        parts = []
        for c, chunk in enumerate(pipeline.chunks(model)):
            prefix = f"chunk{c}." if isinstance(model, pipeline.RankModule) else ""
            parts += [(f"{prefix}layer{i}", layer) for i, layer in enumerate(chunk.layers)]
            parts += [(prefix + k, getattr(chunk, k)) for k in ("norm", "lm_head")
                      if getattr(chunk, k)]
    else:
        parts = [(f"layer{i}", layer) for i, layer in enumerate(models.decoder_layers(model))]
        lm = next(m for m in model.modules() if "lm_head" in m._modules)
        base = getattr(lm, "model", None) or getattr(lm, "transformer", None)  # GPT-2's
        norm = getattr(base, "norm", None) or getattr(base, "ln_f", None)
        parts += [("norm", norm), ("head", lm.lm_head)]
    for name, module in parts:
        def forward_pre(m, args, _name=name):
            mt.marker = f"fw:{_name}"

        def forward(m, args, out, _name=name):
            tensor = out[0] if isinstance(out, tuple) else out
            if isinstance(tensor, torch.Tensor) and tensor.requires_grad:
                tensor.register_hook(lambda grad: setattr(mt, "marker", f"bw:{_name}"))
        module.register_forward_pre_hook(forward_pre)
        module.register_forward_hook(forward)
