"""Time as well as schedule: the engine's measured step times against the simulated ones, when the
simulation is priced by a profile of the engine's device (``validate --engine vllm --profile P``).

Both sides start every request at 0 and run their steps back to back, so a step ends at the running
sum of step times. The engine's first step is its warm-up (``step_errors.WARMUP_STEPS``), reported
apart and left out of every figure below. Per iteration (engine step ``i`` against simulated iteration ``i``): the absolute
percentage error of the step time, and its signed mean (bias). End to end: throughput (committed
tokens over the total time) and mean TPOT (a request's last emission minus its first over its output
tokens - 1), each as the simulation's relative error against the engine's.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import pandas as pd

from specplan.calibration.step_errors import WARMUP_STEPS, request_tpot, residuals, step_classes

STEP_LOG_COLUMNS = ("step", "request", "scheduled", "drafted", "accepted", "committed", "accepted_stats",
                    "is_prefill", "context", "step_s", "host_s")


def step_log(rows: pd.DataFrame, step_s: Sequence[float], host_s: Optional[Sequence[float]] = None) -> pd.DataFrame:
    """``engine_steps.csv``: every request in every engine step (``vllm_compare.engine_rows``), with the
    step's measured seconds and, of them, the scheduler's host seconds repeated on each of its rows
    (the input of ``specplan calibrate --from-logs``)."""
    out = rows.assign(is_prefill=~rows["decode"].astype(bool))
    idx = out["step"].to_numpy() - 1
    out["step_s"] = np.asarray(step_s, dtype=float)[idx]
    out["host_s"] = np.asarray(host_s, dtype=float)[idx] if host_s is not None and len(host_s) else np.nan
    return out[list(STEP_LOG_COLUMNS)]


def timing(engine_rows: pd.DataFrame, engine_step_s: Sequence[float], sim_rows: pd.DataFrame,
           sim_step_s: Sequence[float]) -> dict:
    """Per-iteration step-time error and end-to-end throughput and TPOT errors (fractions), after the
    engine's warm-up (``WARMUP_STEPS``: its seconds are reported, not compared); given a step log
    (``step_log``) as ``engine_rows``, also the ``residuals`` by class of step."""
    e, s = np.asarray(engine_step_s, dtype=float), np.asarray(sim_step_s, dtype=float)
    n, w = min(len(e), len(s)), WARMUP_STEPS
    rel = (s[w:n] - e[w:n]) / e[w:n]
    thr_e = float(engine_rows.loc[engine_rows["step"] > w, "committed"].sum()) / e[w:].sum()
    thr_s = float(sim_rows.loc[sim_rows["step"] > w, "committed"].sum()) / s[w:].sum()
    tpot_e, tpot_s = request_tpot(engine_rows, e).mean(), request_tpot(sim_rows, s).mean()
    out = {"iterations_timed": int(n - w), "warmup": {"steps": w, "engine_s": e[:w].tolist(), "sim_s": s[:w].tolist()},
           "median_step_ape": float(np.median(np.abs(rel))),
           "p90_step_ape": float(np.quantile(np.abs(rel), 0.9)), "step_bias": float(rel.mean()),
           "engine_throughput_tok_s": thr_e, "sim_throughput_tok_s": thr_s, "throughput_error": thr_s / thr_e - 1,
           "engine_mean_tpot_s": float(tpot_e), "sim_mean_tpot_s": float(tpot_s),
           "tpot_error": float(tpot_s / tpot_e - 1)}
    if {"is_prefill", "drafted"} <= set(engine_rows.columns):  # a step log: where the error sits
        out["residuals"] = residuals(step_classes(engine_rows).iloc[w:n], e[w:n], s[w:n])
    return out
