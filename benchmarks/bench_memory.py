"""Peak memory of a 100,000-request run in each acceptance mode that holds per-request state.

Each mode runs in its own child process (a fresh interpreter, so one mode's allocations cannot hide
another's) and reports its peak resident set size from ``resource.getrusage``. Traffic: Spec-Bench
requests sampled with replacement (copies of one trace request share its tokens and drafter
tables), 64 closed-loop clients, roofline costs. Target (issue 16): every mode under 1,024 MiB.

    python benchmarks/bench_memory.py [--requests N] [--mode alpha|sa|ngram ...]
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


def child(mode: str, num_requests: int) -> None:
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
                     "num_requests": num_requests, "sample_with_replacement": True},
        "cost": {"model": "roofline", "gpu": "h200", "model_name": "llama-3.1-8b"},
    })
    cpu0 = time.process_time()
    result = simulate(cfg)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    print(json.dumps({"mode": mode, "peak_rss_mib": usage.ru_maxrss / 1024, "cpu_s": time.process_time() - cpu0,
                      "completed": result.summary["completed_requests"],
                      "output_tokens": result.summary["output_tokens"]}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--mode", choices=list(MODES), action="append")
    parser.add_argument("--child", choices=list(MODES), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.requests)
        return
    worst = 0.0
    for mode in args.mode or list(MODES):
        proc = subprocess.run([sys.executable, __file__, "--child", mode, "--requests", str(args.requests)],
                              capture_output=True, text=True, check=True)
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        worst = max(worst, row["peak_rss_mib"])
        print(f"{mode:>6}: {row['completed']:,} requests ({row['output_tokens']:,} output tokens), "
              f"peak RSS {row['peak_rss_mib']:,.0f} MiB, {row['cpu_s']:.1f} CPU s")
    print(f"worst peak RSS {worst:,.0f} MiB (target < {TARGET_MIB:,} MiB): {'ok' if worst < TARGET_MIB else 'OVER'}")


if __name__ == "__main__":
    main()
