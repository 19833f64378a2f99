"""JSON Schemas of the public inputs, generated from the pydantic models.

    python -m calc.schema --write   # refresh schema/*.json (a test fails when they are stale)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from .presets import GpuPreset, ModelPreset
from .scenario import Scenario

SCHEMAS: dict[str, type[Any]] = {
    "scenario.schema.json": Scenario,
    "model-preset.schema.json": ModelPreset,
    "gpu-preset.schema.json": GpuPreset,
}


def render(model: type[Any]) -> str:
    return json.dumps(model.model_json_schema(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    out = Path(__file__).resolve().parent.parent / "schema"
    if "--write" not in args:
        for name, model in SCHEMAS.items():
            print(f"== {name}\n{render(model)}")
        return 0
    out.mkdir(exist_ok=True)
    for name, model in SCHEMAS.items():
        (out / name).write_text(render(model))
    return 0


if __name__ == "__main__":
    sys.exit(main())
