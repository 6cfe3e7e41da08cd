"""A sweep from spec to table: validate every point, run what is missing, write the Parquet table.

Layout of a sweep folder::

    DIR/sweep.yaml         the spec with the base inlined (what ``specplan report`` reads)
    DIR/records/KEY.json   one record per run, keyed by the hash of its config (resumable)
    DIR/results.parquet    one row per point: swept fields, summary metrics, speedup columns
    DIR/failures.jsonl     one line per point that could not run: {"point", "run", "error"}
                           (only when some failed; a later sweep into DIR retries them)

Baselines: with ``baseline: true`` (the default) every point's scenario is also run with speculation
off (``table.baseline_of``; points that differ only in speculation share it), and the table carries
the speedup against it. Baseline runs are records, not rows.

Failures: an invalid point (its config breaks a rule) or a run that raises does not stop the others;
the table holds the points that ran (with their baselines), and every point left out is listed in
``failures.jsonl`` with its one-line error. A point whose baseline failed is listed as ``run:
baseline``.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pandas as pd
import yaml

from specplan.errors import ConfigError, SpecplanError, one_line
from specplan.atomic import atomic_write_text
from specplan.sweeps.records import RecordStore, config_json, config_key
from specplan.sweeps.runners import (SHARED, RunFailure, Runner, execute, make_runner, run_record, this_package_first,
                                     unique_configs)
from specplan.sweeps.spec import InvalidPoint, Point, SweepSpec, expand, read_sweep
from specplan.sweeps.table import baseline_of, results_table, write_table

SPEC_FILE = "sweep.yaml"
RECORDS_DIR = "records"
TABLE_FILE = "results.parquet"
FAILURES_FILE = "failures.jsonl"
#: What a sweep folder may hold (``report`` is the default folder of ``specplan report``).
SWEEP_OUTPUTS = (SPEC_FILE, RECORDS_DIR, TABLE_FILE, FAILURES_FILE, "report")


@dataclass(frozen=True)
class SweepFailure:
    """A point the table leaves out: its axis values (and seed), which run failed, the one-line error."""

    point: dict
    run: str  # "point" (its config or its own run) or "baseline"
    error: str

    def to_json(self) -> str:
        return json.dumps({"point": self.point, "run": self.run, "error": self.error})


def sweep_configs(spec: SweepSpec, points: list[Point]) -> list:
    """Every config the sweep runs: the points, then their baselines when asked for."""
    configs = [p.config for p in points]
    if spec.baseline:
        configs += [baseline_of(p.config) for p in points]
    return configs


@dataclass
class SweepPlan:
    """What a sweep into a folder would do: its valid and invalid points, every distinct run, and
    which of those are already recorded there."""

    spec: SweepSpec
    points: list[Point]
    invalid: list[InvalidPoint]
    runs: dict = field(default_factory=dict)  # key -> config, points and baselines, each once
    recorded: set = field(default_factory=set)

    @property
    def to_run(self) -> list:
        """The configs a sweep would simulate now (distinct, not yet recorded)."""
        return [cfg for key, cfg in self.runs.items() if key not in self.recorded]


def plan_sweep(spec: SweepSpec, out_dir: str | Path) -> SweepPlan:
    """Expand and validate the sweep and look up ``out_dir``'s records; writes nothing."""
    invalid: list[InvalidPoint] = []
    points = expand(spec, invalid)
    runs = unique_configs(sweep_configs(spec, points))
    records = Path(out_dir) / RECORDS_DIR
    recorded = {k for k in runs if RecordStore(records).has(k)} if records.is_dir() else set()
    return SweepPlan(spec, points, invalid, runs, recorded)


def runnable_plan(spec: SweepSpec, out_dir: str | Path) -> SweepPlan:
    """``plan_sweep``, refusing (one line, the first point's error) a sweep none of whose points is valid:
    that is bad input, not a sweep with failures."""
    plan = plan_sweep(spec, out_dir)
    if plan.invalid and not plan.points:
        raise ConfigError(plan.invalid[0].error)
    return plan


@dataclass(frozen=True)
class Estimate:
    """A dry run's time estimate: start-up, plus one sample run timed and scaled to every run by its
    output tokens."""

    seconds: float  # wall seconds for the sweep: start-up plus the runs still to do, over the workers
    sample_cpu_s: float  # the sample's second run (kernels loaded)
    sample_tokens: int
    startup_s: float = 0.0  # the command's and its worker pool's start: imports and the kernels' load
    first_run_extra_s: float = 0.0  # what this dry run's first run spent loading or compiling the kernels

    @property
    def runs_s(self) -> float:
        return self.seconds - self.startup_s


def output_tokens(cfg) -> int:
    """Output tokens the config's workload asks for (its requests are built, as a run would)."""
    key_of, build = SHARED["requests"]
    return sum(r.output_len for r in build(key_of(cfg)))


def startup_seconds(cfg) -> float:
    """Wall seconds a fresh process takes to import specplan, load the compiled kernels and run
    ``cfg`` (a worker's start; the command itself starts the same way before its pool does)."""
    import subprocess
    import sys

    code = "import json, sys; from specplan.sweeps.runners import run_record; run_record(json.load(sys.stdin))"
    start = time.perf_counter()
    with this_package_first():
        subprocess.run([sys.executable, "-c", code], input=json.dumps(config_json(cfg)), text=True,
                       capture_output=True, check=False)
    return time.perf_counter() - start


