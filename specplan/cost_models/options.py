"""Cost settings that ``CostConfig`` does not carry yet, with their documented defaults.

``CostOptions`` gathers every knob of the analytic, linear, calibrated and drafting models beyond the
fields ``CostConfig`` already has. ``CostOptions.from_config(cfg, extra)`` takes each value from
``cfg`` when ``CostConfig`` has a field of that name, else from the ``extra`` mapping, else the default
below, so the same code keeps working once the fields move into ``CostConfig``.

Defaults and where they come from (``COSTS.md`` in the design notes):

- ``eta_mem = 0.80``: achieved fraction of HBM bandwidth when streaming weights (Vidur-derived 0.77-0.86, §1).
- ``eta_comp = 0.70``: achieved fraction of dense peak FLOPs in GEMMs (prefill MFU 0.69-0.76, §1).
- ``eta_attn = 0.70``: achieved bandwidth when reading the KV cache (§1 suggests 0.65-0.70).
- ``eta_attn_comp = 0.50``: achieved FLOP fraction of attention kernels (FlashAttention-2 reaches about
  0.35-0.5 of H100 peak, FlashAttention-3 up to 0.75).
- ``gemm_floor_s = 5e-6``: per-GEMM-kernel floor (5-7 us at small TP shards, §1 and §3).
- ``attn_floor_s = 5e-6``: per-attention-kernel floor (same launch/tail class as GEMMs).
- ``small_kernels_per_layer = 3`` at ``small_kernel_s = 2e-6``: fused add+RMSNorm twice and SiLU*mul per
  layer (rotary embedding fused into attention), each a few microseconds under CUDA graphs.
- ``host_overhead_s = 126e-6`` and ``host_overhead_per_seq_s = 4e-6``: BLIS's fitted per-step (beta7) and
  per-request (beta6) terms on vLLM (ANCHORS.md, anchor 3). ``CostConfig.host_overhead_s`` overrides
  the first.
- ``cuda_graph_max_tokens = 512``: largest captured token count (vLLM V1 default); counts up to it are
  padded to 1, 2, 4 or the next multiple of 8.
- ``allreduce_alpha_s`` / ``allreduce_beta_Bps``: per-all-reduce latency and effective bandwidth for
  TP > 1; ``None`` takes the GPU catalogue's interconnect values (§5: alpha about 10 us, beta 300 GB/s
  on NVLink, as in §2e).
- ``dtype``: ``bf16`` or ``fp8`` weights (and KV cache) for the analytic model.
- ``linear_coefficients``: ``{c0_s, c_tok_s, c_kv_s, c_seq_s}`` for the ``linear`` model, or
  ``linear_fit_csv``: a calibrate ``measurements.csv`` to fit them from by least squares.
- ``draft_fraction``: ``linear`` model only, drafting cost as a fraction of the verify step.
- ``draft_costs``: path of a drafting-cost file; ``None`` uses the bundled one (``data/profiles/draft_costs.yaml``)
  or the ``draft`` section of a measured profile.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional

from specplan.errors import ConfigError


@dataclass(frozen=True)
class CostOptions:
    """Every cost knob beyond the present ``CostConfig`` fields; see the module docstring for sources."""

    dtype: str = "bf16"
    eta_mem: float = 0.80
    eta_comp: float = 0.70
    eta_attn: float = 0.70
    eta_attn_comp: float = 0.50
    gemm_floor_s: float = 5e-6
    attn_floor_s: float = 5e-6
    small_kernels_per_layer: int = 3
    small_kernel_s: float = 2e-6
    host_overhead_s: float = 126e-6
    host_overhead_per_seq_s: float = 4e-6
    cuda_graph_padding: bool = True
    cuda_graph_max_tokens: int = 512
    allreduce_alpha_s: Optional[float] = None
    allreduce_beta_Bps: Optional[float] = None
    linear_coefficients: Optional[dict[str, float]] = field(default=None, hash=False)
    linear_fit_csv: Optional[str] = None
    draft_fraction: Optional[float] = None
    draft_costs: Optional[str] = None

    def __post_init__(self) -> None:
        if self.dtype not in ("bf16", "fp8"):
            raise ConfigError(f"cost.dtype: {self.dtype!r} is not one of bf16, fp8")
        for name in ("eta_mem", "eta_comp", "eta_attn", "eta_attn_comp"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ConfigError(f"cost.{name}: {value} must be in (0, 1]")
        for name in ("gemm_floor_s", "attn_floor_s", "small_kernel_s", "host_overhead_s", "host_overhead_per_seq_s"):
            if getattr(self, name) < 0:
                raise ConfigError(f"cost.{name}: must be >= 0")
        if self.small_kernels_per_layer < 0 or self.cuda_graph_max_tokens < 1:
            raise ConfigError("cost.small_kernels_per_layer must be >= 0 and cost.cuda_graph_max_tokens >= 1")
        if self.allreduce_beta_Bps is not None and self.allreduce_beta_Bps <= 0:
            raise ConfigError("cost.allreduce_beta_Bps: must be > 0")
        if self.draft_fraction is not None and self.draft_fraction < 0:
            raise ConfigError("cost.draft_fraction: must be >= 0")

    @classmethod
    def from_config(cls, cfg: Any = None, extra: Optional[Mapping[str, Any]] = None) -> "CostOptions":
        """Options from a ``CostConfig`` (fields it has) and an ``extra`` mapping (fields it lacks yet).

        ``CostConfig.host_overhead_s`` of ``None`` keeps the default. An unknown key in ``extra`` fails
        with one line naming it.
        """
        names = {f.name for f in dataclasses.fields(cls)}
        extra = dict(extra or {})
        unknown = sorted(set(extra) - names)
        if unknown:
            raise ConfigError(f"cost.{unknown[0]}: unknown cost option (known: {', '.join(sorted(names))})")
        values: dict[str, Any] = {}
        for name in names:
            if name in extra:
                values[name] = extra[name]
            elif cfg is not None and getattr(cfg, name, None) is not None:
                values[name] = getattr(cfg, name)
        return cls(**values)
