"""Recorded acceptance oracles: hand-computed replays, the bundled Spec-Bench logs, bad logs."""

from __future__ import annotations

import gzip
import json
from dataclasses import replace

import numpy as np
import pytest

from specplan.errors import TraceError
from specplan.workloads.bundled import bundled_traces
from specplan.workloads.formats import load_workload
from specplan.acceptance.recorded import RecordedPositionOracle, RecordedStepOracle, recorded_oracle
from specplan.workloads.request import Request


def _reqs():
    return [Request("a", [1, 2, 3], list(range(10, 22))), Request("b", [4], [7, 8, 9, 10, 11, 12])]


def _log(tmp_path, records, name="log.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_step_log_replayed_in_order(tmp_path):
    path = _log(tmp_path, [{"id": "a", "accepted_per_step": [4, 1, 6]}, {"id": "b", "accepted_per_step": [3, 3]}])
    oracle = recorded_oracle(path, _reqs())
    assert isinstance(oracle, RecordedStepOracle)
    rids = np.array([0, 1])
    # step 1: a (12 outputs, 0 committed) logged 4 -> 3 accepted; b (6 outputs) logged 3 -> 2 accepted
    drafted, accepted = oracle.draft(rids, np.array([0, 0]), 5)
    assert drafted.tolist() == [5, 5] and accepted.tolist() == [3, 2]
    # step 2 with K = 2: a logged 1 -> 0; b logged 3 -> 2, but its budget is 6 - 3 - 1 = 2 drafts
    drafted, accepted = oracle.draft(rids, np.array([4, 3]), 2)
    assert drafted.tolist() == [2, 2] and accepted.tolist() == [0, 2]
    # step 3: a logged 6 -> 5 but K = 3 caps it; b's log is exhausted and starts over (3 -> 2), budget 1
    drafted, accepted = oracle.draft(rids, np.array([5, 4]), 3)
    assert drafted.tolist() == [3, 1] and accepted.tolist() == [3, 1]
    assert oracle.metrics() == {"recorded_steps": 6, "recorded_steps_wrapped": 1}
    # K = 0 is no speculative step: nothing drafted, the log does not advance
    assert oracle.draft(rids, np.array([9, 5]), 0)[1].tolist() == [0, 0]
    assert oracle.metrics()["recorded_steps"] == 6


def test_copies_share_their_originals_log(tmp_path):
    path = _log(tmp_path, [{"id": "a", "accepted_per_step": [2]}, {"id": "b", "accepted_per_step": [5]}])
    a, b = _reqs()
    reqs = [a, replace(b, id="b#1", meta={"source_id": "b"})]
    oracle = recorded_oracle(path, reqs)
    assert oracle.draft(np.array([0, 1]), np.array([0, 0]), 8)[1].tolist() == [1, 4]


def test_position_log_answers_any_k(tmp_path):
    a, b = _reqs()
    runs_a = [5, 4, 3, 2, 1, 1, 1, 7, 6, 5, 4, 1]
    path = _log(tmp_path, [
        {"id": "a", "prompt_ids": a.prompt_ids.tolist(), "output_ids": a.output_ids.tolist(), "run_length_per_position": runs_a},
        {"id": "b", "prompt_ids": b.prompt_ids.tolist(), "output_ids": b.output_ids.tolist(), "run_length_per_position": [2] * 6},
    ])
    oracle = recorded_oracle(path, [a, b])
    assert isinstance(oracle, RecordedPositionOracle)
    for k in (1, 2, 4, 8):
        for c in range(12):
            drafted, accepted = oracle.draft(np.array([0]), np.array([c]), k)
            budget = max(min(k, 12 - c - 1), 0)
            assert drafted[0] == budget and accepted[0] == min(runs_a[c] - 1, budget)  # emitted min(r, K+1)
    # K varies per row within one call
    assert oracle.draft(np.array([0, 1]), np.array([7, 0]), 3)[1].tolist() == [3, 1]


def test_position_log_must_match_the_request(tmp_path):
    a, _ = _reqs()
    good = {"id": "a", "prompt_ids": a.prompt_ids.tolist(), "output_ids": a.output_ids.tolist(), "run_length_per_position": [1] * 12}
    path = _log(tmp_path, [{**good, "output_ids": good["output_ids"][:-1] + [0]}])
    with pytest.raises(TraceError, match=r"log\.jsonl:1: field 'output_ids' the tokens logged for 'a' differ"):
        RecordedPositionOracle(path, [a])
    path = _log(tmp_path, [{**good, "run_length_per_position": [1] * 11}])
    with pytest.raises(TraceError, match=r"log\.jsonl:1: field 'run_length_per_position' has 11 entries for 12 output tokens"):
        RecordedPositionOracle(path, [a])


def test_bad_logs(tmp_path):
    path = _log(tmp_path, [{"id": "a", "accepted_per_step": [2]}])
    with pytest.raises(TraceError, match=r"log\.jsonl: no record for request id 'b'"):
        recorded_oracle(path, _reqs())
    path = _log(tmp_path, [{"id": "a", "accepted_per_step": [2]}, {"id": "b", "accepted_per_step": [1, 0]}])
    with pytest.raises(TraceError, match=r"log\.jsonl:2: field 'accepted_per_step' must hold integers >= 1"):
        recorded_oracle(path, _reqs())
    path = _log(tmp_path, [{"id": "a", "accepted_per_step": [2]}, {"id": "a", "accepted_per_step": [2]}])
    with pytest.raises(TraceError, match=r"log\.jsonl:2: field 'id' duplicate id 'a'"):
        recorded_oracle(path, _reqs())
    path = _log(tmp_path, [{"id": "a", "steps": [2]}])
    with pytest.raises(TraceError, match=r"log\.jsonl:1: missing field 'accepted_per_step' or 'run_length_per_position'"):
        recorded_oracle(path, _reqs())
    with pytest.raises(TraceError, match=r"no such file and no bundled log of that name \(bundled: .*specbench-eagle"):
        recorded_oracle(tmp_path / "none.jsonl", _reqs())


@pytest.mark.parametrize("name", ["specbench-eagle", "specbench-sps"])
def test_bundled_logs_replay_the_recorded_runs(name):
    """Replaying with an unbounded K reproduces each logged turn exactly wherever the speculative run
    produced as many tokens as the trace's request: one simulated step per logged step."""
    info = bundled_traces("recorded_acceptance")[name]
    logs = {}
    for line in gzip.decompress(info.path.read_bytes()).decode().splitlines():
        rec = json.loads(line)
        logs[rec["id"]] = rec["accepted_per_step"]
    assert sum(map(len, logs.values())) == info.info["counts"]["steps"]
    reqs = load_workload(info.info["workload"])
    oracle = recorded_oracle(name, reqs)
    out = np.array([r.output_len for r in reqs])
    committed = np.zeros(len(reqs), dtype=np.int64)
    steps = np.zeros(len(reqs), dtype=np.int64)
    while (active := np.flatnonzero(committed < out)).size:
        _, accepted = oracle.draft(active, committed[active], 64)
        committed[active] += accepted + 1
        steps[active] += 1
    assert np.array_equal(committed, out)
    same = [i for i, r in enumerate(reqs) if sum(logs[r.id]) == r.output_len]
    assert len(same) > 400
    assert all(steps[i] == len(logs[reqs[i].id]) for i in same)
