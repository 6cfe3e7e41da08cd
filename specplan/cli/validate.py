"""``specplan validate``: replay simulated iterations on a device and report the simulator's error.

Needs torch (``pip install 'specplan[calibrate]'``); it is imported only when the command runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from specplan.validation.scenarios import BUNDLED


def register(app: typer.Typer) -> None:
    @app.command()
    def validate(
        profile: str = typer.Option(..., "--profile",
                                    help="Profile file, or bundled name GPU/MODEL (e.g. h200/llama-3.1-8b)."),
        out: Path = typer.Option(..., "--out",
                                 help="Directory for report.md, iterations.csv, the plot and summary.json."),
        device: str = typer.Option("cuda", "--device", help="cuda or cpu (cpu: a CPU profile of the tiny model)."),
        scenario: Optional[list[str]] = typer.Option(
            None, "--scenario", help=f"Bundled scenario ({', '.join(BUNDLED)}) or a simulate config YAML; repeatable. "
                                     f"Default: {' and '.join(BUNDLED)}."),
        model: Optional[str] = typer.Option(None, "--model", help="Model to replay (default: the profile's)."),
        threads: Optional[int] = typer.Option(None, "--threads", min=1, help="CPU threads (cpu device; default 1)."),
        warmup: int = typer.Option(3, "--warmup", min=0, help="Steps run untimed before timing starts."),
        attention: str = typer.Option(
            "auto", "--attention",
            help="auto (FlashAttention varlen on CUDA when it checks out) or rows (SDPA per row)."),
        seed: int = typer.Option(0, "--seed", help="Random weights."),
    ) -> None:
        """Simulate scenarios, replay every iteration for real, report per-iteration and end-to-end error."""
        from specplan.outputs import check_output_dir
        from specplan.validation.runner import run_validation

        check_output_dir(out)
        run_validation(profile, out, device=device, scenarios=scenario or list(BUNDLED), model=model,
                       threads=threads, seed=seed, warmup=warmup, attention=attention)
