#!/usr/bin/env python
"""Trace the real memory of Hugging Face training steps without a GPU.

Models are built from their config (random init, nothing downloaded) under
FakeTensorMode on a *fake CUDA device* (see fake_cuda.py) and measured with
torch.distributed._tools MemTracker / FSDPMemTracker. See validation/README.md.

Usage:
  python validation/trace.py --case ID             # one case of validation/cases.json
  python validation/trace.py --scenario FILE.json   # one scenario (public JSON contract)
  python validation/trace.py --all [--split dev|test] [--only-missing]
      -> updates validation/results/traced.json after every case
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import datetime
import gc
import json
import os
import re
import sys
import time
import traceback
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

# The device the fake tensors pretend to live on. "cuda" needs fake_cuda's C++ shim,
# which must be loaded before torch is imported.
TRACE_DEVICE = os.environ.get("TRACE_DEVICE", "cuda")
if TRACE_DEVICE == "cuda":
    import fake_cuda  # noqa: E402

    if not fake_cuda.load_fake_cuda_lib():
        raise RuntimeError(
            "fake CUDA hooks not active (torch imported before validation/fake_cuda?); "
            "run trace.py as a fresh process or set TRACE_DEVICE=cpu")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.distributed._tools.mem_tracker import MemTracker, _TOTAL_KEY  # noqa: E402

if TRACE_DEVICE == "cuda":
    fake_cuda.apply_patches()

import transformers  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM  # noqa: E402

warnings.filterwarnings("ignore")
transformers.logging.set_verbosity_error()

# Under FakeTensorMode transformers believes it is being traced (is_tracing(fake) is True),
# so find_packed_sequence_indices() cannot read position_ids and reports "packed", which
# forbids the is_causal skip and materialises a (B,1,S,S) bool mask for sdpa -> mem-efficient
# kernel instead of flash. Our inputs are never packed (position_ids = arange), which is
# exactly the case where the real function returns None.
import transformers.masking_utils as _mu  # noqa: E402
_mu.find_packed_sequence_indices = lambda position_ids: None

CASES_FILE = os.path.join(HERE, "cases.json")
RESULTS_FILE = os.path.join(HERE, "results", "traced.json")
MODULES_DIR = os.path.join(HERE, "results", "modules")
PRESETS_DIR = os.path.join(ROOT, "presets", "models")

PHASES = ("forward", "backward", "optimizer_step")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class Untraceable(Exception):
    """The scenario cannot be traced by this harness (reason in the message)."""


# ----------------------------------------------------------------------------- scenario
TRAINING_DEFAULTS = {
    "micro_batch_size": 1, "seq_len": 4096, "gradient_accumulation_steps": 1,
    "precision": "bf16", "mixed_precision": "amp", "optimizer": "adamw",
    "optimizer_impl": "fused", "activation_checkpointing": "none", "attention": "flash",
    "loss": "standard", "finetuning": "full", "lora_rank": 16, "lora_targets": "all_linear",
    "lora_dropout": 0.0,
}
PARALLEL_DEFAULTS = {"dp": 1, "zero": 0}


def normalize_scenario(sc: dict) -> dict:
    sc = copy.deepcopy(sc)
    out = {"schema_version": sc.get("schema_version", 1), "model": sc["model"],
           "gpu": sc.get("gpu", "h100-sxm-80gb")}
    tr = dict(TRAINING_DEFAULTS)
    tr.update(sc.get("training") or {})
    par = dict(PARALLEL_DEFAULTS)
    par.update(sc.get("parallelism") or {})
    out["training"], out["parallelism"] = tr, par
    return out


def load_hf_config(model) -> dict:
    if isinstance(model, str):
        path = os.path.join(PRESETS_DIR, f"{model}.json")
        if not os.path.exists(path):
            raise FileNotFoundError(f"preset {model!r} not found at {path}")
        with open(path) as f:
            return json.load(f)["hf_config"]
    if isinstance(model, dict) and "hf_config" in model:
        return model["hf_config"]
    raise ValueError(f"bad model field: {model!r}")


def build_config(hf: dict, tr: dict):
    d = copy.deepcopy(hf)
    mt = d.pop("model_type")
    for k in ("architectures", "transformers_version", "torch_dtype", "dtype", "auto_map",
              "_name_or_path"):
        d.pop(k, None)
    cfg = AutoConfig.for_model(mt, **d)
    cfg.use_cache = False
    if tr["attention"] == "flash":
        if getattr(cfg, "attn_logit_softcapping", None):
            raise Untraceable("HF sdpa attention does not support attn_logit_softcapping "
                              "(gemma2); use attention=eager")
        attn = "sdpa"
    elif tr["attention"] == "eager":
        attn = "eager"
    else:
        raise Untraceable(f"attention={tr['attention']}")
    return cfg, attn


# ----------------------------------------------------------------------------- optimizers
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


def make_optimizer(params, tr: dict):
    name, impl = tr["optimizer"], tr["optimizer_impl"]
    flags = {"fused": {"fused": True}, "foreach": {"foreach": True},
             "for_loop": {"foreach": False}}.get(impl)
    if flags is None:
        raise Untraceable(f"optimizer_impl={impl}")
    lr = 1e-5

    def factory(ps):
        if name == "adamw":
            return torch.optim.AdamW(ps, lr=lr, weight_decay=0.0, **flags), impl
        if name == "adam":
            return torch.optim.Adam(ps, lr=lr, **flags), impl
        if name == "sgd":
            return torch.optim.SGD(ps, lr=lr, momentum=0.0, **flags), impl
        if name == "sgd_momentum":
            return torch.optim.SGD(ps, lr=lr, momentum=0.9, **flags), impl
        if name == "adafactor":
            # What HF Trainer builds for optim="adafactor": transformers' Adafactor with
            # scale_parameter=False, relative_step=False (for-loop implementation only).
            from transformers.optimization import Adafactor
            return Adafactor(ps, lr=lr, scale_parameter=False, relative_step=False,
                             warmup_init=False), "for_loop(transformers.Adafactor)"
        if name == "lion":
            raise Untraceable("no lion implementation in torch 2.13 / transformers")
        if name == "adamw_8bit":
            raise Untraceable("adamw_8bit needs bitsandbytes CUDA kernels")
        raise Untraceable(f"optimizer={name}")

    if tr["mixed_precision"] == "master" and tr["precision"] != "fp32":
        holder = {}

        def inner(ps):
            o, holder["impl"] = factory(ps)
            return o
        opt = MasterWeightsOptimizer(params, inner)
        return opt, f"master[{holder['impl']}]"
    return factory(params)


# ----------------------------------------------------------------------------- tracker
_CAT_MAP = {
    "Parameter": "param", "Buffer": "buffer", "Gradient": "grad", "Activation": "act",
    "Temp": "temp", "Optstate": "optstate", "Other": "other",
    # FSDPMemTracker categories
    "Sharded Param": "param", "Unsharded Param": "param", "Sharded Grad": "grad",
    "Unsharded Grad": "grad", "All Gather": "other", "Reduce Scatter": "other",
    "Inputs": "other", "OptState": "optstate",
}
_CATS = ("param", "buffer", "grad", "act", "temp", "optstate", "other")


def _cats(dev_snap: dict, raw: bool = False) -> dict:
    out = dict.fromkeys(_CATS, 0)
    rawd = {}
    for k, v in dev_snap.items():
        name = getattr(k, "value", k)
        if name == _TOTAL_KEY:
            continue
        out[_CAT_MAP.get(name, "other")] += int(v)
        rawd[name] = int(v)
    if raw:
        return out, rawd
    return out


def make_phase_tracker_cls(base):
    class PhaseTracker(base):
        """MemTracker that also records a peak (and its breakdown) per training phase."""

        def _phase_init(self, device):
            self.dev = device
            self.phase = None
            self.phase_peak = {}
            self.phase_snap = {}

        def set_phase(self, phase):
            self.phase = phase
            if phase is not None:
                self._phase_update()

        def reset_phase_peaks(self):
            self.phase_peak, self.phase_snap = {}, {}

        def _phase_update(self):
            snap = self._curr_mem_snap.get(self.dev)
            tot = snap[_TOTAL_KEY] if snap else 0
            if tot > self.phase_peak.get(self.phase, -1):
                self.phase_peak[self.phase] = tot
                self.phase_snap[self.phase] = copy.deepcopy(snap) if snap else {}

        def _track_module_params_and_buffers(self, module, install_grad_hooks=True):
            # Same as MemTracker's, but frozen params (LoRA) get no grad hooks: the stock
            # version calls register_hook on every param and raises on requires_grad=False.
            if base is not MemTracker:
                return super()._track_module_params_and_buffers(module, install_grad_hooks)
            from torch.distributed._tools.mem_tracker import _MemRefType

            def _grad_hook(grad):
                self._update_and_maybe_create_winfos(grad, _MemRefType.GRAD)

            param_memory = 0
            for param in module.parameters():
                winfos = self._update_and_maybe_create_winfos(param, _MemRefType.PARAM)
                param_memory += sum(w.mem_consumed for w in winfos)
                if param.grad is not None:
                    self._update_and_maybe_create_winfos(param.grad, _MemRefType.GRAD)
                if (install_grad_hooks and param.requires_grad
                        and self._param_to_grad_hook_handles.get(param, None) is None):
                    h1 = param.register_hook(_grad_hook)
                    h2 = param.register_post_accumulate_grad_hook(lambda p: _grad_hook(p.grad))
                    self._param_to_grad_hook_handles[param] = (h1, h2)
            buffer_memory = 0
            for buffer in module.buffers():
                winfos = self._update_and_maybe_create_winfos(buffer, _MemRefType.BUFFER)
                buffer_memory += sum(w.mem_consumed for w in winfos)
            return param_memory, buffer_memory

        def _update_peak_stats(self, peak_state):
            # Same semantics as MemTracker._update_peak_stats, but only visits the modules
            # that are currently active (the stock version walks every tracked module on
            # every op, which dominates trace time for LoRA models with ~1000 modules).
            curr_snap = self._curr_mem_snap
            mt_ = self.memory_tracking
            if getattr(self, "_idx_len", -1) != len(mt_):
                idx = {}
                for ms in mt_.values():
                    idx.setdefault(ms.mod_fqn, []).append(ms)
                self._idx, self._idx_len = idx, len(mt_)
            for fqn in self._mod_tracker.parents:
                for ms in self._idx.get(fqn, ()):
                    if ms.mod_fqn != fqn or peak_state not in ms.snapshots:
                        continue
                    for dev, dev_snap in curr_snap.items():
                        if ms.local_peak.get(dev, 0) < dev_snap[_TOTAL_KEY]:
                            ms.local_peak[dev] = dev_snap[_TOTAL_KEY]
                            ms.snapshots[peak_state][-1][dev] = copy.deepcopy(dev_snap)
            for dev, dev_snap in curr_snap.items():
                if self._peak_mem.get(dev, 0) < dev_snap[_TOTAL_KEY]:
                    self._peak_mem[dev] = dev_snap[_TOTAL_KEY]
                    self._peak_mem_snap[dev] = copy.deepcopy(dev_snap)
            if self.phase is not None:
                self._phase_update()

        def reset_mod_stats(self):
            super().reset_mod_stats()
            self._idx_len = -1

    return PhaseTracker


# ----------------------------------------------------------------------------- modules
def module_report(mt, device, depth: int = 4) -> dict:
    """Compact per-module snapshot at each module's forward and backward peak.

    Depth counts the root class name (Root.model.layers.0 has depth 4); the children of
    the first decoder layer (depth 5) are included too."""
    from torch.distributed._tools.mem_tracker import _ModState
    rep = {}
    for mod_stats in mt.memory_tracking.values():
        fqn = mod_stats.mod_fqn
        d = fqn.count(".") + 1
        if d > depth and not (d == depth + 1 and re.search(r"\.(layers|h)\.0\.[^.]+$", fqn)):
            continue
        ent = {}
        for key, state in (("fw_peak", "PEAK_FW"), ("bw_peak", "PEAK_BW")):
            st = None
            for s in mod_stats.snapshots:
                if getattr(s, "name", None) == state:
                    st = s
            if st is None:
                continue
            best = None
            for snap in mod_stats.snapshots[st]:
                ds = snap.get(device)
                if ds and (best is None or ds[_TOTAL_KEY] > best[_TOTAL_KEY]):
                    best = ds
            if best:
                c = {k: v for k, v in _cats(best).items() if v}
                c["total"] = int(best[_TOTAL_KEY])
                ent[key] = c
        for attr in ("parameter_mem", "input_mem", "output_mem"):
            if hasattr(mod_stats, attr):
                ent[attr.replace("_mem", "_bytes")] = int(getattr(mod_stats, attr))
        rep[fqn] = ent

    def nkey(s):
        return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]
    return {k: rep[k] for k in sorted(rep, key=nkey)}


# ----------------------------------------------------------------------------- FSDP
_PG_READY = False


def init_fake_pg(world: int):
    global _PG_READY
    from torch.testing._internal.distributed.fake_pg import FakeStore
    if _PG_READY:
        if dist.get_world_size() != world:
            raise RuntimeError("one process per FSDP world size")
        return
    dist.init_process_group("fake", rank=0, world_size=world, store=FakeStore())
    _PG_READY = True


# ----------------------------------------------------------------------------- trace
def trace_scenario(scenario: dict, with_modules: bool = False) -> dict:
    sc = normalize_scenario(scenario)
    tr, par = sc["training"], sc["parallelism"]
    t0 = time.time()
    if tr["precision"] not in DTYPES:
        raise Untraceable(f"precision={tr['precision']}")
    if tr["loss"] != "standard":
        raise Untraceable(f"loss={tr['loss']}")
    if tr["activation_checkpointing"] not in ("none", "full"):
        raise Untraceable(f"activation_checkpointing={tr['activation_checkpointing']} (not in HF)")
    dp, zero = int(par.get("dp", 1)), int(par.get("zero", 0))
    fsdp = dp > 1
    if fsdp and zero != 3:
        raise Untraceable("dp>1 is only traced with zero=3 (FSDP2)")
    if par.get("tp", 1) not in (1, None) or par.get("pp", 1) not in (1, None):
        raise Untraceable("tp/pp not traced")

    pdt = DTYPES[tr["precision"]]
    mp = tr["mixed_precision"]
    if mp not in ("pure", "amp", "master"):
        raise Untraceable(f"mixed_precision={mp}")
    model_dtype = torch.float32 if mp == "amp" else pdt
    use_autocast = mp == "amp" and pdt != torch.float32
    if fsdp and mp == "master":
        raise Untraceable("master weights with FSDP2 not implemented in the harness")

    hf = load_hf_config(sc["model"])
    cfg, attn_impl = build_config(hf, tr)
    dev = torch.device(TRACE_DEVICE, 0) if TRACE_DEVICE == "cuda" else torch.device("cpu")

    mesh = None
    if fsdp:
        init_fake_pg(dp)
        if TRACE_DEVICE == "cuda":
            fake_cuda.patch_cuda_runtime_for_fsdp()
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh(dev.type, (dp,))   # outside fake mode

    b, s, gas = int(tr["micro_batch_size"]), int(tr["seq_len"]), int(tr["gradient_accumulation_steps"])
    if TRACE_DEVICE == "cuda":
        fake_cuda.SDPA_CHOICES.clear()

    fake_mode = FakeTensorMode(allow_non_fake_inputs=True)
    prev_dtype = torch.get_default_dtype()
    with fake_mode:
        torch.set_default_dtype(model_dtype)
        try:
            with torch.device(dev):
                model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attn_impl,
                                                         dtype=model_dtype)
        finally:
            torch.set_default_dtype(prev_dtype)
        param_count = sum(p.numel() for p in model.parameters())

        if tr["finetuning"] == "lora":
            from peft import LoraConfig, get_peft_model
            r = int(tr["lora_rank"])
            if tr["lora_targets"] == "all_linear":
                targets = "all-linear"   # peft: every Linear/Conv1D except the output layer
            elif tr["lora_targets"] == "attention":
                targets = _attention_targets(model)
            else:
                raise Untraceable(f"lora_targets={tr['lora_targets']}")
            lcfg = LoraConfig(r=r, lora_alpha=2 * r, lora_dropout=float(tr["lora_dropout"]),
                              target_modules=targets, task_type="CAUSAL_LM")
            with torch.device(dev), _fake_safe_module_to():
                model = get_peft_model(model, lcfg)
        elif tr["finetuning"] != "full":
            raise Untraceable(f"finetuning={tr['finetuning']}")

        if tr["activation_checkpointing"] == "full":
            # what Trainer(activation_checkpointing=True) calls; transformers 5.23 default
            # kwargs are {"use_reentrant": False}
            model.activation_checkpointing_enable()
        model.train()

        if fsdp:
            from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy
            mpp = None
            if use_autocast:
                mpp = MixedPrecisionPolicy(param_dtype=pdt, reduce_dtype=torch.float32)
            kw = {"mesh": mesh}
            if mpp is not None:
                kw["mp_policy"] = mpp
            for layer in _decoder_layers(model):
                fully_shard(layer, **kw)
            fully_shard(model, **kw)

        trainable = [p for p in model.parameters() if p.requires_grad]
        trainable_count = sum(p.numel() for p in trainable)
        optimizer, impl_traced = make_optimizer(trainable, tr)

        vocab = cfg.vocab_size
        input_ids = torch.randint(0, vocab, (b, s), device=dev)
        labels = torch.randint(0, vocab, (b, s), device=dev)

        if fsdp:
            from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
            mt = make_phase_tracker_cls(FSDPMemTracker)(model, optimizer)
        else:
            mt = make_phase_tracker_cls(MemTracker)()
        mt._phase_init(dev)
        mt.track_external(model, optimizer, input_ids, labels)

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
                mt.set_phase("forward")
                with autocast_ctx():
                    outputs = model(input_ids=input_ids, labels=labels)
                loss = outputs.loss
                del outputs            # Trainer.compute_loss returns only the loss
                mt.set_phase("backward")
                (loss / gas).backward()
                del loss
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
        if fsdp:
            res["fsdp_categories_by_phase"] = raw_by_phase
            res["per_rank"] = "rank 0"
        if TRACE_DEVICE == "cuda":
            res["sdpa_backend_calls"] = dict(fake_cuda.SDPA_CHOICES)
        modules = module_report(mt, dev) if with_modules else None
        del mt, optimizer, model
    gc.collect()
    res["seconds"] = round(time.time() - t0, 2)
    if modules is not None:
        res["_modules"] = modules
    return res


@contextlib.contextmanager
def _fake_safe_module_to():
    """nn.Module.to() on FakeTensor params always goes through swap_tensors, which fails
    (FakeTensorMode holds weakrefs). PEFT moves each new adapter to the base layer's
    device/dtype with .to(); do the same by re-registering new Parameters."""
    orig = torch.nn.Module.to

    def to(self, *args, **kwargs):
        device, dtype, _, _ = torch._C._nn._parse_to(*args, **kwargs)

        def moved(t):
            """`t` on the target device/dtype, or None when it is there already."""
            tdt = dtype if (dtype is not None and t.is_floating_point()) else t.dtype
            tdev = device if device is not None else t.device
            return None if (t.dtype == tdt and t.device == tdev) else t.detach().to(
                device=tdev, dtype=tdt)

        for mod in self.modules():
            for name, p in list(mod._parameters.items()):
                new = None if p is None else moved(p)
                if new is not None:
                    mod._parameters[name] = torch.nn.Parameter(new, requires_grad=p.requires_grad)
            for name, b in list(mod._buffers.items()):
                new = None if b is None else moved(b)
                if new is not None:
                    mod._buffers[name] = new
        return self

    torch.nn.Module.to = to
    try:
        yield
    finally:
        torch.nn.Module.to = orig


def _attention_targets(model):
    names = set()
    for n, m in model.named_modules():
        if isinstance(m, torch.nn.Linear) or type(m).__name__ == "Conv1D":
            leaf = n.split(".")[-1]
            if leaf in ("q_proj", "k_proj", "v_proj", "o_proj", "qkv_proj", "c_attn", "c_proj") \
                    and ".attn" in n or ".self_attn" in n:
                names.add(leaf)
    # gpt2: c_attn/c_proj inside .attn (mlp.c_proj excluded via regex below)
    if "c_attn" in names:
        return r".*\.attn\.(c_attn|c_proj)$"
    return sorted(names)


def _decoder_layers(model):
    base = model
    for _ in range(4):
        for attr in ("layers", "h"):
            if hasattr(base, attr) and isinstance(getattr(base, attr), torch.nn.ModuleList):
                return list(getattr(base, attr))
        for attr in ("base_model", "model", "transformer"):
            if hasattr(base, attr):
                base = getattr(base, attr)
                break
    raise RuntimeError("decoder layers not found")


# ----------------------------------------------------------------------------- results io
def _meta() -> dict:
    import peft
    return {"torch_version": torch.__version__, "transformers_version": transformers.__version__,
            "peft_version": peft.__version__,
            "device": "cuda(fake)" if TRACE_DEVICE == "cuda" else "cpu"}


def load_results() -> dict:
    if os.path.exists(RESULTS_FILE):
        with open(RESULTS_FILE) as f:
            return json.load(f)
    return {"cases": {}}


def save_results(res: dict) -> None:
    os.makedirs(os.path.dirname(RESULTS_FILE), exist_ok=True)
    res.update(_meta())
    res["generated"] = datetime.date.today().isoformat()
    ordered = {k: res[k] for k in ("torch_version", "transformers_version", "peft_version", "device",
                                   "generated") if k in res}
    ordered["cases"] = dict(sorted(res.get("cases", {}).items()))
    ordered.update({k: v for k, v in res.items() if k not in ordered})
    tmp = RESULTS_FILE + ".tmp"
    with open(tmp, "w") as f:
        json.dump(ordered, f, indent=1)
        f.write("\n")
    os.replace(tmp, RESULTS_FILE)


def load_cases() -> list:
    with open(CASES_FILE) as f:
        return json.load(f)


def run_case(case: dict) -> dict:
    dev_split = case.get("split") == "dev"
    try:
        r = trace_scenario(case["scenario"], with_modules=dev_split)
    except Untraceable as e:
        return {"error": f"untraceable: {e}"}
    mods = r.pop("_modules", None)
    if mods is not None:
        os.makedirs(MODULES_DIR, exist_ok=True)
        with open(os.path.join(MODULES_DIR, f"{case['id']}.json"), "w") as f:
            json.dump({"case": case["id"], "note": "per-module MemTracker snapshots (bytes, rank 0) at "
                       "each module's forward peak and backward peak, second step", "modules": mods},
                      f, indent=1)
    return r


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--case")
    g.add_argument("--scenario")
    g.add_argument("--all", action="store_true")
    ap.add_argument("--split", choices=["dev", "test"])
    ap.add_argument("--only-missing", action="store_true")
    ap.add_argument("--no-save", action="store_true", help="--case: do not write traced.json")
    ap.add_argument("--modules", action="store_true", help="--scenario: include per-module report")
    a = ap.parse_args(argv)

    if a.scenario:
        with open(a.scenario) as f:
            sc = json.load(f)
        sc = sc.get("scenario", sc)
        try:
            r = trace_scenario(sc, with_modules=a.modules)
        except Untraceable as e:
            r = {"error": f"untraceable: {e}"}
        print(json.dumps(r, indent=1))
        return 0

    cases = load_cases()
    if a.case:
        sel = [c for c in cases if c["id"] == a.case]
        if not sel:
            print(f"unknown case {a.case}", file=sys.stderr)
            return 2
    else:
        sel = [c for c in cases if not a.split or c.get("split") == a.split]
    results = load_results()
    rc = 0
    for c in sel:
        if a.only_missing and c["id"] in results.get("cases", {}) and "error" not in results["cases"][c["id"]]:
            continue
        # FSDP needs one process per world size: run those in a subprocess.
        dp = int((c["scenario"].get("parallelism") or {}).get("dp", 1))
        try:
            if dp > 1 and (a.all or _PG_READY):
                r = _run_subprocess(c["id"])
            else:
                r = run_case(c)
        except Exception as e:  # keep going; record the failure
            traceback.print_exc()
            r = {"error": f"{type(e).__name__}: {str(e)[:500]}"}
            rc = 1
        r["split"] = c.get("split")
        print(json.dumps({c["id"]: r}), flush=True)
        if not a.no_save:
            results = load_results()
            results.setdefault("cases", {})[c["id"]] = r
            save_results(results)
    return rc


def _run_subprocess(case_id: str) -> dict:
    import subprocess
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--case", case_id, "--no-save"],
                       capture_output=True, text=True)
    for line in reversed(p.stdout.strip().splitlines()):
        if line.startswith("{"):
            d = json.loads(line)
            if case_id in d:
                return d[case_id]
    raise RuntimeError(f"subprocess failed: {p.stderr[-1500:]}")


if __name__ == "__main__":
    sys.exit(main())
