"""Simulator speed on a mixture-of-experts model against a dense one, in CPU seconds.

``python benchmarks/bench_moe.py``: the steady scenario of ``bench_executor.py``
(``scenarios/steady.yaml``: 64 closed-loop clients, K = 4, roofline on H200) run on Llama-3.1-8B and
on Qwen3-30B-A3B (top-8 of 128 experts, priced per step with the distinct-experts term), then on
gpt-oss-20b (MXFP4 experts, sliding window).
The MoE price is compiled with the rest of the step (``roofline_parts``), so the in-loop CPU seconds
per iteration should stay within 10% of the dense model's. Best of ``--repeat`` runs after a warm-up;
the last two columns time the compiled step price alone (nanoseconds per call, best of five).
"""

from __future__ import annotations

import argparse
import copy
import time
from pathlib import Path

import yaml
from numba import njit

from loop_timer import measure
from specplan.config import CostConfig
from specplan.cost_models.registry import make_cost_model
from specplan.cost_models.roofline import roofline_step_time

STEADY = yaml.safe_load((Path(__file__).parent / "scenarios" / "steady.yaml").read_text())


@njit(cache=True)
def _price_many(c, calls):
    """Price ``calls`` decode steps of 1..256 rows at K = 4 inside compiled code (as the span loop does)."""
    total = 0.0
    for i in range(calls):
        b = i % 256 + 1
        total += roofline_step_time(c, b, 5 * b, 5 * b, b * 2053.0, 0.0, b * 10275.0, 0.0)
    return total


def price_ns(model: str, calls: int = 2_000_000) -> float:
    """Nanoseconds per compiled step price (best of five)."""
    c = make_cost_model(CostConfig(model_name=model)).coefficients
    _price_many(c, 10)
    best = float("inf")
    for _ in range(5):
        t0 = time.process_time()
        _price_many(c, calls)
        best = min(best, time.process_time() - t0)
    return best / calls * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--requests", type=int, default=640)
    args = parser.parse_args()
    rows = []
    for model in ("llama-3.1-8b", "qwen3-30b-a3b", "gpt-oss-20b"):
        data = copy.deepcopy(STEADY)
        data["cost"]["model_name"] = model
        data["workload"]["num_requests"] = args.requests
        summary, whole, loop = measure(data, args.repeat)
        per_it = loop / summary["iterations"] * 1e6
        rows.append((model, summary["iterations"], whole, loop, per_it))
    dense_per_it = rows[0][4]
    dense_ns = price_ns(rows[0][0])
    print(f"{'model':<16}{'iterations':>12}{'whole CPU s':>14}{'loop CPU s':>13}{'us/iteration':>15}{'vs dense':>10}"
          f"{'ns/price':>10}{'vs dense':>10}")
    for model, iterations, whole, loop, per_it in rows:
        ns = price_ns(model)
        print(f"{model:<16}{iterations:>12,}{whole:>14.3f}{loop:>13.3f}{per_it:>15.2f}{per_it / dense_per_it - 1:>+10.1%}"
              f"{ns:>10.1f}{ns / dense_ns - 1:>+10.1%}")


if __name__ == "__main__":
    main()
