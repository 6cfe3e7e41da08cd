"""The capacity search's figure: GPUs needed against request rate, one line per configuration."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from specplan.reports.plots import _save


def capacity_figure(table: pd.DataFrame, path: Path) -> Path:
    """GPUs needed against request rate, one line per config; the plotted data is written beside it as CSV."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for label, sel in table.groupby("config", sort=False):
        sel = sel.sort_values("rate")
        ax.plot(sel.rate, sel.gpus.astype(float), "o-", label=label, ms=4)
    ax.set_xlabel("request rate (req/s)")
    ax.set_ylabel("GPUs needed to meet the SLO")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return _save(fig, path, table[["rate", "config", "replicas", "gpus"]])
