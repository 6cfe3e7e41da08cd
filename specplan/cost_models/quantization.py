"""Weight and KV-cache storage formats: bytes per element and the GEMM peak each one computes at.

Bytes per parameter include the scales a format stores beside its values (one scale per block of
``block`` elements, ``scale_bytes`` each):

- ``bf16``: 2 bytes, BF16 tensor cores.
- ``fp8``: 1 byte (E4M3); per-tensor scales, or DeepSeek-V3's 128x128 weight blocks (one FP32 scale per
  16384 weights, negligible); FP8 tensor cores (activations quantized on the fly).
- ``int4``: AWQ/GPTQ weight-only, 4-bit values in groups of 128 with an FP16 scale (and a packed
  zero point, counted as 0.5 byte) per group; dequantized to BF16, so BF16 peak.
- ``nvfp4``: 4-bit E2M1 values, an FP8 (E4M3) scale per 16 (NVIDIA, "Introducing NVFP4", 2025);
  FP4 tensor cores, Blackwell only.
- ``mxfp4``: 4-bit E2M1 values, an E8M0 scale per 32 (OCP Microscaling Formats v1.0); gpt-oss ships
  its experts in it. Weight-only on GPUs without FP4 tensor cores (vLLM's Marlin/Triton paths), so
  BF16 peak there and FP4 peak where the GPU has it.

The KV cache is ``bf16`` (2 bytes) or ``fp8`` (1 byte).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from specplan.errors import ConfigError


@dataclass(frozen=True)
class Format:
    """A storage format: value bits, and one ``scale_bytes`` scale per ``block`` values (0: none)."""

    name: str
    value_bytes: float
    block: int = 0
    scale_bytes: float = 0.0
    compute: str = "bf16"  # the GEMM peak it runs at: bf16, fp8 or fp4 (fp4 falls back to bf16 without FP4 cores)

    @property
    def bytes_per_param(self) -> float:
        """Stored bytes per weight, scales included."""
        return self.value_bytes + (self.scale_bytes / self.block if self.block else 0.0)


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("bf16", 2.0),
        Format("fp8", 1.0, compute="fp8"),
        Format("int4", 0.5, 128, 2.5),
        Format("nvfp4", 0.5, 16, 1.0, compute="fp4"),
        Format("mxfp4", 0.5, 32, 1.0, compute="fp4"),
    )
}
KV_FORMATS = {"bf16": 2.0, "fp8": 1.0}

# quantization_config.quant_method -> format (AWQ/GPTQ only at 4 bits, checked below).
_QUANT_METHODS = {"fp8": "fp8", "fbgemm_fp8": "fp8", "awq": "int4", "gptq": "int4", "mxfp4": "mxfp4",
                  "modelopt": None}


def get_format(name: str, field: str = "cost.weight_format") -> Format:
    """The format called ``name``; one-line error naming ``field`` otherwise."""
    if name not in FORMATS:
        raise ConfigError(f"{field}: unknown format {name!r} (known: {', '.join(FORMATS)})")
    return FORMATS[name]


def format_from_quant_config(qc: object, where: str) -> tuple[Optional[str], tuple[str, ...]]:
    """``(format, patterns of modules left unquantized)`` from a config.json ``quantization_config``.

    None for no quantization_config; a method or bit width this module does not price is refused,
    naming the field, rather than read as BF16."""
    if qc is None:
        return None, ()
    if not isinstance(qc, dict):
        raise ConfigError(f"{where}: quantization_config: expected an object")
    method = str(qc.get("quant_method", "")).lower()
    if method not in _QUANT_METHODS:
        raise ConfigError(f"{where}: quantization_config.quant_method: {method!r} is not priced "
                          f"(known: {', '.join(_QUANT_METHODS)}); set cost.weight_format instead")
    fmt = _QUANT_METHODS[method]
    if method in ("awq", "gptq") and qc.get("bits", 4) != 4:
        raise ConfigError(f"{where}: quantization_config.bits: {qc.get('bits')!r} (only 4-bit AWQ/GPTQ is priced)")
    if method == "modelopt":  # NVIDIA ModelOpt checkpoints: FP8 or NVFP4
        algo = str(qc.get("quant_algo", (qc.get("quantization") or {}).get("quant_algo", ""))).upper()
        fmt = {"FP8": "fp8", "NVFP4": "nvfp4"}.get(algo)
        if fmt is None:
            raise ConfigError(f"{where}: quantization_config.quant_algo: {algo!r} is not priced (FP8, NVFP4)")
    skip = qc.get("modules_to_not_convert") or qc.get("ignore") or ()
    return fmt, tuple(str(s) for s in skip)
