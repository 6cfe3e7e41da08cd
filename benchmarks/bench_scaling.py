"""Cost against workload size: the same scenarios at 10,000 and 100,000 requests, in CPU seconds.

Two shapes: the Vidur-shaped one (A100, Llama-2-7B, vLLM scheduler, 512 + 256 tokens at 6 QPS, no
speculation) and the steady speculative one of ``bench_executor.py`` (64 closed-loop clients, i.i.d.
acceptance, SA path) with 200-token outputs. Prints CPU seconds per 1,000 requests for the whole
``simulate`` call and for the loop, and the 100k / 10k ratio of each: linear cost is a ratio near 1.
Target (issue 17): cost grows linearly with requests.
"""

from __future__ import annotations

import time

from loop_timer import LoopTimer
from specplan.config import build_config
from specplan.simulator.run import simulate

SHAPES = {
    "vidur-shaped (no speculation)": {
        "seed": 0,
        "engine": {"engine": "vllm", "max_batch_size": 128, "max_num_tokens": 4096, "enable_prefix_caching": False},
        "speculation": {"decoding_type": "none"},
        "workload": {"trace": None, "arrival": "poisson", "rate": 6.0, "prompt_len": 512, "output_len": 256},
        "cost": {"model": "roofline", "gpu": "a100", "model_name": "llama-2-7b"},
    },
    "steady speculative (SA, alpha 0.7)": {
        "seed": 0,
        "engine": {"max_batch_size": 64, "max_num_tokens": 8192, "kv_num_blocks": 200000},
        "speculation": {"decoding_type": "SA", "max_draft_len": 4, "max_matching_ngram_size": -1},
        "acceptance": {"mode": "alpha", "alpha": 0.7},
        "workload": {"trace": None, "arrival": "closed_loop", "concurrency": 64, "prompt_len": 512, "output_len": 200},
        "cost": {"model": "roofline", "gpu": "h200", "model_name": "llama-3.1-8b"},
    },
}


def run(data: dict, requests: int) -> tuple[float, float]:
    """(whole-call CPU seconds, loop CPU seconds) for ``requests`` requests."""
    data = {**data, "workload": {**data["workload"], "num_requests": requests}}
    loop = LoopTimer()
    t0 = time.process_time()
    simulate(build_config(data), observe=loop)
    return time.process_time() - t0, loop.seconds[0]


def main() -> None:
    for name, data in SHAPES.items():
        run(data, 500)  # warm-up
        small, large = run(data, 10_000), run(data, 100_000)
        print(f"{name}:")
        for label, (whole, loop) in (("10,000 requests", small), ("100,000 requests", large)):
            print(f"  {label}: whole {whole:.2f} CPU-s ({whole / (int(label.split()[0].replace(',', '')) / 1000):.3f} "
                  f"per 1k requests), loop {loop:.2f} CPU-s")
        print(f"  per-request cost, 100k / 10k: whole {large[0] / small[0] / 10:.2f}, loop {large[1] / small[1] / 10:.2f}"
              "  (linear: about 1)")


if __name__ == "__main__":
    main()
