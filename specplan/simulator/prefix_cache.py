"""vLLM's automatic prefix caching (``enable_prefix_caching``, on by default in V1).

A full KV block is identified by the hash of its tokens chained to its parent block's hash
(``kv_cache_utils.hash_block_tokens``). When a request is admitted, its leading prompt blocks whose
hashes are cached count as computed (``KVCacheManager.get_computed_blocks``), at most
``prompt_len - 1`` tokens, since the last prompt token is always recomputed to sample from. Blocks
enter the cache once computed: prompt blocks as the prefill passes them, and at completion every
full block of prompt and output (a later turn's prompt holds the earlier turns).

Simplifications, stated in docs/semantics.md: cached blocks are never evicted (vLLM evicts free
cached blocks LRU under KV pressure), a hit still counts toward the request's own KV blocks
(vLLM shares them), and a preempted request recomputes from scratch.
"""

from __future__ import annotations

import numpy as np


def block_hashes(tokens: np.ndarray, block_size: int) -> list[int]:
    """Chained hashes of the full blocks of ``tokens``."""
    out, parent = [], None
    for start in range(0, len(tokens) - block_size + 1, block_size):
        parent = hash((parent, tuple(tokens[start:start + block_size].tolist())))
        out.append(parent)
    return out


class PrefixCache:
    """The set of cached block hashes and each request's prompt hashes."""

    def __init__(self, requests, block_size: int) -> None:
        self.block_size = block_size
        self._requests = requests
        self._prompt = [block_hashes(r.prompt_ids, block_size) for r in requests]
        self._cached: set[int] = set()
        self.hit_tokens = 0

    def admit(self, slots: np.ndarray, rids: np.ndarray, st) -> None:
        """Requests joining the active set skip their cached prompt prefix (``slots`` index the
        executor's state ``st``, ``rids`` the requests)."""
        for slot, rid in zip(slots.tolist(), rids.tolist()):
            if st.computed[slot] or st.generated[slot]:
                continue
            hits = 0
            for h in self._prompt[rid]:
                if h not in self._cached:
                    break
                hits += 1
            tokens = min(hits * self.block_size, int(st.plen[slot]) - 1)
            st.computed[slot] = max(tokens, 0)
            self.hit_tokens += max(tokens, 0)

    def on_computed(self, slots: np.ndarray, rids: np.ndarray, st) -> None:
        """Prompt blocks the prefill has passed become cached."""
        for slot, rid in zip(slots.tolist(), rids.tolist()):
            done = min(int(st.computed[slot]), int(st.plen[slot])) // self.block_size
            self._cached.update(self._prompt[rid][:done])

    def on_finish(self, rids: np.ndarray) -> None:
        """Every full block of a finished request's prompt and output becomes cached."""
        for rid in rids.tolist():
            r = self._requests[rid]
            self._cached.update(block_hashes(np.concatenate([r.prompt_ids, r.output_ids]), self.block_size))
