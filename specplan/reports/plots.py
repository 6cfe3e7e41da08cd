"""The report's figures, drawn with matplotlib into PNG files (whatever backend is active: Agg on a
headless machine, inline in a notebook; figures are closed after saving)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from specplan.atomic import atomic_write

MAX_SERIES = 8


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=110))
    plt.close(fig)
    return path


def speedup(points: pd.DataFrame, x: str, xlabel: str, series: pd.Series, path: Path) -> Path:
    """Throughput and mean-TPOT speedup against ``x``, one line per series (seed means)."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    scatter = x == "mean_batch_rows"  # measured x: points, not lines
    for label in list(dict.fromkeys(series))[:MAX_SERIES]:
        sel = points[series == label].sort_values(x)
        for ax, col in zip(axes, ("speedup", "tpot_speedup")):
            ax.plot(sel[x], sel[col], "o" if scatter else "o-", label=label, ms=4)
    for ax, title in zip(axes, ("output throughput, spec / baseline", "mean TPOT, baseline / spec")):
        ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("speedup")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    return _save(fig, path)


def throughput_vs_tpot(points: pd.DataFrame, front: np.ndarray, labels: pd.Series, path: Path) -> Path:
    """Every point's throughput against its p99 TPOT, the Pareto front joined and labelled."""
    fig, ax = plt.subplots(figsize=(7.5, 5))
    x, y = points["tpot_s.p99"] * 1e3, points["throughput_tok_s"]
    ax.scatter(x[~front], y[~front], s=14, color="tab:blue", alpha=0.6, label="runs (seed means)")
    order = np.argsort(x[front].to_numpy())
    fx, fy = x[front].to_numpy()[order], y[front].to_numpy()[order]
    ax.plot(fx, fy, "o-", color="tab:red", ms=6, label="Pareto front")
    for xi, yi, lab in zip(fx, fy, labels[front].to_numpy()[order]):
        ax.annotate(lab, (xi, yi), fontsize=6, xytext=(4, 3), textcoords="offset points")
    ax.set_xlabel("p99 TPOT (ms)")
    ax.set_ylabel("output throughput (tokens/s)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def acceptance_lengths(dists: dict[str, np.ndarray], path: Path) -> Path:
    """P(acceptance length) per group, grouped bars."""
    fig, ax = plt.subplots(figsize=(8, 4.2))
    items = list(dists.items())[:MAX_SERIES]
    width = 0.8 / max(len(items), 1)
    for j, (label, p) in enumerate(items):
        lengths = np.arange(1, len(p) + 1)
        ax.bar(lengths + (j - (len(items) - 1) / 2) * width, p, width=width, label=label)
    ax.set_xlabel("acceptance length (accepted draft tokens + 1)")
    ax.set_ylabel("fraction of drafts")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7)
    return _save(fig, path)


def gamma_curves(curves: dict[str, tuple[np.ndarray, np.ndarray]], path: Path) -> Path:
    """gamma(B) per cost profile and K."""
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    for label, (b, g) in curves.items():
        ax.plot(b, g, "-", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size B")
    ax.set_ylabel("gamma(B, K) = (T(B,1+K) - T(B,1)) / (K T(B,1))")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6)
    return _save(fig, path)


def gate_trips(labels: Sequence[str], makespan: np.ndarray, tripped: np.ndarray, path: Path) -> Path:
    """One bar per gated run over its makespan, a marker where the gate tripped (none: never)."""
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(labels) + 1.5))
    y = np.arange(len(labels))
    ax.barh(y, makespan, color="lightgrey", label="makespan")
    hit = ~np.isnan(tripped)
    ax.plot(tripped[hit], y[hit], "rx", ms=8, label="gate tripped")
    ax.set_yticks(y, labels, fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("simulated time (s)")
    ax.legend(fontsize=7)
    return _save(fig, path)
