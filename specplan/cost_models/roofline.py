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

import numpy as np
from numba import njit

from specplan.cost_models.base import StepBatch
from specplan.cost_models.draft import DraftCost
from specplan.cost_models.hardware import GPUSpec
from specplan.cost_models.models import ModelSpec
from specplan.config import CostConfig
from specplan.cost_models.terms import ACT_BYTES, BatchTerms, TermsCostModel, padded_tokens, tp_comm_s


COMPONENTS = ("gemm", "attention_decode", "attention_prefill", "small_kernels", "lm_head", "tp_comm", "host")

# Positions in ``RooflineCostModel.coefficients``, which the compiled formula reads: the four GEMMs'
# (t_mem fixed, t_mem per token, t_comp per token) from 0, the LM head's three from 12, then scalars.
_LM_HEAD = 12
(_KV_S_PER_TOKEN, _ATTN_S_PER_WORK, _SMALL_FIXED_S, _SMALL_S_PER_TOKEN, _ALPHA, _BETA, _FLOOR2, _ATTN_FLOOR2,
 _LAYERS, _HIDDEN, _VOCAB, _TP, _PADDING, _MAX_CAPTURED, _HOST_S, _HOST_PER_SEQ_S, _TWO) = range(15, 32)


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
        gemm_coeffs = [
            (p * weight_bytes / mem_rate, io * ACT_BYTES / mem_rate, 2.0 * p / comp_rate) for p, io in gemms
        ]
        lm_params = h * shard.vocab
        lm_head = (lm_params * weight_bytes / mem_rate, (h + shard.vocab) * ACT_BYTES / mem_rate,
                         2.0 * lm_params / comp_rate)
        kv_bytes_per_token = 2 * shard.kv_heads * hd * weight_bytes  # K and V, one layer
        kv_s_per_token = kv_bytes_per_token / (o.eta_attn * gpu.hbm_bw)
        attn_s_per_work = 4.0 * shard.q_heads * hd / (o.eta_attn_comp * gpu.bf16_flops)
        # Small kernels: read+write the residual stream twice (norms), read gate/up and write the product.
        small_fixed_s = o.small_kernels_per_layer * o.small_kernel_s
        small_s_per_token = (4 * h + 3 * shard.intermediate) * ACT_BYTES / mem_rate
        alpha = o.allreduce_alpha_s if o.allreduce_alpha_s is not None else gpu.allreduce_alpha_s
        beta = o.allreduce_beta_Bps if o.allreduce_beta_Bps is not None else gpu.allreduce_beta_Bps
        # Every constant of the formula in one array, for ``roofline_parts`` (compiled, so the
        # executor's compiled steps price a batch without returning to Python).
        self.coefficients = np.array([  # in the order of the positions above
            *(x for g in gemm_coeffs for x in g), *lm_head, kv_s_per_token, attn_s_per_work,
            small_fixed_s, small_s_per_token, alpha, beta, o.gemm_floor_s ** 2, o.attn_floor_s ** 2,
            model.num_layers, model.hidden, model.vocab, tp, float(o.cuda_graph_padding), o.cuda_graph_max_tokens,
            o.host_overhead_s, o.host_overhead_per_seq_s, 2.0,
        ])

    def _parts(self, t: BatchTerms) -> tuple[float, ...]:
        return roofline_parts(self.coefficients, t.num_seqs, t.num_tokens, t.logit_tokens, t.kv_decode,
                              t.kv_prefill, t.work_decode, t.work_prefill)

    def components(self, batch: StepBatch) -> dict[str, float]:
        """Seconds of each part of the step (whole model, all layers); their sum is ``step_time``."""
        return dict(zip(COMPONENTS, self._parts(BatchTerms.of(batch))))

    def step_time_terms(self, t: BatchTerms) -> float:
        """Seconds for one forward, host overhead included (0 for an empty batch)."""
        if t.num_seqs == 0:
            return 0.0
        return roofline_step_time(self.coefficients, t.num_seqs, t.num_tokens, t.logit_tokens, t.kv_decode,
                                  t.kv_prefill, t.work_decode, t.work_prefill)

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


@njit(cache=True)
def _blend(floor2, a, b, two):
    # Squares through libm's pow (a run-time exponent keeps the compiler from turning it into x * x),
    # as CPython's ``**`` computes them: the compiled and the Python price agree to the bit.
    return math.sqrt(floor2 + a ** two + b ** two)


@njit(cache=True)
def roofline_parts(c, num_seqs, num_tokens, logit_tokens, kv_decode, kv_prefill, work_decode, work_prefill):
    """Seconds of each of ``COMPONENTS`` for one step, from ``RooflineCostModel.coefficients``."""
    floor2, two = c[_FLOOR2], c[_TWO]
    layers = int(c[_LAYERS])
    n = padded_tokens(num_tokens, int(c[_MAX_CAPTURED])) if c[_PADDING] else num_tokens
    gemm = 0.0
    for g in range(0, _LM_HEAD, 3):
        gemm += _blend(floor2, c[g] + c[g + 1] * n, c[g + 2] * n, two)
    attention = [0.0, 0.0]
    for i, (kv, work) in enumerate(((kv_decode, work_decode), (kv_prefill, work_prefill))):
        if kv > 0:
            attention[i] = _blend(c[_ATTN_FLOOR2], kv * c[_KV_S_PER_TOKEN], work * c[_ATTN_S_PER_WORK], two)
    return (
        layers * gemm,
        layers * attention[0],
        layers * attention[1],
        layers * (c[_SMALL_FIXED_S] + n * c[_SMALL_S_PER_TOKEN]),
        _blend(floor2, c[_LM_HEAD] + c[_LM_HEAD + 1] * logit_tokens, c[_LM_HEAD + 2] * logit_tokens, two),
        tp_comm_s(n, logit_tokens, layers, int(c[_HIDDEN]), int(c[_VOCAB]), int(c[_TP]), c[_ALPHA], c[_BETA]),
        c[_HOST_S] + c[_HOST_PER_SEQ_S] * num_seqs,
    )


@njit(cache=True)
def roofline_step_time(c, num_seqs, num_tokens, logit_tokens, kv_decode, kv_prefill, work_decode, work_prefill):
    """The step's seconds: its ``roofline_parts`` summed in order."""
    total = 0.0
    for part in roofline_parts(c, num_seqs, num_tokens, logit_tokens, kv_decode, kv_prefill, work_decode,
                               work_prefill):
        total += part
    return total
