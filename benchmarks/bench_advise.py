"""Speed of the parallelism advisor. Prints numbers; target: a 1024-GPU search under 1 s in
CPython (the site runs it in the browser) within ~5,000 estimates. Not a test: timings on
shared machines flake; the estimate counts are deterministic."""

from __future__ import annotations

import platform
import time

from calc.plan import advise

CASES = [  # (model, gpu, gpus, seq_len, global batch in sequences)
    ("llama-3-8b", "h100-sxm-80gb", 8, 4096, 64),
    ("llama-3-70b", "h100-sxm-80gb", 1024, 4096, 1024),
    ("llama-3.1-405b", "h100-sxm-80gb", 1024, 8192, 512),
    ("llama-3-70b", "a100-40gb", 1024, 65536, 1024),
    ("mixtral-8x7b", "h100-sxm-80gb", 1024, 4096, 2048),
    ("deepseek-v3", "h100-sxm-80gb", 1024, 4096, 4096),
    ("deepseek-v3", "h100-sxm-80gb", 4096, 32768, 1024),
]


def main() -> None:
    for model, gpu, gpus, seq_len, batch in CASES:
        timings = []
        for _ in range(3):  # the first run also loads presets and fills caches
            t0 = time.perf_counter()
            r = advise(model, gpu, gpus, seq_len, batch)
            timings.append(time.perf_counter() - t0)
        top = r.plans[0].as_dict()["layout"] if r.plans else None
        print(f"{model} on {gpus} x {gpu}, {batch} x {seq_len}: {r.estimates} estimates, "
              f"{r.searched} combinations, first {timings[0]:.3f} s, "
              f"best {min(timings):.3f} s; top: {top}")
    print(f"({platform.python_implementation()} {platform.python_version()}, "
          f"{platform.machine()})")


if __name__ == "__main__":
    main()
