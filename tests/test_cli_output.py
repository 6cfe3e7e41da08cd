"""Command output an operator can pipe: latencies in ms, nothing wrapped or cut at 80 columns, a CSV
form, and progress bars only on a terminal."""

import csv
import io
import json
import threading

import yaml
from cli_helpers import SMALL, run_cli

from specplan.cli import progress
from specplan.cli.progress import progress_bar


def test_csv_and_table_read_latencies_in_ms_and_are_not_cut_when_piped(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**SMALL, "seed": 2}))
    raw = json.loads(run_cli("simulate", path, "--baseline", "--format", "json").stdout)
    rows = list(csv.reader(io.StringIO(run_cli("simulate", path, "--baseline", "--format", "csv").stdout)))
    assert rows[0] == ["metric", "speculative", "baseline"]
    got = {r[0]: r[1:] for r in rows[1:]}
    assert float(got["tpot p99 (ms)"][0]) == raw["tpot_s"]["p99"] * 1e3
    assert float(got["ttft p50 (ms)"][1]) == raw["baseline"]["ttft_s"]["p50"] * 1e3
    assert got["completed_requests"] == ["12", "12"]
    table = run_cli("simulate", path, "--baseline")
    assert table.returncode == 0
    lines = table.stdout.splitlines()
    cost_line = next(line for line in lines if line.startswith("Cost: "))
    assert len(cost_line) > 80 and cost_line.endswith(".")  # one line, whole
    assert any("tpot p99 (ms)" in line for line in lines)
    assert table.stderr == ""  # no progress bar when not a terminal


def test_bar_is_off_without_a_terminal(capsys):
    polled = []
    with progress_bar("work", lambda: polled.append(1) or (0, 1), enabled=False):
        pass
    assert not polled and capsys.readouterr().err == ""


def test_bar_polls_the_run_once_it_is_shown(monkeypatch):
    monkeypatch.setattr(progress, "DELAY_S", 0.0)
    seen = threading.Event()
    with progress_bar("work", lambda: (seen.set(), (3, 10))[1], enabled=True):
        assert seen.wait(60)
