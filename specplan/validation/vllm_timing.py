"""Time as well as schedule: the engine's measured step times against the simulated ones, when the
simulation is priced by a profile of the engine's device (``validate --engine vllm --profile P``).

Both sides start every request at 0 and run their steps back to back, so a step ends at the running
sum of step times. Per iteration (engine step ``i`` against simulated iteration ``i``): the absolute
percentage error of the step time, and its signed mean (bias). End to end: throughput (committed
tokens over the total time) and mean TPOT (a request's last emission minus its first over its output
tokens - 1), each as the simulation's relative error against the engine's.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd


def request_tpot(rows: pd.DataFrame, step_s: Sequence[float]) -> pd.Series:
    """Per request of a row table (``step`` 1-based, ``request``, ``committed``) with those step times."""
    ends = np.cumsum(np.asarray(step_s, dtype=float))
    emitted = rows[rows["committed"] > 0]
    t = pd.Series(ends[emitted["step"].to_numpy() - 1], index=emitted.index)
    g = pd.DataFrame({"request": emitted["request"], "t": t, "tokens": emitted["committed"]}).groupby("request")
    tokens = g["tokens"].sum()
    span = g["t"].max() - g["t"].min()
    return (span / (tokens - 1)).where(tokens > 1).dropna()


def timing(engine_rows: pd.DataFrame, engine_step_s: Sequence[float], sim_rows: pd.DataFrame,
           sim_step_s: Sequence[float]) -> dict:
    """Per-iteration step-time error and end-to-end throughput and TPOT errors (fractions)."""
    e, s = np.asarray(engine_step_s, dtype=float), np.asarray(sim_step_s, dtype=float)
    n = min(len(e), len(s))
    rel = (s[:n] - e[:n]) / e[:n]
    tokens = float(engine_rows["committed"].sum())
    thr_e, thr_s = tokens / e.sum(), float(sim_rows["committed"].sum()) / s.sum()
    tpot_e, tpot_s = request_tpot(engine_rows, e).mean(), request_tpot(sim_rows, s).mean()
    return {"iterations_timed": int(n), "median_step_ape": float(np.median(np.abs(rel))),
            "p90_step_ape": float(np.quantile(np.abs(rel), 0.9)), "step_bias": float(rel.mean()),
            "engine_throughput_tok_s": thr_e, "sim_throughput_tok_s": thr_s, "throughput_error": thr_s / thr_e - 1,
            "engine_mean_tpot_s": float(tpot_e), "sim_mean_tpot_s": float(tpot_s),
            "tpot_error": float(tpot_s / tpot_e - 1)}
