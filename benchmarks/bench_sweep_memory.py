"""Memory across runs: a sweep worker's resident set after 10, 100 and 1,000 runs.

A child process does what a local pool's worker does, run after run: calls the sweep's task,
``specplan.sweeps.runners.run_record``, on each point of the sweep grid of ``bench_sweep.py`` (K,
arrival rate, alpha, batch size over ``--requests`` synthetic requests; the rate varies fastest, so
every workload the worker memoises has been built by run 10) and prints its RSS (``VmRSS``) after
10, 100 and 1,000 runs. No collection is forced: what a run leaves in a reference cycle stays until
the collector's own full pass. Target: after 1,000 runs within 10% of after 10 (a worker grew from
175 MB to 830 MB over about 400 configs before runs were freed by reference counting).

    python benchmarks/bench_sweep_memory.py [--requests 1000] [--runs 1000]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys

from cpu_clock import ROOT

GRID = {  # bench_sweep.py's axes, the rate last so that it varies fastest
    "speculation.max_draft_len": [0, 1, 2, 3, 4],
    "acceptance.alpha": [0.5, 0.6, 0.7, 0.8],
    "engine.max_batch_size": [16, 32, 48, 64, 128],
    "workload.rate": [16.0, 24.0, 32.0, 48.0, 64.0, 96.0, 128.0, 160.0, 192.0, 256.0],
}
CHECKPOINTS = (10, 100, 1000)
TARGET = 0.10


def base(requests: int) -> dict:
    """``bench_sweep.py``'s base scenario."""
    return {"seed": 0, "engine": {"engine": "trtllm", "max_batch_size": 64, "kv_num_blocks": 1_000_000},
            "speculation": {"decoding_type": "NGram", "max_draft_len": 4},
            "acceptance": {"mode": "alpha", "alpha": 0.7},
            "workload": {"trace": None, "arrival": "poisson", "rate": 32.0, "num_requests": requests,
                         "prompt_len": 128, "output_len": 64},
            "cost": {"model": "linear_gamma", "t_base_s": {1: 0.008, 64: 0.014}, "gamma": {1: 0.02, 64: 0.5}}}


def rss_mb() -> float:
    """This process's resident set, MB (Linux ``/proc``)."""
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS")) / 1024


def worker(requests: int, runs: int) -> None:
    """The child: run ``runs`` grid points through ``run_record`` and print ``{runs: RSS MB}`` as JSON."""
    from specplan.config import build_config
    from specplan.sweeps.records import config_json
    from specplan.sweeps.runners import run_record

    configs = []
    for point in itertools.product(*GRID.values()):
        cfg = json.loads(json.dumps(base(requests)))
        for axis, value in zip(GRID, point):
            section, field = axis.split(".")
            cfg[section][field] = value
        configs.append(config_json(build_config(cfg)))
    seen = {}
    for i in range(runs):
        run_record(configs[i % len(configs)])
        if i + 1 in CHECKPOINTS:
            seen[i + 1] = rss_mb()
    print(json.dumps(seen))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=1000, help="runs in all (checkpoints at 10, 100, 1000)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # the child
    args = ap.parse_args()
    if args.worker:
        worker(args.requests, args.runs)
        return
    proc = subprocess.run([sys.executable, __file__, "--worker", "--requests", str(args.requests), "--runs",
                           str(args.runs)], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, check=True)
    seen = {int(k): v for k, v in json.loads(proc.stdout.strip().splitlines()[-1]).items()}
    print(f"a sweep worker's RSS over runs of {args.requests} requests each (run_record, no forced collection)")
    for runs, mb in seen.items():
        print(f"  after {runs:>5} runs: {mb:7.1f} MB")
    last = max(seen)
    growth = seen[last] / seen[min(seen)] - 1
    print(f"after {last} runs / after {min(seen)}: {growth:+.1%} (target within {TARGET:.0%})")


if __name__ == "__main__":
    main()
