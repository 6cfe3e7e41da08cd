"""`specplan simulate` end to end through the console entry point."""

import json

import pandas as pd
import pytest
import yaml
from cli_helpers import run_cli

SMALL = {
    "seed": 3,
    "engine": {"max_batch_size": 8, "kv_num_blocks": 20000},
    "speculation": {"decoding_type": "NGram", "max_draft_len": 3},
    "acceptance": {"mode": "alpha", "alpha": 0.7},
    "workload": {"trace": None, "arrival": "poisson", "rate": 20.0, "num_requests": 30, "prompt_len": 64,
                 "output_len": 64},
    "cost": {"model": "linear_gamma", "t_base_s": 0.01, "gamma": 0.05},
}

KEYS = {"completed_requests", "output_tokens", "throughput_tok_s", "mean_acceptance_length", "acceptance_rate",
        "iterations", "spec_iterations", "gate_tripped_iteration", "preemptions", "ttft_s", "tpot_s", "itl_s",
        "e2e_s", "seed"}


def test_json_output_with_baseline(tmp_path):
    cfg = tmp_path / "small.yaml"
    cfg.write_text(yaml.safe_dump(SMALL))
    out = run_cli("simulate", str(cfg), "--baseline", "--format", "json", "--out", str(tmp_path / "run"))
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert KEYS <= set(data) and KEYS - {"seed"} <= set(data["baseline"])
    assert data["completed_requests"] == 30 and data["output_tokens"] == 30 * 64
    for key in ("ttft_s", "tpot_s", "itl_s", "e2e_s"):
        assert set(data[key]) >= {"p50", "p90", "p99"}
    assert data["speedup"] == data["throughput_tok_s"] / data["baseline"]["throughput_tok_s"]
    assert data["baseline"]["mean_acceptance_length"] is None
    assert "Simulating 30 requests" in out.stderr  # says first what it simulates
    req = pd.read_parquet(tmp_path / "run" / "speculative" / "requests.parquet")
    assert len(req) == 30 and (tmp_path / "run" / "baseline" / "iterations.parquet").exists()
    assert not list((tmp_path / "run").rglob("*.csv"))  # CSV only with --csv


def test_set_overrides_and_bad_field_one_line(tmp_path):
    cfg = tmp_path / "small.yaml"
    cfg.write_text(yaml.safe_dump(SMALL))
    ok = run_cli("simulate", str(cfg), "--set", "speculation.max_draft_len=0", "--format", "json")
    assert ok.returncode == 0 and json.loads(ok.stdout)["spec_iterations"] == 0
    bad = run_cli("simulate", str(cfg), "--set", "engine.max_batch=4")
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and "engine.max_batch" in bad.stderr and "Traceback" not in bad.stderr


def test_fleet_prints_and_returns_each_replica_from_its_own_requests(tmp_path):
    """A fleet's per-replica figures (table and json) are those of its requests table split by
    replica: request counts, output tokens over each replica's own first arrival to last finish,
    and np.percentile's TTFT p99 and TPOT p50 / p99."""
    import numpy as np

    cfg = tmp_path / "fleet.yaml"
    cfg.write_text(yaml.safe_dump({**SMALL, "workload": {**SMALL["workload"], "num_requests": 90},
                                   "cluster": {"replicas": 3, "router": "least_outstanding"}}))
    out = run_cli("simulate", str(cfg), "--format", "json", "--out", str(tmp_path / "run"))
    assert out.returncode == 0, out.stderr
    per = json.loads(out.stdout)["per_replica"]
    req = pd.read_parquet(tmp_path / "run" / "requests.parquet")
    for i, rep in enumerate(per):
        mine = req[req.replica == i]
        assert rep["requests"] == len(mine) == rep["completed_requests"] and rep["tp"] == 1
        span = mine.finish_s.max() - mine.arrival_s.min()
        assert rep["throughput_tok_s"] == pytest.approx(mine.output_len.sum() / span, rel=1e-12)
        assert rep["ttft_s"]["p99"] == pytest.approx(np.percentile(mine.ttft_s, 99), rel=1e-12)
        assert [rep["tpot_s"][p] for p in ("p50", "p99")] == pytest.approx(np.percentile(mine.tpot_s, [50, 99]))
    assert sum(rep["requests"] for rep in per) == 90
    table = run_cli("simulate", str(cfg))
    assert table.returncode == 0, table.stderr
    rows = [line for line in table.stdout.splitlines()
            if line.startswith("│") and line.split("│")[1].strip() in ("0", "1", "2")]
    assert len(rows) == 3 and rows[2].split("│")[3].strip() == str(per[2]["requests"])
    small = tmp_path / "small.yaml"
    small.write_text(yaml.safe_dump(SMALL))
    assert "per_replica" not in json.loads(run_cli("simulate", str(small), "--format", "json").stdout)
