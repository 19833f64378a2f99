#!/usr/bin/env python
"""Record DeepSpeed ZeRO-3's parameter coordinator, fetch by fetch, on traced cases.

Runs each case's traced step (harness/step.py, DeepSpeed's own engine) with the coordinator's
`fetch_sub_module` and `release_sub_module` wrapped: after each call, which module it was and
how many elements of partitioned parameters are gathered or in flight. The second step's
forward and backward are written to results/coordinator.json; tests/test_coordinator.py
replays calc.coordinator over the same modules and checks every fetch against it.

Usage: .venv-val/bin/python validation/coordinator_log.py [CASE ...]
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "results", "coordinator.json")
CASES = (
    "llama-3.1-8b-4L_b1_s2048_master_flash_deepspeed-zero3x4",
    "llama-2-7b_b1_s4096_master_flash_acfull_deepspeed-zero3x8",
    "qwen2.5-0.5b_b2_s1024_master_flash_deepspeed-zero3x4",
    "mixtral-8x7b-2L_b1_s1024_master_flash_deepspeed-zero3x4",
    "deepseek-v3-3L-e32-v32k_b1_s1024_master_flash_deepspeed-zero3x4",
    "llama-3.2-1b_b2_s2048_master_flash_lora16_deepspeed-zero3x4",
    "llama-3.2-1b_b2_s2048_master_flash_acfull_lora16_deepspeed-zero3x4",
    "mixtral-8x7b-2L_b1_s1024_master_flash_lora16_deepspeed-zero3x4",
    "mixtral-8x7b-2L_b1_s1024_master_flash_lora16attn_deepspeed-zero3x4",
    "qwen3-30b-a3b-4L-v32k_b1_s1024_master_flash_lora16_deepspeed-zero3x2",
    "llama-3.1-8b-4L_b1_s2048_master_flash_acfull_qlora16_deepspeed-zero3x4",
    "llama-3.1-8b-4L_b2_s1024_amp_flash_qlora16_deepspeed-zero3x2",
    "qwen3-8b-4L_b1_s2048_amp_flash_acfull_qlora8attn_deepspeed-zero3x2",
)


def record(case_id: str) -> list[list]:
    """The second step's coordinator calls: [kind, module, elements gathered or in flight],
    kind F/B a fetch before a forward/backward, f/b a release after one."""
    sys.path.insert(0, HERE)
    from harness.common import TRACE_DEVICE  # noqa: F401, I001  (the fake CUDA device first)
    from harness import deepspeed_engine, step

    log: list[list] = []
    initialize = deepspeed_engine.initialize

    def wrapped(model, optimizer, cfg):
        engine, ds_optimizer = initialize(model, optimizer, cfg)
        from deepspeed.runtime.zero.partition_parameters import ZeroParamStatus
        from deepspeed.runtime.zero.partitioned_param_coordinator import (
            PartitionedParameterCoordinator as Coordinator,
        )
        names = {m: n for n, m in model.named_modules()}
        params = list(model.parameters())

        def gathered() -> int:
            return sum(p.ds_numel for p in params
                       if p.ds_status != ZeroParamStatus.NOT_AVAILABLE and not p.ds_persist)
        fetch, release = Coordinator.fetch_sub_module, Coordinator.release_sub_module

        def fetched(self, module, forward):
            fetch(self, module, forward)
            log.append(["F" if forward else "B", names.get(module, ""), gathered()])

        def released(self, module, forward=False):
            release(self, module, forward)
            log.append(["f" if forward else "b", names.get(module, ""), gathered()])
        Coordinator.fetch_sub_module, Coordinator.release_sub_module = fetched, released
        return engine, ds_optimizer

    deepspeed_engine.initialize = wrapped
    with open(os.path.join(HERE, "cases.json")) as f:
        cases = json.load(f)
    scenario = next(c["scenario"] for c in cases if c["id"] == case_id)
    step.trace_scenario(scenario)
    starts = [i for i, (kind, name, _) in enumerate(log) if kind == "F" and name == ""]
    return log[starts[-1]:]


def main(argv: list[str]) -> int:
    if argv[:1] == ["--one"]:  # a process group is one per process: each case runs alone
        print(json.dumps(record(argv[1])))
        return 0
    out = {}
    if os.path.exists(OUT):
        with open(OUT) as f:
            out = json.load(f)
    for case_id in argv or CASES:
        p = subprocess.run([sys.executable, __file__, "--one", case_id], capture_output=True,
                           text=True)
        if p.returncode:
            print(p.stderr[-2000:], file=sys.stderr)
            return 1
        out[case_id] = json.loads(p.stdout.strip().splitlines()[-1])
        print(f"{case_id}: {len(out[case_id])} calls", flush=True)
    with open(OUT, "w") as f:
        json.dump(dict(sorted(out.items())), f, separators=(",", ":"))
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
