"""Expected number of distinct routed experts a step's tokens touch, per MoE layer.

Model (stated, and what ``tests/test_models_moe.py`` checks against a brute-force router): each routed
token picks ``k`` distinct experts of ``E``; expert ``i`` is among a token's ``k`` with probability
``pi_i`` (so ``sum(pi) = k``), and tokens route independently. Then expert ``i`` is untouched by ``n``
tokens with probability ``(1 - pi_i)^n`` and

    D(n) = sum_i 1 - (1 - pi_i)^n.

- uniform router (the default): ``pi_i = k / E``, so ``D(n) = E (1 - (1 - k/E)^n)``. At batch 1 with
  K = 4 drafts, top-8 of 256: ``n = 5`` and ``D / E = 1 - (31/32)^5 = 0.147``.
- skewed popularity: expert ``i`` (by rank, from 1) carries a load share proportional to ``i^-s``
  (Zipf exponent ``s``, ``cost.expert_skew``);
- a measured histogram (``cost.expert_load``: tokens routed to each expert, e.g. from a profile's
  router counters): load share ``count_i / sum(count)``.

A load share ``l_i`` gives ``pi_i = k * l_i``; an expert whose share would make ``pi_i`` exceed 1 is
taken by every token and the surplus spread over the others in proportion to their shares.

``distinct_table`` tabulates D(n) for the compiled step price, which reads it with ``distinct_at``.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
from numba import njit

from specplan.errors import ConfigError

TABLE_TOKENS = 16384  # D(n) tabulated for n < this; larger steps sum over the experts


def inclusion_probabilities(num_experts: int, top_k: int, skew: float = 0.0,
                            load: Optional[Sequence[float]] = None) -> np.ndarray:
    """``pi_i``: the probability that one token routes to expert ``i`` (see the module docstring)."""
    if not 1 <= top_k <= num_experts:
        raise ConfigError(f"num_experts_per_tok: {top_k} must be between 1 and the {num_experts} experts")
    if load is not None:
        share = np.asarray(load, dtype=float)
        if share.shape != (num_experts,) or (share < 0).any() or share.sum() <= 0:
            raise ConfigError(f"cost.expert_load: give {num_experts} non-negative counts, one per expert "
                              f"(got {share.size})")
    elif skew < 0:
        raise ConfigError(f"cost.expert_skew: {skew} must be >= 0")
    else:
        share = np.arange(1, num_experts + 1, dtype=float) ** -skew
    share = share / share.sum()
    pi = np.zeros(num_experts)
    full = np.zeros(num_experts, dtype=bool)
    while True:  # cap at 1, spread the surplus over the uncapped experts; ends within num_experts rounds
        rest = top_k - full.sum()
        weights = np.where(full, 0.0, share)
        pi = np.where(full, 1.0, rest * weights / weights.sum())
        over = (pi > 1.0) & ~full
        if not over.any():
            return pi
        full |= over


def expected_distinct(pi: np.ndarray, tokens) -> np.ndarray:
    """D(n) for each ``n`` in ``tokens`` (array-like)."""
    n = np.asarray(tokens, dtype=float)[..., None]
    return (1.0 - (1.0 - pi) ** n).sum(axis=-1)


def distinct_table(pi: np.ndarray, size: int = TABLE_TOKENS) -> np.ndarray:
    """D(0), D(1), ..., D(size - 1)."""
    return expected_distinct(pi, np.arange(size))


@njit(cache=True)
def distinct_at(table: np.ndarray, pi: np.ndarray, n: float) -> float:
    """D(n): the table's entry for a tabulated ``n``, else the sum over the experts."""
    if n < table.shape[0]:
        return table[int(n)]
    total = 0.0
    for p in pi:
        total += 1.0 - (1.0 - p) ** n
    return total
