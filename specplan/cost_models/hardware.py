"""GPU catalogue: memory, HBM bandwidth, dense FLOPs and the TP interconnect of each supported GPU.

Figures are dense (no sparsity), from COSTS.md §1. The interconnect terms price one all-reduce as
``alpha + bytes / beta`` (COSTS.md §5): NVLink GPUs take alpha 10 us and an effective small-message
beta scaled from H100's 300 GB/s (the value behind COSTS.md §2e) by NVLink generation; L40S has no
NVLink, so TP runs over PCIe Gen4 (64 GB/s bidirectional, a ring's algorithm bandwidth near 20 GB/s).

The entries added for the models operators serve (dense peaks, i.e. the datasheets' sparse figures halved):

- ``h20``: 96 GB HBM3, 4.0 TB/s, BF16 148 / FP8 296 TFLOPS, 78 SMs, NVLink 900 GB/s (NVIDIA H20
  product brief, 2024, as reported by the press; no public datasheet).
- ``h100-pcie``: 80 GB HBM2e, 2.0 TB/s, BF16 756 / FP8 1513 TFLOPS, 114 SMs (NVIDIA H100 datasheet,
  "H100 PCIe" column); TP beyond a bridged pair runs over PCIe Gen5, twice L40S's Gen4 beta.
- ``l4``: 24 GB GDDR6, 300 GB/s, BF16 121 / FP8 242 TFLOPS, 58 SMs, PCIe Gen4 (NVIDIA L4 datasheet).
- ``gb200``: one Blackwell GPU of a GB200 NVL72: 186 GB HBM3e, 8 TB/s, BF16 2.5 / FP8 5 / FP4 10 PFLOPS
  (NVIDIA GB200 NVL72 specifications, per-GPU = rack / 72), NVLink 5 like B200.
- ``mi300x``: 192 GB HBM3, 5.3 TB/s, BF16 1307 / FP8 2615 TFLOPS, 304 CUs (AMD Instinct MI300X
  datasheet); Infinity Fabric links taken at H100's effective all-reduce figures.

``fp4_flops`` is the dense FP4 tensor-core peak where the GPU has one (Blackwell: B200 9 PFLOPS, HGX B200
datasheet); NVFP4/MXFP4 GEMMs run at it, elsewhere MXFP4 weights are dequantized to BF16.
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
    fp4_flops: Optional[float] = None

    def gemm_flops(self, dtype: str) -> float:
        """Dense peak for GEMMs in ``dtype``; FP8 on a GPU without FP8 tensor cores is an error, FP4
        without FP4 tensor cores computes at the BF16 peak (weights dequantized)."""
        if dtype == "fp4":
            return self.fp4_flops if self.fp4_flops is not None else self.bf16_flops
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
        GPUSpec("b200", "HGX B200", 180 * GB, 7.7 * T, 2250 * T, 4500 * T, 148, 10e-6, 600 * GB, 9000 * T),
        GPUSpec("h20", "H20", 96 * GB, 4.0 * T, 148 * T, 296 * T, 78, 10e-6, 300 * GB),
        GPUSpec("h100-pcie", "H100 PCIe", 80 * GB, 2.0 * T, 756 * T, 1513 * T, 114, 30e-6, 40 * GB),
        GPUSpec("l4", "L4", 24 * GB, 0.3 * T, 121 * T, 242 * T, 58, 30e-6, 20 * GB),
        GPUSpec("gb200", "GB200 (per GPU)", 186 * GB, 8.0 * T, 2500 * T, 5000 * T, 148, 10e-6, 600 * GB, 10000 * T),
        GPUSpec("mi300x", "MI300X", 192 * GB, 5.3 * T, 1307 * T, 2615 * T, 304, 10e-6, 300 * GB),
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
    "nvidia h20": "h20",
    "nvidia h100 pcie": "h100-pcie",
    "nvidia l4": "l4",
    "nvidia gb200": "gb200",
    "amd instinct mi300x": "mi300x",
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
