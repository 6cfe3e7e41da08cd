"""Sweep throughput: a 1,000-config sweep over a 1,000-request workload, and 1 vs 2 local workers.

Targets (issue 6): the full sweep in under 10 minutes on a 2-core machine; the local runner on 2
workers at least 1.8x the throughput (configs per second) of 1 worker. Each config is a cheap one
(i.i.d. acceptance, ``linear_gamma`` cost, synthetic fixed lengths) taking a few tenths of a second.
The scaling figure is measured on a subset (``--scaling-configs``), once per worker count and
``--repeat`` times interleaved (best kept), each into a fresh folder so nothing is skipped. The load
average and the CPU share the workers got are printed alongside: other processes on the machine
lower both figures.

    python benchmarks/bench_sweep.py [--configs 1000] [--requests 1000] [--scaling-configs 100] [--repeat 2] [--skip-full]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from specplan.sweeps.runners import LocalRunner
from specplan.sweeps.spec import expand, parse_sweep
from specplan.sweeps.sweep import run_sweep

GRID = {
    "speculation.max_draft_len": [0, 1, 2, 3, 4],
    "workload.rate": [16.0, 24.0, 32.0, 48.0, 64.0, 96.0, 128.0, 160.0, 192.0, 256.0],
    "acceptance.alpha": [0.5, 0.6, 0.7, 0.8],
    "engine.max_batch_size": [16, 32, 48, 64, 128],
}


def sweep_spec(configs: int, requests: int):
    """The benchmark sweep, cut to its first ``configs`` points (grid order)."""
    spec = parse_sweep({
        "base": {
            "seed": 0,
            "engine": {"engine": "trtllm", "max_batch_size": 64, "kv_num_blocks": 1_000_000},
            "speculation": {"decoding_type": "NGram", "max_draft_len": 4},
            "acceptance": {"mode": "alpha", "alpha": 0.7},
            "workload": {"trace": None, "arrival": "poisson", "rate": 32.0, "num_requests": requests,
                         "prompt_len": 128, "output_len": 64},
            "cost": {"model": "linear_gamma", "t_base_s": {1: 0.008, 64: 0.014}, "gamma": {1: 0.02, 64: 0.5}},
        },
        "grid": GRID,
        "baseline": False,
    }, "bench")
    n = len(expand(spec))
    if configs > n:
        raise SystemExit(f"--configs: the grid has {n} points")
    return spec, configs


def _worker_cpu_seconds(runner: LocalRunner) -> float:
    """CPU seconds the pool's worker processes have used so far (Linux ``/proc``)."""
    total = 0.0
    for pid in runner._pool._processes:  # private, but the only handle on the pool's process ids
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
    return total


def timed_sweep(spec, limit: int, workers: int) -> tuple[float, float]:
    """``(wall seconds, worker CPU seconds)`` to run the first ``limit`` points on ``workers`` local
    processes from an empty folder (pool start-up and the Parquet table included)."""
    points = expand(spec)[:limit]
    # a zip over the chosen points' own values reproduces exactly those points
    sub = parse_sweep({"base": spec.base, "zip": {a: [p.values[a] for p in points] for a in spec.axes},
                       "baseline": False}, spec.source)
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        with LocalRunner(workers) as runner:
            table = run_sweep(sub, out, runner)
            wall = time.perf_counter() - t0
            cpu = _worker_cpu_seconds(runner)
    assert len(table) == limit
    return wall, cpu


def _line(label: str, n: int, workers: int, wall: float, cpu: float) -> str:
    return (f"  {label}: {wall:7.1f} s wall, {n / wall:5.2f} configs/s; workers got {cpu:6.1f} CPU-s "
            f"= {cpu / (wall * workers):4.0%} of {workers} core(s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", type=int, default=1000)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--scaling-configs", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=2, help="scaling runs per worker count (best kept)")
    ap.add_argument("--workers", type=int, default=2, help="workers for the full sweep")
    ap.add_argument("--skip-full", action="store_true", help="only the 1 vs 2 worker scaling")
    args = ap.parse_args()

    print(f"cores available: {len(os.sched_getaffinity(0))}; load average before: {os.getloadavg()[0]:.2f}")
    spec, n = sweep_spec(args.configs, args.requests)
    k = args.scaling_configs
    # interleaved and best of --repeat, so a burst of load from other processes hits both alike
    runs = [(timed_sweep(spec, k, 1), timed_sweep(spec, k, 2)) for _ in range(args.repeat)]
    one, cpu1 = min(r[0] for r in runs)
    two, cpu2 = min(r[1] for r in runs)
    print(f"scaling subset: the first {k} configs x {args.requests} requests, best of {args.repeat}")
    print(_line("1 worker ", k, 1, one, cpu1))
    print(_line("2 workers", k, 2, two, cpu2))
    print(f"  2-worker speedup: {one / two:.2f}x wall (target >= 1.8x); CPU per config "
          f"{cpu1 / k:.3f} s on 1 worker, {cpu2 / k:.3f} s on 2")
    if not args.skip_full:
        wall, cpu = timed_sweep(spec, n, args.workers)
        print(f"full sweep: {n} configs x {args.requests} requests (target < 600 s)")
        print(_line(f"{args.workers} workers", n, args.workers, wall, cpu))
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
