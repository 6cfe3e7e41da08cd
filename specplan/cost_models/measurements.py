"""The long-format measurement table that ``specplan calibrate`` writes and the fitted models read.

One row per measurement (one timed block of replays of one grid point in one pass):

- ``kind``: ``forward`` (a whole step: decoder stack, LM head and sampling), ``lm_head`` (final norm,
  LM head and argmax alone) or ``ngram_host`` (one request-step of the Python NGram pool);
- ``sweep``, ``point``, ``pass``: which 1-D sweep, which point of it, which interleaved pass;
- ``mode``: ``graph`` (CUDA-graph replay, CUDA events), ``eager`` (eager launches, CUDA events),
  ``wall`` (host wall clock: CPU runs and the NGram pool) or ``cpu`` (the calibrating thread's CPU
  time, CPU runs: steady on a shared host, and what a CPU profile is fitted to);
- ``batch``, ``query_len``, ``context``, ``is_prefill``: the uniform rows of the step (every row has the
  same query length and context); ``num_tokens`` = batch * query_len; ``logit_tokens``: positions whose
  logits are computed (all of a generation row's, the last of a prefill row's);
- ``pool_entries``, ``draft_len``: NGram pool size and K (``ngram_host`` rows);
- ``replays``: calls in the block; ``seconds``: mean seconds per call over the block (``graph``,
  ``eager``, ``ngram_host``), or the fastest call of the block (``wall`` and ``cpu`` forward and
  LM-head rows, robust to other processes on a shared CPU).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from specplan.errors import SpecplanError

COLUMNS = (
    "kind", "sweep", "point", "pass", "mode", "batch", "query_len", "context", "is_prefill",
    "num_tokens", "logit_tokens", "pool_entries", "draft_len", "replays", "seconds",
)
KINDS = ("forward", "lm_head", "ngram_host")
INT_COLUMNS = ("batch", "query_len", "context", "num_tokens", "logit_tokens")


def read_measurements(path: str | Path) -> pd.DataFrame:
    """Read a measurement CSV; one-line error naming the file and the missing column."""
    try:
        df = pd.read_csv(path)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise SpecplanError(f"{path}: cannot read measurements ({exc})") from None
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise SpecplanError(f"{path}: column {missing[0]}: missing (expected {', '.join(COLUMNS)})")
    bad = sorted(set(df["kind"]) - set(KINDS))
    if bad:
        raise SpecplanError(f"{path}: column kind: unknown value {bad[0]!r}")
    return df


def summary_stat(mode: str) -> str:
    """How repeats of a point combine: ``median`` of GPU timings; ``min`` of CPU timings, the least
    disturbed by other processes on a shared host."""
    return "min" if mode in ("wall", "cpu") else "median"


def preferred_mode(df: pd.DataFrame) -> str:
    """The timing mode profiles are fitted to: ``graph`` (GPU runs), else ``cpu``, else ``wall``."""
    modes = set(df.loc[df["kind"] == "forward", "mode"])
    return next((m for m in ("graph", "cpu") if m in modes), "wall")


def forward_points(df: pd.DataFrame, mode: str | None = None) -> pd.DataFrame:
    """Seconds per forward point (``summary_stat`` of its repeats), one row each, in one timing mode.

    ``mode`` None takes ``preferred_mode``. Adds ``p10`` and ``p90`` of the repeats as the spread.
    """
    mode = mode or preferred_mode(df)
    fwd = df[(df["kind"] == "forward") & (df["mode"] == mode)].astype({c: "int64" for c in INT_COLUMNS})
    fwd["is_prefill"] = fwd["is_prefill"].astype(str).str.lower().isin(["true", "1", "1.0"])
    keys = ["sweep", "point", "batch", "query_len", "context", "is_prefill", "num_tokens", "logit_tokens"]
    grouped = fwd.groupby(keys, as_index=False, sort=True)["seconds"]
    out = grouped.agg(summary_stat(mode))
    out["p10"] = grouped.quantile(0.1)["seconds"].to_numpy()
    out["p90"] = grouped.quantile(0.9)["seconds"].to_numpy()
    out["repeats"] = grouped.count()["seconds"].to_numpy()
    out["mode"] = mode
    return out
