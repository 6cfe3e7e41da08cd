"""``specplan sweep SWEEP.yaml --out DIR``: run a grid of scenarios, resumably, on a local pool or Ray."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from specplan.sweeps.spec import DEFAULT_MAX_POINTS


def register(app: typer.Typer) -> None:
    @app.command()
    def sweep(
        spec: Path = typer.Argument(..., help="Sweep YAML: base, grid, zip, seeds, baseline."),
        out: Path = typer.Option(..., "--out", help="Sweep folder: records, results.parquet (re-run to resume)."),
        backend: str = typer.Option("local", "--backend", help="local (process pool) or ray."),
        workers: Optional[int] = typer.Option(None, "--workers", help="Local processes (default: all cores); Ray: CPUs of a local instance."),
        address: Optional[str] = typer.Option(None, "--address", help="Ray cluster address (default: a local Ray instance)."),
        progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar with ETA."),
        max_points: int = typer.Option(DEFAULT_MAX_POINTS, "--max-points", min=1,
                                       help="Refuse a sweep of more points than this (grid x zip x seeds)."),
    ) -> None:
        """Run every point of a sweep (skipping those already recorded in --out) and write the result table."""
        from specplan.outputs import check_output_dir
        from specplan.sweeps.runners import make_runner
        from specplan.sweeps.spec import check_size, expand, read_sweep
        from specplan.sweeps.sweep import TABLE_FILE, run_sweep

        console = Console(stderr=True)
        sweep_spec = read_sweep(spec)
        check_size(sweep_spec, max_points)
        points = expand(sweep_spec)  # every point validated before a worker starts
        check_output_dir(out)
        with make_runner(backend, workers, address) as runner:
            console.print(f"Sweep {spec}: axes {', '.join(sweep_spec.axes) or 'none'}; "
                          f"{'with' if sweep_spec.baseline else 'without'} baselines; {backend} backend, "
                          f"{runner.workers} worker(s).")
            table = run_sweep(sweep_spec, out, runner, progress, points)
        console.print(f"Wrote {out / TABLE_FILE}: {len(table)} runs x {table.shape[1]} columns. "
                      f"Next: specplan report {out}")
