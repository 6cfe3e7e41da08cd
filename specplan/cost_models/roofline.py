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

Models from their config.json (``layer_costs``): an MoE layer replaces the dense MLP by the router,
shared experts and the routed experts' grouped GEMMs over the D(n) distinct experts the step's tokens
touch (``moe``), with EP all-to-alls in place of its all-reduce; windowed layers cap the KV a row
reads; MLA reads its latent; each part's weights are priced in their own format.
"""

from __future__ import annotations

import math

from numba import njit

from specplan.cost_models.base import StepBatch
from specplan.cost_models.draft import DraftCost
from specplan.cost_models.hardware import GPUSpec
from specplan.cost_models.models import ModelSpec
from specplan.config import CostConfig
from specplan.cost_models.layer_costs import (
    A2A_S_PER_ASSIGNMENT, ALPHA, ATTN_FLOOR2, ATTN_S_PER_WORK, ATTN_S_PER_WORK_PREFILL, BETA, DENSE_LAYERS, EP,
    FLOOR2, HIDDEN, HOST_PER_SEQ_S, HOST_S, KV_S_PER_TOKEN, LAYERS, LM_HEAD, MAX_CAPTURED, MOE_LAYERS, NUM_EXPERTS,
    PADDING, ROUTED_DOWN, ROUTED_GU, ROUTER, SHARED_DOWN, SHARED_GU, SMALL_FIXED_S, SMALL_S_PER_TOKEN, TABLE,
    TABLE_LEN, TOP_K, TP, TWO, VOCAB, WIN_LAYERS, WINDOW, coefficients,
)
from specplan.cost_models.moe import distinct_at
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
        # Every constant of the formula in one array, for ``roofline_parts`` (compiled, so the
        # executor's compiled steps price a batch without returning to Python).
        self.coefficients = coefficients(gpu, model, tp, options)

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
def _moe_mlp_s(c, n, routed):
    """One MoE layer's MLP seconds: router, shared experts, and the routed experts' grouped GEMMs over
    ``routed`` tokens (unpadded: CUDA-graph padding repeats one token) touching D(routed) experts."""
    floor2, two = c[FLOOR2], c[TWO]
    assignments = routed * c[TOP_K]
    length = int(c[TABLE_LEN])
    distinct = distinct_at(c[TABLE:TABLE + length], c[TABLE + length:TABLE + length + int(c[NUM_EXPERTS])], routed)
    total = _blend(floor2, c[ROUTER] + c[ROUTER + 1] * n, c[ROUTER + 2] * n, two)
    if c[SHARED_GU] > 0:
        for g in (SHARED_GU, SHARED_DOWN):
            total += _blend(floor2, c[g] + c[g + 1] * n, c[g + 2] * n, two)
    for g in (ROUTED_GU, ROUTED_DOWN):
        total += _blend(floor2, c[g] * distinct + c[g + 1] * assignments, c[g + 2] * assignments, two)
    return total


@njit(cache=True)
def _windowed(c, num_seqs, num_tokens, logit_tokens, kv, work, prefill_phase, has_prefill):
    """KV tokens read and score positions of one phase with keys capped at the window W, from the step's
    sums: ``min(kv, rows * W + tokens)`` and ``min(work, W * tokens)``, exact when every row's context
    is past the window or every row's within it. A step with prefill is taken to hold one prefill row
    (its logit positions are then the decode tokens plus one)."""
    w = c[WINDOW]
    n_dec = logit_tokens - 1 if has_prefill else num_tokens
    if prefill_phase:
        rows, tokens = 1, num_tokens - n_dec
    else:
        rows, tokens = num_seqs - (1 if has_prefill else 0), n_dec
    return min(kv, rows * w + tokens), min(work, w * tokens)


@njit(cache=True)
def roofline_parts(c, num_seqs, num_tokens, logit_tokens, kv_decode, kv_prefill, work_decode, work_prefill):
    """Seconds of each of ``COMPONENTS`` for one step, from ``RooflineCostModel.coefficients``."""
    floor2, two = c[FLOOR2], c[TWO]
    layers = int(c[LAYERS])
    n = padded_tokens(num_tokens, int(c[MAX_CAPTURED])) if c[PADDING] else num_tokens
    gemm = 0.0
    for g in range(0, 6, 3):
        gemm += _blend(floor2, c[g] + c[g + 1] * n, c[g + 2] * n, two)
    attn_gemm = gemm
    for g in range(6, LM_HEAD, 3):
        gemm += _blend(floor2, c[g] + c[g + 1] * n, c[g + 2] * n, two)
    gemm *= c[DENSE_LAYERS]
    comm = tp_comm_s(n, logit_tokens, layers, int(c[HIDDEN]), int(c[VOCAB]), int(c[TP]), c[ALPHA], c[BETA])
    moe_layers = c[MOE_LAYERS]
    if moe_layers > 0:
        gemm += moe_layers * (attn_gemm + _moe_mlp_s(c, n, float(num_tokens)))
        if c[EP] > 1:  # dispatch + combine all-to-alls replace the MLP's all-reduce
            a2a = 2.0 * (c[ALPHA] + num_tokens * c[TOP_K] * c[A2A_S_PER_ASSIGNMENT])
            comm += moe_layers * (a2a - (c[ALPHA] + n * c[HIDDEN] * ACT_BYTES / c[BETA]))
    win_layers = c[WIN_LAYERS]
    full_layers = layers - win_layers
    attention = [0.0, 0.0]
    phases = ((kv_decode, work_decode, c[ATTN_S_PER_WORK]), (kv_prefill, work_prefill, c[ATTN_S_PER_WORK_PREFILL]))
    for i, (kv, work, per_work) in enumerate(phases):
        if kv > 0:
            attention[i] = full_layers * _blend(c[ATTN_FLOOR2], kv * c[KV_S_PER_TOKEN], work * per_work, two)
            if win_layers > 0:
                kv_w, work_w = _windowed(c, num_seqs, num_tokens, logit_tokens, kv, work, i == 1, kv_prefill > 0)
                attention[i] += win_layers * _blend(c[ATTN_FLOOR2], kv_w * c[KV_S_PER_TOKEN], work_w * per_work, two)
    return (
        gemm,
        attention[0],
        attention[1],
        layers * (c[SMALL_FIXED_S] + n * c[SMALL_S_PER_TOKEN]),
        _blend(floor2, c[LM_HEAD] + c[LM_HEAD + 1] * logit_tokens, c[LM_HEAD + 2] * logit_tokens, two),
        comm,
        c[HOST_S] + c[HOST_PER_SEQ_S] * num_seqs,
    )


@njit(cache=True)
def roofline_step_time(c, num_seqs, num_tokens, logit_tokens, kv_decode, kv_prefill, work_decode, work_prefill):
    """The step's seconds: its ``roofline_parts`` summed in order."""
    total = 0.0
    for part in roofline_parts(c, num_seqs, num_tokens, logit_tokens, kv_decode, kv_prefill, work_decode,
                               work_prefill):
        total += part
    return total
