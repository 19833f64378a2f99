"""Model and GPU presets: JSON data files in `presets/`, validated on load.

The files ship inside the wheel as `calc/presets/` (see pyproject's force-include); from a
source checkout they are read from the repository's `presets/`. Loading is lazy and cached, so
importing `calc` costs nothing until a preset is looked up.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from .architecture import Architecture, from_hf_config
from .formatting import natural_key

HardwareDtype = Literal["fp32", "tf32", "fp16", "bf16", "fp8", "fp4"]


class ModelPreset(BaseModel):
    """A published model: its config.json and where it comes from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9.\-]*$")
    name: str
    family: str
    aliases: tuple[str, ...] = ()
    source_url: str
    verified: bool
    verification_note: str = ""
    published_param_count: int | None = None
    published_param_count_source: str | None = None
    hf_param_count: int | None = Field(
        default=None, description="sum of numel over the transformers model built on meta"
    )
    hf_config: dict[str, Any]

    def architecture(self) -> Architecture:
        return _architecture(self.id)


class Interconnect(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    bandwidth_gbps: float = Field(gt=0, description="GB/s per GPU, bidirectional as marketed")


class GpuPrice(BaseModel):
    """An on-demand LIST price per GPU-hour, for order-of-magnitude planning.

    Prices vary by provider, region, commitment and month, and fall over a GPU's life: pass
    your own (`price_per_gpu_hour=`, `--price-per-gpu-hour`). `offer` names the listing the
    price comes from (a multi-GPU instance's price divided per GPU), `as_of` its month.
    `verified` is false where the figure was written from the provider's public price page as
    remembered for that month, not re-read from it.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    usd_per_gpu_hour: float = Field(gt=0, allow_inf_nan=False)
    offer: str = Field(min_length=1, description="the instance or listing, divided per GPU")
    source: str = Field(pattern=r"^https://", description="the provider's price page")
    as_of: str = Field(pattern=r"^[0-9]{4}-(0[1-9]|1[0-2])$", description="YYYY-MM")
    verified: bool = Field(description="re-read from the provider's page for `as_of`")


class GpuPreset(BaseModel):
    """An accelerator: memory, supported dtypes, speed, list price, with sources."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9.\-]*$")
    name: str
    vendor: Literal["nvidia", "amd"]
    architecture: str
    aliases: tuple[str, ...] = ()
    memory_bytes: int = Field(gt=0)
    usable_bytes: int = Field(gt=0, description="total memory the driver reports")
    usable_bytes_source: str
    dtypes: tuple[HardwareDtype, ...]
    dense_tflops: dict[HardwareDtype, float]
    memory_bandwidth_gbps: float = Field(gt=0)
    interconnect: Interconnect
    price: GpuPrice | None = Field(
        default=None, description="on-demand list price; none where no stable one is cited")
    sources: tuple[str, ...]
    verified: bool
    verification_note: str = ""

    @property
    def sdpa_flash(self) -> bool:
        """Whether torch's CUDA SDPA has its flash kernel here: sm80 and newer (Ampere on);
        Volta and Turing take the memory-efficient kernel (no grouped K/V heads) or math."""
        return not (self.vendor == "nvidia" and self.architecture in ("volta", "turing"))


_P = TypeVar("_P", ModelPreset, GpuPreset)


def _presets_dir() -> Path:
    here = Path(__file__).resolve().parent
    packaged = here / "presets"
    return packaged if packaged.is_dir() else here.parent / "presets"


@cache
def models() -> dict[str, ModelPreset]:
    """All model presets by id, in natural order (llama-2-7b before llama-2-13b)."""
    return _load("models", ModelPreset)


@cache
def gpus() -> dict[str, GpuPreset]:
    """All GPU presets by id, in natural order."""
    return _load("gpus", GpuPreset)


def _load(kind: str, cls: type[_P]) -> dict[str, _P]:
    out: dict[str, _P] = {}
    for path in sorted((_presets_dir() / kind).glob("*.json"), key=lambda p: natural_key(p.stem)):
        item = cls.model_validate_json(path.read_bytes())  # parsed and checked in one pass
        if item.id != path.stem:
            raise ValueError(f"{path.name}: id {item.id!r} does not match the file name")
        out[item.id] = item
    return out


@cache
def _aliases(kind: str) -> dict[str, str]:
    table: dict[str, ModelPreset] | dict[str, GpuPreset] = models() if kind == "model" else gpus()
    index: dict[str, str] = {}
    for pid, item in table.items():
        for name in (pid, *item.aliases):
            key = name.lower()
            if index.get(key, pid) != pid:
                raise ValueError(f"{kind} alias {name!r} names both {index[key]!r} and {pid!r}")
            index[key] = pid
    return index


class UnknownPreset(LookupError):
    def __init__(self, kind: str, name: str, known: list[str]) -> None:
        super().__init__(f"unknown {kind} preset {name!r}; known: {', '.join(known)}")


def resolve_model(name: str) -> ModelPreset:
    pid = _aliases("model").get(name.lower())
    if pid is None:
        raise UnknownPreset("model", name, sorted(models()))
    return models()[pid]


def resolve_gpu(name: str) -> GpuPreset:
    pid = _aliases("gpu").get(name.lower())
    if pid is None:
        raise UnknownPreset("gpu", name, sorted(gpus()))
    return gpus()[pid]


@cache
def _architecture(model_id: str) -> Architecture:
    arch, _ = from_hf_config(models()[model_id].hf_config)
    return arch
