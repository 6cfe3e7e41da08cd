"""Paged KV-cache accounting: blocks of ``block_size`` tokens out of a fixed pool."""

from __future__ import annotations

import numpy as np
from numba import njit

from specplan.simulator.state import KV_USED


@njit(cache=True)
def blocks_for(tokens, block_size):
    """KV blocks needed to hold ``tokens`` positions (a count or an int64 array)."""
    return -(-tokens // block_size)


class KVBlockPool:
    """Blocks held per request and in use; the compiled step resizes them in place (``held`` and
    ``counters[KV_USED]``) and the run fails if the count ever leaves ``[0, num_blocks]``."""

    def __init__(self, num_blocks: int, block_size: int, state) -> None:
        self.num_blocks = int(num_blocks)
        self.block_size = int(block_size)
        self._state = state  # the RequestState: blocks per slot and the counters

    @property
    def held(self) -> np.ndarray:
        return self._state.kv_held

    @property
    def used(self) -> int:
        return int(self._state.counters[KV_USED])

    def check(self, ok: bool) -> None:
        """Raise when a step left the accounting outside the pool."""
        if not ok:
            raise AssertionError(f"KV accounting broke: {self.used} of {self.num_blocks} blocks")
