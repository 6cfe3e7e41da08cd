"""Microseconds per ``step_time`` call of each cost model, on the batches the event loop prices.

``python benchmarks/bench_cost.py``: the simulator calls ``step_time`` once per iteration with up to
256 rows, so each model should stay well under 50 us per call. Reports the fastest of five means
(the least disturbed by other processes).
"""

from __future__ import annotations

import time

import numpy as np

from specplan.config import CostConfig
from specplan.cost_models.base import StepBatch
from specplan.cost_models.registry import make_cost_model

CONFIGS = {
    "roofline": CostConfig(),
    "roofline 70B TP8": CostConfig(model_name="llama-3.1-70b", tp=8),
    "linear_gamma": CostConfig(model="linear_gamma", t_base_s={1: 0.01, 256: 0.03}, gamma={1: 0.0, 256: 0.4}),
    "table": CostConfig(model="table", table_s={1: {0: 0.01, 8: 0.02}, 256: {0: 0.03, 8: 0.09}}),
    "linear": CostConfig(model="linear", linear_coefficients={"c0_s": 2e-3, "c_tok_s": 1e-5, "c_kv_s": 2e-8,
                                                              "c_seq_s": 4e-6}),
}


def batches() -> dict[str, StepBatch]:
    rng = np.random.default_rng(0)
    return {
        "decode B=256 K=4": StepBatch.decode(256, 5, 2048),
        "mixed B=256": StepBatch(rng.integers(1, 6, 256), rng.integers(0, 8192, 256), np.arange(256) % 32 == 0),
        "decode B=8": StepBatch.decode(8, 5, 2048),
    }


def mean_call_us(model, batch, calls: int = 2000) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        model.step_time(batch)
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    shapes = batches()
    print(f"{'model':<18}" + "".join(f"{name:>20}" for name in shapes))
    for label, cfg in CONFIGS.items():
        model = make_cost_model(cfg)
        cells = [min(mean_call_us(model, b) for _ in range(5)) for b in shapes.values()]
        print(f"{label:<18}" + "".join(f"{us:>17.1f} us" for us in cells))


if __name__ == "__main__":
    main()
