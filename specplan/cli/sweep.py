"""``specplan sweep SWEEP.yaml --out DIR``: run a grid of scenarios, resumably, on a local pool or Ray.

Points that cannot run (an invalid config, a run that raises) do not stop the others: they are
written to ``DIR/failures.jsonl``, printed at the end, and the command exits 1. ``--dry-run``
validates every point, counts the runs and estimates the time, and runs nothing else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from specplan.cli.choices import Backend
from specplan.cli.output import console as make_console
from specplan.sweeps.spec import DEFAULT_MAX_POINTS

FAILED_EXIT = 1


def _dry_run(console: Console, sweep_spec, out: Path, workers: Optional[int]) -> int:
    from specplan.cli.progress import compile_notice, kernels_cached
    from specplan.sweeps.runners import default_workers
    from specplan.sweeps.sweep import estimate_time, plan_sweep

    plan = plan_sweep(sweep_spec, out)
    n_valid, n_bad = len(plan.points), len(plan.invalid)
    todo = plan.to_run
    console.print(f"{n_valid + n_bad} points ({n_bad} invalid), {len(plan.runs)} distinct runs "
                  f"{'with' if sweep_spec.baseline else 'without'} baselines; {len(plan.recorded)} already "
                  f"recorded in {out}, {len(todo)} to run.")
    workers = workers or default_workers()
    compiling = not kernels_cached()
    if compiling and todo:
        compile_notice(enabled=True)  # the dry run says what it is doing, since it compiles here
    est = estimate_time(plan, workers)
    if est is not None:
        console.print(f"Estimate: about {est.seconds:.0f} s on {min(workers, len(todo))} worker(s): start-up "
                      f"{est.startup_s:.1f} s (the command and its worker pool: imports and the compiled kernels' "
                      f"load) and runs {est.runs_s:.0f} s (one sample run took {est.sample_cpu_s:.2f} CPU s for "
                      f"{est.sample_tokens} output tokens; each run scaled by its output tokens).")
        if compiling:
            console.print(f"This dry run compiled the simulator's kernels ({est.first_run_extra_s:.0f} s); they are "
                          "cached, so the sweep does not compile them again.")
    elif todo:
        console.print("No estimate: every sample run failed (the sweep will list them).")
    for bad in plan.invalid:
        console.print(f"invalid: {bad.error}", markup=False)
    return FAILED_EXIT if plan.invalid else 0


def _same_base(path: Path, spec) -> bool:
    """Whether the ``sweep.yaml`` an older sweep left in its folder has this spec's base scenario."""
    import yaml

    try:
        return (yaml.safe_load(path.read_text()) or {}).get("base") == spec.base
    except (OSError, yaml.YAMLError, AttributeError):
        return False


def warn_schedules(configs) -> None:
    """One warning line per distinct schedule whose meaning differs between the engine's code and docs."""
    import warnings

    from specplan.simulator.k_bands import schedule_reading_warning
    from specplan.simulator.run import resolve

    for text in dict.fromkeys(filter(None, (schedule_reading_warning(resolve(c)) for c in configs))):
        warnings.warn(text, stacklevel=2)


def sweep(
    spec: Path = typer.Argument(..., help="Sweep YAML: base, grid, zip, seeds, baseline."),
    out: Path = typer.Option(..., "--out", metavar="DIR", help="Sweep folder: records, results.parquet (re-run to resume)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Clear --out first if it holds another run."),
    backend: Backend = typer.Option(Backend.local, "--backend", case_sensitive=False, help="local: a process pool."),
    workers: Optional[int] = typer.Option(None, "--workers", metavar="N", help="Local processes (default: all cores); Ray: CPUs of a local instance."),
    address: Optional[str] = typer.Option(None, "--address", metavar="HOST:PORT", help="Ray cluster address (default: a local Ray instance)."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar with ETA."),
    engine_config: Optional[Path] = typer.Option(None, "--engine-config", metavar="FILE", help="A TensorRT-LLM options YAML, vLLM speculative-config JSON or serve command line applied over the sweep's base (see specplan config import)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Validate, count the runs, estimate the time; run nothing."),
    max_points: int = typer.Option(DEFAULT_MAX_POINTS, "--max-points", min=1, metavar="N",
                                   help="Refuse a sweep of more points than this (grid x zip x seeds)."),
) -> None:
    """Run every point of a sweep (skipping those already recorded in --out) and write the result table.

    Exits 1 when some points failed (listed at the end and in DIR/failures.jsonl)."""
    from specplan.cli.output import claim_output_dir
    from specplan.cli.progress import compile_notice
    from specplan.sweeps.runners import make_runner
    from specplan.sweeps.spec import check_size, read_sweep
    from specplan.sweeps.sweep import (
        FAILURES_FILE,
        SPEC_FILE,
        SWEEP_OUTPUTS,
        TABLE_FILE,
        run_sweep,
        runnable_plan,
    )

    console = make_console(stderr=True)
    sweep_spec = read_sweep(spec)
    if engine_config is not None:
        from dataclasses import replace

        from specplan.engine_config import import_engine_config, merge_sections

        sweep_spec = replace(sweep_spec, base=merge_sections(sweep_spec.base, import_engine_config(engine_config).sections))
    check_size(sweep_spec, max_points)
    if dry_run:  # writes nothing, so the folder is not made
        raise typer.Exit(_dry_run(console, sweep_spec, out, workers))
    plan = runnable_plan(sweep_spec, out)  # before the header: a sweep with no valid point is one line
    # a sweep of the same base scenario extends the folder (more points or seeds: its records are reused)
    claim_output_dir(out, "sweep", sweep_spec.base, overwrite, SWEEP_OUTPUTS,
                     same_run=lambda folder: _same_base(folder / SPEC_FILE, sweep_spec))
    warn_schedules(point.config for point in plan.points)
    compile_notice()
    failures: list = []
    with make_runner(str(backend), workers, address) as runner:
        console.print(f"Sweep {spec}: axes {', '.join(sweep_spec.axes) or 'none'}; "
                      f"{'with' if sweep_spec.baseline else 'without'} baselines; {backend} backend, "
                      f"{runner.workers} worker(s).")
        table = run_sweep(sweep_spec, out, runner, progress, failures)
    console.print(f"Wrote {out / TABLE_FILE}: {len(table)} runs x {table.shape[1]} columns. "
                  f"Next: specplan report {out}")
    if failures:
        console.print(f"{len(failures)} point(s) failed (also in {out / FAILURES_FILE}):", markup=False)
        for f in failures:
            console.print(f"  {f.error}", markup=False)
        raise typer.Exit(FAILED_EXIT)


def register(app: typer.Typer) -> None:
    app.command()(sweep)
