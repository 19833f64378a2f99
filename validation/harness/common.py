"""What every part of the harness shares: the fake CUDA device (loaded before torch), the
scenario as the harness reads it, and the model's Hugging Face config."""
from __future__ import annotations

import copy
import json
import os
import sys
import warnings

HARNESS = os.path.dirname(os.path.abspath(__file__))
HERE = os.path.dirname(HARNESS)  # validation/
ROOT = os.path.dirname(HERE)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
if ROOT not in sys.path:  # calc: the scenario's defaults
    sys.path.insert(0, ROOT)

from calc.scenario import Training  # noqa: E402


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

if TRACE_DEVICE == "cuda":
    fake_cuda.apply_patches()

import transformers  # noqa: E402
from transformers import AutoConfig  # noqa: E402

warnings.filterwarnings("ignore")
transformers.logging.set_verbosity_error()

# Under FakeTensorMode transformers believes it is being traced (is_tracing(fake) is True),
# so find_packed_sequence_indices() cannot read position_ids and reports "packed", which
# forbids the is_causal skip and materialises a (B,1,S,S) bool mask for sdpa -> mem-efficient
# kernel instead of flash. Our inputs are never packed (position_ids = arange), which is
# exactly the case where the real function returns None.
import transformers.masking_utils as _mu  # noqa: E402
_mu.find_packed_sequence_indices = lambda position_ids: None


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
    given = sc.get("training") or {}
    tr = dict(TRAINING_DEFAULTS)
    tr.update(given)
    if "mixed_precision" not in given:  # calc's default, which depends on the fine-tuning
        # (LoRA and QLoRA: autocast over a base loaded in `precision`), from calc itself
        tr["mixed_precision"] = Training.model_validate(given).mixed_precision
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


# CUDA compute capability by GPU architecture (the SDPA chooser's: flash from sm80); AMD's
# Instinct GPUs are traced as an H100 (their SDPA kernels are not modelled apart)
_SM = {"volta": 70, "turing": 75, "ampere": 80, "ada": 89, "hopper": 90, "blackwell": 100}


def gpu_sm(gpu: str) -> int:
    """The compute capability of the scenario's GPU, looked up as calc looks it up (an id or
    alias, any case); it must agree with the preset's `sdpa_flash`, which calc reads."""
    from calc.presets import resolve_gpu
    preset = resolve_gpu(gpu)
    sm = _SM.get(preset.architecture, 90)
    assert (sm >= 80) == preset.sdpa_flash, f"{preset.id}: sm{sm} but sdpa_flash " \
        f"{preset.sdpa_flash}"
    return sm


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

