"""A traced validation case: its scenario and what the instrument measured (traced.json)."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "validation"


def traced_case(case_id: str) -> tuple[dict, dict]:
    case = next(c for c in json.loads((ROOT / "cases.json").read_text()) if c["id"] == case_id)
    traced = json.loads((ROOT / "results" / "traced.json").read_text())["cases"][case_id]
    return case["scenario"], traced
