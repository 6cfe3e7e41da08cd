"""``specplan.memory``: bulk arrays without numpy's huge-page advice, and the collector kept off what
was alive when a run's loop started. The advice is read back from the kernel (``/proc/self/smaps``,
``VmFlags`` ``hg`` marks a region advised ``MADV_HUGEPAGE``)."""

from __future__ import annotations

import gc
import sys
import weakref
from pathlib import Path

import numpy as np
import pytest

from specplan import memory

BIG = 64 << 20  # well over numpy's 4 MiB threshold for the advice


def _advised(a: np.ndarray) -> bool:
    """Whether the kernel marks the region holding the middle of ``a`` as advised into huge pages
    (numpy advises the allocation's page-aligned interior, so its first page may lie outside)."""
    addr = a.ctypes.data + a.nbytes // 2
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and ":" not in head:
            lo, hi = (int(x, 16) for x in head.split("-"))
            inside = lo <= addr < hi
        elif inside and head == "VmFlags:":
            return "hg" in line.split()[1:]
    raise AssertionError("the array's address is in no mapping of /proc/self/smaps")


needs_advice = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not Path("/proc/self/smaps").exists(),
    reason="reads the kernel's record of madvise in /proc/self/smaps (Linux)")


@needs_advice
def test_bulk_arrays_get_no_huge_page_advice_and_numpy_keeps_its_own():
    plain = np.empty(BIG, dtype=np.uint8)
    plain[:] = 1
    if not _advised(plain):
        pytest.skip("numpy does not advise huge pages here (NUMPY_MADVISE_HUGEPAGE=0, or a kernel before 4.6)")
    bulk = memory.empty(BIG, np.uint8)
    bulk[:] = 1
    assert not _advised(bulk)
    with memory.small_pages():
        inside = np.empty(BIG, dtype=np.uint8)
    inside[:] = 1
    assert not _advised(inside)
    after = np.empty(BIG, dtype=np.uint8)  # the setting is numpy's own again after the block
    after[:] = 1
    assert _advised(after)


def test_small_pages_restores_numpys_setting_when_the_block_raises():
    set_advice = memory._set_madvise_hugepage
    before = set_advice(True)
    try:
        with pytest.raises(RuntimeError):
            with memory.small_pages():
                raise RuntimeError
        assert set_advice(True) is True  # the block put back the True it found
    finally:
        set_advice(before)


class _Node:
    pass


def _cycle() -> weakref.ref:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_collector_spared_leaves_earlier_objects_out_and_collects_new_cycles():
    assert gc.get_freeze_count() == 0, "an earlier test left objects frozen"
    enabled = gc.isenabled()
    gc.disable()  # no automatic pass between the steps below: only the explicit ones
    try:
        old = _cycle()  # garbage already when the block starts: frozen with the rest, kept until after
        with memory.collector_spared():
            assert gc.get_freeze_count() > 0
            new = _cycle()
            gc.collect()
            assert new() is None  # made inside: collected as usual
            assert old() is not None  # alive when the block began: no pass looked at it
        assert gc.get_freeze_count() == 0
        gc.collect()
        assert old() is None
    finally:
        if enabled:
            gc.enable()


def test_collector_spared_leaves_a_callers_own_freeze_alone():
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with memory.collector_spared():
            pass
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
