"""Paged KV-cache accounting: blocks of ``block_size`` tokens out of a fixed pool."""

from __future__ import annotations

import numpy as np


class KVBlockPool:
    """Counts blocks held per request; never exceeds capacity, never goes negative."""

    def __init__(self, num_blocks: int, block_size: int, num_requests: int) -> None:
        self.num_blocks = int(num_blocks)
        self.block_size = int(block_size)
        self.held = np.zeros(num_requests, dtype=np.int64)
        self.used = 0

    def blocks_for(self, tokens):
        """Blocks needed to hold ``tokens`` positions (vectorised)."""
        return -(-np.asarray(tokens) // self.block_size)

    @property
    def free(self) -> int:
        return self.num_blocks - self.used

    def resize(self, rids: np.ndarray, tokens: np.ndarray) -> None:
        """Set the blocks held by ``rids`` to what ``tokens`` positions need (grow or rewind)."""
        new = self.blocks_for(tokens)
        self.used += int((new - self.held[rids]).sum())
        self.held[rids] = new
        if self.used > self.num_blocks or self.used < 0:
            raise AssertionError(f"KV accounting broke: {self.used} of {self.num_blocks} blocks")

    def release(self, rids) -> None:
        self.used -= int(self.held[rids].sum())
        self.held[rids] = 0
