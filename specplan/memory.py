"""How a run holds its memory: bulk arrays on ordinary pages, and the collector kept off the workload.

**Pages.** numpy advises every array of 4 MiB and more into transparent huge pages
(``MADV_HUGEPAGE``). Under the common ``defrag = madvise`` setting a fault in such a region may stall
on reclaim and compaction to find 2 MiB of free memory (numpy/numpy#31590). What specplan writes
in bulk (the logs, the gaps between tokens, the synthetic token block) is written once and read in
order, so huge pages buy it no TLB reach worth that; ``empty`` and ``small_pages`` allocate it
without the advice. Arrays read at random (the request state, the drafters' tables) keep numpy's.
``NUMPY_MADVISE_HUGEPAGE=1`` in the environment (numpy's own switch) keeps huge pages for all.

**Collector.** A run's loop allocates as it goes, and each of the collector's passes would walk the
workload's hundreds of thousands of request objects, which hold no cycles. ``collector_spared``
keeps what is alive when the loop starts out of those passes until it ends; ``collector_paused``
keeps the collector off while such objects are made. A command or a sweep's worker may start with the
collector off (``startup.pause_collector``): its first loop turns it back on, then freezes.

**Cycles.** A finished run must be freed by reference counting alone. What ``collector_spared``
froze goes to the oldest generation when it thaws, and each freeze resets the young generations'
counts: in a process of many small runs (a sweep's worker) a full collection may not come for
thousands of runs, and a run left in a reference cycle would keep its logs until then (a worker
grew 0.7 MB a run). ``break_self_cycle`` undoes SimPy's one built-in cycle.

Measured on a 2-core VM (``benchmarks/bench_fleet.py --no-speculation``, an 8-replica fleet of 100k
requests): system CPU 1.6 s -> 0.5 s for the pages, the collector's time 0.10 s -> 0.045 s.
"""

from __future__ import annotations

import gc
import os
from contextlib import contextmanager
from types import MethodType
from typing import Iterator

import numpy as np

from specplan import startup

try:
    from numpy._core.multiarray import _set_madvise_hugepage
except ImportError:  # numpy < 2
    from numpy.core.multiarray import _set_madvise_hugepage

_HUGE_ASKED = os.environ.get("NUMPY_MADVISE_HUGEPAGE") == "1"


@contextmanager
def small_pages() -> Iterator[None]:
    """numpy arrays allocated inside the block get no huge-page advice (the setting is restored after;
    it is numpy's process-wide one, so another thread's arrays allocated meanwhile get none either)."""
    if _HUGE_ASKED:
        yield
        return
    was = _set_madvise_hugepage(False)
    try:
        yield
    finally:
        _set_madvise_hugepage(was)


def empty(shape, dtype=np.float64) -> np.ndarray:
    """``np.empty`` on ordinary pages: for rows written once, in order."""
    with small_pages():
        return np.empty(shape, dtype=dtype)


@contextmanager
def collector_paused() -> Iterator[None]:
    """No collection inside the block (the collector's state is restored after): for building many
    small objects without cycles, where the collector's full passes over a growing heap would find
    nothing and make the build superlinear in the number of objects."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


@contextmanager
def collector_spared() -> Iterator[None]:
    """The objects alive now are left out of the collector's passes until the block ends (``gc.freeze``,
    then ``gc.unfreeze``); objects made inside are collected as usual. A process that froze objects
    itself (a server after ``fork``) keeps its own freeze untouched."""
    startup.resume_collector()  # the process's start-up is over (``startup.pause_collector``)
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def break_self_cycle(obj: object) -> None:
    """Delete ``obj``'s instance attributes that are its own bound methods, each a reference back to
    ``obj`` (SimPy's ``Environment`` binds ``process``, ``timeout``, ``event``, ``all_of`` and
    ``any_of`` to itself when made, for speed); the names still resolve through the class."""
    for name, value in list(vars(obj).items()):
        if isinstance(value, MethodType) and value.__self__ is obj:
            delattr(obj, name)
