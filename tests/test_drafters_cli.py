"""``specplan acceptance`` on the real-trace fixture, and the drafters inside the simulator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from specplan.cli.acceptance import register
from specplan.workloads.tokentrace import read_token_trace

FIXTURE = Path(__file__).parent / "data" / "drafters" / "specbench_vanilla.jsonl"


@pytest.fixture(scope="module")
def cli():
    app = typer.Typer()
    register(app)
    app.command("noop")(lambda: None)  # a second command keeps "acceptance" a subcommand
    runner = CliRunner()
    return lambda *args: runner.invoke(app, ["acceptance", *map(str, args)])


@pytest.mark.parametrize("drafter", ["ngram", "sa", "vllm-ngram", "suffix", "pld"])
def test_cli_prints_sane_json(cli, drafter):
    res = cli(FIXTURE, "--drafter", drafter, "--max-draft-len", 3, "--format", "json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout.strip().splitlines()[-1])
    groups = {g["group"]: g for g in out["groups"]}
    requests = read_token_trace(FIXTURE)
    assert set(groups) == {r.category for r in requests} | {"overall"}
    overall = groups["overall"]
    assert overall["requests"] == len(requests) and out["k"] == 3
    for g in groups.values():
        assert sum(g["histogram"]) == g["drafts"] and len(g["histogram"]) == 4
        assert g["accepted_tokens"] == sum(i * n for i, n in enumerate(g["histogram"]))
        assert 0.0 <= g["acceptance_rate"] <= 1.0 and 1.0 <= g["mean_acceptance_length"] <= 4.0
        pos = g["per_position"]
        assert all(1.0 >= a >= b >= 0.0 for a, b in zip(pos, pos[1:] + [0.0]))
    assert sum(groups[c]["steps"] for c in groups if c != "overall") == overall["steps"]
    assert overall["drafts"] > 100 and overall["mean_acceptance_length"] > 1.2


def test_cli_dump_steps(cli, tmp_path):
    dump = tmp_path / "steps.jsonl"
    res = cli(FIXTURE, "--drafter", "ngram", "--no-is-public-pool", "--max-matching-ngram-size", 3,
              "--max-draft-len", 5, "--dump-steps", dump)
    assert res.exit_code == 0, res.output
    requests = read_token_trace(FIXTURE)
    lines = [json.loads(x) for x in dump.read_text().splitlines()]
    assert [x["id"] for x in lines] == [r.id for r in requests]
    for r, rec in zip(requests, lines):
        tokens = r.tokens.tolist()
        positions = [p for p, _, _ in rec["steps"]]
        assert positions[0] == r.prompt_len + 1 and positions == sorted(positions)
        for p, draft, accepted in rec["steps"]:
            assert len(draft) <= 5 and accepted <= len(draft)
            n = 0
            while n < len(draft) and p + n < len(tokens) and draft[n] == tokens[p + n]:
                n += 1
            assert n == accepted
    assert not list(tmp_path.glob(".*tmp"))  # written through a temporary file, renamed


def test_cli_rejects_unknown_drafter_and_bad_settings(cli):
    res = cli(FIXTURE, "--drafter", "medusa")
    assert res.exit_code != 0 and "--drafter" in res.output
    res = cli(FIXTURE, "--drafter", "sa", "--max-matching-ngram-size", 0)
    assert res.exit_code != 0 and "max_matching_ngram_size" in str(res.exception)


@pytest.mark.parametrize("engine, decoding", [("trtllm", "NGram"), ("trtllm", "SA"), ("vllm", "vllm_ngram"),
                                              ("vllm", "suffix")])
def test_drafters_run_in_the_simulator(engine, decoding):
    from specplan.config import SimConfig
    from specplan.simulator.run import simulate

    requests = read_token_trace(FIXTURE)
    cfg = SimConfig.model_validate({
        "engine": {"engine": engine, "max_batch_size": 4, "kv_num_blocks": 4000},
        "speculation": {"decoding_type": decoding, "max_draft_len": 4},
        "acceptance": {"mode": "drafter"},
        "workload": {"arrival": "closed_loop", "concurrency": 4, "num_requests": len(requests)},
        "cost": {"model": "linear_gamma", "t_base_s": 0.01, "gamma": 0.1},
    })
    s = simulate(cfg, requests=requests).summary
    assert s["completed_requests"] == len(requests)
    assert s["output_tokens"] == sum(r.output_len for r in requests)
    assert s["mean_acceptance_length"] > 1.3
