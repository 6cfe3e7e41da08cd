"""Step-level terms shared by the analytic and the calibrated model.

- ``BatchTerms``: what a step's cost depends on, reduced from the per-row arrays in a few numpy ops.
- ``padded_tokens``: CUDA-graph padding of the token count to a captured size (vLLM: 1, 2, 4, then
  multiples of 8 up to the largest captured size; larger steps run eagerly, unpadded).
- ``tp_comm_s``: tensor-parallel communication, two all-reduces per layer plus one for the
  vocab-parallel embedding and one logits all-gather, each ``alpha + bytes / beta`` (COSTS.md §5).

Attention work of a row with ``q`` query positions over ``ctx`` resident tokens is
``q * (ctx + (q + 1) / 2)`` score positions: each new position attends to the context and, causally,
to the new positions before it. A decode row (q = 1) gives ``ctx + 1``; a prefill chunk gives
``chunk * (ctx + chunk / 2)`` to first order. KV traffic of a row is ``ctx + q`` tokens (read the
context, write the new positions).
"""

from __future__ import annotations

from abc import abstractmethod
from typing import NamedTuple

import numpy as np
from numba import njit

from specplan.cost_models.base import CostModel, StepBatch

ACT_BYTES = 2  # activations, all-reduce payloads and gathered logits travel in 16-bit


class BatchTerms(NamedTuple):
    """Reductions of one ``StepBatch``. ``decode`` rows are the non-prefill ones (generation/verify).

    The compiled step (``specplan.simulator.step.price_step``) computes the same fields exactly
    (integer sums), so every built-in model prices a step without per-row arrays."""

    num_seqs: int
    num_tokens: int
    logit_tokens: int
    kv_decode: float
    kv_prefill: float
    work_decode: float
    work_prefill: float
    max_context: int
    context_tokens: int  # resident KV summed over the rows
    verify_rows: int  # generation rows computing more than one position (drafts verified)

    @classmethod
    def of(cls, batch: StepBatch) -> "BatchTerms":
        """Reduce ``batch``. Logits are computed for every generation position (verification needs them)
        and for one position per prefill row."""
        q = batch.query_tokens.astype(np.int64, copy=False)
        c = batch.context_tokens.astype(np.int64, copy=False)
        pre = batch.is_prefill
        max_ctx = int(c.max()) if c.size else 0
        c_sum, verify = int(c.sum()), int(((q > 1) & ~pre).sum())
        if not pre.any():
            n, kv, work = _sums(q, c)
            return cls(q.size, n, n, kv, 0.0, work, 0.0, max_ctx, c_sum, verify)
        dec = ~pre
        n_dec, kv_dec, work_dec = _sums(q[dec], c[dec])
        n_pre, kv_pre, work_pre = _sums(q[pre], c[pre])
        n_pre_rows = int(pre.sum())
        return cls(q.size, n_dec + n_pre, n_dec + n_pre_rows, kv_dec, kv_pre, work_dec, work_pre, max_ctx, c_sum, verify)


class TermsCostModel(CostModel):
    """A cost model that prices a step from its ``BatchTerms`` alone (every built-in model)."""

    def step_time(self, batch: StepBatch) -> float:
        return self.step_time_terms(BatchTerms.of(batch))

    @abstractmethod
    def step_time_terms(self, t: BatchTerms) -> float:
        """Seconds for one forward with terms ``t``, per-step host overhead included (0 for no rows)."""


def _sums(q: np.ndarray, c: np.ndarray) -> tuple[int, float, float]:
    """Tokens, KV tokens ``sum(c + q)`` and work ``sum(q * (c + (q + 1) / 2))`` of some rows."""
    n = int(q.sum())
    return n, float(c.sum()) + n, float(q.dot(c)) + 0.5 * (float(q.dot(q)) + n)


@njit(cache=True)
def padded_tokens(n: int, max_captured: int) -> int:
    """Token count after CUDA-graph padding to vLLM's captured sizes 1, 2, 4, 8, 16, ..., ``max_captured``."""
    if n > max_captured or n <= 2:
        return n
    if n <= 4:
        return 4
    return -(-n // 8) * 8


@njit(cache=True)
def tp_comm_s(num_tokens: int, logit_tokens: int, num_layers: int, hidden: int, vocab: int, tp: int,
              alpha_s: float, beta_Bps: float) -> float:
    """Seconds of TP communication in one step (0 at TP 1)."""
    if tp <= 1:
        return 0.0
    n_allreduce = 2 * num_layers + 1
    allreduce = n_allreduce * (alpha_s + num_tokens * hidden * ACT_BYTES / beta_Bps)
    gather = alpha_s + logit_tokens * vocab * ACT_BYTES / beta_Bps
    return allreduce + gather
