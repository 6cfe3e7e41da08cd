"""Pure table work behind the report: seed averages, series labels, Pareto fronts, histograms."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd


def short_names(columns: Sequence[str]) -> dict[str, str]:
    """Last dotted part of each column, the full name where two would clash."""
    last = [c.rsplit(".", 1)[-1] for c in columns]
    return {c: (s if last.count(s) == 1 else c) for c, s in zip(columns, last)}


def label_rows(df: pd.DataFrame, columns: Sequence[str]) -> pd.Series:
    """``name=value, ...`` per row over ``columns`` (``all runs`` when there are none)."""
    if not columns:
        return pd.Series(["all runs"] * len(df), index=df.index)
    names = short_names(columns)
    return df[list(columns)].apply(lambda r: ", ".join(f"{names[c]}={r[c]}" for c in columns), axis=1)


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