def estimate_time(plan: SweepPlan, workers: int) -> Optional[Estimate]:
    """Time the smallest run still to do in this process and scale it to all of them (None: nothing
    to do, or no run succeeded). Simulation cost grows with the tokens generated, so each run counts
    by its output tokens; a sample that fails (it will fail in the sweep too) hands over to the next.

    The sample runs twice: the first loads (or, once after an install or a change, compiles) the
    kernels, the second is the steady cost per token. Start-up counts twice, each a fresh process
    (imports and the kernels' load, timed on the sample): the command's own and its worker pool's.
    Compiling, if this dry run did it, is not counted: the kernels are cached for the sweep."""
    todo = plan.to_run
    tokens = [output_tokens(cfg) for cfg in todo]
    for i in sorted(range(len(todo)), key=tokens.__getitem__):
        try:
            first = _cpu(run_record, config_json(todo[i]))
        except SpecplanError:
            continue
        cpu = _cpu(run_record, config_json(todo[i]))
        per_token = cpu / max(tokens[i], 1)
        startup = 2 * max(startup_seconds(todo[i]) - cpu, 0.0)
        runs = per_token * sum(tokens) / max(1, min(workers, len(todo)))
        return Estimate(startup + runs, cpu, tokens[i], startup, max(first - cpu, 0.0))
    return None


def _cpu(fn, *args) -> float:
    start = time.process_time()
    fn(*args)
    return time.process_time() - start


def _point_values(spec: SweepSpec, point: Point) -> dict:
    return {**point.values, **({"seed": point.config.seed} if spec.seeds is not None else {})}


def _run_failures(spec: SweepSpec, points: list[Point], failed: dict[str, RunFailure]) -> list[SweepFailure]:
    """Each point whose own run or baseline run failed, with that run's error."""
    out = []
    for point in points:
        own = failed.get(config_key(point.config))
        base = failed.get(config_key(baseline_of(point.config))) if spec.baseline else None
        if own is None and base is None:
            continue
        values = _point_values(spec, point)
        where = f"{spec.source}: point {', '.join(f'{k}={v}' for k, v in values.items())}"
        run = "point" if own is not None else "baseline"
        out.append(SweepFailure(values, run, f"{where}{': baseline' if own is None else ''}: {(own or base).error}"))
    return out


def write_failures(out_dir: Path, failures: list[SweepFailure]) -> None:
    """``failures.jsonl`` listing them; removed when there are none (a resumed sweep that now succeeds)."""
    path = out_dir / FAILURES_FILE
    if failures:
        atomic_write_text(path, "".join(f.to_json() + "\n" for f in failures))
    else:
        path.unlink(missing_ok=True)


def run_sweep(spec: SweepSpec, out_dir: str | Path, runner: Optional[Runner] = None, progress: bool = False,
              failures: Optional[list[SweepFailure]] = None) -> pd.DataFrame:
    """Run a sweep into ``out_dir`` (resuming whatever is recorded there) and return its table.

    ``runner`` defaults to a local pool over all cores; one passed in is left open for the caller.
    Points that cannot run are written to ``failures.jsonl``; with a ``failures`` list they are
    appended there too and the table holds the rest, otherwise the first one raises its error
    (after the others have run and the table is written).
    """
    plan = runnable_plan(spec, out_dir)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(spec.to_dict(), sort_keys=False)
    atomic_write_text(out / SPEC_FILE, text)
    store = RecordStore(out / RECORDS_DIR)
    own = runner is None
    runner = runner or make_runner()
    failed: dict[str, RunFailure] = {}
    try:
        records = execute(plan.runs.values(), runner, store, progress, f"sweep {spec.source}", failed)
    finally:
        if own:
            runner.close()
    lost = [SweepFailure(p.values, "point", p.error) for p in plan.invalid] + _run_failures(spec, plan.points, failed)
    ran = [p for p in plan.points if config_key(p.config) in records
           and (not spec.baseline or config_key(baseline_of(p.config)) in records)]
    table = results_table(ran, spec.axes, records, spec.baseline)
    write_table(table, out / TABLE_FILE)
    write_failures(out, lost)
    if failures is not None:
        failures.extend(lost)
    elif plan.invalid:
        raise ConfigError(plan.invalid[0].error)
    elif failed:
        raise next(iter(failed.values())).exception
    return table


def open_sweep(sweep_dir: str | Path) -> tuple[SweepSpec, list[Point], pd.DataFrame]:
    """What a finished sweep folder holds: its spec, its points and its table."""
    root = Path(sweep_dir)
    spec_path, table_path = root / SPEC_FILE, root / TABLE_FILE
    for path in (spec_path, table_path):
        if not path.is_file():
            raise SpecplanError(f"{path}: missing (is {root} a sweep folder? run `specplan sweep SPEC --out {root}`)")
    spec = read_sweep(spec_path)
    try:
        table = pd.read_parquet(table_path)
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        raise SpecplanError(f"{table_path}: not a readable Parquet table ({one_line(exc)}); re-run "
                            f"`specplan sweep SPEC --out {root}` to rebuild it from the records") from None
    ran = set(table["key"]) if "key" in table.columns else set()
    # the points the table holds, in its order (those that failed are in failures.jsonl)
    return spec, [p for p in expand(spec, []) if config_key(p.config) in ran], table
