"""calc: per-GPU memory of LLM training, phase by phase, validated against traced steps.

A first estimate:

    >>> from calc import estimate
    >>> report = estimate({"model": "llama-3-8b", "training": {"seq_len": 2048}})
    >>> report.peak_phase in ("forward", "backward", "optimizer_step")
    True
"""

from ._version import __version__
from .architecture import Architecture, ConfigError, from_hf_config
from .estimate import COMPONENTS, PHASES, Estimate, Moment, estimate
from .presets import GpuPreset, GpuPrice, ModelPreset, gpus, models
from .scenario import (
    Parallelism,
    Scenario,
    ScenarioError,
    Training,
    normalize_scenario,
    parse_scenario,
    resolve,
)

__all__ = [
    "COMPONENTS", "PHASES", "Architecture", "ConfigError", "Estimate", "GpuPreset", "GpuPrice",
    "ModelPreset", "Moment", "Parallelism", "Scenario", "ScenarioError", "Training",
    "__version__", "estimate", "from_hf_config", "gpus", "models", "normalize_scenario",
    "parse_scenario", "resolve",
]
