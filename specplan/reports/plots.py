"""The report's figures, drawn with matplotlib into PNG files (whatever backend is active: Agg on a
headless machine, inline in a notebook; figures are closed after saving).

Every figure shows all of its data (no series dropped: many series get one colour each from an
ordered colour map, many facets get one row of panels each) and is written with the data behind it
beside it, ``NAME.csv`` next to ``NAME.png``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from specplan.atomic import atomic_write
from specplan.reports.analysis import Layout, label_rows, short_names

MARKERS = "osD^vP*X<>ph"  # with the colour, tells neighbouring values of a colour map apart
BASELINE = "baseline (speculation off)"


LEGEND_AT = 0.8  # share of the width left to the panels when the legend sits on the right


def _legend(fig, *args, **kwargs) -> None:
    """The figure's legend just right of the panels, outside them so it covers no data."""
    fig.legend(*args, loc="center left", bbox_to_anchor=(LEGEND_AT, 0.5), **kwargs)


def _save(fig, path: Path, data: pd.DataFrame, legend_room: bool = False) -> Path:
    """Write the PNG and its CSV, both atomically."""
    fig.tight_layout(rect=(0, 0, LEGEND_AT if legend_room else 1, 1))
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=110))
    plt.close(fig)
    atomic_write(path.with_suffix(".csv"), lambda tmp: data.to_csv(tmp, index=False))
    return path


def colours(values: Sequence) -> dict:
    """One colour per distinct value: an ordered map (viridis) over sorted numbers, else categories."""
    distinct = list(dict.fromkeys(values))
    numeric = all(isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) for v in distinct)
    if numeric:
        distinct = sorted(distinct)
        cmap = plt.get_cmap("viridis")
        return {v: cmap(0.9 * i / max(len(distinct) - 1, 1)) for i, v in enumerate(distinct)}
    cmap = plt.get_cmap("tab10" if len(distinct) <= 10 else "tab20")
    return {v: cmap(i % cmap.N) for i, v in enumerate(distinct)}


def _style(i: int, colour) -> dict:
    return {"color": colour, "marker": MARKERS[i % len(MARKERS)], "ms": 4}


def speedup(points: pd.DataFrame, lay: Layout, xlabel: str, axes_cols: Sequence[str], path: Path) -> Path:
    """Throughput and mean-TPOT speedup against ``lay.x``: one row of two panels per facet, one line
    per value of ``lay.colour`` (seed means), the baseline at 1.0. The CSV has every point with its
    ``#``, its series (the colour's value) and ``axes_cols``."""
    facets = label_rows(points, lay.facets)
    groups = points[lay.colour].tolist() if lay.colour else ["all runs"] * len(points)
    palette = colours(groups)
    facet_names = list(dict.fromkeys(facets))
    fig, axes = plt.subplots(len(facet_names), 2, figsize=(12, 3.6 * len(facet_names) + 0.4), squeeze=False)
    for row, facet in zip(axes, facet_names):
        in_facet = (facets == facet).to_numpy()
        for i, value in enumerate(palette):
            sel = points[in_facet & (np.array(groups, dtype=object) == value)].sort_values(lay.x)
            for ax, col in zip(row, ("speedup", "tpot_speedup")):
                ax.plot(sel[lay.x], sel[col], "-", label=str(value), **_style(i, palette[value]))
        for ax, title in zip(row, ("output throughput, spec / baseline", "mean TPOT, baseline / spec")):
            ax.axhline(1.0, color="black", lw=1.0, ls="--", label=BASELINE)
            ax.set_xlabel(xlabel)
            ax.set_ylabel("speedup")
            ax.set_title(title if facet == "all runs" else f"{title}\n{facet}", fontsize=9)
            ax.grid(alpha=0.3)
    entries: dict = {}  # label -> handle over every panel (a facet may lack some series)
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            entries.setdefault(label, handle)
    _legend(fig, list(entries.values()), list(entries), fontsize=7, title_fontsize=8,
            title=short_names([lay.colour])[lay.colour] if lay.colour else None)
    data = points[list(dict.fromkeys(["#", *axes_cols, lay.x, "speedup", "tpot_speedup"]))].copy()
    data.insert(1, "series", groups)
    return _save(fig, path, data, legend_room=True)


