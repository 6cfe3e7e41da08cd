"""``specplan validate --engine vllm``.

The unit tests run everywhere; the tests marked ``vllm`` run the real engine on the CPU and skip
where vLLM is not importable (the CI tier runs them in ``.venv-vllm``, see ``.ci/run``).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from specplan.cli import app
from specplan.errors import SpecplanError
from specplan.simulator.run import simulate
from specplan.validation import vllm_compare as vc
from specplan.validation.vllm_check import sim_config
from specplan.validation.vllm_engine import EngineRun, StepRow
from specplan.workloads.request import Request
from specplan.workloads.tokentrace import write_token_trace

NGRAM = {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 1, "prompt_lookup_max": 3}


def test_simulated_rows_of_a_hand_worked_request(tmp_path):
    # Prompt 1 2 3 1 2, greedy output 3 1 2 3 1 9, K = 2. Worked by hand with vLLM's n-gram rule:
    # step 1 prefills 5 tokens and samples 3; the history ends "1 2 3", seen at 0, so the draft is
    # "1 2", both right, bonus 3 (commit 3); the history again ends "1 2 3": draft "1 2", only "1"
    # right, bonus 9 (commit 2) ends the output.
    req = Request(id="r", prompt_ids=[1, 2, 3, 1, 2], output_ids=[3, 1, 2, 3, 1, 9], arrival_s=0.0)
    path = write_token_trace([req], tmp_path / "t.jsonl")
    settings = {"max_num_seqs": 1, "max_num_batched_tokens": 64, "max_model_len": 64}
    result = simulate(sim_config(NGRAM, 1, settings, path), requests=[req], record_batches=True)
    rows = vc.sim_rows(result, ["r"])
    assert rows["scheduled"].tolist() == [5, 3, 3]
    assert rows["decode"].tolist() == [False, True, True]
    assert rows["drafted"].tolist() == [0, 2, 2]
    assert rows["accepted"].tolist() == [0, 2, 1]
    assert rows["committed"].tolist() == [1, 3, 2]
    assert vc.per_iteration(rows)["accepted"].tolist() == result.iterations["accepted"].tolist() == [0, 2, 1]


def _engine_run() -> EngineRun:
    # Two requests, prompts of 4 and 3 tokens, a 5-token budget: "a" prefills in step 1, "b" is
    # chunked over steps 1-2 (1 + 2 tokens), then both decode.
    rows = [StepRow(1, "a", 4, 0, 0, 1), StepRow(1, "b", 1, 0, 0, 0),
            StepRow(2, "a", 3, 2, 1, 2), StepRow(2, "b", 2, 0, 0, 1),
            StepRow(3, "a", 1, 0, 0, 1), StepRow(3, "b", 4, 3, 3, 4)]
    return EngineRun(rows=rows, step_s=[0.1, 0.1, 0.1])


def test_engine_rows_decode_flags_and_tables():
    rows = vc.engine_rows(_engine_run(), {"a": 4, "b": 3})
    assert rows["decode"].tolist() == [False, False, True, False, True, True]
    its = vc.per_iteration(rows)
    assert its.loc[2].tolist() == [2, 1, 5, 2, 1, 3]  # rows, decode rows, scheduled, drafted, accepted, committed
    assert its.loc[3].tolist() == [2, 2, 5, 3, 3, 5]
    req = vc.per_request(rows, ["a", "b"])
    assert req.loc["a"].tolist() == [3, 2, 1] and req.loc["b"].tolist() == [3, 3, 3]


def test_compare_counts_and_first_difference():
    rows = vc.engine_rows(_engine_run(), {"a": 4, "b": 3})
    e_its, e_req = vc.per_iteration(rows), vc.per_request(rows, ["a", "b"])
    table, summary = vc.compare(e_its, e_its.copy(), e_req, e_req.copy())
    assert summary["iterations_differing"] == 0 and summary["first_difference"] is None
    assert summary["requests_steps_equal"] == 2 and summary["iterations_compared"] == 3
    s_its = e_its.copy()
    s_its.loc[3, "drafted"] = 2
    s_its.loc[4] = [1, 1, 1, 0, 0, 1]  # one simulated iteration more
    s_req = e_req.copy()
    s_req.loc["b", "steps"] = 4
    table, summary = vc.compare(e_its, s_its, e_req, s_req)
    assert summary["engine_iterations"] == 3 and summary["sim_iterations"] == 4
    assert summary["iterations_compared"] == 3 and summary["iterations_differing"] == 1
    assert summary["first_difference"]["iteration"] == 3 and summary["first_difference"]["columns"] == ["drafted"]
    assert summary["requests_steps_equal"] == 1
    assert table["differs"].tolist() == [False, False, True, True]


@pytest.mark.parametrize("spec, message", [
    ("{not json", "not valid JSON"),
    ('{"method": "eagle", "num_speculative_tokens": 3}', '"method": "ngram"'),
    ('{"method": "ngram", "num_speculative_tokens": 0}', "num_speculative_tokens"),
    ('{"method": "ngram", "num_speculative_tokens": 3, "lookahead": 1}', "lookahead"),
])
def test_bad_speculative_config_is_one_line(tmp_path, spec, message):
    res = CliRunner().invoke(app, ["validate", "--engine", "vllm", "--speculative-config", spec,
                                   "--out", str(tmp_path)])
    assert isinstance(res.exception, SpecplanError) and message in str(res.exception)


def test_engine_and_profile_options_are_checked_before_any_run(tmp_path):
    # --engine vllm takes --profile (it prices the simulation); a profile that does not load is refused
    # in one line naming it, before the engine starts.
    cases = [(["--engine", "trtllm"], "--engine"), (["--engine", "vllm", "--profile", "no/such-profile"],
                                                    "no/such-profile"), ([], "--profile")]
    for args, named in cases:
        res = CliRunner().invoke(app, ["validate", *args, "--out", str(tmp_path)])
        assert isinstance(res.exception, SpecplanError) and named in str(res.exception)


# ----------------------------------------------------------------------------- the CPU tier
# 24 prompts (summarisation, RAG, coding), 96 new tokens; K = 5 and 4, one request at a time and
# batched; and one run whose max_model_len (800) is close to the prompts' (up to 768 tokens).
TIER = {
    "k5-single": ["--max-num-seqs", "1"],
    "k5-batched": [],
    "k4-single": ["--max-num-seqs", "1", "--speculative-config", json.dumps({**NGRAM, "num_speculative_tokens": 4})],
    "k4-batched": ["--speculative-config", json.dumps({**NGRAM, "num_speculative_tokens": 4})],
    "k5-max-model-len": ["--max-model-len", "800"],
}


@pytest.mark.vllm
@pytest.mark.parametrize("name", list(TIER))
def test_vllm_cpu_matches_the_simulator(tmp_path, name, vllm_check):
    pytest.importorskip("vllm")
    out = vllm_check(name, *TIER[name])
    summary = json.loads((out / "summary.json").read_text())
    table = pd.read_csv(out / "iterations.csv")
    assert len(table) == max(summary["engine_iterations"], summary["sim_iterations"])
    assert summary["greedy_equal"], "speculative output differs from plain greedy output"
    assert summary["requests"] == 24
    assert summary["iterations_differing"] == 0, summary["first_difference"]
    assert summary["engine_iterations"] == summary["sim_iterations"]
    assert summary["requests_steps_equal"] == summary["requests"]
    # vLLM's own Prometheus metrics of the run, read back by `calibrate --from-logs`, give the per-position
    # rates counted independently from the engine's per-step rows (drafts accepting more than p tokens, as
    # SpecDecodingStats counts them: before the stop check cuts a finishing request's tokens).
    k = summary["speculative_config"]["num_speculative_tokens"]
    steps = pd.read_csv(out / "engine_steps.csv")
    drafts = steps[steps["drafted"] > 0]
    n = [len(drafts)] + [int((drafts["accepted_stats"] > p).sum()) for p in range(k)]
    cal = subprocess.run([sys.executable, "-m", "specplan", "calibrate", "--from-logs", str(out / "metrics.prom"),
                          "--out", str(tmp_path / "cal")], cwd=Path(__file__).parents[1], capture_output=True, text=True)
    assert cal.returncode == 0, cal.stderr[-2000:]
    got = json.loads((tmp_path / "cal" / "acceptance.json").read_text())
    assert got["num_drafts"] == n[0]
    assert got["per_position"] == pytest.approx([n[p + 1] / n[p] if n[p] else 0.0 for p in range(k)], abs=1e-12)


def _shared_prefix_trace(path: Path) -> Path:
    """24 prompts sharing a 496-token system prefix, each with its own 40-token tail: token ids in
    SmolLM2's vocabulary (49,152), drawn once from a seeded generator."""
    rng = np.random.default_rng(7)
    prefix = rng.integers(100, 49000, 496).tolist()
    reqs = [Request(id=f"p{i}", prompt_ids=prefix + rng.integers(100, 49000, 40).tolist(), output_ids=[0])
            for i in range(24)]
    return write_token_trace(reqs, path)


