"""Analytic roofline of one executor step from its batch composition (COSTS.md §3, "uncalibrated").

Per layer, on one GPU's tensor-parallel shard:

- four GEMMs (qkv, o, gate_up, down), each ``sqrt(floor^2 + t_mem^2 + t_comp^2)`` with
  ``t_mem = (weight bytes + activation bytes) / (eta_mem * BW)`` and ``t_comp = 2 * N * params /
  (eta_comp * FLOPs)``. The L2 blend is right near the knee, where ``max()`` under-predicts (§2e, §3);
  the floor is the per-kernel launch/tail cost that dominates small TP shards (§1, §5);
- decode attention: one kernel over the generation rows, reading each row's KV (``ctx + q`` tokens at
  ``eta_attn``) and doing ``4 * heads * head_dim * q * (ctx + (q + 1) / 2)`` FLOPs at ``eta_attn_comp``,
  blended the same way. Reading the KV once for all 1+K positions is why verification is cheap at
  long context (§2b);
- prefill-chunk attention: the same form over the prefill rows, a separate kernel;
- a few small kernels (norms, activation) with a floor each, plus their activation traffic;
- two all-reduces for TP > 1 (``terms.tp_comm_s``).

Per step: the LM head GEMM over the positions that need logits, the per-step host overhead
(``host_overhead_s + host_overhead_per_seq_s * B``), and CUDA-graph padding of the token count of the
token-level work (GEMMs, small kernels, all-reduces) when enabled. Attention is not padded: padded
rows carry no context. FP8 halves weight and KV bytes and uses FP8 GEMM peak; attention math stays
at BF16 peak.
"""

from __future__ import annotations

import math

from specplan.cost_models.base import StepBatch
from specplan.cost_models.draft import DraftCost
from specplan.cost_models.hardware import GPUSpec
from specplan.cost_models.models import ModelSpec
from specplan.config import CostConfig
from specplan.cost_models.terms import ACT_BYTES, BatchTerms, TermsCostModel, padded_tokens, tp_comm_s


COMPONENTS = ("gemm", "attention_decode", "attention_prefill", "small_kernels", "lm_head", "tp_comm", "host")


class RooflineCostModel(TermsCostModel):
    """Analytic step time of ``model`` on ``gpu`` at tensor parallelism ``tp``; see the module docstring."""

    name = "roofline"

    def __init__(self, gpu: GPUSpec, model: ModelSpec, tp: int = 1, options: CostConfig = CostConfig(),
                 draft: DraftCost | None = None, source: str = "") -> None:
        self.gpu, self.model, self.tp, self.options = gpu, model, tp, options
        self.draft = draft if draft is not None else DraftCost.default(gpu.sm_count)
        self.source = source
        o = options
        shard = model.shard(tp)
        weight_bytes = 1 if o.dtype == "fp8" else 2
        h, hd = model.hidden, model.head_dim
        # (params, input + output width) of the four per-layer GEMMs on one GPU.
        gemms = [
            (h * (shard.q_heads + 2 * shard.kv_heads) * hd, h + (shard.q_heads + 2 * shard.kv_heads) * hd),
            (shard.q_heads * hd * h, shard.q_heads * hd + h),
            (h * 2 * shard.intermediate, h + 2 * shard.intermediate),
            (shard.intermediate * h, shard.intermediate + h),
        ]
        mem_rate = o.eta_mem * gpu.hbm_bw
        comp_rate = o.eta_comp * gpu.gemm_flops(o.dtype)
        # t_mem = a + b * N and t_comp = c * N per GEMM.
        self._gemms = [
            (p * weight_bytes / mem_rate, io * ACT_BYTES / mem_rate, 2.0 * p / comp_rate) for p, io in gemms
        ]
        lm_params = h * shard.vocab
        self._lm_head = (lm_params * weight_bytes / mem_rate, (h + shard.vocab) * ACT_BYTES / mem_rate,
                         2.0 * lm_params / comp_rate)
        kv_bytes_per_token = 2 * shard.kv_heads * hd * weight_bytes  # K and V, one layer
        self._kv_s_per_token = kv_bytes_per_token / (o.eta_attn * gpu.hbm_bw)
        self._attn_s_per_work = 4.0 * shard.q_heads * hd / (o.eta_attn_comp * gpu.bf16_flops)
        # Small kernels: read+write the residual stream twice (norms), read gate/up and write the product.
        self._small_fixed_s = o.small_kernels_per_layer * o.small_kernel_s
        self._small_s_per_token = (4 * h + 3 * shard.intermediate) * ACT_BYTES / mem_rate
        self._alpha = o.allreduce_alpha_s if o.allreduce_alpha_s is not None else gpu.allreduce_alpha_s
        self._beta = o.allreduce_beta_Bps if o.allreduce_beta_Bps is not None else gpu.allreduce_beta_Bps
        self._floor2 = o.gemm_floor_s ** 2
        self._attn_floor2 = o.attn_floor_s ** 2

    def _gemm_s(self, coeffs: tuple[float, float, float], n: int) -> float:
        a, b, c = coeffs
        return math.sqrt(self._floor2 + (a + b * n) ** 2 + (c * n) ** 2)

    def _attention_s(self, kv_tokens: float, work: float) -> float:
        if kv_tokens <= 0:
            return 0.0
        return math.sqrt(self._attn_floor2 + (kv_tokens * self._kv_s_per_token) ** 2
                         + (work * self._attn_s_per_work) ** 2)

    def _parts(self, t: BatchTerms) -> tuple[float, ...]:
        o, m = self.options, self.model
        n = padded_tokens(t.num_tokens, o.cuda_graph_max_tokens) if o.cuda_graph_padding else t.num_tokens
        layers = m.num_layers
        g0, g1, g2, g3 = self._gemms
        return (
            layers * (self._gemm_s(g0, n) + self._gemm_s(g1, n) + self._gemm_s(g2, n) + self._gemm_s(g3, n)),
            layers * self._attention_s(t.kv_decode, t.work_decode),
            layers * self._attention_s(t.kv_prefill, t.work_prefill),
            layers * (self._small_fixed_s + n * self._small_s_per_token),
            self._gemm_s(self._lm_head, t.logit_tokens),
            tp_comm_s(n, t.logit_tokens, layers, m.hidden, m.vocab, self.tp, self._alpha, self._beta),
            o.host_overhead_s + o.host_overhead_per_seq_s * t.num_seqs,
        )

    def components(self, batch: StepBatch) -> dict[str, float]:
        """Seconds of each part of the step (whole model, all layers); their sum is ``step_time``."""
        return dict(zip(COMPONENTS, self._parts(BatchTerms.of(batch))))

    def step_time_terms(self, t: BatchTerms) -> float:
        """Seconds for one forward, host overhead included (0 for an empty batch)."""
        if t.num_seqs == 0:
            return 0.0
        return sum(self._parts(t))

    def draft_time(self, drafter: str, num_requests: int, k: int, pool_entries: int = 0) -> float:
        """Drafting seconds on the critical path: host NGram pool or GPU SA kernel (``DraftCost``)."""
        return self.draft.time(drafter, num_requests, k, pool_entries)

    def describe(self) -> str:
        o = self.options
        where = f" ({self.source})" if self.source else ""
        return (
            f"roofline {self.model.name} on {self.gpu.name} TP{self.tp} {o.dtype}{where}: analytic, "
            f"eta_mem {o.eta_mem}, eta_comp {o.eta_comp}, eta_attn {o.eta_attn}, sqrt blend, "
            f"GEMM floor {o.gemm_floor_s * 1e6:g} us, host {o.host_overhead_s * 1e6:g} us/step"
        )
