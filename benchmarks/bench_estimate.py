"""Speed of the estimator. Prints numbers; targets: one estimate < 100 us median (CPython),
10,000 scenarios < 1 s. Not a test: timings on shared machines flake, numbers do not lie."""

from __future__ import annotations

import platform
import statistics
import time

from calc import estimate, parse_scenario

SCENARIO = {"model": "llama-3-8b",
            "training": {"micro_batch_size": 2, "seq_len": 4096, "activation_checkpointing": "full"},
            "parallelism": {"dp": 8, "zero": 3}, "gpu": "h100-sxm-80gb"}


def _sweep() -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    models = ["llama-3-8b", "qwen2.5-7b", "gemma-2-2b", "gpt2", "mixtral-8x7b", "llama-3-70b"]
    for i in range(10_000):
        out.append({"model": models[i % len(models)],
                    "training": {"micro_batch_size": 1 + i % 8, "seq_len": 256 * (1 + i % 4),
                                 "activation_checkpointing": ("none", "full")[i % 2]},
                    "parallelism": {"dp": 8, "zero": i % 4}})
    return out


def main() -> None:
    estimate(SCENARIO)  # warm caches (presets, parameter counts)
    scenario = parse_scenario(SCENARIO)
    for label, arg in (("from a dict (validation included)", SCENARIO),
                       ("from a parsed Scenario", scenario)):
        times = []
        for _ in range(2000):
            t0 = time.perf_counter()
            estimate(arg)
            times.append(time.perf_counter() - t0)
        print(f"one estimate, {label}: median {statistics.median(times) * 1e6:.1f} us, "
              f"p90 {sorted(times)[int(0.9 * len(times))] * 1e6:.1f} us")
    batch = _sweep()
    t0 = time.perf_counter()
    for sc in batch:
        estimate(sc)
    print(f"10,000 scenarios: {time.perf_counter() - t0:.3f} s")
    t0 = time.perf_counter()
    for sc in batch:
        estimate(sc).as_dict()
    print(f"10,000 scenarios with the JSON report: {time.perf_counter() - t0:.3f} s")
    print(f"({platform.python_implementation()} {platform.python_version()}, "
          f"{platform.machine()})")


if __name__ == "__main__":
    main()
