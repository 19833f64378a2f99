import pytest

from calc import presets


@pytest.fixture(scope="session")
def model_ids() -> list[str]:
    return sorted(presets.models())
