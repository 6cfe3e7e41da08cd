"""Feedback on long work: help readable at 80 columns with typed metavars, ``--out`` that refuses another
run's folder unless ``--overwrite``, the compile notice, progress on ``capacity``, and dry-run estimates
that count start-up."""

import os
import subprocess
import sys

import pytest
import yaml

from specplan.cli.output import RUN_MARKER
from cli_helpers import run_main

SMALL = {
    "seed": 0,
    "engine": {"max_batch_size": 4, "kv_num_blocks": 20000},
    "speculation": {"decoding_type": "NGram", "max_draft_len": 2},
    "acceptance": {"mode": "alpha", "alpha": 0.7},
    "workload": {"trace": None, "arrival": "poisson", "rate": 10.0, "num_requests": 6, "prompt_len": 8,
                 "output_len": 8},
    "cost": {"model": "linear_gamma", "t_base_s": 0.01, "gamma": 0.1},
}




@pytest.mark.parametrize("command, names", [
    ("simulate", ["--engine-config", "--baseline", "--overwrite", "--timeline"]),
    ("sweep", ["--engine-config", "--max-points", "--dry-run", "--overwrite"]),
    ("recommend", ["--slo-tpot-ms", "--max-draft-len", "--probe-requests", "--gate-window", "--engine-config"]),
    ("report", ["--out"]),
    ("capacity", ["--slo-ttft-ms", "--max-replicas", "--candidates", "--percentile", "--overwrite"]),
])
def test_help_fits_80_columns_with_typed_metavars(monkeypatch, capsys, command, names):
    monkeypatch.setenv("COLUMNS", "80")
    code, text, _ = run_main(monkeypatch, capsys, command, "--help")
    assert code == 0
    assert all(len(line) <= 80 for line in text.splitlines()), max(text.splitlines(), key=len)
    for bad in ("<str>", "<int>", "<float>", "<list[str]>", "\u2026"):
        assert bad not in text
    for name in names:  # every option name whole, with the value it takes where it takes one
        assert name in text


def _scenario(tmp_path, **workload):
    path = tmp_path / f"s{len(list(tmp_path.glob('s*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump({**SMALL, "workload": {**SMALL["workload"], **workload}}))
    return path


def test_simulate_out_refuses_another_run_unless_overwrite(tmp_path, monkeypatch, capsys):
    first, second = _scenario(tmp_path), _scenario(tmp_path, rate=20.0)
    out = tmp_path / "out"
    assert run_main(monkeypatch, capsys, "simulate", first, "--baseline", "--out", out, "--format", "json")[0] == 0
    assert (out / "speculative" / "summary.json").is_file()
    # the same run again rewrites its own folder
    assert run_main(monkeypatch, capsys, "simulate", first, "--baseline", "--out", out, "--format", "json")[0] == 0
    code, _, err = run_main(monkeypatch, capsys, "simulate", second, "--out", out, "--format", "json")
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: --out {out}: holds a simulate run") and "--overwrite" in lines[0]
    assert (out / "speculative").is_dir()  # nothing touched
    code, _, err = run_main(monkeypatch, capsys, "simulate", second, "--out", out, "--overwrite", "--format", "json")
    assert code == 0, err
    assert not (out / "speculative").exists() and (out / "summary.json").is_file()  # the first run's files cleared


def test_out_never_clears_a_folder_that_is_not_a_run(tmp_path, monkeypatch, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("keep me\n")
    code, _, err = run_main(monkeypatch, capsys, "simulate", _scenario(tmp_path), "--out", out, "--overwrite")
    assert code == 2 and "not a specplan run's" in err
    assert (out / "notes.txt").read_text() == "keep me\n"


def test_sweep_out_of_another_scenario_is_refused_then_cleared(tmp_path, monkeypatch, capsys):
    def sweep_file(rate):
        path = tmp_path / f"sweep{rate:g}.yaml"
        base = {**SMALL, "workload": {**SMALL["workload"], "rate": rate}}
        path.write_text(yaml.safe_dump({"base": base, "grid": {"speculation.max_draft_len": [1, 2]}}))
        return path

    out = tmp_path / "out"
    args = ["--out", out, "--workers", "1", "--no-progress"]
    assert run_main(monkeypatch, capsys, "sweep", sweep_file(10), *args)[0] == 0
    assert len(list((out / "records").glob("*.json"))) == 3  # two points and their baseline
    code, _, err = run_main(monkeypatch, capsys, "sweep", sweep_file(20), *args)
    assert code == 2 and "holds a sweep run of other inputs" in err
    assert run_main(monkeypatch, capsys, "sweep", sweep_file(20), *args, "--overwrite")[0] == 0
    assert len(list((out / "records").glob("*.json"))) == 3  # only the second sweep's runs: the first's were cleared
    assert (out / RUN_MARKER).is_file()


def test_compile_notice_when_the_kernels_are_not_cached(tmp_path):
    code = "from specplan.cli.progress import compile_notice; compile_notice(enabled=True)"
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}  # an empty cache: nothing compiled yet
    fresh = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert fresh.returncode == 0
    assert fresh.stderr.strip().splitlines() == [
        "compiling the simulator's kernels (first run only; later runs load them from the cache)"]


def test_no_compile_notice_once_a_run_cached_the_kernels(tmp_path, monkeypatch, capsys):
    from specplan.cli.progress import compile_notice

    # a run in this process compiles what is missing into numba's cache, or loads it from there
    assert run_main(monkeypatch, capsys, "simulate", _scenario(tmp_path), "--format", "json")[0] == 0
    compile_notice(enabled=True)
    assert capsys.readouterr().err == ""


def test_capacity_shows_progress(tmp_path, monkeypatch, capsys):
    scenario = _scenario(tmp_path)
    code, _, err = run_main(monkeypatch, capsys, "capacity", scenario, "--rate", "5", "--slo-ttft-ms", "1000",
                         "--slo-tpot-ms", "100", "--max-replicas", "1", "--workers", "1", "--out", tmp_path / "cap")
    assert code == 0, err
    assert "capacity round 1: 2 of 2 searches open" in err


def test_dry_run_estimate_counts_start_up(tmp_path):
    from specplan.sweeps.spec import parse_sweep
    from specplan.sweeps.sweep import estimate_time, plan_sweep

    spec = parse_sweep({"base": SMALL, "grid": {"speculation.max_draft_len": [1, 2]}}, "s")
    est = estimate_time(plan_sweep(spec, tmp_path / "none"), workers=1)
    # the estimate is start-up (a fresh process twice: the command and its pool) plus the runs
    assert est.startup_s > 0 and est.seconds == pytest.approx(est.startup_s + est.runs_s)
