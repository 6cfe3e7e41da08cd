"""Capacity and micro-batch scheduling of one iteration, as a pure function over array state.

TensorRT-LLM charges every generation request ``1 + K`` tokens (the placeholder drafts) against
``max_num_tokens``, context and generation requests share that budget, and both the capacity
and the micro-batch scheduler stop at the first request that does not fit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ScheduleDecision:
    """Which active requests run this iteration and how many query tokens each computes."""

    rows: np.ndarray  # request ids, in schedule order
    query_tokens: np.ndarray  # tokens computed per row (placeholder 1 + K for generation rows)
    is_prefill: np.ndarray  # context-phase rows


def fit_token_budget(cost: np.ndarray, is_ctx: np.ndarray, budget: int, max_rows: int, chunked: bool) -> tuple[int, int]:
    """FCFS with break: how many leading rows fit fully, and the partial chunk of the next one.

    Returns ``(n_full, partial)``; ``partial > 0`` means row ``n_full`` is a context request that
    gets a chunk of that many tokens (chunked prefill only).
    """
    cum = np.cumsum(cost)
    n_full = min(int(np.searchsorted(cum, budget, side="right")), max_rows)
    partial = 0
    if chunked and n_full < len(cost) and n_full < max_rows and is_ctx[n_full]:
        partial = int(budget - (cum[n_full - 1] if n_full else 0))
    return n_full, max(partial, 0)
