"""Pure table work behind the report: seed averages, series labels, figure layouts (colour per K, facets), Pareto
fronts, histograms, latencies in ms."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np
import pandas as pd

# Axes that set the load: with a measured x (mean batch rows) their values are points along a line.
LOAD_AXES = ("workload.rate", "workload.concurrency", "engine.max_batch_size", "workload.num_requests")
LATENCY = re.compile(r"^(ttft|tpot|itl|e2e)_s\.(p\d+|mean)$")


def short_names(columns: Sequence[str]) -> dict[str, str]:
    """Last dotted part of each column, the full name where two would clash."""
    last = [c.rsplit(".", 1)[-1] for c in columns]
    return {c: (s if last.count(s) == 1 else c) for c, s in zip(columns, last)}


def label_rows(df: pd.DataFrame, columns: Sequence[str]) -> pd.Series:
    """``name=value, ...`` per row over ``columns`` (``all runs`` when there are none), each value
    as its column holds it (column by column: a row-wise pass would turn ints into floats)."""
    if not columns:
        return pd.Series(["all runs"] * len(df), index=df.index)
    names = short_names(columns)
    parts = [[f"{names[c]}={v}" for v in df[c].tolist()] for c in columns]
    return pd.Series([", ".join(p) for p in zip(*parts)], index=df.index)


@dataclass(frozen=True)
class Layout:
    """How a figure against ``x`` splits the points: one colour per value of ``colour`` (the
    speculation axis the operator chooses, usually K), one panel per combination of ``facets``;
    ``along`` are axes whose values become points along a line (the load, when x is measured)."""

    x: str
    colour: Optional[str]
    facets: tuple[str, ...]
    along: tuple[str, ...] = ()


def layout(axes: Sequence[str], zipped: Sequence[str], x: str) -> Layout:
    """The layout for ``x`` over a sweep's axes: axes zipped with ``x`` move with it (they are not
    separate lines); a measured ``x`` takes the load axes as points along each line."""
    others = [a for a in axes if a != x and not (x in zipped and a in zipped)]
    along = tuple(a for a in others if a in LOAD_AXES) if x not in axes else ()
    rest = [a for a in others if a not in along]
    colour = next((a for a in rest if a.startswith("speculation.")), rest[0] if rest else None)
    return Layout(x, colour, tuple(a for a in rest if a != colour), along)


def ms_columns(df: pd.DataFrame) -> pd.DataFrame:
    """Latency columns (``tpot_s.p99`` ...) in milliseconds, renamed ``tpot p99 (ms)``; the rest as is."""
    out = df.copy()
    for c in df.columns:
        m = LATENCY.match(str(c))
        if m:
            out[c] = df[c] * 1e3
            out = out.rename(columns={c: f"{m.group(1)} {m.group(2)} (ms)"})
    return out


def seed_means(df: pd.DataFrame, axes: Sequence[str]) -> pd.DataFrame:
    """Numeric columns averaged over seeds, one row per point (the axes' combination), sweep order kept."""
    numeric = [c for c in df.columns if c not in axes and c != "seed" and pd.api.types.is_numeric_dtype(df[c])]
    if not axes:
        return df[numeric].mean().to_frame().T
    return df.groupby(list(axes), sort=False, dropna=False)[numeric].mean().reset_index()


def pareto_front(cost: np.ndarray, value: np.ndarray) -> np.ndarray:
    """Mask of points no other point beats: none has ``cost <=`` and ``value >=`` with one strict.

    Lower ``cost`` and higher ``value`` are better; NaN points are never on the front.
    """
    cost, value = np.asarray(cost, dtype=float), np.asarray(value, dtype=float)
    on = np.zeros(len(cost), dtype=bool)
    ok = np.flatnonzero(~(np.isnan(cost) | np.isnan(value)))
    best = -np.inf
    # by cost ascending, then value descending: a point is on the front iff it beats every cheaper one
    for i in ok[np.lexsort((-value[ok], cost[ok]))]:
        if value[i] > best:
            on[i] = True
            best = value[i]
    return on


def acceptance_length_distribution(histograms: Sequence[Sequence[int]]) -> np.ndarray:
    """P(acceptance length = 1 + i) from summed per-run histograms (``[i]`` = drafts accepting i tokens)."""
    hists = [np.asarray(h, dtype=float) for h in histograms if h is not None and len(h)]
    if not hists:
        return np.array([])
    total = np.zeros(max(len(h) for h in hists))
    for h in hists:
        total[: len(h)] += h
    return total / total.sum() if total.sum() > 0 else np.array([])


def md_table(df: pd.DataFrame) -> str:
    """A GitHub Markdown table; floats to four significant digits, missing values as '-'."""
    def fmt(v) -> str:
        if v is None or (isinstance(v, float) and np.isnan(v)):
            return "-"
        if isinstance(v, (float, np.floating)):
            return f"{v:.4g}"
        return str(v).replace("|", "\\|")

    head = "| " + " | ".join(map(str, df.columns)) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    body = ["| " + " | ".join(fmt(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join([head, rule, *body])
