"""How every number is written, the same on the command line, in the docs and on the page.

The page's twin is ``site/assets/format.mjs``: the same rules, and ``tests/test_formatting.py``
runs one table of values through both so they cannot drift. Rounding is half away from zero on
the number's exact binary value, as JavaScript's ``toFixed`` rounds (Python's ``format`` would
round an exact tie to even).

    >>> gib(23_987_965_952), params(7_615_616_512), tflops(1307.4), tflops(19.5), percent(0.2793)
    ('22.34 GiB', '7.62 B', '1,307', '19.5', '27.9%')
    >>> sorted(["llama-2-70b", "llama-2-13b", "llama-2-7b"], key=natural_key)
    ['llama-2-7b', 'llama-2-13b', 'llama-2-70b']
"""

from __future__ import annotations

import math
import re
from decimal import ROUND_HALF_UP, Decimal
from typing import TYPE_CHECKING

from .architecture import Architecture

if TYPE_CHECKING:
    from .estimate import Estimate, FitStatus

GiB = 1024**3
_SCALES = ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K"))
_ROUNDS_UP = 0.9995  # from here a unit's count shows as 1.00 at three significant figures


def fixed(x: float, digits: int) -> str:
    """`x` with `digits` decimals and thousands separators: ``fixed(1234.5, 1) == "1,234.5"``."""
    q = Decimal(x).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP)
    return f"{q:,f}" if q else f"{abs(q):f}"  # no "-0.00"


def significant(x: float, figures: int = 3) -> str:
    """`x` to `figures` significant figures, never in exponent form: 7.62, 70.6, 671, 1,307."""
    if x == 0:
        return "0"
    return fixed(x, max(0, figures - 1 - math.floor(math.log10(abs(x)))))


def gib(n: float) -> str:
    """Bytes as GiB (1024**3) with two decimals: ``22.34 GiB``."""
    return f"{fixed(n / GiB, 2)} GiB"


def gib_number(n: float) -> str:
    """`gib` without the unit, for a table column whose header names it: ``22.34``."""
    return fixed(n / GiB, 2)


def percent(x: float) -> str:
    """A fraction as a percentage with one decimal: ``27.9%``."""
    return f"{fixed(100 * x, 1)}%"


def params(n: float) -> str:
    """A parameter count to three significant figures: ``7.62 B``, ``494 M``; a count that
    rounds to 1,000 of a unit is one of the next (999,885,952: ``1.00 B``, not ``1,000 M``)."""
    for scale, unit in _SCALES:
        if abs(n) >= scale * _ROUNDS_UP:  # (0.9995 .. 1 of a unit: 1.00 of it)
            return f"{significant(math.copysign(max(abs(n) / scale, 1.0), n))} {unit}"
    return fixed(n, 0)


def tflops(x: float) -> str:
    """TFLOPS: whole from 100 up (``1,307``), else three significant figures (``19.5``)."""
    return fixed(x, 0) if abs(x) >= 100 else significant(x)


def count(n: float) -> str:
    """A whole count with thousands separators: ``32,768``."""
    return fixed(n, 0)


FIT_WORDS: dict[FitStatus, str] = {"fits": "fits", "tight": "tight", "does_not_fit": "does not fit"}
"""The words for `calc.estimate.fit_status`, everywhere a verdict is written."""

FIT_PHRASES: dict[FitStatus, str] = {"fits": "fits within the target",
                                     "tight": "fits, but above the target",
                                     "does_not_fit": "does not fit"}
"""The same verdicts where a sentence says them of its scenario ("it fits, but above the
target"): the walkthroughs' prose and live examples."""


COMPONENT_LABELS = {
    "parameters": "Parameters", "gradients": "Gradients", "optimizer_states": "Optimizer states",
    "activations": "Activations", "logits": "Logits and loss", "temporaries": "Temporaries",
    "overhead/allocator": "Allocator cache (empirical)", "overhead/cuda_context": "CUDA context",
    "overhead/nccl": "NCCL buffers",
}
"""What the pages call each part of the device memory: the report's `components` and
`overhead` keys (the command line prints the keys)."""


def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders the numbers inside names by value: 7b before 13b before 70b."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", text.lower()) if p)


_CHECKPOINTING = {"none": "no checkpointing", "full": "full checkpointing",
                  "selective": "selective checkpointing"}
# DeepSpeed's sizes, where a scenario sets them (calc.scenario.ZERO_SIZES, in its order)
_SIZE_WORDS = {"reduce_bucket_size": "reduce bucket", "stage3_prefetch_bucket_size": "prefetch",
               "stage3_param_persistence_threshold": "persistence",
               "stage3_max_live_parameters": "max live", "stage3_max_reuse_distance":
               "reuse distance", "sub_group_size": "sub-group"}


def setup_parts(e: Estimate) -> list[tuple[str, str, str]]:
    """The estimate's setup in words: model, GPUs and layout, precision, checkpointing,
    micro-batch x sequence. Each part is (the scenario field it comes from, its text, the text
    that joins it to the part before)."""
    s, t, p = e.scenario, e.scenario.training, e.scenario.parallelism
    model = e.resolved.preset.name if e.resolved.preset else (
        "custom architecture" if isinstance(s.model, Architecture) else "pasted config.json")
    parts = [("model", model, ""), ("gpu", f"{p.world_size} × {e.resolved.gpu.name}", " · ")]
    layout = [(f"parallelism.{k}", f"{k} {v}") for k, v in
              (("dp", p.dp), ("tp", p.tp), ("pp", p.pp), ("cp", p.cp), ("ep", p.ep)) if v > 1]
    layout.append(("parallelism.zero", f"ZeRO-{p.zero}" if p.zero else "no ZeRO"))
    if p.offload_optimizer or p.offload_params:
        layout.append(("parallelism.offload_optimizer" if p.offload_optimizer
                       else "parallelism.offload_params", "CPU offload"))
    layout += [(f"parallelism.{name}", f"{_SIZE_WORDS[name]} {count(getattr(p, name))}")
               for name in _SIZE_WORDS if getattr(p, name) is not None]
    parts += [(path, text, ": " if i == 0 else ", ") for i, (path, text) in enumerate(layout)]
    parts.append(("training.precision", f"{t.precision} ({t.mixed_precision})", " · "))
    if t.finetuning != "full":
        parts.append(("training.finetuning", f"{t.finetuning} rank {t.lora_rank}", " · "))
    parts.append(("training.activation_checkpointing",
                  _CHECKPOINTING[t.activation_checkpointing], " · "))
    parts.append(("training.micro_batch_size", f"micro-batch {t.micro_batch_size}", " · "))
    parts.append(("training.seq_len", f"{count(t.seq_len)} tokens", " × "))
    return parts


def setup_line(e: Estimate) -> str:
    """`setup_parts` as one line, as the command line writes it (the page links each part
    to its field)."""
    return "".join(join + text for _, text, join in setup_parts(e))


__all__ = ["COMPONENT_LABELS", "FIT_PHRASES", "FIT_WORDS", "GiB", "count", "fixed", "gib",
           "gib_number", "natural_key", "params", "percent", "setup_line", "setup_parts",
           "significant", "tflops"]
