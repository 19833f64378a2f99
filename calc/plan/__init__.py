"""Planning tools on top of the estimator: what fits, what to change, what it costs, how to
configure it.

    >>> from calc.plan import max_micro_batch
    >>> max_micro_batch({"model": "gpt2", "training": {"seq_len": 1024}}).value > 1
    True

- :func:`max_micro_batch`, :func:`max_seq_len`: the largest value that fits a memory target;
- :func:`recommend`: single changes ranked by the device memory they save;
- :func:`compare`: scenarios side by side; :func:`compare_gpus`: one scenario on every GPU;
- :func:`training_cost`: FLOPs, step time, time and money to train N tokens;
- :func:`export`: DeepSpeed, Accelerate FSDP, torchtitan, Megatron-LM, HF Trainer settings;
- :func:`kv_cache_bytes`: the KV cache of inference and RL rollouts;
- :func:`advise`: parallelism layouts of N GPUs that fit, ranked by estimated step time;
- :func:`import_config`: a DeepSpeed, Accelerate or HF Trainer config as a scenario;
- :func:`cheapest`: the cheapest GPU type and count that fits and meets a deadline;
- :func:`rl_memory`: RL fine-tuning: training, rollout KV cache and engine weights per GPU.
"""

from ..presets import GpuPrice
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
from .kv_cache import KVQuant, kv_cache_bytes
from .recommend import Recommendation, Recommendations, recommend
from .rl import RLMemory, rl_memory

__all__ = [
    "DEFAULT_INTER_NODE_GBPS",
    "DEFAULT_MAX_GPUS",
    "DEFAULT_MFU",
    "DEFAULT_TARGET",
    "FORMATS",
    "IMPORT_FORMATS",
    "AdviceResult",
    "CheapestResult",
    "Comparison",
    "ConfigImportError",
    "Export",
    "ExportError",
    "ExportFormat",
    "FitResult",
    "Flops",
    "GpuFit",
    "GpuPrice",
    "ImportFormat",
    "Imported",
    "KVQuant",
    "Option",
    "Plan",
    "PlanError",
    "RLMemory",
    "Recommendation",
    "Recommendations",
    "StepTime",
    "TrainingCost",
    "advise",
    "cheapest",
    "compare",
    "compare_gpus",
    "export",
    "fits_target",
    "flops_per_token",
    "import_config",
    "kv_cache_bytes",
    "max_micro_batch",
    "max_seq_len",
    "parse_yaml",
    "recommend",
    "rl_memory",
    "training_cost",
]
