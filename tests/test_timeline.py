"""`simulate --timeline`: a Chrome trace event file with one complete event per iteration and the
per-request spans, laid out as the format requires (microseconds, nesting per thread, names)."""

import json

import numpy as np
import pandas as pd
import pytest
import yaml
from cli_helpers import SMALL, run_cli

from specplan.reports.timeline import request_lanes


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("timeline")
    (tmp / "s.yaml").write_text(yaml.safe_dump(SMALL))
    proc = run_cli("simulate", tmp / "s.yaml", "--out", tmp / "out", "--timeline", "--baseline", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    return tmp / "out", json.loads(proc.stdout)


def _load(path):
    trace = json.loads(path.read_text())  # strict JSON: no NaN
    return trace, trace["traceEvents"]


def test_one_complete_event_per_iteration_with_its_record(run):
    out, summary = run
    for sub, n_iter in (("speculative", summary["iterations"]), ("baseline", summary["baseline"]["iterations"])):
        its = pd.read_parquet(out / sub / "iterations.parquet")
        _, events = _load(out / sub / "timeline.json")
        iters = [e for e in events if e.get("cat") == "iteration"]
        assert len(iters) == len(its) == n_iter
        assert all(e["ph"] == "X" and e["pid"] == 1 and e["tid"] == 1 for e in iters)
        np.testing.assert_allclose([e["ts"] for e in iters], its["start_s"] * 1e6)
        np.testing.assert_allclose([e["dur"] for e in iters], its["step_s"] * 1e6)
        for field in ("batch_rows", "k", "drafted", "accepted", "verified_tokens"):
            assert [e["args"][field] for e in iters] == its[field].tolist()
        # iterations follow one another on the executor thread: they never overlap
        ends = np.array([e["ts"] + e["dur"] for e in iters])
        assert (np.array([e["ts"] for e in iters])[1:] >= ends[:-1] - 1e-6).all()
    assert {e["args"]["k"] for e in _load(out / "baseline" / "timeline.json")[1] if e.get("cat") == "iteration"} == {0}


def test_request_spans_follow_the_requests_table_and_nest_per_lane(run):
    out, _ = run
    reqs = pd.read_parquet(out / "speculative" / "requests.parquet")
    _, events = _load(out / "speculative" / "timeline.json")
    spans = [e for e in events if e.get("cat") == "request"]
    assert len(spans) == 2 * len(reqs)
    by_id = {}
    for e in spans:
        by_id.setdefault(str(e["args"]["request_id"]), {})[e["name"]] = e
    for r in reqs.itertuples():
        wait, decode = by_id[str(r.request_id)]["queued + prefill"], by_id[str(r.request_id)]["decode"]
        assert wait["ts"] == pytest.approx(r.arrival_s * 1e6) and wait["dur"] == pytest.approx(r.ttft_s * 1e6)
        assert decode["ts"] == pytest.approx(r.first_token_s * 1e6)
        assert decode["ts"] + decode["dur"] == pytest.approx(r.finish_s * 1e6)
        assert wait["tid"] == decode["tid"]
    for lane in {e["tid"] for e in spans}:
        on = sorted((e["ts"], e["ts"] + e["dur"]) for e in spans if e["tid"] == lane)
        assert all(b[0] >= a[1] - 1e-6 for a, b in zip(on, on[1:]))  # no partial overlap on a thread


def test_metadata_names_every_process_and_thread(run):
    out, _ = run
    trace, events = _load(out / "speculative" / "timeline.json")
    assert trace["displayTimeUnit"] == "ms"
    names = {(e["name"], e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M"}
    assert names[("process_name", 1, 0)] == "executor" and names[("process_name", 2, 0)] == "requests"
    used = {(e["pid"], e["tid"]) for e in events if e["ph"] == "X"}
    assert all(("thread_name", pid, tid) in names for pid, tid in used)
    assert all(isinstance(e["ts"], (int, float)) and e["ts"] >= 0 for e in events if e["ph"] != "M")


def test_lanes_by_hand():
    # [0,2) [1,3) [2,4) [5,6): the third reuses lane 1 (free at 2), the fourth takes the earliest free lane
    assert request_lanes([0, 1, 2, 5], [2, 3, 4, 6]) == [1, 2, 1, 2]


def test_timeline_without_out_is_one_line_exit_2():
    proc = run_cli("simulate", "--timeline")
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1] == (
        "error: --timeline: give --out DIR to write timeline.json into")
