"""What the report's loss explanation costs a sweep run: CPU seconds of the simulation against the
CPU seconds of pricing its cost terms (``simulator.cost_split.cost_terms``: four forward prices per
distinct speculating decode-step shape), for the small example scenario under ``linear_gamma`` and
``roofline``. Measured on the 2-core development machine: 8% and 4% of the simulation.

    python benchmarks/bench_cost_terms.py [--requests 200]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import yaml

from specplan.config import build_config
from specplan.simulator.cost_split import cost_terms
from specplan.simulator.run import build_cost, simulate

SCENARIO = Path(__file__).resolve().parent.parent / "examples" / "scenario_small.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    base = yaml.safe_load(SCENARIO.read_text())
    base["workload"]["num_requests"] = args.requests
    for cost in (base["cost"], {"model": "roofline", "gpu": "h200", "model_name": "llama-3.1-8b"}):
        cfg = build_config({**base, "cost": cost})
        model = build_cost(cfg)
        start = time.process_time()
        result = simulate(cfg, model)
        sim = time.process_time() - start
        start = time.process_time()
        terms = cost_terms(result.iterations, model, cfg.engine.kv_block_size)
        priced = time.process_time() - start
        print(f"{cost['model']:>12}: {len(result.iterations)} iterations ({terms['steps']} priced); "
              f"simulate {sim:.2f} CPU s, cost terms {priced:.2f} CPU s ({priced / sim:.0%})")


if __name__ == "__main__":
    main()
