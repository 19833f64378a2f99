"""MemTracker with per-phase peaks, a per-module report and an op-by-op timeline."""
from __future__ import annotations

import copy
import re
import weakref

import torch

from torch.distributed._tools.mem_tracker import MemTracker, _TOTAL_KEY

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


# DTensor infers an op's output shape by running it on fake tensors of the *global* shape
# (ShardingPropagator._propagate_tensor_meta_non_cached) in the active fake mode, which under
# the harness is the tracing mode itself: MemTracker would count e.g. the full-vocabulary
# log_softmax that loss parallel never allocates. Those ops are not memory; skip them.
_SHARDING_PROP = [False]


def _skip_sharding_propagation() -> None:
    from torch.distributed.tensor._sharding_prop import ShardingPropagator
    orig = ShardingPropagator._propagate_tensor_meta_non_cached
    if getattr(orig, "_harness", False):
        return

    def propagate(self, op_schema):
        outer, _SHARDING_PROP[0] = _SHARDING_PROP[0], True
        try:
            return orig(self, op_schema)
        finally:
            _SHARDING_PROP[0] = outer
    propagate._harness = True
    ShardingPropagator._propagate_tensor_meta_non_cached = propagate


_skip_sharding_propagation()


def _module_pop_hook_holds_no_node() -> None:
    """ModTracker (MemTracker's module tracker) marks the end of a module's backward with
    `register_multi_grad_hook(inputs, pop, mode="all")`. That hook closes over the inputs'
    autograd nodes and is stored on those nodes: a cycle through C++ nodes that the garbage
    collector does not break. Harmless where backward releases each node's saved tensors as
    it runs; but zero bubble's input backward (torch's `stage_backward_input`) runs with
    `retain_graph=True` and its weight backward only the weights' side, so every other node
    would keep its saved tensors for the rest of the trace (+11 GiB at the optimizer step of a
    4-layer 8B stage; no such reference exists without the tracker). Its "all" mode also asks
    the engine about each input's node, which raises for a leaf under `torch.autograd.grad`
    (a stage's received activation). The pop hook is registered in "any" mode, which holds
    no node: the module's backward ends at its first input gradient instead of its last (the
    same for every module here, whose one input needing a gradient is the hidden state).
    Module bookkeeping only; no tensor is kept or dropped by it."""
    from torch.autograd.graph import register_multi_grad_hook
    from torch.distributed._tools.mod_tracker import ModTracker
    from torch.utils._pytree import tree_flatten
    if getattr(ModTracker._fw_pre_hook, "_harness", False):
        return

    def _fw_pre_hook(self, mod, input):
        if torch._dynamo.eval_frame._is_in_optimized_module():
            return
        name = self._get_mod_name(mod)
        w_mod = weakref.ref(mod)
        self._get_append_fn(w_mod, name, False)()
        if self._user_pre_fw_hook is not None:
            self._user_pre_fw_hook(mod, input)
        args, _ = tree_flatten(input)
        tensors = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
        if not self.is_bw:
            if tensors:
                register_multi_grad_hook(tensors, self._get_pop_fn(w_mod, name, True),
                                         mode="any")
            else:
                self._post_bw_callbacks_to_enqueue.append(self._get_pop_fn(w_mod, name, True))
    _fw_pre_hook._harness = True
    ModTracker._fw_pre_hook = _fw_pre_hook


_module_pop_hook_holds_no_node()


def make_phase_tracker_cls(base):
    class PhaseTracker(base):
        """MemTracker that also records a peak (and its breakdown) per training phase."""

        def _phase_init(self, device, timeline: bool = False):
            self.dev = device
            self.timeline = [] if timeline else None  # op by op, when asked
            self._last_op = None
            self.marker = ""  # where the step is (set by the harness's module hooks)
            self.phase = None
            self.phase_peak = {}
            self.phase_snap = {}

        def set_phase(self, phase):
            self.phase = phase
            if phase is not None:
                self._phase_update()

        def reset_phase_peaks(self):
            self.phase_peak, self.phase_snap = {}, {}
            if self.timeline is not None:
                self.timeline.clear()

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
            if self.timeline is not None and self.phase is not None:
                snap = curr_snap.get(self.dev)
                cats, raw = _cats(snap or {}, raw=True)  # raw: FSDP's own categories
                parents = self._mod_tracker.parents - {"Global"}
                self.timeline.append({
                    "phase": self.phase, "op": str(self._last_op), "at": self.marker,
                    "module": max(parents, key=lambda p: p.count(".")) if parents else "",
                    "total": int(snap[_TOTAL_KEY]) if snap else 0,
                    "categories": {k: v for k, v in cats.items() if v},
                    "raw": {k: v for k, v in raw.items() if v}})

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if _SHARDING_PROP[0]:  # DTensor's shape inference, not memory (see below)
                return func(*args, **(kwargs or {}))
            self._last_op = func
            return super().__torch_dispatch__(func, types, args, kwargs)

        def reset_mod_stats(self):
            super().reset_mod_stats()
            self._idx_len = -1

    return PhaseTracker


# ----------------------------------------------------------------------------- modules
def module_report(mt, device, depth: int = 4) -> dict:
    """Compact per-module snapshot at each module's forward and backward peak.

    Depth counts the root class name (Root.model.layers.0 has depth 4); the children of
    the first decoder layer (depth 5) are included too."""
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

