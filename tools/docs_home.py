"""The home page: one worked example (the calculator's opening scenario, estimated now) and the
accuracy headline (the accuracy page's own figures, from the committed validation results)."""

from __future__ import annotations

from docs_common import DEFAULT_SCENARIO, calc_link, gib, pct, verdict
from docs_pages import _context
from docs_walkthroughs import components_table

from calc import Scenario, estimate, gpus, models


def _describe(scenario: dict) -> str:
    """The scenario in a sentence, from its fields."""
    t, p = scenario["training"], scenario["parallelism"]
    ckpt = {"none": "no activation checkpointing", "full": "full activation checkpointing",
            "selective": "selective activation checkpointing"}[t["activation_checkpointing"]]
    return (f"{models()[scenario['model']].name}, {t['finetuning']} fine-tuning in "
            f"{t['precision']}, {t['micro_batch_size']} x {t['seq_len']:,}-token sequences per "
            f"GPU, {ckpt}, on {p['dp']} x {gpus()[scenario['gpu']].name} with ZeRO-{p['zero']}")


def _command(scenario: dict) -> str:
    """`calc estimate` with a flag per field the scenario sets away from its default."""
    defaults = Scenario(model=scenario["model"]).model_dump(mode="json")
    flags = [f"--model {scenario['model']}"]
    for group in ("training", "parallelism"):
        flags += [f"--{k.replace('_', '-')} {v}" for k, v in scenario[group].items()
                  if v != defaults[group][k]]
    if scenario["gpu"] != defaults["gpu"]:
        flags.append(f"--gpu {scenario['gpu']}")
    return "calc estimate " + " ".join(flags)


def context(src: str) -> dict[str, str]:
    e = estimate(DEFAULT_SCENARIO)
    acc = _context("accuracy.md")
    return {
        "example_scenario": _describe(DEFAULT_SCENARIO),
        "example_link": calc_link(DEFAULT_SCENARIO, src),
        "example_command": _command(DEFAULT_SCENARIO),
        "example_peak": gib(e.peak_bytes), "example_phase": e.peak_phase.replace("_", " "),
        "example_device": gib(e.device_bytes), "example_usable": gib(e.usable_bytes),
        "example_use": pct(e.utilization), "example_verdict": verdict(e),
        "example_components": components_table(e),
        **{k: acc[k] for k in ("cases", "test_cases", "error_test_median", "error_test_worst",
                               "published_kept", "published_median", "published_worst")},
    }
