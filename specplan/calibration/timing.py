"""Timing one step closure: CUDA-graph replay and eager launches with CUDA events, or CPU wall clock.

COSTS.md §4: on CUDA, capture the step in a graph after eager warm-up on a side stream, replay it
``WARMUP`` times, then time one block of R replays between a pair of CUDA events (gap-free mean; R is
chosen so a block lasts about ``block_s``). Eager timing is the same block of eager calls; the
difference is the launch overhead that graphs remove. On a CPU, wall clock and thread CPU time
around each of a block of calls after warm-up, keeping the fastest. Each returns seconds per call
and R.
"""

from __future__ import annotations

import math
import time
from typing import Callable

import torch

WARMUP = 3
MAX_REPLAYS = 50
MIN_CPU_CALLS = 5


def _replays(single_s: float, block_s: float) -> int:
    return max(1, min(MAX_REPLAYS, math.ceil(block_s / max(single_s, 1e-7))))


def _event_block(fn: Callable[[], object], replays: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e-3 / replays


def time_cuda(fn: Callable[[], torch.Tensor], block_s: float) -> dict[str, tuple[float, int]]:
    """``{"graph": (seconds, R), "eager": (seconds, R)}`` for one step closure."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(WARMUP):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    eager_single = _event_block(fn, 1)
    eager_r = _replays(eager_single, block_s)
    eager = _event_block(fn, eager_r)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    for _ in range(WARMUP):
        graph.replay()
    single = _event_block(graph.replay, 1)
    r = _replays(single, block_s)
    result = {"graph": (_event_block(graph.replay, r), r), "eager": (eager, eager_r)}
    del graph
    return result


def time_cpu(fn: Callable[[], torch.Tensor], block_s: float) -> dict[str, tuple[float, int]]:
    """``{"wall": (seconds, R), "cpu": (seconds, R)}``: the fastest of R calls after one warm-up call,
    by wall clock (``perf_counter``) and by the calling thread's CPU time (``thread_time``).

    With one torch thread the step runs on the calling thread, so its CPU time is the step's compute
    without the time other processes hold the core: on a shared host it is the steadier of the two.
    The fastest call is the least disturbed one; a mean would carry preemptions into the profile.
    """
    start = time.perf_counter()
    fn()
    r = max(MIN_CPU_CALLS, _replays(time.perf_counter() - start, block_s))
    wall = cpu = math.inf
    for _ in range(r):
        start, start_cpu = time.perf_counter(), time.thread_time()
        fn()
        cpu = min(cpu, time.thread_time() - start_cpu)
        wall = min(wall, time.perf_counter() - start)
    return {"wall": (wall, r), "cpu": (cpu, r)}
