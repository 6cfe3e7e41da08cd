"""Prefix caching: vLLM's automatic prefix caching (``enable_prefix_caching``, on by default in V1)
and TensorRT-LLM's KV block reuse (``kv_cache_config.enable_block_reuse``).

A full KV block is identified by the hash of its tokens chained to its parent block's hash
(vLLM ``kv_cache_utils.hash_block_tokens``; TensorRT-LLM's radix tree of block keys). Each request's
full blocks over prompt + output get dense ids here, so the compiled scheduler
(``scheduler.schedule_step``) looks them up and registers them as the engines do:

- lookup: when a request is first scheduled with nothing computed (vLLM ``Scheduler.schedule``'s
  waiting loop, ``num_computed_tokens == 0`` -> ``KVCacheManager.get_computed_blocks``, reached only
  while the step has token budget and room; TensorRT-LLM ``addSequence`` in ``prepare_resources``),
  its leading cached blocks count as computed, whole blocks within ``num_tokens - 1`` (the last
  prompt token is always recomputed to sample from);
- registration: vLLM caches a request's full blocks when they are allocated, in the same
  ``schedule()`` call and before the forward (``allocate_slots`` -> ``cache_blocks``), so a request
  scheduled later in the same step already hits them (``SAME_STEP``); TensorRT-LLM stores blocks
  for reuse once computed, visible from the next step's scheduling (``AFTER_STEP``). At completion
  every full block of prompt and output is cached (a later turn's prompt holds the earlier turns).

Simplifications, stated in docs/semantics.md: cached blocks are never evicted (the engines evict
free cached blocks LRU under KV pressure), a hit still counts toward the request's own KV blocks
(the engines share them), and a block registered in the token pass stays cached if KV admission
then drops its row.
"""

from __future__ import annotations

import numpy as np
from numba import njit

OFF, SAME_STEP, AFTER_STEP = 0, 1, 2


def block_hashes(tokens: np.ndarray, block_size: int) -> list[int]:
    """Chained hashes of the full blocks of ``tokens``."""
    full = len(tokens) // block_size
    out, parent = [], None
    for block in tokens[:full * block_size].reshape(full, block_size).tolist():
        parent = hash((parent, tuple(block)))
        out.append(parent)
    return out


class PrefixCache:
    """Every request's full blocks (prompt + output) as dense ids (``off``/``ids``: request ``g``'s
    blocks are ``ids[off[g]:off[g + 1]]``), the ``cached`` flag of each id, and the hit counter."""

    def __init__(self, requests, block_size: int, mode: int = SAME_STEP) -> None:
        self.block_size = block_size
        self.mode = mode
        dense: dict[int, int] = {}
        # A trace's copies share their token arrays: each pair of arrays is hashed once.
        by_tokens: dict[tuple[int, int], np.ndarray] = {}
        per_request = []
        for r in requests:
            key = (id(r.prompt_ids), id(r.output_ids))
            blocks = by_tokens.get(key)
            if blocks is None:
                hashes = block_hashes(np.concatenate([r.prompt_ids, r.output_ids]), block_size)
                blocks = by_tokens[key] = np.array([dense.setdefault(h, len(dense)) for h in hashes], dtype=np.int64)
            per_request.append(blocks)
        self.off = np.zeros(len(requests) + 1, dtype=np.int64)
        self.off[1:] = np.cumsum([len(b) for b in per_request])
        self.ids = np.concatenate(per_request) if per_request else np.zeros(0, dtype=np.int64)
        self.cached = np.zeros(max(len(dense), 1), dtype=np.bool_)
        self.hits = np.zeros(1, dtype=np.int64)

    @property
    def hit_tokens(self) -> int:
        """Prompt tokens served from the cache so far."""
        return int(self.hits[0])

    def on_finish(self, rids: np.ndarray) -> None:
        """Every full block of a finished request's prompt and output becomes cached (``cache_finished``)."""
        for g in rids.tolist():
            cache_finished(g, self.off, self.ids, self.cached)


#: What a run without prefix caching passes to the compiled scheduler.
NO_CACHE = (np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.bool_),
            np.zeros(1, dtype=np.int64))


def arrays(cache) -> tuple:
    """``(mode, off, ids, cached, hits)`` of a ``PrefixCache`` (or of none) for ``schedule_step``."""
    if cache is None:
        return (OFF, *NO_CACHE)
    return cache.mode, cache.off, cache.ids, cache.cached, cache.hits


@njit(cache=True)
def cache_finished(g, off, ids, cached):
    """Request ``g`` finished: every full block of its prompt and output becomes cached (also called by
    a span serving closed-loop clients, ``closed_loop.on_finish``)."""
    for b in range(off[g], off[g + 1]):
        cached[ids[b]] = True


@njit(cache=True)
def lookup(g, num_tokens, block_size, off, ids, cached):
    """Tokens of request ``g``'s leading cached blocks, whole blocks within ``num_tokens - 1``."""
    lo = off[g]
    most = min(off[g + 1] - lo, (num_tokens - 1) // block_size)
    h = 0
    while h < most and cached[ids[lo + h]]:
        h += 1
    return h * block_size


@njit(cache=True)
def register(r, g, upto, block_size, off, ids, cached, done):
    """Cache slot ``r``'s (request ``g``) full blocks within its first ``upto`` tokens; ``done[r]``
    counts those already registered, so a step registers only new ones."""
    lo = off[g]
    last = min(upto // block_size, off[g + 1] - lo)
    for b in range(done[r], last):
        cached[ids[lo + b]] = True
    if last > done[r]:
        done[r] = last
