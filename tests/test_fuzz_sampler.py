"""validation/fuzz.py's sampler: the scenarios it draws are ones the estimator takes and the
harness's limits allow (tracing them needs torch, so it is not run here)."""

from __future__ import annotations

import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "validation"))

import fuzz  # noqa: E402

from calc import ScenarioError, estimate  # noqa: E402


def test_samples_respect_the_harness_and_mostly_estimate() -> None:
    rng, models = random.Random(7), fuzz._models()
    drawn = [s for s in (fuzz.sample(rng, models) for _ in range(300)) if s is not None]
    accepted = 0
    for s in drawn:
        t, p = s["training"], s["parallelism"]
        meshed = any(p.get(k, 1) > 1 for k in ("tp", "cp", "pp"))
        if meshed:  # tp, cp and pp: full training, the standard loss, no master weights
            assert "finetuning" not in t and "loss" not in t and t["mixed_precision"] != "master"
        if p.get("ep", 1) > 1:
            assert p["zero"] == 3 and p["dp"] % p["ep"] == 0
        try:
            estimate(s)
            accepted += 1
        except ScenarioError:
            pass
    assert len(drawn) > 200 and accepted > len(drawn) // 2
