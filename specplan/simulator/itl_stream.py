"""The inter-token latency figures of an emission log whose chunks went to disk
(``specplan.simulator.spill``), equal to the bit to what ``metrics._pcts`` gives for the whole log's
gaps in one array, with one chunk's gaps in memory at a time.

Each pass reads the chunks in order and takes their gaps as ``metrics.inter_token_latencies`` does,
each request's last emission time carried from chunk to chunk (a gap may span a chunk boundary).

- The count and the **mean**: numpy's mean is its pairwise sum (``np.add.reduce``: blocks of 128
  summed eight-way, halves split at multiples of eight) over the count. Given the count, the sum's
  tree is known, so each node that lies inside one chunk is summed by numpy itself, and only the
  few nodes across a boundary are split here (:func:`_tree`).
- The **percentiles**: np.percentile's linear method interpolates two order statistics per
  percentile (``metrics._neighbours``). Each is found by counting: a gap's float64 bits, read as an
  integer, order non-negative gaps as their values do, so the gaps are counted into 65,536 buckets
  of their top bits, the bucket holding the rank is kept, and the next pass either gathers that
  bucket's gaps (when few) and partitions them, or counts it again by its next 16 bits (ties of
  equal steps can fill a bucket; at the last bits a bucket is a single value).
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
from numba import njit

from specplan import memory
from specplan.simulator.emissions import EmissionLog
from specplan.simulator.metrics import PERCENTILES, _lerp, _neighbours, _row_order_gaps

_DIGIT = 16  # bits a counting pass resolves
_GATHER_AT_MOST = 1 << 20  # gaps a bucket may hold to be gathered rather than counted again
_LEAF = 128  # numpy's pairwise-summation block (PW_BLOCKSIZE)
_TOP = np.iinfo(np.int64).max


def itl_figures(log: EmissionLog) -> dict:
    """``p50``, ``p90``, ``p99`` and ``mean`` of the log's inter-token gaps (None when it has none)."""
    counts = np.zeros((1, 1 << _DIGIT), dtype=np.int64)
    below, fits = np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64)
    n = 0
    shift0 = 63 - _DIGIT
    for gaps in _chunk_gaps(log):
        n += len(gaps)
        _sift(gaps, np.zeros(1, dtype=np.int64), np.full(1, _TOP), np.full(1, shift0), np.ones(1, dtype=np.int64),
              below, counts, np.empty((1, 0)), fits)
    if n == 0:
        return {f"p{p}": None for p in PERCENTILES} | {"mean": None}
    ranks = np.unique(_neighbours(n))
    targets = _Targets(ranks, counts[0], shift0)
    total = None
    while total is None or targets.open():
        pieces = _chunk_gaps(log)
        if total is None:
            pieces = _summed(pieces, n, out := [])
        targets.pass_over(pieces)
        if total is None:
            total = out[0]
    value = dict(zip(ranks.tolist(), targets.values))
    stats = [(value[a], value[b]) for a, b in _neighbours(n).tolist()]
    return {f"p{p}": _lerp(n, p / 100, a, b) for p, (a, b) in zip(PERCENTILES, stats)} | {"mean": float(total / n)}


def _chunk_gaps(log: EmissionLog) -> Iterator[np.ndarray]:
    # Each chunk's gaps, in one buffer the next chunk reuses; each request's last time carried over.
    last, buffer = np.full(1, np.nan), memory.empty(0)
    for rids, times in log.chunks(("request", "time")):
        if not len(times):
            continue
        top = int(rids.max()) + 1
        if top > len(last):
            last = np.concatenate([last, np.full(max(top, 2 * len(last)) - len(last), np.nan)])
        if len(buffer) < len(times):
            buffer = memory.empty(len(times))
        yield buffer[:_row_order_gaps(rids, times, last, buffer)]


