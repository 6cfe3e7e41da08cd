"""Open-addressing hash table on numpy arrays, for the numba kernels of the drafters.

Keys are non-negative int64 (callers pack two int31 fields as ``a << 31 | b``); an empty slot holds
-1. ``ht_delete`` removes a key by backward shifting (no tombstones), for a caller whose key set
must stay bounded by what it holds (the suffix tree's global tree under eviction); others store a
sentinel value instead. The capacity is a power of two and callers keep the load at or under one
half.
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


@njit(cache=True, inline="always")
def ht_home(key, mask):
    """Home slot of ``key`` in a table of ``mask + 1`` slots, for a caller that probes its own table
    layout (linear probing from here, as the functions below do)."""
    return _slot(key, mask)


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
def ht_delete(keys, vals, key):
    """Remove ``key`` (returns 1, or 0 when absent), shifting later entries of its probe run back so
    that every remaining key stays reachable from its home slot without a gap."""
    mask = keys.shape[0] - 1
    i = _slot(key, mask)
    while keys[i] != key:
        if keys[i] == -1:
            return 0
        i = (i + 1) & mask
    j = i
    while True:
        j = (j + 1) & mask
        k = keys[j]
        if k == -1:
            break
        home = _slot(k, mask)
        # k may fill the hole at i only if its home slot is not cyclically within (i, j]
        if (i < j and i < home <= j) or (i > j and (home > i or home <= j)):
            continue
        keys[i] = k
        vals[i] = vals[j]
        i = j
    keys[i] = -1
    vals[i] = -1
    return 1


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


@njit(cache=True)
def grown_table(keys, vals, n_keys):
    """The same entries in a table sized for ``n_keys`` keys (returned unchanged when big enough);
    compiled, so kernels that own their tables grow them as Python callers do."""
    cap = table_capacity(n_keys)
    if cap <= keys.shape[0]:
        return keys, vals
    new_keys, new_vals = np.full(cap, -1, dtype=np.int64), np.full(cap, -1, dtype=vals.dtype)
    ht_rehash(keys, vals, new_keys, new_vals)
    return new_keys, new_vals
