"""A sweep from spec to table: validate every point, run what is missing, write the Parquet table.

Layout of a sweep folder::

    DIR/sweep.yaml         the spec with the base inlined (what ``specplan report`` reads)
    DIR/records/KEY.json   one record per run, keyed by the hash of its config (resumable)
    DIR/results.parquet    one row per point: swept fields, summary metrics, speedup columns

Baselines: with ``baseline: true`` (the default) every point's scenario is also run with speculation
off (``table.baseline_of``; points that differ only in speculation share it), and the table carries
the speedup against it. Baseline runs are records, not rows.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import pandas as pd
import yaml

from specplan.errors import SpecplanError, one_line
from specplan.atomic import atomic_write_text
from specplan.sweeps.records import RecordStore
from specplan.sweeps.runners import Runner, execute, make_runner
from specplan.sweeps.spec import Point, SweepSpec, expand, read_sweep
from specplan.sweeps.table import baseline_of, results_table, write_table

SPEC_FILE = "sweep.yaml"
RECORDS_DIR = "records"
TABLE_FILE = "results.parquet"


def sweep_configs(spec: SweepSpec, points: list[Point]) -> list:
    """Every config the sweep runs: the points, then their baselines when asked for."""
    configs = [p.config for p in points]
    if spec.baseline:
        configs += [baseline_of(p.config) for p in points]
    return configs


def run_sweep(spec: SweepSpec, out_dir: str | Path, runner: Optional[Runner] = None, progress: bool = False,
              points: Optional[list[Point]] = None) -> pd.DataFrame:
    """Run a sweep into ``out_dir`` (resuming whatever is recorded there) and return its table.

    ``runner`` defaults to a local pool over all cores; one passed in is left open for the caller.
    ``points``, when the caller already expanded (validated) ``spec``, saves expanding it again.
    """
    points = points if points is not None else expand(spec)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    text = yaml.safe_dump(spec.to_dict(), sort_keys=False)
    atomic_write_text(out / SPEC_FILE, text)
    store = RecordStore(out / RECORDS_DIR)
    own = runner is None
    runner = runner or make_runner()
    try:
        records = execute(sweep_configs(spec, points), runner, store, progress, f"sweep {spec.source}")
    finally:
        if own:
            runner.close()
    table = results_table(points, spec.axes, records, spec.baseline)
    write_table(table, out / TABLE_FILE)
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
    return spec, expand(spec), table
