"""``specplan report DIR``: figures and a Markdown summary of a finished sweep."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def report(
    sweep_dir: Path = typer.Argument(..., help="A folder written by `specplan sweep --out`."),
    out: Optional[Path] = typer.Option(None, "--out", metavar="OUT_DIR", help="Where to write (default: DIR/report)."),
) -> None:
    """Plot speedup, throughput against p99 TPOT (Pareto front), acceptance lengths, gamma(B), gate trips."""
    from specplan.reports.summary import write_report

    print(f"Wrote {write_report(sweep_dir, out)} (figures beside it)")


def register(app: typer.Typer) -> None:
    app.command()(report)
