"""Sweep cost as users run it: ``specplan sweep`` processes, in CPU seconds of the command and its workers.

A 1,000-config sweep over a 1,000-request workload (the grid below: K, arrival rate, alpha, batch
size; i.i.d. acceptance, ``linear_gamma`` cost, synthetic fixed lengths), and the same command on 1
and on 2 local workers. Each sweep runs as a child process, ``python -m specplan sweep FILE --out DIR
--workers N --no-progress``, from an empty folder; its CPU time (user + sys of the command and of its
workers, which it joins before it exits, from ``getrusage(RUSAGE_CHILDREN)``) covers start-up, the
pool, every run and the Parquet table. The wall clock is not used: on a shared machine it measures
the other jobs as much as this one.

Targets (issue 6, in CPU terms):

- the full sweep in <= 300 CPU-seconds (workers and command together);
- 2 workers at least 1.8x the throughput of 1 on 2 cores: the same configs may cost the 2-worker
  sweep at most 2 / 1.8 = 1.11x the CPU seconds of the 1-worker sweep (the parallel overhead:
  pickling, a second process's start-up and imports, contention). Idle workers waiting on the
  command cost no CPU and so are not seen here.

The scaling figure runs the first ``--scaling-configs`` points of the grid, ``--repeat`` times on each
worker count, interleaved; the median of each is printed with the range.

    python benchmarks/bench_sweep.py [--configs 1000] [--requests 1000] [--scaling-configs 100] [--repeat 3]
        [--workers 2] [--skip-full]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
from pathlib import Path

import yaml

from cpu_clock import bad_input, child_cpu, spread

GRID = {
    "speculation.max_draft_len": [0, 1, 2, 3, 4],
    "workload.rate": [16.0, 24.0, 32.0, 48.0, 64.0, 96.0, 128.0, 160.0, 192.0, 256.0],
    "acceptance.alpha": [0.5, 0.6, 0.7, 0.8],
    "engine.max_batch_size": [16, 32, 48, 64, 128],
}
TARGET_CPU_S, TARGET_OVERHEAD = 300.0, 2 / 1.8


def sweep_file(path: Path, configs: int, requests: int) -> None:
    """Write the benchmark sweep, cut to its first ``configs`` grid points, as a sweep YAML at ``path``."""
    points = list(itertools.product(*GRID.values()))[:configs]
    # a zip over the chosen points' own values reproduces exactly those points
    path.write_text(yaml.safe_dump({
        "base": {
            "seed": 0,
            "engine": {"engine": "trtllm", "max_batch_size": 64, "kv_num_blocks": 1_000_000},
            "speculation": {"decoding_type": "NGram", "max_draft_len": 4},
            "acceptance": {"mode": "alpha", "alpha": 0.7},
            "workload": {"trace": None, "arrival": "poisson", "rate": 32.0, "num_requests": requests,
                         "prompt_len": 128, "output_len": 64},
            "cost": {"model": "linear_gamma", "t_base_s": {1: 0.008, 64: 0.014}, "gamma": {1: 0.02, 64: 0.5}},
        },
        "zip": {axis: [p[i] for p in points] for i, axis in enumerate(GRID)},
        "baseline": False,
    }, sort_keys=False))


def sweep_cpu(configs: int, requests: int, workers: int) -> float:
    """CPU seconds of one ``specplan sweep`` of the first ``configs`` points on ``workers`` local
    processes, from an empty folder."""
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "sweep.yaml"
        sweep_file(spec, configs, requests)
        cpu, _ = child_cpu(["-m", "specplan", "sweep", str(spec), "--out", str(Path(tmp) / "out"),
                            "--workers", str(workers), "--no-progress"])
        return cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", type=int, default=1000)
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--scaling-configs", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3, help="scaling runs per worker count (median kept)")
    ap.add_argument("--workers", type=int, default=2, help="workers for the full sweep")
    ap.add_argument("--skip-full", action="store_true", help="only the 1 vs 2 worker scaling")
    args = ap.parse_args()
    n = len(list(itertools.product(*GRID.values())))
    for name, value, most in (("--configs", args.configs, n), ("--scaling-configs", args.scaling_configs, n),
                              ("--requests", args.requests, None), ("--repeat", args.repeat, None),
                              ("--workers", args.workers, None)):
        if value < 1 or (most is not None and value > most):
            bad_input(f"{name}: give a positive number" + (f" up to {most} (the grid's points)" if most else ""))

    k = args.scaling_configs
    sweep_cpu(min(k, 10), args.requests, 1)  # warm-up: compiled-code caches
    # interleaved, so a change in the machine's speed falls on both alike
    runs = [(sweep_cpu(k, args.requests, 1), sweep_cpu(k, args.requests, 2)) for _ in range(args.repeat)]
    one, two = [r[0] for r in runs], [r[1] for r in runs]
    print(f"scaling subset: the first {k} configs x {args.requests} requests, {args.repeat} runs each")
    print(f"  1 worker : {spread(one)} CPU-s (min / median / max), {statistics.median(one) / k:.3f} per config")
    print(f"  2 workers: {spread(two)} CPU-s (min / median / max), {statistics.median(two) / k:.3f} per config")
    print(f"  CPU on 2 workers / on 1 (medians): {statistics.median(two) / statistics.median(one):.2f}  "
          f"(target <= {TARGET_OVERHEAD:.2f}: 1.8x the throughput on 2 cores)")
    if not args.skip_full:
        cpu = sweep_cpu(args.configs, args.requests, args.workers)
        print(f"full sweep: {args.configs} configs x {args.requests} requests on {args.workers} workers: "
              f"{cpu:.1f} CPU-s, {cpu / args.configs:.3f} per config  (target <= {TARGET_CPU_S:.0f} CPU-s)")


if __name__ == "__main__":
    main()