@pytest.mark.vllm
def test_vllm_cpu_prefix_caching_matches_the_simulator(tmp_path):
    # Prefix caching on in both runs: vLLM looks the cache up as each waiting request is first
    # scheduled and caches the blocks it allocates in the same schedule() call, so requests scheduled
    # in the first step beside the one that computes the shared blocks already hit them.
    pytest.importorskip("vllm")
    out = tmp_path / "prefix"
    cmd = [sys.executable, "-m", "specplan", "validate", "--engine", "vllm", "--num-prompts", "24",
           "--max-tokens", "32", "--enable-prefix-caching", "--trace", str(_shared_prefix_trace(tmp_path / "t.jsonl")),
           "--out", str(out)]
    proc = subprocess.run(cmd, cwd=Path(__file__).parents[1], capture_output=True, text=True,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"] == 24
    assert summary["iterations_differing"] == 0, summary["first_difference"]
    assert summary["engine_iterations"] == summary["sim_iterations"]
    assert summary["requests_steps_equal"] == summary["requests"]
    steps = pd.read_csv(out / "engine_steps.csv")
    first = steps.groupby("request").head(1)
    assert (first["scheduled"] < 536).sum() >= 20  # the engine did serve prefixes from its cache


def test_step_timing_against_the_engine_hand_worked():
    """Two requests over four steps, the first the engine's warm-up: a commits 1, 1, 2, 1 tokens, b 1, 1, 1;
    engine steps 3, 1, 2, 1 s, simulated 1.2, 1.1, 1.8, 1.0 s. Worked by hand, after the warm-up: step
    errors +10%, -10%, 0; throughput 6 tokens in 4 s against 3.9; TPOT (from each request's first
    emission, so the warm-up's length drops out) a 4/4 s and b 3/2 s (mean 1.25) against 3.9/4 and
    2.9/2 (mean 1.2125)."""
    from specplan.validation.vllm_timing import timing

    rows = pd.DataFrame({"step": [1, 1, 2, 2, 3, 3, 4], "request": ["a", "b", "a", "b", "a", "b", "a"],
                         "committed": [1, 1, 1, 1, 2, 1, 1]})
    t = timing(rows, [3.0, 1.0, 2.0, 1.0], rows, [1.2, 1.1, 1.8, 1.0])
    assert t["iterations_timed"] == 3 and t["warmup"] == {"steps": 1, "engine_s": [3.0], "sim_s": [1.2]}
    assert t["median_step_ape"] == pytest.approx(0.1) and t["p90_step_ape"] == pytest.approx(0.1)
    assert t["step_bias"] == pytest.approx(0.0, abs=1e-12)
    assert t["engine_throughput_tok_s"] == pytest.approx(1.5)
    assert t["throughput_error"] == pytest.approx((6 / 3.9) / 1.5 - 1)
    assert t["engine_mean_tpot_s"] == pytest.approx(1.25)
    assert t["sim_mean_tpot_s"] == pytest.approx((3.9 / 4 + 2.9 / 2) / 2)
