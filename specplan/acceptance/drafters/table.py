"""Precomputed per-position match tables and the vectorised oracle that answers from them.

For a drafter whose proposal depends only on the request's own history (SA without the global
pool, vLLM's n-gram proposer, prompt lookup), position ``committed = c`` (history length
``L = prompt_len + c``) needs three numbers, whatever K is:

- ``src``: where in the request's tokens the draft is copied from (-1: no match);
- ``avail``: how many tokens the drafter can copy from there (``L - src``, less for HF's EOS cut);
- ``run``: how many tokens from ``src`` agree with the truth, i.e. the longest common prefix of
  ``tokens[src:]`` and ``tokens[L:]``.

Then for any K, ``drafted = min(K, avail, engine limit)`` and ``accepted = min(run, drafted)``, one
gather per batch. ``ell`` (the match length) is kept for drafters that compare matches.
"""

from __future__ import annotations

from typing import Callable, Optional

import numpy as np
from numba import njit

from specplan.acceptance.drafters.cache import DEFAULT_CACHE, PrecomputeCache, Table
from specplan.acceptance.drafters.base import DrafterOracle, shared_offsets

FIELDS = ("ell", "src", "avail", "run")


@njit(cache=True)
def agreement_runs(tokens, l_lo, src):
    """``run[j]`` = common prefix of ``tokens[src[j]:]`` and ``tokens[l_lo + j:]`` (0 where src < 0).

    When the source of position L+1 is the source of L shifted by one, the run is the previous run
    minus one, so repeated spans cost O(1) per position instead of a fresh comparison.
    """
    m = src.shape[0]
    n = tokens.shape[0]
    run = np.zeros(m, dtype=np.int32)
    prev_src = -2
    prev_run = 0
    for j in range(m):
        s = src[j]
        if s < 0:
            prev_src = -2
            continue
        L = l_lo + j
        if s == prev_src + 1 and prev_run >= 1:
            r = prev_run - 1
        else:
            r = 0
            while L + r < n and tokens[s + r] == tokens[L + r]:
                r += 1
        run[j] = r
        prev_src = s
        prev_run = r
    return run


def match_table(tokens: np.ndarray, prompt_len: int, ell: np.ndarray, src: np.ndarray,
                avail: Optional[np.ndarray] = None) -> Table:
    """One request's table (int32 arrays indexed by committed count) from its match lengths and sources.

    Position j is the history ``tokens[:prompt_len + j]``. ``avail`` defaults to every token between
    the source and the end of the history.
    """
    L = prompt_len + np.arange(len(src), dtype=np.int32)
    if avail is None:
        avail = np.where(src >= 0, L - src, 0)
    run = agreement_runs(tokens, prompt_len, src)
    return {"ell": ell.astype(np.int32), "src": src.astype(np.int32), "avail": np.asarray(avail, dtype=np.int32),
            "run": run}


class TableOracle(DrafterOracle):
    """An acceptance oracle answered from precomputed match tables, one gather per batch.

    ``compute(request)`` (or ``compute(request, k)`` when the table depends on K) builds one
    request's table; tables go through the precompute cache. Subclasses state the engine's own
    limit on the draft length (``limit``).
    """

    precomputed = True
    #: True when the table depends on K (computed and cached per K).
    k_dependent = False

    def __init__(self, settings, requests, compute: Callable, cache: Optional[PrecomputeCache] = None) -> None:
        super().__init__(settings, requests)
        self._compute = compute
        self._cache = cache if cache is not None else DEFAULT_CACHE
        self._off = shared_offsets(np.array([r.output_len for r in self.distinct], dtype=np.int64), self.copy_of)
        self._by_k: dict[int, Table] = {}
        self._select(settings.max_draft_len)

    def _select(self, k: int) -> None:
        """Point the flat arrays at the table for K (built on first use)."""
        key = k if self.k_dependent else 0
        if key not in self._by_k:
            tag = self.settings.key() + (f"|k={k}" if self.k_dependent else "")
            compute = (lambda r: self._compute(r, k)) if self.k_dependent else self._compute
            tables = self._cache.tables(tag, self.distinct, compute)
            self._by_k[key] = {f: np.concatenate([t[f] for t in tables]) for f in FIELDS}
        flat = self._by_k[key]
        self._ell, self._src, self._avail, self._run = (flat[f] for f in FIELDS)
        self._k = k

    def _index(self, rid, committed):
        return self._off[rid] + committed

    def stacked_tables(self, ks) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """What ``draft`` reads, as arrays for compiled code: each request's offset into a table,
        the tables ``[K row, position, (src, avail, run)]`` with one row per K of ``ks`` (one row
        for every K when they do not depend on K; a position's three numbers side by side, read
        together), and the row of each K up to ``max(ks)``."""
        ks = sorted({int(k) for k in ks if k > 0}) or [self._k]
        keys = ks if self.k_dependent else [ks[0]]
        current = self._k
        flat = []
        for k in keys:
            self._select(k)
            flat.append((self._src, self._avail, self._run))
        self._select(current)
        row_of = np.zeros(max(ks) + 1, dtype=np.int64)
        for i, k in enumerate(keys):
            row_of[k] = i
        return self._off, np.stack([np.stack(f, axis=-1) for f in flat]), row_of

    def limit(self, rids: np.ndarray, committed: np.ndarray, k: int) -> np.ndarray:
        """The engine's cap on the draft length before the match is consulted (default: K)."""
        return np.full(np.shape(committed), k, dtype=np.int64)

    def draft(self, rids, committed, k):
        rids = np.asarray(rids, dtype=np.int64)
        committed = np.asarray(committed, dtype=np.int64)
        if k <= 0 or len(rids) == 0:
            zero = np.zeros(len(rids), dtype=np.int64)
            return zero, zero.copy()
        if self.k_dependent and k != self._k:
            self._select(k)
        olen = self.output_lens[rids]
        live = committed < olen
        idx = self._index(rids, np.minimum(committed, olen - 1))
        drafted = np.minimum(np.minimum(self.limit(rids, committed, k), self._avail[idx]), k)
        drafted = np.where(live & (self._src[idx] >= 0), np.maximum(drafted, 0), 0)
        accepted = np.minimum(self._run[idx], drafted)
        return drafted.astype(np.int64), accepted.astype(np.int64)

    def propose(self, rid: int, committed: int, k: int) -> np.ndarray:
        """The draft tokens for one request at one position (what ``draft`` counts)."""
        drafted, _ = self.draft(np.array([rid]), np.array([committed]), k)
        if drafted[0] == 0:
            return np.empty(0, dtype=np.int32)
        s = int(self._src[self._index(rid, committed)])
        return self._tokens[rid][s:s + int(drafted[0])]
