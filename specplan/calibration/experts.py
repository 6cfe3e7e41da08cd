"""The ``experts`` sweep of an MoE model's calibration: step time against distinct experts touched.

At a fixed step (``tokens`` generation rows of one token over the grid's ``token_context``), the MoE
layers' tokens are sent to exactly ``d`` experts (``moe_block.forced_routing``: balanced loads, so the
tokens, the assignments and the FLOPs stay fixed and only the experts whose weights are read change),
``d`` from ``top_k`` doubling to every expert the step's assignments can reach. The slope of the time
over ``d``, per MoE layer, is the measured counterpart of the roofline's per-distinct-expert term
(``layer_costs``: the routed experts' weight bytes, ``ROUTED_GU`` + ``ROUTED_DOWN``), which
``cost_models.moe`` multiplies by the expected D(n). The forward grid (``grid``) routes uniformly, so
its token-level curve already holds D(n) of the uniform router; this sweep separates the term.

Rows go to ``experts.csv`` (the forward fit must not see steps routed other than by the model's
router); ``summarise`` gives meta.yaml's ``experts`` section.
"""

from __future__ import annotations

import math
import random
import time
from typing import Callable, Optional

import numpy as np
import pandas as pd

from specplan.calibration.grid import GridSpec, Point
from specplan.cost_models.measurements import summary_stat
from specplan.cost_models.models import ModelSpec

MIN_TOKENS = {"cuda": 64, "cpu": 16}
COLUMNS = ("sweep", "point", "pass", "mode", "batch", "context", "distinct", "replays", "seconds")


def sweep_points(model: ModelSpec, grid: GridSpec, device: str) -> tuple[Point, list[int]]:
    """The fixed step and the distinct-expert counts measured at it."""
    moe = model.moe
    tokens = max(MIN_TOKENS[device], math.ceil(moe.num_experts / moe.top_k))
    top = min(moe.num_experts, tokens * moe.top_k)
    counts, d = [], moe.top_k
    while d < top:
        counts.append(d)
        d *= 2
    return Point("experts", tokens, 1, grid.token_context), counts + [top]


def measure(stack, timer: Callable, device: str, grid: GridSpec, block_s: float, passes: int, deadline: float,
            rng: random.Random) -> pd.DataFrame:
    """``passes`` interleaved passes over the sweep in random order, stopping at ``deadline``."""
    point, counts = sweep_points(stack.model, grid, device)
    rows = []
    for rep in range(passes):
        order = counts[:]
        rng.shuffle(order)
        for d in order:
            if time.monotonic() > deadline:
                return pd.DataFrame(rows, columns=list(COLUMNS))
            for mode, (seconds, replays) in timer(stack.step(point, distinct=d), block_s).items():
                rows.append({"sweep": "experts", "point": f"{point.key}-e{d}", "pass": rep, "mode": mode,
                             "batch": point.batch, "context": point.context, "distinct": d, "replays": replays,
                             "seconds": seconds})
    return pd.DataFrame(rows, columns=list(COLUMNS))


def summarise(df: pd.DataFrame, mode: str, model: ModelSpec,
              roofline_s_per_expert: Optional[float] = None) -> Optional[dict]:
    """Seconds per distinct-expert count (``summary_stat`` of the repeats) and the least-squares slope per
    MoE layer, next to the roofline's figure when the GPU is catalogued; None when under two counts."""
    rows = df[df["mode"] == mode]
    per = rows.groupby("distinct")["seconds"].agg(summary_stat(mode)).sort_index()
    if len(per) < 2:
        return None
    slope, intercept = np.polyfit(per.index.to_numpy(dtype=float), per.to_numpy(dtype=float), 1)
    layers = model.moe.num_moe_layers
    return {"tokens": int(rows["batch"].iloc[0]), "context": int(rows["context"].iloc[0]), "mode": mode,
            "distinct": [int(d) for d in per.index], "seconds": [float(s) for s in per],
            "s_per_distinct_expert_per_layer": float(slope / layers), "s_at_zero_experts": float(intercept),
            "moe_layers": layers, "roofline_s_per_distinct_expert_per_layer": roofline_s_per_expert}


def write(df: pd.DataFrame, out, mode: str, model: ModelSpec, gpu_key: Optional[str], tp: int) -> Optional[dict]:
    """Write ``experts.csv`` under ``out`` and return meta.yaml's ``experts`` section. The roofline's figure
    is for BF16 weights, as measured (``cost.weight_format`` bf16), at ``tp``."""
    from pathlib import Path

    from specplan.atomic import atomic_write_text
    from specplan.config import CostConfig
    from specplan.cost_models.hardware import get_gpu
    from specplan.cost_models.layer_costs import ROUTED_DOWN, ROUTED_GU, coefficients

    atomic_write_text(Path(out) / "experts.csv", df.to_csv(index=False))
    roofline = None
    if gpu_key is not None:
        c = coefficients(get_gpu(gpu_key), model, tp, CostConfig(weight_format="bf16"))
        roofline = float(c[ROUTED_GU] + c[ROUTED_DOWN])
    return summarise(df, mode, model, roofline)