def throughput_vs_tpot(points: pd.DataFrame, front: np.ndarray, colour: Optional[str], axes_cols: Sequence[str],
                       baselines: pd.DataFrame, path: Path) -> Path:
    """Every point's throughput against its p99 TPOT, coloured by ``colour`` (K), the Pareto front
    joined and numbered, the baselines (speculation off) as black crosses."""
    fig, ax = plt.subplots(figsize=(9, 5.5))
    x, y = points["tpot_s.p99"].to_numpy() * 1e3, points["throughput_tok_s"].to_numpy()
    groups = points[colour].tolist() if colour else ["runs"] * len(points)
    palette = colours(groups)
    for i, value in enumerate(palette):
        sel = np.array(groups, dtype=object) == value
        ax.scatter(x[sel], y[sel], s=22, color=palette[value], marker=MARKERS[i % len(MARKERS)], label=str(value))
    order = np.argsort(x[front])
    fx, fy, fn = x[front][order], y[front][order], points["#"].to_numpy()[front][order]
    ax.plot(fx, fy, "-", color="tab:red", lw=1.2, label="Pareto front")
    for xi, yi, n in zip(fx, fy, fn):
        ax.annotate(f"#{n}", (xi, yi), fontsize=6, xytext=(4, 3), textcoords="offset points")
    if len(baselines):
        ax.scatter(baselines["tpot p99 (ms)"], baselines["throughput_tok_s"], s=50, color="black", marker="x",
                   label=BASELINE)
    ax.set_xlabel("p99 TPOT (ms)")
    ax.set_ylabel("output throughput (tokens/s)")
    ax.grid(alpha=0.3)
    _legend(fig, title=short_names([colour])[colour] if colour else None, fontsize=7,
               title_fontsize=8)
    data = points[["#", *axes_cols]].assign(**{"tpot p99 (ms)": x, "throughput_tok_s": y, "pareto": front,
                                               "kind": "point"})
    return _save(fig, path, pd.concat([data, baselines.assign(kind="baseline")], ignore_index=True), legend_room=True)


def acceptance_lengths(dists: dict[str, np.ndarray], path: Path, keys: Optional[dict] = None) -> Path:
    """P(acceptance length) per group, grouped bars, every group drawn; ``keys`` (label -> value,
    e.g. K) colour the groups as the other figures colour that value."""
    fig, ax = plt.subplots(figsize=(10, 4.5))
    items = list(dists.items())
    width = 0.8 / max(len(items), 1)
    keys = keys or {label: label for label in dists}
    palette = colours(list(keys.values()))
    for j, (label, p) in enumerate(items):
        lengths = np.arange(1, len(p) + 1)
        ax.bar(lengths + (j - (len(items) - 1) / 2) * width, p, width=width, label=label, color=palette[keys[label]])
    ax.set_xlabel("acceptance length (accepted draft tokens + 1)")
    ax.set_ylabel("fraction of drafts")
    ax.grid(alpha=0.3, axis="y")
    _legend(fig, fontsize=6)
    data = pd.DataFrame([{"setting": k, "acceptance_length": i + 1, "fraction": float(v)}
                         for k, p in items for i, v in enumerate(p)])
    return _save(fig, path, data, legend_room=True)


def gamma_curves(curves: dict[str, tuple[np.ndarray, np.ndarray]], path: Path) -> Path:
    """gamma(B) per cost profile and K."""
    fig, ax = plt.subplots(figsize=(9, 4.5))
    palette = colours(list(curves))
    for label, (b, g) in curves.items():
        ax.plot(b, g, "-", label=label, color=palette[label])
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size B")
    ax.set_ylabel("gamma(B, K) = (T(B,1+K) - T(B,1)) / (K T(B,1))")
    ax.grid(alpha=0.3)
    _legend(fig, fontsize=6)
    data = pd.DataFrame([{"curve": k, "B": int(bi), "gamma": float(gi)} for k, (b, g) in curves.items()
                         for bi, gi in zip(b, g)])
    return _save(fig, path, data, legend_room=True)


def gate_trips(table: pd.DataFrame, path: Path) -> Path:
    """One bar per gated run over its makespan (``run``, ``makespan (s)``), a marker where the gate
    tripped (``tripped at (s)``, NaN: never)."""
    labels, makespan = table["run"].tolist(), table["makespan (s)"].to_numpy(dtype=float)
    tripped = table["tripped at (s)"].to_numpy(dtype=float)
    fig, ax = plt.subplots(figsize=(8, 0.35 * len(labels) + 1.5))
    y = np.arange(len(labels))
    ax.barh(y, makespan, color="lightgrey", label="makespan")
    hit = ~np.isnan(tripped)
    ax.plot(tripped[hit], y[hit], "rx", ms=8, label="gate tripped")
    ax.set_yticks(y, labels, fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("simulated time (s)")
    ax.legend(fontsize=7)
    return _save(fig, path, table)
