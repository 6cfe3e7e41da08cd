"""Exact drafters' speed in OUTPUT tokens per CPU-second, drafting as the simulator asks them to.

Each case builds the drafter's oracle (its precompute included, the cache bypassed) and drives it
like the executor: up to 64 requests in flight, one ``draft(rids, committed, K)`` call per step with
the rows in request order, commits of accepted + 1, ``on_finish`` as requests end and new ones join.
The figure is the requests' output tokens over the CPU seconds (``time.process_time``) of the whole
case, best of ``--repeat`` runs after a warm-up run (compiled-code caches loaded).

Workloads, both from the bundled Spec-Bench trace (Llama-2 tokens): ``distinct``, its 560 requests
once each (every prompt new to the public pool), and ``sampled``, ``--requests`` drawn with
replacement as ``workload.sample_with_replacement`` does (copies share their precompute and their
span of the public pool's token buffer), the simulator's usual case, which the targets are for: the
public NGram pool (TensorRT-LLM's defaults) 1,000,000; SA and vLLM n-gram 3,000,000; the private NGram
pool 300,000. ``distinct`` is shown beside them: there every prompt is scanned into the pool (NGram)
or precomputed (the others) for its output tokens alone.

``--simulate N`` also times one ``simulate`` call with the public NGram pool (Spec-Bench, N requests
sampled, 64 closed-loop clients, roofline H200 / Llama-3.1-8B), warm, in CPU seconds.

Run from the repository root: ``python benchmarks/bench_drafters.py [--repeat 3] [--requests 4000] [--simulate 4000]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from specplan.acceptance.drafters import DrafterSettings, PrecomputeCache, build_drafter
from specplan.workloads.bundled import get_bundled
from specplan.workloads.tokentrace import read_token_trace

BATCH = 64
CASES = {  # name: (settings, target output tokens per CPU-second on the sampled workload, 0: none)
    "NGram pool (public)": (dict(kind="NGram", max_draft_len=4), 1_000_000),
    "NGram pool (public, N=3 K=5)": (dict(kind="NGram", max_draft_len=5, max_matching_ngram_size=3), 0),
    "NGram pool (private)": (dict(kind="NGram", max_draft_len=4, is_public_pool=False), 300_000),
    "SA (longest match)": (dict(kind="SA", max_draft_len=4), 3_000_000),
    "vLLM n-gram (5..5)": (dict(kind="vllm_ngram", max_draft_len=4), 3_000_000),
    "vLLM n-gram (1..4)": (dict(kind="vllm_ngram", max_draft_len=4, prompt_lookup_min=1, prompt_lookup_max=4),
                           3_000_000),
}


def drive(settings: DrafterSettings, requests) -> int:
    """Build the oracle and draft every request to its end, ``BATCH`` at a time; returns output tokens."""
    oracle = build_drafter(settings, requests, BATCH, PrecomputeCache())
    out = oracle.output_lens
    committed = np.minimum(1, out).astype(np.int64)  # the prefill commits the first token
    k = settings.max_draft_len
    waiting, active = iter(range(len(requests))), np.zeros(0, dtype=np.int64)
    while True:
        joining = [r for r, _ in zip(waiting, range(BATCH - len(active)))]
        active = np.concatenate([active, np.array(joining, dtype=np.int64)])
        active = active[committed[active] < out[active]]
        if not len(active):
            if not joining:
                return int(out.sum())
            continue
        _, accepted = oracle.draft(active, committed[active], k)
        committed[active] += np.minimum(accepted + 1, out[active] - committed[active])
        done = committed[active] >= out[active]
        if done.any():
            oracle.on_finish(active[done])


def best_cpu(fn, repeat: int) -> tuple[float, object]:
    """(least CPU seconds over ``repeat`` runs, the last result), after one warm-up run."""
    result = fn()
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        result = fn()
        best = min(best, time.process_time() - start)
    return best, result


def simulate_ngram(n: int, repeat: int) -> None:
    from specplan.config import build_config
    from specplan.simulator.run import simulate

    cfg = build_config({
        "seed": 0, "engine": {"max_batch_size": BATCH, "max_num_tokens": 8192},
        "speculation": {"decoding_type": "NGram", "max_draft_len": 4}, "acceptance": {"mode": "drafter"},
        "workload": {"trace": "specbench", "arrival": "closed_loop", "concurrency": BATCH, "num_requests": n,
                     "sample_with_replacement": True},
        "cost": {"model": "roofline", "gpu": "h200", "model_name": "llama-3.1-8b"},
    })
    cpu, res = best_cpu(lambda: simulate(cfg), repeat)
    tokens = int(res.requests["output_len"].sum())
    print(f"simulate, public NGram pool, Spec-Bench {n:,} requests sampled, batch {BATCH}: {cpu:.2f} CPU-s, "
          f"{tokens / cpu:,.0f} output tokens per CPU-second")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per case (the best is shown)")
    ap.add_argument("--requests", type=int, default=4000, help="requests in the sampled workload")
    ap.add_argument("--simulate", type=int, default=4000, help="requests of the simulate run (0: skip it)")
    args = ap.parse_args()
    trace = read_token_trace(get_bundled("specbench").path)
    picks = np.random.default_rng(0).integers(0, len(trace), args.requests)
    workloads = {"distinct": trace, "sampled": [trace[i] for i in picks]}
    for name, reqs in workloads.items():
        print(f"{name}: {len(reqs):,} requests, {sum(r.output_len for r in reqs):,} output tokens "
              f"({sum(r.prompt_len for r in reqs):,} prompt)")
    print(f"{'drafter':30s} {'distinct':>12s} {'sampled':>12s} {'target':>12s}  (output tokens per CPU-second)")
    for name, (kw, target) in CASES.items():
        settings = DrafterSettings(**kw)
        rates = []
        for reqs in workloads.values():
            cpu, tokens = best_cpu(lambda: drive(settings, reqs), args.repeat)
            rates.append(tokens / cpu)
        flag = "" if not target else "ok" if rates[1] >= target else "BELOW TARGET"
        print(f"{name:30s} {rates[0]:12,.0f} {rates[1]:12,.0f} {f'{target:,d}' if target else '-':>12s}  {flag}")
    if args.simulate:
        simulate_ngram(args.simulate, args.repeat)


if __name__ == "__main__":
    main()
