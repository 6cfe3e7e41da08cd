"""Reports never recommend an overloaded point: a point whose queue grows without bound is marked
unstable and left out of every ranking."""

import numpy as np

from specplan.reports.summary import write_report
from specplan.sweeps.runners import LocalRunner
from specplan.sweeps.spec import parse_sweep
from specplan.sweeps.stability import stability
from specplan.sweeps.sweep import run_sweep


def test_a_single_server_queue_worked_by_hand():
    arrivals = np.arange(20.0)  # one request a second, t = 0..19
    # served one at a time in 2 s: finish_i = 2 (i + 1); over (9.5, 19] 10 arrive and 5 (10, 12, .., 18) finish,
    # growth 1 - mu / lambda = 1 - 0.5 / 1
    slow = stability(arrivals, 2.0 * (arrivals + 1))
    assert slow == {"queue_growth": 0.5, "unstable": True}
    # served in 0.5 s as they come: every arrival of the window but the last finishes in it
    fast = stability(arrivals, arrivals + 0.5)
    assert fast["queue_growth"] == 0.1 and not fast["unstable"]
    assert stability([0.0, 0.0], [1.0, 2.0])["queue_growth"] is None  # no arrival window


BASE = {
    "seed": 0,
    "engine": {"max_batch_size": 1, "kv_num_blocks": 20000},
    "speculation": {"decoding_type": "NGram", "max_draft_len": 2},
    "acceptance": {"mode": "alpha", "alpha": 0.5},
    "workload": {"trace": None, "arrival": "poisson", "rate": 1.0, "num_requests": 60, "prompt_len": 8,
                 "output_len": 10},
    "cost": {"model": "linear_gamma", "t_base_s": 0.01, "gamma": 0.0},
}


def test_overloaded_rate_is_marked_and_never_ranked(tmp_path):
    # One request at a time, each >= 10 / 3 steps of 10 ms: at most 30 req/s served. 100 req/s overloads;
    # at 1 req/s the engine is busy about a tenth of the time.
    spec = parse_sweep({"base": BASE, "grid": {"workload.rate": [1.0, 100.0]}}, "s")
    with LocalRunner(1) as runner:
        table = run_sweep(spec, tmp_path, runner)
    assert table.set_index("workload.rate")["unstable"].to_dict() == {1.0: False, 100.0: True}
    # without a TTFT SLO the overloaded point has the higher goodput: it finishes its 60 requests sooner
    assert table.set_index("workload.rate")["goodput_tok_s"].idxmax() == 100.0
    md = write_report(tmp_path).read_text()
    best = md.split("## Best points by goodput")[1].split("###")[0]
    rows = [line for line in best.splitlines() if line.startswith("| ") and not line.startswith("| #")]
    assert len(rows) == 1 and rows[0].split("|")[2].strip() == "1"  # only the 1 req/s point is ranked
    assert "are never ranked: #2" in best and "No SLO is set" in best
    assert "No stable point at 100 req/s" in md
    every = md.split("## All points")[1]
    assert [line.rstrip(" |").endswith("unstable") for line in every.splitlines() if line.startswith("| ")][1:] == \
        [False, True]


def test_report_lists_k_bands_per_point(tmp_path):
    schedules = [{1: 2, 3: 0}, {2: 2}]
    one_client = {**BASE["workload"], "arrival": "closed_loop", "concurrency": 1, "num_requests": 4}
    spec = parse_sweep({"base": {**BASE, "engine": {"max_batch_size": 4, "kv_num_blocks": 20000},
                                 "workload": one_client},
                        "grid": {"speculation.draft_len_schedule": schedules}, "baseline": False}, "s")
    with LocalRunner(1) as runner:
        table = run_sweep(spec, tmp_path, runner)
    # NGram keys are lower bounds (Drafter.get_draft_len_for_batch_size)
    assert table["k_bands"].tolist() == ["batch 1-2: K 2; 3+: 0 (off)", "batch 1: K 0 (off); 2+: 2"]
    md = write_report(tmp_path).read_text()
    section = md.split("## K per batch size")[1].split("##")[0]
    assert "batch 1-2: K 2; 3+: 0 (off)" in section and "batch 1: K 0 (off); 2+: 2" in section
    # one client: one active request at every step, where {2: 2} gives K 0
    assert table["k_shares"].tolist()[1] == "K 0: 100%" and "K 0: 100%" in section
