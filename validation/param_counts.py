"""Compute parameter counts for the model presets with Hugging Face transformers.

For every presets/models/*.json this builds the model from its ``hf_config`` on
the meta device (no memory is allocated, no weights are downloaded) and counts
``sum(p.numel() for p in model.parameters())``. ``parameters()`` yields each
Parameter once, so tied input/output embeddings are counted once.

Usage (from the repository root, with torch + transformers installed):

    python validation/param_counts.py              # print the counts
    python validation/param_counts.py --write      # store them as hf_param_count
    python validation/param_counts.py --check      # exit 1 if any stored value differs
    python validation/param_counts.py --check qwen3-0.6b llama-3-8b   # only these ids

A preset whose model type cannot be instantiated by the installed transformers
is reported and skipped; its stored hf_param_count is left as is (null when it
has never been computed) and --check does not fail on it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODELS_DIR = ROOT / "presets" / "models"


def count_params(hf_config: dict) -> int:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = dict(hf_config)
    model_type = cfg.pop("model_type")
    cfg.pop("architectures", None)
    dtype = cfg.pop("torch_dtype", None)
    config = AutoConfig.for_model(model_type, **cfg)
    if dtype is not None:
        config.dtype = dtype  # informational only; meta tensors are not allocated
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


def load_presets(ids: list[str]) -> list[Path]:
    paths = sorted(MODELS_DIR.glob("*.json"))
    if ids:
        wanted = set(ids)
        paths = [p for p in paths if p.stem in wanted]
        missing = wanted - {p.stem for p in paths}
        if missing:
            sys.exit(f"unknown preset id(s): {', '.join(sorted(missing))}")
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="write hf_param_count into each preset file")
    mode.add_argument("--check", action="store_true", help="exit 1 if a stored hf_param_count differs")
    ap.add_argument("ids", nargs="*", help="preset ids to process (default: all)")
    args = ap.parse_args(argv)

    import transformers

    print(f"transformers {transformers.__version__}")
    failures = 0
    for path in load_presets(args.ids):
        preset = json.loads(path.read_text())
        stored = preset.get("hf_param_count")
        published = preset.get("published_param_count")
        try:
            n = count_params(preset["hf_config"])
        except Exception as exc:  # model type unknown to this transformers, bad config, ...
            print(f"{path.stem:20s} cannot instantiate: {type(exc).__name__}: {exc}".splitlines()[0])
            continue
        diff = ""
        if published:
            diff = f"  published {published:,} ({(n - published) / published:+.3%})"
        status = ""
        if args.check and stored != n:
            status = f"  MISMATCH: stored {stored}"
            failures += 1
        print(f"{path.stem:20s} {n:>16,}{diff}{status}")
        if args.write and stored != n:
            preset["hf_param_count"] = n
            path.write_text(json.dumps(preset, indent=2, ensure_ascii=False) + "\n")
    if failures:
        print(f"{failures} mismatch(es)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
