"""Recorded per-position acceptance with "no proposal" entries (0: the drafter had nothing there),
replayed through the vLLM executor loop against a table worked by hand."""

import json

import numpy as np
import pytest

from specplan.config import build_config
from specplan.errors import TraceError
from specplan.simulator.run import build_cost, simulate
from specplan.acceptance.recorded import RecordedPositionOracle
from specplan.workloads.request import Request

PROMPT, OUTPUT = [1, 2, 3], list(range(100, 108))


def run(tmp_path, runs):
    (tmp_path / "trace.jsonl").write_text(json.dumps({"id": "r", "prompt_ids": PROMPT, "output_ids": OUTPUT}) + "\n")
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"id": "r", "prompt_ids": PROMPT, "output_ids": OUTPUT, "run_length_per_position": runs}) + "\n")
    cfg = build_config({
        "engine": {"engine": "vllm"}, "speculation": {"decoding_type": "vllm_ngram", "max_draft_len": 3},
        "acceptance": {"mode": "recorded", "recorded_path": str(log)},
        "workload": {"trace": str(tmp_path / "trace.jsonl"), "arrival": "closed_loop", "concurrency": 1, "num_requests": 1},
        "cost": {"model": "linear_gamma"}})
    return simulate(cfg, build_cost(cfg))


def test_no_proposal_rows_verify_one_token(tmp_path):
    # By hand, K = 3, 8 output tokens, r_c for c = 0..7 = [9, 0, 3, 0, 0, 2, 0, 1]:
    #   prefill emits output 1                                         -> committed 1
    #   c=1: r=0, no proposal: 0 drafted, verifies 1, emits 1          -> 2
    #   c=2: r=3, budget min(3, 8-2-1) = 3: 3 drafted, 2 accepted, emits 3 -> 5
    #   c=5: r=2, budget min(3, 8-5-1) = 2: 2 drafted, 1 accepted, emits 2 -> 7
    #   c=7: budget 0: nothing drafted, emits the last token           -> 8
    # drafted 5, accepted 3, 2 proposing rows: rate 3/5, mean acceptance length 1 + 3/2.
    r = run(tmp_path, [9, 0, 3, 0, 0, 2, 0, 1])
    it = r.iterations
    assert it["drafted"].tolist() == [0, 0, 3, 2, 0]
    assert it["accepted"].tolist() == [0, 0, 2, 1, 0]
    assert it["verified_tokens"].tolist() == [0, 1, 4, 3, 1]
    assert it["committed"].tolist() == [1, 1, 3, 2, 1]
    assert r.summary["acceptance_rate"] == pytest.approx(0.6)
    assert r.summary["mean_acceptance_length"] == pytest.approx(2.5)
    assert r.summary["accepted_histogram"] == [0, 1, 1]
    # the same log with "drafted, all rejected" (1) in place of "no proposal" (0): c=1 now drafts 3
    one = run(tmp_path, [9, 1, 3, 1, 1, 2, 1, 1])
    assert one.iterations["verified_tokens"].tolist() == [0, 4, 4, 3, 1]
    assert one.summary["acceptance_rate"] == pytest.approx(3 / 8)
    assert one.summary["mean_acceptance_length"] == pytest.approx(1 + 3 / 3)


def test_oracle_entries_and_bad_values(tmp_path):
    req = Request("r", PROMPT, OUTPUT)
    log = tmp_path / "log.jsonl"
    log.write_text(json.dumps({"id": "r", "prompt_ids": PROMPT, "output_ids": OUTPUT,
                               "run_length_per_position": [0, 4, 0, 2, 1, 0, 3, 1]}) + "\n")
    oracle = RecordedPositionOracle(log, [req])
    got = [tuple(int(x[0]) for x in oracle.draft(np.array([0]), np.array([c]), 4)) for c in range(8)]
    assert got == [(0, 0), (4, 3), (0, 0), (4, 1), (3, 0), (0, 0), (1, 1), (0, 0)]
    log.write_text(json.dumps({"id": "r", "prompt_ids": PROMPT, "output_ids": OUTPUT,
                               "run_length_per_position": [0, -1, 1, 1, 1, 1, 1, 1]}) + "\n")
    with pytest.raises(TraceError, match=r"must hold integers >= 0 .*0 = no proposal"):
        RecordedPositionOracle(log, [req])
