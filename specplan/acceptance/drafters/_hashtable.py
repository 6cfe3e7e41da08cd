"""Open-addressing hash table on numpy arrays, for the numba kernels of the drafters.

Keys are non-negative int64 (callers pack two int31 fields as ``a << 31 | b``); an empty slot holds
-1. Keys are never deleted: a caller that needs removal stores a sentinel value instead, which keeps
probing simple and is cheap because every key set here is bounded by the trace. The capacity is a
power of two and callers keep the load at or under one half.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_M1 = np.uint64(0xFF51AFD7ED558CCD)
_M2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)


@njit(cache=True, inline="always")
def _slot(key, mask):
    # murmur3 finaliser: packed keys differ mostly in high bits, so plain masking would cluster
    x = np.uint64(key)
    x ^= x >> _S33
    x *= _M1
    x ^= x >> _S33
    x *= _M2
    x ^= x >> _S33
    return np.int64(x & np.uint64(mask))


@njit(cache=True)
def ht_get(keys, vals, key):
    """Value stored under ``key``, or -1 when the key was never inserted."""
    mask = keys.shape[0] - 1
    i = _slot(key, mask)
    while True:
        k = keys[i]
        if k == key:
            return vals[i]
        if k == -1:
            return -1
        i = (i + 1) & mask


@njit(cache=True)
def ht_put(keys, vals, key, val):
    """Insert or overwrite; returns 1 when a new key took a slot, else 0 (for load accounting)."""
    mask = keys.shape[0] - 1
    i = _slot(key, mask)
    while True:
        k = keys[i]
        if k == key:
            vals[i] = val
            return 0
        if k == -1:
            keys[i] = key
            vals[i] = val
            return 1
        i = (i + 1) & mask


@njit(cache=True)
def ht_rehash(keys, vals, new_keys, new_vals):
    """Copy every entry into a larger (empty) table."""
    for i in range(keys.shape[0]):
        if keys[i] != -1:
            ht_put(new_keys, new_vals, keys[i], vals[i])


@njit(cache=True)
def table_capacity(n_keys):
    """Smallest power of two that keeps ``n_keys`` at or under half load."""
    cap = 16
    while cap < 2 * n_keys:
        cap *= 2
    return cap


def grown_table(keys: np.ndarray, vals: np.ndarray, n_keys: int) -> tuple[np.ndarray, np.ndarray]:
    """The same entries in a table sized for ``n_keys`` keys (returned unchanged when big enough)."""
    cap = table_capacity(n_keys)
    if cap <= keys.shape[0]:
        return keys, vals
    new_keys, new_vals = np.full(cap, -1, dtype=np.int64), np.full(cap, -1, dtype=vals.dtype)
    ht_rehash(keys, vals, new_keys, new_vals)
    return new_keys, new_vals
