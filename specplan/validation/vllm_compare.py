"""Engine steps against simulated iterations, iteration by iteration and request by request.

Both sides become the same tables. Per iteration: ``rows`` (requests scheduled), ``decode_rows``
(rows past their prompt), ``scheduled`` (tokens: prefill chunks plus 1 + verified drafts),
``drafted``, ``accepted`` and ``committed``. Per request: ``steps`` (iterations it was scheduled
in), ``drafted`` and ``accepted`` summed over them. Iteration ``i`` of the engine is compared with
iteration ``i`` of the simulation; the first iteration where any column differs is the
``first_difference``.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import pandas as pd

ITERATION_COLUMNS = ("rows", "decode_rows", "scheduled", "drafted", "accepted", "committed")
REQUEST_COLUMNS = ("steps", "drafted", "accepted")


def engine_rows(run, prompt_lens: dict[str, int]) -> pd.DataFrame:
    """One row per (step, request) of an ``EngineRun``, with ``decode`` (its prompt was done before: the
    request has committed a token, which its last prefill chunk samples; with prefix caching its
    chunks add up to less than the prompt) and ``context``: the tokens in its KV cache when the step
    starts (vLLM's ``num_computed_tokens``). A prefill chunk starts after the chunks before it (and,
    with prefix caching, after its cache hit, not counted here); a decode row after its prompt and
    every committed token but the last, which this step computes (rejected drafts were rolled back).
    """
    df = pd.DataFrame([r.__dict__ for r in run.rows])
    g = df.groupby("request")
    before = (g["scheduled"].cumsum() - df["scheduled"]).to_numpy()
    committed_before = (g["committed"].cumsum() - df["committed"]).to_numpy()
    plen = df["request"].map(prompt_lens).to_numpy()
    df["decode"] = committed_before > 0
    df["context"] = np.where(df["decode"], plen + committed_before - 1, before)
    return df


def sim_rows(result, ids: Sequence[str]) -> pd.DataFrame:
    """The same rows from a simulation recorded with ``record_batches`` (request index -> id).

    A decode row verified ``query_tokens - 1`` drafts and accepted ``committed - 1`` of them (at a
    request's last step, the acceptance its commit kept; should vLLM count more there, the
    ``accepted`` column shows the gap).
    """
    b = result.batches
    em = result.emissions
    its = result.iterations.sort_values("iteration").reset_index(drop=True)
    end = (its["start_s"] + its["step_s"]).to_numpy(dtype=float)
    # An emission happens at its iteration's end; iterations never share an end time (steps > 0).
    em_it = its["iteration"].to_numpy()[np.searchsorted(end, em["time_s"].to_numpy(dtype=float) - 1e-12)]
    committed = pd.Series(em["tokens"].to_numpy(), index=pd.MultiIndex.from_arrays([em_it, em["request"]]))
    df = pd.DataFrame({"step": b["iteration"].to_numpy(), "request": np.asarray(ids, dtype=object)[b["request"]],
                       "scheduled": b["query_tokens"].to_numpy(), "decode": ~b["is_prefill"].to_numpy(dtype=bool)})
    key = pd.MultiIndex.from_arrays([b["iteration"].to_numpy(), b["request"].to_numpy()])
    df["committed"] = committed.reindex(key).fillna(0).astype(int).to_numpy()
    df["drafted"] = np.where(df["decode"], df["scheduled"] - 1, 0)
    df["accepted"] = np.where(df["decode"] & (df["drafted"] > 0), np.maximum(df["committed"] - 1, 0), 0)
    return df


def per_iteration(rows: pd.DataFrame) -> pd.DataFrame:
    """The iteration table of a row table."""
    g = rows.groupby("step", sort=True)
    return pd.DataFrame({"rows": g.size(), "decode_rows": g["decode"].sum(), "scheduled": g["scheduled"].sum(),
                         "drafted": g["drafted"].sum(), "accepted": g["accepted"].sum(),
                         "committed": g["committed"].sum()}).astype(int).rename_axis("iteration")


def per_request(rows: pd.DataFrame, ids: Sequence[str]) -> pd.DataFrame:
    """The request table of a row table, in ``ids`` order."""
    g = rows.groupby("request", sort=False)
    return pd.DataFrame({"steps": g.size(), "drafted": g["drafted"].sum(),
                         "accepted": g["accepted"].sum()}).reindex(list(ids)).fillna(0).astype(int)


def compare(engine_its: pd.DataFrame, sim_its: pd.DataFrame, engine_req: pd.DataFrame,
            sim_req: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """The joined per-iteration table (``engine_*``, ``sim_*``, ``differs``) and the summary counts."""
    n = max(len(engine_its), len(sim_its))
    idx = pd.RangeIndex(1, n + 1, name="iteration")
    e, s = engine_its.reindex(idx), sim_its.reindex(idx)
    table = pd.DataFrame(index=idx)
    for col in ITERATION_COLUMNS:
        table[f"engine_{col}"] = e[col].astype("Int64")
        table[f"sim_{col}"] = s[col].astype("Int64")
    both = e.notna().all(axis=1) & s.notna().all(axis=1)
    diff = pd.DataFrame({c: (e[c] != s[c]) & both for c in ITERATION_COLUMNS})
    table["differs"] = diff.any(axis=1) | ~both
    compared = int(both.sum())
    first: Optional[dict] = None
    if table["differs"].any():
        it = int(table.index[table["differs"].to_numpy()][0])
        first = {"iteration": it, "columns": [c for c in ITERATION_COLUMNS if bool(diff.loc[it, c])] or
                 ["missing on one side"],
                 "engine": {c: _int(e.loc[it, c]) for c in ITERATION_COLUMNS},
                 "sim": {c: _int(s.loc[it, c]) for c in ITERATION_COLUMNS}}
    req_equal = (engine_req == sim_req)
    summary = {
        "engine_iterations": int(len(engine_its)), "sim_iterations": int(len(sim_its)),
        "iterations_compared": compared, "iterations_differing": int(diff.loc[both].any(axis=1).sum()),
        "iterations_differing_by_column": {c: int(diff.loc[both, c].sum()) for c in ITERATION_COLUMNS},
        "requests": int(len(engine_req)), "requests_steps_equal": int(req_equal["steps"].sum()),
        "requests_drafted_equal": int(req_equal["drafted"].sum()),
        "requests_accepted_equal": int(req_equal["accepted"].sum()),
        "first_difference": first,
    }
    return table.reset_index(), summary


def _int(v):
    return None if pd.isna(v) else int(v)

