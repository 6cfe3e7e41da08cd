"""GPU catalogue: memory, HBM bandwidth, dense FLOPs and the TP interconnect of each supported GPU.

Figures are dense (no sparsity), from COSTS.md §1. The interconnect terms price one all-reduce as
``alpha + bytes / beta`` (COSTS.md §5): NVLink GPUs take alpha 10 us and an effective small-message
beta scaled from H100's 300 GB/s (the value behind COSTS.md §2e) by NVLink generation; L40S has no
NVLink, so TP runs over PCIe Gen4 (64 GB/s bidirectional, a ring's algorithm bandwidth near 20 GB/s).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from specplan.errors import ConfigError


@dataclass(frozen=True)
class GPUSpec:
    """One GPU SKU. Bandwidth in bytes/s, FLOPs in FLOP/s, memory in bytes."""

    key: str
    name: str
    memory_bytes: float
    hbm_bw: float
    bf16_flops: float
    fp8_flops: Optional[float]
    sm_count: int
    allreduce_alpha_s: float
    allreduce_beta_Bps: float

    def gemm_flops(self, dtype: str) -> float:
        """Dense peak for GEMMs in ``dtype``; FP8 on a GPU without FP8 tensor cores is an error."""
        if dtype == "fp8":
            if self.fp8_flops is None:
                raise ConfigError(f"cost.dtype: fp8 is not supported on {self.name}")
            return self.fp8_flops
        return self.bf16_flops


GB = 1e9
T = 1e12

GPUS: dict[str, GPUSpec] = {
    g.key: g
    for g in (
        GPUSpec("a100", "A100 80GB SXM", 80 * GB, 2.039 * T, 312 * T, None, 108, 10e-6, 200 * GB),
        GPUSpec("h100", "H100 SXM", 80 * GB, 3.35 * T, 989 * T, 1979 * T, 132, 10e-6, 300 * GB),
        GPUSpec("h200", "H200 SXM", 141 * GB, 4.8 * T, 989 * T, 1979 * T, 132, 10e-6, 300 * GB),
        GPUSpec("l40s", "L40S", 48 * GB, 0.864 * T, 362 * T, 733 * T, 142, 30e-6, 20 * GB),
        GPUSpec("b200", "HGX B200", 180 * GB, 7.7 * T, 2250 * T, 4500 * T, 148, 10e-6, 600 * GB),
    )
}

_ALIASES = {
    "a100-80gb": "a100",
    "a100-sxm": "a100",
    "h100-sxm": "h100",
    "h200-sxm": "h200",
    "hgx-b200": "b200",
}

# nvidia-smi names of the catalogued SKUs. H200 NVL (PCIe, 600 W) is a different, slower SKU: no entry.
_DEVICE_NAMES = {
    "nvidia a100-sxm4-80gb": "a100",
    "nvidia h100 80gb hbm3": "h100",
    "nvidia h200": "h200",
    "nvidia l40s": "l40s",
    "nvidia b200": "b200",
}


def get_gpu(name: str) -> GPUSpec:
    """The catalogue entry for ``name`` (case-insensitive key or alias); one-line error otherwise."""
    key = _ALIASES.get(name.lower(), name.lower())
    if key not in GPUS:
        raise ConfigError(f"cost.gpu: unknown GPU {name!r} (known: {', '.join(GPUS)})")
    return GPUS[key]


def gpu_key_for_device(device_name: str) -> Optional[str]:
    """Catalogue key for an ``nvidia-smi``/torch device name, or None when the SKU is not catalogued."""
    return _DEVICE_NAMES.get(device_name.strip().lower())
