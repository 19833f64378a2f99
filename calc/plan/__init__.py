"""Planning tools on top of the estimator: what fits, what to change, what it costs, how to
configure it.

    >>> from calc.plan import max_micro_batch
    >>> max_micro_batch({"model": "gpt2", "training": {"seq_len": 1024}}).value > 1
    True

- `max_micro_batch`, `max_seq_len`: the largest value that fits a memory target;
- `recommend`: single changes ranked by the device memory they save;
- `compare`: scenarios side by side; `compare_gpus`: one scenario on every GPU;
- `training_cost`: FLOPs, step time, time and money to train N tokens;
- `export`: DeepSpeed, Accelerate FSDP, torchtitan, Megatron-LM, HF Trainer settings;
- `kv_cache_bytes`: the KV cache of inference and RL rollouts;
- `advise`: parallelism layouts of N GPUs that fit, ranked by estimated step time;
- `import_config`: a DeepSpeed, Accelerate or HF Trainer config as a scenario;
- `cheapest`: the cheapest GPU type and count that fits and meets a deadline;
- `rl_memory`: RL fine-tuning: training, rollout KV cache and engine weights per GPU;
- `inference_memory`: serving memory (vLLM's arithmetic) and concurrent sequences.

Each name is imported from its module on first use (PEP 562), so that importing one tool (as the
calculator's worker does, through calc.operations) does not load all of them.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the same names, for type checkers (at run time: __getattr__)
    from ._common import PlanError
    from .advise import DEFAULT_INTER_NODE_GBPS, AdviceResult, Plan, StepTime, advise
    from .cheapest import DEFAULT_MAX_GPUS, CheapestResult, Option, cheapest
    from .compare import Comparison, GpuFit, compare, compare_gpus
    from .cost import DEFAULT_MFU, Flops, TrainingCost, flops_per_token, training_cost
    from .export import FORMATS, Export, ExportError, ExportFormat, export
    from .fit import DEFAULT_TARGET, FitResult, fits_target, max_micro_batch, max_seq_len
    from .importers import (
        IMPORT_FORMATS,
        ConfigImportError,
        Imported,
        ImportFormat,
        import_config,
        parse_yaml,
    )
    from .inference import InferenceMemory, inference_memory
    from .kv_cache import KVQuant, kv_cache_bytes
    from .recommend import Recommendation, Recommendations, recommend
    from .rl import RLMemory, rl_memory

_MODULES = {  # module -> the public names it defines
    "_common": ("PlanError",),
    "advise": ("DEFAULT_INTER_NODE_GBPS", "AdviceResult", "Plan", "StepTime", "advise"),
    "cheapest": ("DEFAULT_MAX_GPUS", "CheapestResult", "Option", "cheapest"),
    "compare": ("Comparison", "GpuFit", "compare", "compare_gpus"),
    "cost": ("DEFAULT_MFU", "Flops", "TrainingCost", "flops_per_token", "training_cost"),
    "export": ("FORMATS", "Export", "ExportError", "ExportFormat", "export"),
    "fit": ("DEFAULT_TARGET", "FitResult", "fits_target", "max_micro_batch", "max_seq_len"),
    "importers": ("IMPORT_FORMATS", "ConfigImportError", "Imported", "ImportFormat",
                  "import_config", "parse_yaml"),
    "inference": ("InferenceMemory", "inference_memory"),
    "kv_cache": ("KVQuant", "kv_cache_bytes"),
    "recommend": ("Recommendation", "Recommendations", "recommend"),
    "rl": ("RLMemory", "rl_memory"),
}
_WHERE = {name: module for module, names in _MODULES.items() for name in names}

__all__ = sorted(_WHERE)

if not TYPE_CHECKING:
    class _Package(types.ModuleType):
        def __setattr__(self, name: str, value: Any) -> None:
            # Importing a submodule names it on its package: where a tool's function has its
            # module's name (compare, export, advise, ...), the function keeps the name.
            if isinstance(value, types.ModuleType) and _WHERE.get(name) == name:
                value = getattr(value, name)
            super().__setattr__(name, value)

    sys.modules[__name__].__class__ = _Package

    def __getattr__(name: str) -> Any:
        if name not in _WHERE:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
        globals()[name] = value  # the next access skips this function
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *_WHERE})
