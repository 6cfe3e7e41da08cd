"""The fleet's compiled loop over held steps (``specplan.simulator.fleet_loop``) gives the run that
every step through SimPy gives: same tables, same summaries, bit for bit."""

import numpy as np
import pandas as pd
import pytest

from specplan.config import build_config
from specplan.simulator import fleet_loop
from specplan.simulator.engine import Executor
from specplan.simulator.run import simulate

ROOFLINE = {"model": "roofline", "gpu": "h200", "model_name": "llama-3.1-8b"}
LOCKSTEP = {"seed": 3, "engine": {"max_batch_size": 8, "max_num_tokens": 2048},
            "speculation": {"decoding_type": "none"},
            "workload": {"trace": None, "num_requests": 240, "arrival": "closed_loop", "concurrency": 32,
                         "prompt_len": 64, "output_len": 24},
            "cost": ROOFLINE}


def _run_both(cfg, monkeypatch, count_calls):
    calls = count_calls(fleet_loop, "run_fleet")
    fast = simulate(cfg)
    with monkeypatch.context() as m:
        m.setattr(Executor, "_spans", lambda self: False)
        slow = simulate(cfg)
    for a, b in ((fast.requests, slow.requests), (fast.iterations, slow.iterations), (fast.emissions, slow.emissions)):
        pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert fast.summary == slow.summary and fast.description == slow.description
    return fast, len(calls)


@pytest.mark.parametrize("router", ["least_kv", "least_outstanding", "round_robin"])
def test_lockstep_replicas_tie_in_simpys_order(router, monkeypatch, count_calls):
    """Identical requests on 4 replicas end their steps at the same instants; with a router that
    reads the replicas' load at each arrival, the order of tied steps decides where requests go."""
    cfg = build_config({**LOCKSTEP, "cluster": {"replicas": 4, "router": router}})
    fast, calls = _run_both(cfg, monkeypatch, count_calls)
    it = fast.iterations
    ends = it["start_s"] + it["step_s"]
    tied = it.assign(end=ends).groupby("end")["replica"].nunique()
    assert (tied > 1).sum() > 10  # steps of different replicas end at the same instant, often
    assert 0 < calls < fast.summary["iterations"] / 2  # the compiled loop ran, several steps a call


def test_replicas_join_the_loop_as_their_gates_latch(monkeypatch, count_calls):
    """Speculating replicas step through SimPy until their SpeculationGate latches, then hold their
    steps in the fleet's loop, beside replicas still speculating."""
    cfg = build_config({
        "seed": 1, "engine": {"max_batch_size": 8, "max_num_tokens": 2048},
        "speculation": {"decoding_type": "SA", "max_draft_len": 4, "max_matching_ngram_size": -1,
                        "acceptance_rate_window_size": 20, "acceptance_rate_threshold": 0.9},
        "acceptance": {"mode": "alpha", "alpha": 0.3},
        "workload": {"trace": "specbench", "num_requests": 90, "arrival": "poisson", "rate": 25.0},
        "cost": ROOFLINE, "cluster": {"replicas": 3, "router": "least_outstanding"}})
    fast, calls = _run_both(cfg, monkeypatch, count_calls)
    per = fast.description["cluster"]["per_replica"]
    assert all(p["gate_tripped_iteration"] is not None for p in per)
    assert len({p["gate_tripped_s"] for p in per}) == 3 and calls > 0  # each latched at its own time


def test_max_sim_time_stops_each_replica_in_the_loop(monkeypatch, count_calls):
    cfg = build_config({**LOCKSTEP, "max_sim_time_s": 0.5, "cluster": {"replicas": 3, "router": "least_outstanding"}})
    fast, calls = _run_both(cfg, monkeypatch, count_calls)
    assert calls > 0 and fast.summary["completed_requests"] < 240
    assert np.nanmax(fast.requests["finish_s"]) < 0.5 + fast.iterations["step_s"].max()


def test_held_steps_sort_as_simpy_sorts_its_queue():
    """A held step is the event (time, NORMAL, id) in SimPy's heap: it goes before the queue's head
    exactly when that tuple sorts first."""
    from simpy.events import NORMAL, URGENT

    from specplan.simulator.fleet_loop import _before

    times, ids = (0.5, 1.0, 1.5), (3, 7, 11)
    for t in times:
        for eid in ids:
            for head_t in times:
                for priority in (URGENT, NORMAL):
                    for head_eid in ids:
                        want = (t, NORMAL, eid) < (head_t, priority, head_eid)
                        assert _before(t, eid, head_t, priority, head_eid) == want


def test_the_earliest_held_step_is_the_least_end_then_id():
    from specplan.simulator.fleet_loop import EID, END, HELD_N, earliest

    rng = np.random.default_rng(0)
    for _ in range(200):
        ints, floats = np.zeros((6, 6), dtype=np.int64), np.zeros((6, 3))
        ints[:, HELD_N] = rng.integers(0, 2, 6) * rng.integers(1, 9, 6)
        ints[:, EID] = rng.permutation(6) + 10
        floats[:, END] = rng.choice([0.5, 1.0, 1.5], 6)  # ties on purpose
        skip = int(rng.integers(-1, 6))
        held = [(floats[r, END], ints[r, EID], r) for r in range(6) if ints[r, HELD_N] and r != skip]
        assert earliest(ints, floats, skip) == (min(held)[2] if held else -1)
