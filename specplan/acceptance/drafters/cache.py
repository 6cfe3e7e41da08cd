"""Precompute cache: per-request tables keyed by a hash of the request's tokens and the drafter settings.

Tables are dicts of equal-length numpy arrays. Lookups go to memory first, then, when a cache
folder is set, to one ``.npz`` bundle per (request list, settings); what had to be computed is kept
in memory and written back as a bundle, atomically (a temporary file renamed into place).

The memory held is bounded when ``max_bytes`` is given: past it, the least recently used tables are
dropped (read again from a bundle or computed again when next asked for; the same tables either
way). ``DEFAULT_CACHE``, which every run without a cache of its own shares for the life of the
process, keeps at most ``DEFAULT_MAX_BYTES``: a process simulating one workload after another
(a notebook, a search over scenarios) would otherwise keep every workload's tables.
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from pathlib import Path
from typing import Callable, Optional, Sequence

import numpy as np

from specplan.atomic import atomic_write

Table = dict[str, np.ndarray]

# Bumped whenever a kernel's output changes, so stale on-disk tables are never read.
FORMAT_VERSION = "1"
# DEFAULT_CACHE's bound: Spec-Bench's tables take about 2.6 kB a request (16 bytes an output
# token), so about 100,000 requests' worth.
DEFAULT_MAX_BYTES = 256 << 20


def request_key(tag: str, req) -> str:
    """Content hash of one request under one drafter setting."""
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{FORMAT_VERSION}|{tag}|{req.prompt_len}|{req.output_len}|".encode())
    if req.max_new_tokens is not None:  # a stated generation limit changes NGram drafts
        h.update(f"max_new_tokens={req.max_new_tokens}|".encode())
    h.update(np.ascontiguousarray(req.prompt_ids, dtype=np.int32).tobytes())
    h.update(np.ascontiguousarray(req.output_ids, dtype=np.int32).tobytes())
    return h.hexdigest()


class PrecomputeCache:
    """In-memory table cache with an optional on-disk folder of ``.npz`` bundles; at most ``max_bytes``
    of tables in memory (least recently used dropped first), unbounded when None."""

    def __init__(self, cache_dir: Optional[str | os.PathLike] = None, max_bytes: Optional[int] = None) -> None:
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.max_bytes = max_bytes
        self._mem: OrderedDict[str, Table] = OrderedDict()  # least recently used first
        self._bytes = 0
        self.hits = 0
        self.misses = 0

    def tables(self, tag: str, requests: Sequence, compute: Callable[[object], Table]) -> list[Table]:
        """The table of every request, computing (and storing) only those not cached yet."""
        keys = [request_key(tag, r) for r in requests]
        missing = [i for i, k in enumerate(keys) if k not in self._mem]
        bundle = None
        if missing and self.cache_dir is not None:
            h = hashlib.blake2b("|".join(keys).encode(), digest_size=16).hexdigest()
            bundle = self.cache_dir / f"{h}.npz"
            if bundle.exists():
                for key, table in _read_bundle(bundle).items():
                    self._put(key, table)
                missing = [i for i in missing if keys[i] not in self._mem]
        self.hits += len(requests) - len(missing)
        self.misses += len(missing)
        for i in missing:
            self._put(keys[i], compute(requests[i]))
        out = [self._mem[k] for k in keys]
        if missing and bundle is not None:
            _write_bundle(bundle, dict(zip(keys, out)))
        for k in keys:
            self._mem.move_to_end(k)  # used now: the last to be dropped
        if self.max_bytes is not None:
            while self._bytes > self.max_bytes and self._mem:
                self._bytes -= _nbytes(self._mem.popitem(last=False)[1])
        return out

    def _put(self, key: str, table: Table) -> None:
        if key not in self._mem:
            self._bytes += _nbytes(table)
        self._mem[key] = table


def _nbytes(table: Table) -> int:
    return sum(a.nbytes for a in table.values())


def _read_bundle(path: Path) -> dict[str, Table]:
    with np.load(path, allow_pickle=False) as z:
        keys = [str(k) for k in z["keys"]]
        lengths = z["lengths"]
        fields = [f for f in z.files if f not in ("keys", "lengths")]
        cols = {f: np.split(z[f], np.cumsum(lengths)[:-1]) for f in fields}
    return {k: {f: cols[f][i] for f in fields} for i, k in enumerate(keys)}


def _write_bundle(path: Path, tables: dict[str, Table]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    keys = list(tables)
    fields = list(next(iter(tables.values())))
    arrays = {f: np.concatenate([tables[k][f] for k in keys]) for f in fields}
    arrays["keys"] = np.array(keys)
    arrays["lengths"] = np.array([len(tables[k][fields[0]]) for k in keys], dtype=np.int64)

    def write(tmp: Path) -> None:
        with open(tmp, "wb") as fh:
            np.savez(fh, **arrays)

    atomic_write(path, write)


DEFAULT_CACHE = PrecomputeCache(max_bytes=DEFAULT_MAX_BYTES)
