"""The committed JSON Schemas are the ones the models generate."""

from pathlib import Path

import pytest

from calc.schema import SCHEMAS, render

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_committed_schema_is_fresh(name: str) -> None:
    committed = (ROOT / "schema" / name).read_text()
    assert committed == render(SCHEMAS[name]), "run: python -m calc.schema --write"