class _Targets:
    """The order statistics sought (``ranks``), each narrowed to a range of gap bits, counted below."""

    def __init__(self, ranks: np.ndarray, first_counts: np.ndarray, shift: int) -> None:
        m = len(ranks)
        self.ranks = ranks
        self.lo, self.hi, self.shift = np.zeros(m, dtype=np.int64), np.full(m, _TOP), np.full(m, shift)
        self.mode = np.ones(m, dtype=np.int64)  # 1 counting, 2 gathering, 0 found
        self.below = np.zeros(m, dtype=np.int64)
        self.values = [0.0] * m
        for j in range(m):
            self._narrow(j, first_counts)

    def open(self) -> bool:
        return bool(self.mode.any())

    def _narrow(self, j: int, counts: np.ndarray) -> None:
        # The bucket of ``counts`` holding rank j: found when a single value, else gathered or counted next.
        within = int(self.ranks[j] - self.below[j])
        cum = np.cumsum(counts)
        b = int(np.searchsorted(cum, within, side="right"))
        self.lo[j] += b << int(self.shift[j])
        self.hi[j] = self.lo[j] + (1 << int(self.shift[j]))
        if self.shift[j] == 0:
            self.mode[j] = 0
            self.values[j] = float(np.int64(self.lo[j]).view(np.float64))
        elif counts[b] <= _GATHER_AT_MOST:
            self.mode[j] = 2
        else:
            self.shift[j] = max(int(self.shift[j]) - _DIGIT, 0)

    def pass_over(self, pieces: Iterator[np.ndarray]) -> None:
        """One pass: each open target's range counted or gathered, then narrowed or found."""
        m = len(self.ranks)
        counts = np.zeros((m, 1 << _DIGIT), dtype=np.int64)
        cand = memory.empty((m, _GATHER_AT_MOST if (self.mode == 2).any() else 0))
        fits, self.below[:] = np.zeros(m, dtype=np.int64), 0
        for gaps in pieces:
            _sift(gaps, self.lo, self.hi, self.shift, self.mode, self.below, counts, cand, fits)
        for j in range(m):
            if self.mode[j] == 1:
                self._narrow(j, counts[j])
            elif self.mode[j] == 2:
                within = int(self.ranks[j] - self.below[j])
                self.values[j] = float(np.partition(cand[j, :fits[j]], within)[within])
                self.mode[j] = 0


@njit(cache=True)
def _sift(gaps, lo, hi, shift, mode, below, counts, cand, fits):
    # Per target j: gaps whose bits lie below lo[j] counted into below[j]; those in [lo[j], hi[j])
    # counted by their bits' next digit (mode 1) or gathered into cand[j] (mode 2).
    bits = gaps.view(np.int64)
    for i in range(len(bits)):
        b = bits[i]
        for j in range(len(lo)):
            if mode[j] == 0:
                continue
            if b < lo[j]:
                below[j] += 1
            elif b < hi[j]:
                if mode[j] == 1:
                    counts[j, (b - lo[j]) >> shift[j]] += 1
                else:
                    cand[j, fits[j]] = gaps[i]
                    fits[j] += 1


def _summed(pieces: Iterator[np.ndarray], n: int, out: list) -> Iterator[np.ndarray]:
    """``pieces`` passed through, their pairwise sum (``np.add.reduce`` of all ``n`` together)
    appended to ``out`` once the last has passed."""
    held = _Held()
    tree = _tree(0, n, held)
    for gaps in pieces:
        held.start += len(held.values)
        held.values = gaps
        if not out:
            try:
                next(tree)  # sums what lies in this piece, then waits for the next
            except StopIteration as done:
                out.append(done.value)
        yield gaps


class _Held:
    """The piece of the gaps in memory: ``values`` from index ``start`` of the whole sequence."""

    def __init__(self) -> None:
        self.start, self.values = 0, np.empty(0)


def _tree(s: int, e: int, held: _Held):
    # numpy's pairwise sum of gaps[s:e] (a generator that yields when it needs the next piece and
    # returns the sum): a node inside the piece is numpy's own reduce; one across pieces splits.
    while s >= held.start + len(held.values):
        yield
    lo = held.start
    if e <= lo + len(held.values):
        return np.add.reduce(held.values[s - lo:e - lo])
    if e - s <= _LEAF:  # a block across pieces: its values together
        parts = []
        while True:
            lo, hi = held.start, held.start + len(held.values)
            parts.append(held.values[max(s, lo) - lo:min(e, hi) - lo].copy())
            if e <= hi:
                return np.add.reduce(np.concatenate(parts))
            yield
    half = (e - s) // 2
    half -= half % 8
    left = yield from _tree(s, s + half, held)
    right = yield from _tree(s + half, e, held)
    return left + right
