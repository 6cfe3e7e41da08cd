"""Fleet speed: 8 replicas behind a round-robin router serving 100k requests, against one replica
serving its share of them (the same per-replica load: 64 closed-loop clients, as
``bench_executor.py``'s steady B = 64 scenario but with shorter outputs so 100k requests fit).

Prints simulated output tokens per CPU-second for both, and their ratio; and, for reference, one
replica serving all the requests at the same 64 clients (every replica's per-request arrays span
the whole workload, so this separates the cost of a large workload from the cost of the fleet).
Target (issue 21): the fleet keeps the single replica's per-token speed within 20%.

``--repeat`` pairs of runs (default 3), one replica then the fleet, whole ``simulate`` call included
(workload, replicas, loop, summaries): the ratio of the least CPU times and each pair's ratio.

Usage: ``python benchmarks/bench_fleet.py [--requests 100000] [--output-len 200] [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import resource
import time

from specplan.config import build_config
from specplan.simulator.run import simulate

REPLICAS = 8
CLIENTS_PER_REPLICA = 64


def scenario(replicas: int, requests: int, output_len: int, clients: int = CLIENTS_PER_REPLICA):
    return build_config({
        "seed": 0,
        "engine": {"max_batch_size": 64, "max_num_tokens": 8192, "kv_num_blocks": 200000},
        "speculation": {"decoding_type": "SA", "max_draft_len": 4, "max_matching_ngram_size": -1},
        "acceptance": {"mode": "alpha", "alpha": 0.7},
        "workload": {"trace": None, "arrival": "closed_loop", "concurrency": clients * replicas,
                     "num_requests": requests, "prompt_len": 512, "output_len": output_len},
        "cost": {"model": "roofline", "gpu": "h200", "model_name": "llama-3.1-8b"},
        "cluster": {"replicas": replicas, "router": "round_robin"},
    })


def measure(cfg) -> tuple[dict, float]:
    """The summary and the CPU seconds of one run."""
    t0 = time.process_time()
    res = simulate(cfg)
    return res.summary, time.process_time() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--output-len", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3, help="pairs of runs (one replica, then the fleet)")
    ap.add_argument("--same-workload", action="store_true", help="also run one replica on every request")
    args = ap.parse_args()
    simulate(scenario(1, 256, args.output_len))  # warm-up (imports, first-call costs)
    # Paired runs: the machine's speed drifts, so each fleet run is compared with the one-replica
    # run just before it, and the ratio of the least CPU times is printed beside the pairs'.
    pairs = []
    for _ in range(args.repeat):
        one, cpu_one = measure(scenario(1, args.requests // REPLICAS, args.output_len))
        fleet, cpu_fleet = measure(scenario(REPLICAS, args.requests, args.output_len))
        pairs.append((cpu_one, cpu_fleet))
    ratio = [(fleet["output_tokens"] / f) / (one["output_tokens"] / o) for o, f in pairs]
    cpu_one, cpu_fleet = min(o for o, _ in pairs), min(f for _, f in pairs)
    speed_one, speed_fleet = one["output_tokens"] / cpu_one, fleet["output_tokens"] / cpu_fleet
    print(f"one replica: {one['completed_requests']} requests, {one['output_tokens']} output tokens, "
          f"{one['iterations']} iterations in {cpu_one:.2f} CPU-s (least of {args.repeat}): "
          f"{speed_one:,.0f} tokens per CPU-second")
    print(f"{REPLICAS}-replica fleet: {fleet['completed_requests']} requests, {fleet['output_tokens']} output tokens, "
          f"{fleet['iterations']} iterations in {cpu_fleet:.2f} CPU-s (least of {args.repeat}): "
          f"{speed_fleet:,.0f} tokens per CPU-second")
    print(f"fleet / one replica: {speed_fleet / speed_one:.3f} (least times); per pair "
          f"{', '.join(f'{r:.3f}' for r in ratio)}  (target >= 0.8)")
    if args.same_workload:
        whole, cpu_whole = measure(scenario(1, args.requests, args.output_len))
        speed_whole = whole["output_tokens"] / cpu_whole
        print(f"one replica, all {whole['completed_requests']} requests: {cpu_whole:.2f} CPU-s, {speed_whole:,.0f} tokens "
              f"per CPU-second; fleet / that: {speed_fleet / speed_whole:.3f}")
    print(f"peak memory: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MiB")


if __name__ == "__main__":
    main()
