"""Fleet speed: 8 replicas behind a round-robin router serving 100k requests, against one replica
serving its share of them (the same per-replica load: 64 closed-loop clients, as
``bench_executor.py``'s steady B = 64 scenario but with shorter outputs so 100k requests fit).

Prints simulated output tokens per CPU-second for both, and their ratio. Target (issue 21): the
fleet keeps the single replica's per-token speed within 20% (ratio >= 0.8).

Each measured run is one ``simulate`` call (workload, replicas, loop, summaries) in a process of
its own, after a small warm-up run of the same shape there (imports, compiled-code caches): a user
runs one scenario per process, and its first touches of the memory it needs (system CPU) are part
of its cost. Runs in one process would let each one-replica run reuse the pages the previous one
freed, which a fleet, holding eight replicas' state at once, cannot.

The machine's speed drifts, so the comparison is made in ``--repeat`` rounds: one replica's share
run 8 times, half before and half after the fleet run. A round's ratio is the fleet's tokens per
CPU-second over the 8 one-replica runs' together; the median round is the figure, the least times'
ratio is printed beside it, and so are the user-CPU ratio and the system CPU. ``--same-workload``
also runs one replica on every request: the same workload and work as the fleet, through one
engine. ``--no-speculation`` turns speculation off (the Vidur-shaped benchmark's case, where one
replica runs in compiled spans).

Usage: ``python benchmarks/bench_fleet.py [--requests 100000] [--output-len 200] [--repeat 3]
[--same-workload] [--no-speculation]``.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

from specplan.config import build_config
from specplan.simulator.run import simulate

REPLICAS = 8
CLIENTS_PER_REPLICA = 64


def scenario(replicas: int, requests: int, output_len: int, clients: int = CLIENTS_PER_REPLICA, speculate: bool = True):
    spec = {"decoding_type": "SA", "max_draft_len": 4, "max_matching_ngram_size": -1} if speculate else {
        "decoding_type": "none"}
    return build_config({
        "seed": 0,
        "engine": {"max_batch_size": 64, "max_num_tokens": 8192, "kv_num_blocks": 200000},
        "speculation": spec,
        "acceptance": {"mode": "alpha", "alpha": 0.7},
        "workload": {"trace": None, "arrival": "closed_loop", "concurrency": clients * replicas,
                     "num_requests": requests, "prompt_len": 512, "output_len": output_len},
        "cost": {"model": "roofline", "gpu": "h200", "model_name": "llama-3.1-8b"},
        "cluster": {"replicas": replicas, "router": "round_robin"},
    })


def measure(replicas: int, requests: int, output_len: int, speculate: bool) -> tuple[dict, float, float]:
    """The summary, the CPU seconds and the system CPU seconds of one run, in a process of its own
    (the summary holds that process's peak memory too)."""
    argv = [sys.executable, __file__, "--child", str(replicas), str(requests), str(output_len), str(int(speculate))]
    out = json.loads(subprocess.run(argv, check=True, capture_output=True, text=True).stdout)
    return out["summary"], out["cpu"], out["sys"]


def child(replicas: int, requests: int, output_len: int, speculate: bool) -> None:
    # Warm-up of the same shape (imports, the replica count's compiled fleet loop from the cache).
    simulate(scenario(replicas, 256 * replicas, output_len, speculate=speculate))
    cfg = scenario(replicas, requests, output_len, speculate=speculate)
    t0, s0 = time.process_time(), resource.getrusage(resource.RUSAGE_SELF).ru_stime
    res = simulate(cfg)
    cpu, sys_cpu = time.process_time() - t0, resource.getrusage(resource.RUSAGE_SELF).ru_stime - s0
    summary = {k: res.summary[k] for k in ("output_tokens", "completed_requests", "iterations")}
    summary["peak_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"summary": summary, "cpu": cpu, "sys": sys_cpu}))


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        replicas, requests, output_len, speculate = map(int, sys.argv[2:6])
        return child(replicas, requests, output_len, bool(speculate))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--output-len", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3, help="rounds (8 one-replica runs around one fleet run)")
    ap.add_argument("--same-workload", action="store_true", help="also run one replica on every request")
    ap.add_argument("--no-speculation", action="store_true", help="speculation off (the Vidur-shaped benchmark's case)")
    args = ap.parse_args()
    spec = not args.no_speculation
    one_run = (1, args.requests // REPLICAS, args.output_len, spec)
    fleet_run = (REPLICAS, args.requests, args.output_len, spec)
    singles, fleets, ratios, user_ratios, sys_one, sys_fleet = [], [], [], [], [], []
    for _ in range(args.repeat):
        before = [measure(*one_run) for _ in range(REPLICAS // 2)]
        fleet, cpu_fleet, sys_f = measure(*fleet_run)
        after = [measure(*one_run) for _ in range(REPLICAS - REPLICAS // 2)]
        one, cpu_ones, sys_ones = before[0][0], [r[1] for r in before + after], [r[2] for r in before + after]
        singles += cpu_ones
        fleets.append(cpu_fleet)
        sys_one.append(sum(sys_ones))
        sys_fleet.append(sys_f)
        tokens_ratio = fleet["output_tokens"] / (REPLICAS * one["output_tokens"])
        ratios.append(tokens_ratio * sum(cpu_ones) / cpu_fleet)
        user_ratios.append(tokens_ratio * (sum(cpu_ones) - sum(sys_ones)) / (cpu_fleet - sys_f))
    speed_one, speed_fleet = one["output_tokens"] / min(singles), fleet["output_tokens"] / min(fleets)
    print(f"one replica: {one['completed_requests']} requests, {one['output_tokens']} output tokens, "
          f"{one['iterations']} iterations in {statistics.median(singles):.2f} CPU-s (median of "
          f"{len(singles)}; least {min(singles):.2f}): {speed_one:,.0f} tokens per CPU-second at the least")
    print(f"{REPLICAS}-replica fleet: {fleet['completed_requests']} requests, {fleet['output_tokens']} output tokens, "
          f"{fleet['iterations']} iterations in {statistics.median(fleets):.2f} CPU-s (median of {len(fleets)}; "
          f"least {min(fleets):.2f}): {speed_fleet:,.0f} tokens per CPU-second at the least")
    print(f"fleet / one replica: {statistics.median(ratios):.3f} (median round; rounds "
          f"{', '.join(f'{r:.3f}' for r in ratios)}); least times {speed_fleet / speed_one:.3f}  (target >= 0.8)")
    print(f"  user CPU alone: {statistics.median(user_ratios):.3f} (median round); system CPU per round: "
          f"{statistics.median(sys_fleet):.2f} s for the fleet, {statistics.median(sys_one):.2f} s for the 8 one-replica runs")
    if args.same_workload:
        whole, cpu_whole, _ = measure(1, args.requests, args.output_len, spec)
        speed_whole = whole["output_tokens"] / cpu_whole
        print(f"one replica, all {whole['completed_requests']} requests: {cpu_whole:.2f} CPU-s, {speed_whole:,.0f} tokens "
              f"per CPU-second; fleet / that: {speed_fleet / speed_whole:.3f}")
    print(f"peak memory: {fleet['peak_mib']:,.0f} MiB for the fleet's process, {one['peak_mib']:,.0f} MiB for one replica's")


if __name__ == "__main__":
    main()
