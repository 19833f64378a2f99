"""GPU presets keep the conventions presets/README.md states, so a new card cannot drift."""

import re

import pytest

from calc import gpus

# presets/README.md, `dtypes`: what each architecture's tensor/matrix units run natively.
_ARCH_DTYPES = {
    "volta": {"fp32", "fp16"},
    "turing": {"fp32", "fp16"},
    "ampere": {"fp32", "tf32", "fp16", "bf16"},
    "cdna2": {"fp32", "fp16", "bf16"},
    "ada": {"fp32", "tf32", "fp16", "bf16", "fp8"},
    "hopper": {"fp32", "tf32", "fp16", "bf16", "fp8"},
    "cdna3": {"fp32", "tf32", "fp16", "bf16", "fp8"},
    "blackwell": {"fp32", "tf32", "fp16", "bf16", "fp8", "fp4"},
}
GPU_IDS = sorted(gpus())


@pytest.mark.parametrize("gpu_id", GPU_IDS)
def test_gpu_id_names_the_memory_of_one_device(gpu_id: str) -> None:
    """`name-variant-<N>gb` and memory_bytes = N GiB: one device (an MI250X GCD is 64)."""
    m = re.fullmatch(r"[a-z0-9.\-]+-(\d+)gb", gpu_id)
    assert m is not None
    assert gpus()[gpu_id].memory_bytes == int(m.group(1)) * 2**30


@pytest.mark.parametrize("gpu_id", GPU_IDS)
def test_gpu_dtypes_are_its_architectures_and_each_has_a_rate(gpu_id: str) -> None:
    """No bf16 on a T4, no fp8 on an A100 or MI250X: a precision the card lacks is refused."""
    g = gpus()[gpu_id]
    assert set(g.dtypes) == _ARCH_DTYPES[g.architecture]
    assert set(g.dense_tflops) == set(g.dtypes)


@pytest.mark.parametrize("gpu_id", GPU_IDS)
def test_gpu_usable_memory_is_at_most_the_marketed_and_close_to_it(gpu_id: str) -> None:
    """A driver total sits at most 10% under the GiB figure (ECC on GDDR reserves ~6%)."""
    g = gpus()[gpu_id]
    assert 0.9 * g.memory_bytes < g.usable_bytes <= g.memory_bytes
