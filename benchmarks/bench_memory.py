"""Peak memory of a 100,000-request run in each acceptance mode that holds per-request state.

Each mode runs in its own child process (a fresh interpreter, so one mode's allocations cannot hide
another's) and reports its peak resident set size from ``resource.getrusage``. Traffic: Spec-Bench
requests sampled with replacement (copies of one trace request share its tokens and drafter
tables), 64 closed-loop clients, roofline costs. Target (issue 16): every mode under 1,024 MiB.

    python benchmarks/bench_memory.py [--requests N] [--mode alpha|sa|ngram ...]

``--scale`` runs the alpha mode at a million and ten million requests (``--requests`` to choose
others) on synthetic traffic of Spec-Bench's lengths (lognormal fits; no tokens drawn, no prefix
cache), the shape of a large fleet's day: each prints its peak RSS against the target (1,024 MiB
for a million, 2,048 MiB for ten million), its CPU seconds and CPU microseconds per request, and
the last line the ratio of the largest run's per-request CPU to the smallest's (1.0 is linear).
Logs past ``specplan.simulator.spill.CHUNK_ROWS`` rows go to disk in chunks under ``$TMPDIR``
(about 1 GB a million requests, removed after) and the summary reads them back a chunk at a time;
the engine holds slots for the requests in flight and a few hundred finished ones. A size the
config refuses (``workload.num_requests`` is capped at ``config.MAX_REQUESTS``, ten million, and a
run must fit this machine's memory by ``limits``' estimate) prints the refusal instead of figures.
Ten million requests take about 11 CPU-minutes and 11 GB of temporary disk.

    python benchmarks/bench_memory.py --scale [--requests 1000000 --requests 10000000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

MODES = {
    "alpha": ({"decoding_type": "SA", "max_draft_len": 4}, {"mode": "alpha", "alpha": 0.7}),
    "sa": ({"decoding_type": "SA", "max_draft_len": 4, "max_matching_ngram_size": -1}, {"mode": "drafter"}),
    "ngram": ({"decoding_type": "NGram", "max_draft_len": 4}, {"mode": "drafter"}),
}
TARGET_MIB = 1024
SCALE_TARGETS_MIB = {1_000_000: 1024, 10_000_000: 2048}  # the targets
SCALE_SHAPE = {"trace": "synthetic:lengths=specbench"}


def child(mode: str, num_requests: int, synthetic: bool = False) -> None:
    """Run one mode here and print a JSON line: peak RSS, CPU seconds, completed requests."""
    import resource

    from specplan.config import build_config
    from specplan.simulator.run import simulate

    speculation, acceptance = MODES[mode]
    cfg = build_config({
        "seed": 0,
        "engine": {"max_batch_size": 64, "max_num_tokens": 8192, "kv_num_blocks": 400000},
        "speculation": speculation,
        "acceptance": acceptance,
        "workload": {"trace": "specbench", "arrival": "closed_loop", "concurrency": 64,
                     "num_requests": num_requests, "sample_with_replacement": True, **(SCALE_SHAPE if synthetic else {})},
        "cost": {"model": "roofline", "gpu": "h200", "model_name": "llama-3.1-8b"},
    })
    cpu0 = time.process_time()
    result = simulate(cfg)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"mode": mode, "peak_rss_mib": usage.ru_maxrss / 1024, "cpu_s": time.process_time() - cpu0,
                      "completed": result.summary["completed_requests"],
                      "output_tokens": result.summary["output_tokens"]}))


def run_child(mode: str, num_requests: int, synthetic: bool = False, check: bool = True) -> dict:
    """One mode's figures from a fresh interpreter; unchecked, a failed run gives ``error``, its last line."""
    proc = subprocess.run([sys.executable, __file__, "--child", mode, "--requests", str(num_requests)]
                          + (["--synthetic"] if synthetic else []), capture_output=True, text=True, check=check)
    if proc.returncode:
        return {"error": (proc.stderr.strip().splitlines() or ["exit status %d" % proc.returncode])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def scale(sizes: list[int]) -> None:
    """The alpha mode at each size on the synthetic shape: peak RSS against its target, CPU per request."""
    per_request = []
    for n in sorted(sizes):
        row = run_child("alpha", n, synthetic=True, check=False)
        if "error" in row:
            print(f"{n:>11,} requests: not run: {row['error']}")
            continue
        target = SCALE_TARGETS_MIB.get(n)
        per_request.append(row["cpu_s"] / n)
        verdict = f"target < {target:,} MiB: {'ok' if row['peak_rss_mib'] < target else 'OVER'}" if target else "no target"
        print(f"{n:>11,} requests ({row['output_tokens']:,} output tokens): peak RSS {row['peak_rss_mib']:,.0f} MiB "
              f"({verdict}), "
              f"{row['cpu_s']:.1f} CPU s, {1e6 * per_request[-1]:.1f} CPU us a request")
    if len(per_request) > 1:
        print(f"CPU per request, largest run over smallest: {per_request[-1] / per_request[0]:.2f} (1.0 is linear)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, action="append")
    parser.add_argument("--mode", choices=list(MODES), action="append")
    parser.add_argument("--scale", action="store_true", help="alpha mode at 1M and 10M requests, synthetic traffic")
    parser.add_argument("--child", choices=list(MODES), help=argparse.SUPPRESS)
    parser.add_argument("--synthetic", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.requests[0], args.synthetic)
        return
    if args.scale:
        scale(args.requests or list(SCALE_TARGETS_MIB))
        return
    worst = 0.0
    for mode in args.mode or list(MODES):
        row = run_child(mode, (args.requests or [100_000])[0])
        worst = max(worst, row["peak_rss_mib"])
        print(f"{mode:>6}: {row['completed']:,} requests ({row['output_tokens']:,} output tokens), "
              f"peak RSS {row['peak_rss_mib']:,.0f} MiB, {row['cpu_s']:.1f} CPU s")
    print(f"worst peak RSS {worst:,.0f} MiB (target < {TARGET_MIB:,} MiB): {'ok' if worst < TARGET_MIB else 'OVER'}")


if __name__ == "__main__":
    main()
