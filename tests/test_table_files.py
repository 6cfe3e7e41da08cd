"""A run's tables as files: the Parquet written from numpy columns holds, bit for bit, the run's own
DataFrames (``SimResult.requests / iterations / emissions``); ``--csv`` writes the same values; and
writing them imports no pandas."""

import subprocess
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import yaml

from specplan.config import build_config
from specplan.simulator.run import simulate
from specplan.simulator.table_files import TABLES, arrow_array

from cli_helpers import SMALL, run_cli

# A speculating trace run (categories, session turns) whose time limit leaves requests unfinished
# (NaN latencies), and a fleet (a replica column).
TRACE_RUN = {**SMALL, "workload": {"trace": "specbench", "arrival": "poisson", "rate": 30.0, "num_requests": 24},
             "speculation": {"decoding_type": "NGram", "max_draft_len": 3}, "acceptance": {"mode": "drafter"},
             "max_sim_time_s": 1.5}
FLEET_RUN = {**SMALL, "workload": {**SMALL["workload"], "num_requests": 30}, "cluster": {"replicas": 3}}


def same_column(written: pd.Series, own: pd.Series) -> None:
    """Equal dtype and values; numbers compared by their bytes (NaN and -0.0 included), strings as
    Python objects with missing entries as None."""
    if own.dtype.kind in "biuf":
        assert written.dtype == own.dtype, (own.name, written.dtype, own.dtype)
        assert written.to_numpy().tobytes() == own.to_numpy().tobytes(), own.name
    else:
        to_list = lambda s: [None if pd.isna(v) else v for v in s.tolist()]  # noqa: E731
        assert to_list(written) == to_list(own), own.name


@pytest.fixture(scope="module", params=["trace", "fleet"])
def saved(request, tmp_path_factory):
    result = simulate(build_config(TRACE_RUN if request.param == "trace" else FLEET_RUN))
    out = result.save(tmp_path_factory.mktemp(request.param) / "run", csv=True)
    return result, out


def test_parquet_holds_the_runs_own_tables_bit_for_bit(saved):
    result, out = saved
    if "replica" not in result.requests:
        assert result.requests["finish_s"].isna().any() and result.requests["turn"].max() > 0
        assert result.requests["category"].nunique() > 1
    for name in TABLES:
        own, written = getattr(result, name), pd.read_parquet(out / f"{name}.parquet")
        assert list(written.columns) == list(own.columns) and len(written) == len(own) > 0
        for col in own.columns:
            same_column(written[col], own[col])


def test_csv_holds_the_same_values(saved):
    result, out = saved
    for name in TABLES:
        own, written = getattr(result, name), pd.read_csv(out / f"{name}.csv")
        assert list(written.columns) == list(own.columns) and len(written) == len(own)
        for col in own.columns:
            if own[col].dtype.kind in "biuf":  # CSV has no widths: compare values, the float text round-trips
                back = written[col].to_numpy().astype(own[col].dtype)
                assert np.array_equal(back, own[col].to_numpy(), equal_nan=own[col].dtype.kind == "f"), col
            else:
                same_column(written[col].astype(object), own[col])


@pytest.mark.parametrize("values", [
    np.array([0.1, np.nan, -0.0, np.inf, 1e-300]), np.arange(5, dtype=np.int32), np.arange(3, dtype=np.int64) - 1,
    np.array([True, False, True, True, False, False, True, False, True]), np.array(["a", None, "é", ""], dtype=object),
    np.arange(12).astype(str)])
def test_a_column_is_arrows_own_conversion(values):
    # pa.array (which reads the values one by one where they are objects) is the reference.
    mine, ref = arrow_array(values), pa.array(values.tolist() if values.dtype.kind in "OU" else values)
    assert mine.type == ref.type and mine.null_count == ref.null_count
    if values.dtype.kind == "f":
        assert mine.to_numpy().tobytes() == ref.to_numpy().tobytes()
    else:
        assert mine.equals(ref)


def test_writing_the_tables_imports_no_pandas(tmp_path):
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(SMALL))
    code = ("import sys\nfrom specplan.cli import main\n"
            f"try:\n    main(['simulate', {str(tmp_path / 's.yaml')!r}, '--format', 'json', '--out', "
            f"{str(tmp_path / 'out')!r}, '--csv'])\n"
            "finally:\n    print(sorted(m for m in ('pandas', 'pyarrow') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "['pyarrow']"
    assert {p.name for p in (tmp_path / "out").iterdir()} >= {f"{n}.{ext}" for n in TABLES for ext in ("parquet", "csv")}


def test_csv_needs_out():
    proc = run_cli("simulate", "--csv")
    assert proc.returncode == 2 and "--csv" in proc.stderr and proc.stderr.strip().count("\n") == 0
