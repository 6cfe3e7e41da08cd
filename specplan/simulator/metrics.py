"""Per-request, per-iteration and per-emission tables, and the run summary built from them.

Definitions (as vLLM's metrics and seed 002 use them):
- TTFT: first token time minus arrival; TPOT: (finish - first token) / (output tokens - 1) per
  request; ITL: the gap between consecutive emitted chunks of a request (a step can commit
  several tokens at once, so ITL is per chunk, not per token); E2E: finish minus arrival.
- acceptance rate = sum accepted / sum drafted; mean acceptance length = 1 + accepted / drafts,
  where a draft is one request-step that proposed at least one token; per-position acceptance
  = drafts that accepted at least i tokens / drafts.
- throughput = output tokens / makespan (first arrival to last finish).
"""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np
import pandas as pd

from specplan.simulator.emissions import Trace
from specplan.simulator.emissions import ITERATION_FIELDS

PERCENTILES = (50, 90, 99)


def plain(value: Any) -> Any:
    """``value`` as strict JSON types: numpy scalars unwrapped, NaN and infinities as None."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return [plain(v) for v in value.tolist()]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    return value


def request_table(trace: Trace, requests: Optional[list] = None) -> pd.DataFrame:
    """One row per request: id, category and turn (when ``requests`` are given), lengths, times and
    latency metrics (NaN where it never completed)."""
    out_len = trace.olen
    tpot = np.where(out_len > 1, (trace.finish - trace.first_token) / np.maximum(out_len - 1, 1), np.nan)
    return pd.DataFrame({
        "request_id": [r.id for r in requests] if requests else np.arange(trace.n).astype(str),
        "category": [r.category for r in requests] if requests else None,
        "turn": [r.turn for r in requests] if requests else 0,
        "prompt_len": trace.plen,
        "output_len": out_len,
        "arrival_s": trace.arrival,
        "first_token_s": trace.first_token,
        "finish_s": trace.finish,
        "ttft_s": trace.first_token - trace.arrival,
        "tpot_s": tpot,
        "e2e_s": trace.finish - trace.arrival,
        "generated": trace.generated,
    })


def iteration_table(trace: Trace) -> pd.DataFrame:
    """One row per executor iteration."""
    return pd.DataFrame({name: trace.iterations.column(name) for name in ITERATION_FIELDS})


def batch_table(trace: Trace) -> pd.DataFrame:
    """One row per scheduled sequence per iteration (recorded runs only)."""
    b = trace.batches
    if not b:
        return pd.DataFrame({"iteration": [], "request": [], "query_tokens": [], "context_tokens": [], "is_prefill": []})
    return pd.DataFrame({
        "iteration": np.repeat(np.arange(1, len(b) + 1), [len(x[0]) for x in b]),
        "request": np.concatenate([x[0] for x in b]),
        "query_tokens": np.concatenate([x[1] for x in b]),
        "context_tokens": np.concatenate([x[2] for x in b]),
        "is_prefill": np.concatenate([x[3] for x in b]),
    })


def emission_table(trace: Trace) -> pd.DataFrame:
    """One row per emitted chunk: request index, time, tokens."""
    rids, times, toks = trace.emissions.columns()
    return pd.DataFrame({"request": rids, "time_s": times, "tokens": toks}, copy=False)


def inter_token_latencies(emissions: pd.DataFrame) -> np.ndarray:
    """Gaps between consecutive chunks of the same request (the first chunk is TTFT, not ITL).

    A grouped difference in row order (pandas groups by counting, linear time), not a sort of the
    whole table: the executor's emissions are already in time order. Rows that are not are put in
    time order first.
    """
    if emissions.empty:
        return np.array([])
    em = emissions if emissions["time_s"].is_monotonic_increasing else emissions.sort_values("time_s", kind="stable")
    gaps = em.groupby("request", sort=False)["time_s"].diff().to_numpy()
    return gaps[~np.isnan(gaps)]


def _pcts(values: np.ndarray) -> dict:
    v = np.asarray(values, dtype=float)
    v = v[~np.isnan(v)]
    if v.size == 0:
        return {f"p{p}": None for p in PERCENTILES} | {"mean": None}
    out = {f"p{p}": float(np.percentile(v, p)) for p in PERCENTILES}
    out["mean"] = float(v.mean())
    return out


def summarize(trace: Trace, requests: pd.DataFrame, iterations: pd.DataFrame, emissions: pd.DataFrame,
              slo_ttft_s: Optional[float] = None, slo_tpot_s: Optional[float] = None) -> dict:
    """The run's headline figures as a flat JSON-able dict."""
    done = requests["finish_s"].notna().to_numpy()
    out_tokens = int(requests.loc[done, "output_len"].sum())
    start = float(np.nanmin(requests["arrival_s"])) if requests["arrival_s"].notna().any() else 0.0
    end = float(np.nanmax(requests["finish_s"])) if done.any() else start
    span = max(end - start, 1e-12)
    hist = trace.accepted_hist
    drafts = int(hist.sum())
    drafted = int(iterations["drafted"].sum()) if len(iterations) else 0
    accepted = int(iterations["accepted"].sum()) if len(iterations) else 0
    meets = done.copy()
    if slo_ttft_s is not None:
        meets &= (requests["ttft_s"] <= slo_ttft_s).to_numpy()
    if slo_tpot_s is not None:
        meets &= (requests["tpot_s"].fillna(0.0) <= slo_tpot_s).to_numpy()
    survival = hist[::-1].cumsum()[::-1][1:]  # drafts that accepted >= i, i = 1..K
    return {
        "completed_requests": int(done.sum()),
        "output_tokens": out_tokens,
        "makespan_s": span,
        "throughput_tok_s": out_tokens / span,
        "request_throughput_req_s": int(done.sum()) / span,
        "goodput_tok_s": float(requests.loc[meets, "output_len"].sum()) / span,
        "goodput_req_s": int(meets.sum()) / span,
        "mean_acceptance_length": (1.0 + accepted / drafts) if drafts else None,
        "acceptance_rate": (accepted / drafted) if drafted else None,
        "per_position_acceptance": (survival / drafts).tolist() if drafts else [],
        "accepted_histogram": np.trim_zeros(hist, "b").tolist(),  # [i] = drafts that accepted i tokens
        "drafted_tokens": drafted,
        "accepted_tokens": accepted,
        "iterations": int(len(iterations)),
        "spec_iterations": int(iterations["spec_on"].sum()) if len(iterations) else 0,
        "gate_tripped_iteration": trace.gate_tripped_iteration,
        "gate_tripped_s": trace.gate_tripped_time,
        "preemptions": trace.preemptions,
        "mean_batch_rows": float(iterations["batch_rows"].mean()) if len(iterations) else 0.0,
        "ttft_s": _pcts(requests["ttft_s"].to_numpy()),
        "tpot_s": _pcts(requests["tpot_s"].to_numpy()),
        "itl_s": _pcts(inter_token_latencies(emissions)),
        "e2e_s": _pcts(requests["e2e_s"].to_numpy()),
    }
