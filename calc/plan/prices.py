"""Default $/GPU-hour per GPU preset: on-demand LIST prices, for order-of-magnitude planning.

Prices vary by provider, region, commitment and month, and fall over a GPU's life: always pass
your own (`price_per_gpu_hour=`, `--price-per-gpu-hour`). Each entry names the offer it comes
from and when. None of them has been re-read from the provider's page by this project
(`verified=False`): they were written from the public price pages as remembered for the date
given. GPUs without a widely listed on-demand price have no default.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GpuPrice:
    usd_per_gpu_hour: float
    offer: str  # the instance or listing the price is for, divided per GPU
    source: str
    as_of: str
    verified: bool = False


_LAMBDA = "https://lambda.ai/service/gpu-cloud/pricing"
_AWS = "https://aws.amazon.com/ec2/pricing/on-demand/"

PRICES: dict[str, GpuPrice] = {
    "h100-sxm-80gb": GpuPrice(2.99, "Lambda on-demand 8x H100 SXM, per GPU", _LAMBDA, "2025-01"),
    "h100-pcie-80gb": GpuPrice(2.49, "Lambda on-demand 1x H100 PCIe", _LAMBDA, "2025-01"),
    "a100-80gb": GpuPrice(1.79, "Lambda on-demand 8x A100 SXM 80GB, per GPU", _LAMBDA, "2025-01"),
    "a100-40gb": GpuPrice(1.29, "Lambda on-demand 1x A100 SXM 40GB", _LAMBDA, "2025-01"),
    "b200-180gb": GpuPrice(4.99, "Lambda on-demand 8x B200, per GPU", _LAMBDA, "2025-06"),
    "a10g-24gb": GpuPrice(1.006, "AWS g5.xlarge on-demand, us-east-1 (1x A10G)", _AWS, "2024-12"),
    "l4-24gb": GpuPrice(0.8048, "AWS g6.xlarge on-demand, us-east-1 (1x L4)", _AWS, "2024-12"),
    "l40s-48gb": GpuPrice(1.861, "AWS g6e.xlarge on-demand, us-east-1 (1x L40S)", _AWS,
                          "2024-12"),
    "v100-16gb": GpuPrice(3.06, "AWS p3.2xlarge on-demand, us-east-1 (1x V100 16GB)", _AWS,
                          "2024-12"),
    "v100-32gb": GpuPrice(3.9015, "AWS p3dn.24xlarge on-demand, us-east-1 ($31.212 / 8 GPUs)",
                          _AWS, "2024-12"),
}
"""By GPU preset id. Missing: h100-nvl-94gb, h200-141gb, mi300x-192gb, mi325x-256gb,
rtx-3090-24gb, rtx-4090-24gb (no stable on-demand list price this project could cite)."""


def default_price(gpu_id: str) -> GpuPrice | None:
    return PRICES.get(gpu_id)


__all__ = ["PRICES", "GpuPrice", "default_price"]
