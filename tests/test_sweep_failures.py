"""Sweeps that meet bad points: the rest run, each failure is listed with its field, the exit is
non-zero; and a dry run counts exactly the runs the sweep then makes."""

import copy
import json
import re
import sys

import pytest
import yaml

from specplan.config import build_config
from specplan.sweeps.records import RecordStore, config_key
from specplan.sweeps.runners import LocalRunner, execute
from specplan.sweeps.spec import parse_sweep
from specplan.sweeps.sweep import FAILURES_FILE, RECORDS_DIR, TABLE_FILE, plan_sweep, run_sweep

BASE = {
    "seed": 0,
    "engine": {"max_batch_size": 8, "kv_num_blocks": 100000},
    "speculation": {"decoding_type": "NGram", "max_draft_len": 2},
    "acceptance": {"mode": "alpha", "alpha": 0.7},
    "workload": {"trace": None, "arrival": "poisson", "rate": 20.0, "num_requests": 12, "prompt_len": 8, "output_len": 16},
    "cost": {"model": "linear_gamma", "t_base_s": 0.01, "gamma": 0.1},
}


def _cli(monkeypatch, capsys, *args) -> tuple[int, str]:
    from specplan.cli import main

    monkeypatch.setattr(sys, "argv", ["specplan", *map(str, args)])
    with pytest.raises(SystemExit) as exc:
        main()
        raise SystemExit(0)  # main returns normally on success
    return exc.value.code, capsys.readouterr().err


def test_one_invalid_point_the_others_complete_and_the_exit_is_non_zero(tmp_path, monkeypatch, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"base": BASE, "grid": {"speculation.max_draft_len": [1, -1, 3]}}))
    code, err = _cli(monkeypatch, capsys, "sweep", path, "--out", tmp_path / "out", "--workers", "1", "--no-progress")
    assert code == 1
    lines = (tmp_path / "out" / FAILURES_FILE).read_text().splitlines()
    assert len(lines) == 1
    failure = json.loads(lines[0])
    assert failure["point"] == {"speculation.max_draft_len": -1} and failure["run"] == "point"
    assert "speculation.max_draft_len: Input should be greater than or equal to 0" in failure["error"]
    assert "1 point(s) failed" in err and failure["error"] in err
    import pandas as pd

    table = pd.read_parquet(tmp_path / "out" / TABLE_FILE)
    assert table["speculation.max_draft_len"].tolist() == [1, 3] and table["speedup"].notna().all()


def test_a_run_that_raises_is_a_failure_and_the_rest_are_recorded(tmp_path):
    good = build_config(BASE)
    bad = build_config({**BASE, "acceptance": {"mode": "recorded"}})  # valid config; the run names no log
    failures = {}
    with LocalRunner(1) as runner:
        records = execute([bad, good], runner, RecordStore(tmp_path), failures=failures)
    assert list(records) == [config_key(good)] and list(failures) == [config_key(bad)]
    assert failures[config_key(bad)].error.startswith("acceptance.recorded_path:")
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{config_key(good)}.json"]


def test_a_failed_baseline_names_the_points_that_needed_it(tmp_path):
    # recorded acceptance with no log fails both the point and its baseline; the alpha point runs
    spec = parse_sweep({"base": BASE, "grid": {"acceptance.mode": ["alpha", "recorded"]}}, "s")
    failures = []
    with LocalRunner(1) as runner:
        table = run_sweep(spec, tmp_path, runner, failures=failures)
    assert table["acceptance.mode"].tolist() == ["alpha"]
    assert [(f.point, f.run) for f in failures] == [({"acceptance.mode": "recorded"}, "point")]
    assert "s: point acceptance.mode=recorded: acceptance.recorded_path:" in failures[0].error


def test_dry_run_counts_what_the_sweep_then_runs(tmp_path, monkeypatch, capsys):
    sweep = {"base": BASE, "grid": {"speculation.max_draft_len": [0, 2, 4], "workload.rate": [10.0, 40.0]},
             "seeds": [0, 1]}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(sweep))
    out = tmp_path / "out"

    def dry() -> tuple[int, int, int]:
        code, err = _cli(monkeypatch, capsys, "sweep", path, "--out", out, "--dry-run", "--workers", "1")
        assert code == 0
        m = re.search(r"(\d+) points \(0 invalid\), (\d+) distinct runs with baselines; (\d+) already recorded "
                      r"in .*, (\d+) to run", err)
        assert m, err
        points, runs, recorded, todo = map(int, m.groups())
        assert runs == recorded + todo
        assert ("Estimate: about" in err) == (todo > 0)
        return points, recorded, todo

    assert dry() == (12, 0, 12 + 4)  # 12 points and one baseline per (rate, seed)
    assert not out.exists()  # a dry run writes nothing
    # run half of it (one seed), then the dry run counts what is left
    partial = copy.deepcopy(sweep) | {"seeds": [0]}
    with LocalRunner(1) as runner:
        run_sweep(parse_sweep(partial, "p"), out, runner)
    done = len(list((out / RECORDS_DIR).glob("*.json")))
    assert dry() == (12, done, 16 - done)
    code, _ = _cli(monkeypatch, capsys, "sweep", path, "--out", out, "--workers", "1", "--no-progress")
    assert code == 0
    assert len(list((out / RECORDS_DIR).glob("*.json"))) == 16
    assert dry() == (12, 16, 0)
    assert len(plan_sweep(parse_sweep(sweep, "s"), out).to_run) == 0
