"""Executor speed in CPU seconds: a steady B = 64 scenario and a realistic drafter-mode run.

- ``steady``: 64 closed-loop clients, i.i.d. acceptance (alpha 0.7, K = 4, SA path), 2,000-token
  outputs. Targets (issue 17): >= 2,000,000 simulated output tokens per CPU-second and >= 200x the
  simulated GPU, for the whole ``simulate`` call (workload, oracle, loop, tables), warm.
- ``realistic``: the suffix automaton drafting on Spec-Bench (8,000 requests sampled from its 560,
  64 closed-loop clients, roofline H200 / Llama-3.1-8B). Target: >= 1,000,000 tokens per CPU-second
  in the loop (``Executor.run``); the whole call is printed too (it adds the drafter's precompute,
  once per distinct request).

Each figure is the best of ``--repeat`` runs after one warm-up run (imports, compiled-code caches).
The Vidur-shaped scenario, measured for the whole process, is ``benchmarks/bench_vidur.py``.
"""

from __future__ import annotations

import argparse
import time

from loop_timer import LoopTimer
from specplan.config import build_config
from specplan.simulator.run import simulate

STEADY = {
    "seed": 0,
    "engine": {"max_batch_size": 64, "max_num_tokens": 8192, "kv_num_blocks": 200000},
    "speculation": {"decoding_type": "SA", "max_draft_len": 4, "max_matching_ngram_size": -1},
    "acceptance": {"mode": "alpha", "alpha": 0.7},
    "workload": {"trace": None, "arrival": "closed_loop", "concurrency": 64, "num_requests": 640,
                 "prompt_len": 512, "output_len": 2000},
    "cost": {"model": "roofline", "gpu": "h200", "model_name": "llama-3.1-8b"},
}
REALISTIC = {
    "seed": 0,
    "engine": {"max_batch_size": 64, "max_num_tokens": 8192},
    "speculation": {"decoding_type": "SA", "max_draft_len": 4, "max_matching_ngram_size": -1},
    "acceptance": {"mode": "drafter"},
    "workload": {"trace": "specbench", "arrival": "closed_loop", "concurrency": 64, "num_requests": 8000,
                 "sample_with_replacement": True},
    "cost": {"model": "roofline", "gpu": "h200", "model_name": "llama-3.1-8b"},
}


def measure(data: dict, repeat: int) -> tuple[dict, float, float]:
    """(summary, best whole-call CPU seconds, best in-loop CPU seconds)."""
    cfg = build_config(data)
    loop = LoopTimer()
    simulate(cfg)  # warm-up
    whole = []
    for _ in range(repeat):
        t0 = time.process_time()
        res = simulate(cfg, observe=loop)
        whole.append(time.process_time() - t0)
    return res.summary, min(whole), min(loop.seconds)


def report(name: str, s: dict, whole: float, loop: float, whole_target: str, loop_target: str) -> None:
    tokens, simulated = s["output_tokens"], s["makespan_s"]
    print(f"{name}: {tokens:,} output tokens, {s['iterations']:,} iterations, mean batch {s['mean_batch_rows']:.1f}, "
          f"mean acceptance length {s['mean_acceptance_length']:.3f}")
    print(f"  whole simulate call: {whole:.3f} CPU-s")
    print(f"    tokens per CPU-second: {tokens / whole:,.0f}{whole_target}")
    print(f"    simulated seconds per CPU-second: {simulated / whole:,.1f}x")
    print(f"  in the loop: {loop:.3f} CPU-s, {loop / s['iterations'] * 1e6:.1f} us per iteration")
    print(f"    tokens per CPU-second: {tokens / loop:,.0f}{loop_target}")
    print(f"    simulated seconds per CPU-second: {simulated / loop:,.1f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    report("steady B=64", *measure(STEADY, args.repeat),
           "  (target >= 2,000,000; and >= 200x simulated seconds)", "")
    report("realistic SA on Spec-Bench", *measure(REALISTIC, args.repeat), "", "  (target >= 1,000,000)")


if __name__ == "__main__":
    main()
