"""Open-loop arrivals submitted by the spans (``simulator/open_loop.py``) against SimPy itself: the
frontend's own process for the submit times, and whole runs one step at a time through SimPy (the
frontend a process, ``Executor._spans`` off) for the rest, with arrivals at the same instant as each
other, as a step's end and as the executor falling idle, where SimPy's event order decides."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import simpy

from specplan.config import build_config
from specplan.simulator.frontend import Frontend
from specplan.simulator.inputs import Workload
from specplan.simulator.open_loop import OpenLoop
from specplan.simulator.run import simulate

DATA = {"seed": 1, "engine": {"max_batch_size": 4, "max_num_tokens": 2048, "max_num_active_requests": 5,
                              "enable_prefix_caching": False},
        "speculation": {"decoding_type": "none"},
        "workload": {"trace": None, "num_requests": 24, "arrival": "poisson", "rate": 50.0, "prompt_len": 200,
                     "output_len": 12},
        "cost": {"model": "roofline", "gpu": "h200", "model_name": "llama-3.1-8b"}}


@pytest.mark.parametrize("seed", range(4))
def test_submit_times_are_the_frontends(seed):
    """Arrivals repeated, at 0 and a hair apart, out of order or not: the times the spans submit at are those
    SimPy's run of the frontend records, and a new run of the process starts where it made a timeout."""
    rng = np.random.default_rng(seed)
    base = np.round(rng.exponential(0.01, 60).cumsum(), 2)  # repeats
    base[:3] = 0.0
    base[10] = np.nextafter(base[9], np.inf)  # a hair after the one before
    arrivals = rng.permutation(base) if seed % 2 else base  # out of order, or in id order (no order array)
    env = simpy.Environment()
    w = Workload(np.ones(60, dtype=np.int64), np.ones(60, dtype=np.int64), arrivals, None)
    timeouts, made = [0], env.timeout
    env.timeout = lambda delay: (timeouts.__setitem__(0, timeouts[0] + 1), made(delay))[1]
    frontend = Frontend(env, w, lambda rid: None)
    submits = []  # (request, time, timeouts made so far) at each submit
    real = frontend._submit
    frontend._submit = lambda rid: (submits.append((rid, env.now, timeouts[0])), real(rid))
    frontend.start()
    env.run()
    spans_frontend = Frontend(simpy.Environment(), w, lambda rid: None)
    ours = OpenLoop(spans_frontend)
    rids, times, counts = (np.array(column) for column in zip(*submits))
    assert len(ours.order) == (60 if seed % 2 else 0)
    np.testing.assert_array_equal(ours.order if seed % 2 else np.arange(60), rids)
    np.testing.assert_array_equal(ours.times, times)
    np.testing.assert_array_equal(ours.new_event, np.diff(counts, prepend=0) > 0)
    np.testing.assert_array_equal(spans_frontend.arrival, frontend.arrival)  # what the frontend records
    assert ours.new_event.sum() < 57  # repeats share a run


def _run(monkeypatch, arrivals, spans: bool, max_sim_time=None, recycle_at=None):
    """One run of ``DATA`` with these arrival times: its request, iteration and emission tables and the
    recorded arrivals; ``spans`` False sends every step and the frontend through SimPy."""
    from specplan.acceptance import build_oracle
    from specplan.simulator import state
    from specplan.simulator.engine import Executor
    from specplan.simulator.metrics import emission_table, iteration_table, request_table
    from specplan.simulator.run import build_cost, build_workload, kv_num_blocks, resolve, resolve_engine

    cfg = resolve(build_config(DATA))
    wl, reqs = build_workload(cfg)
    wl.arrivals = np.asarray(arrivals, dtype=float)
    ex = Executor(resolve_engine(cfg, kv_num_blocks(cfg)), wl, build_oracle(cfg, reqs, wl.prompt_lens, wl.output_lens),
                  build_cost(cfg), max_sim_time)
    with monkeypatch.context() as m:
        if not spans:
            m.setattr(Executor, "_spans", lambda self: False)
        if recycle_at is not None:
            m.setattr(state, "RECYCLE_AT", recycle_at)
        trace = ex.run()
    assert (ex._arrivals is not None) == spans  # the spans submitted the arrivals, or the frontend did
    return request_table(trace, reqs), iteration_table(trace), emission_table(trace), trace.arrival.copy()


def _ends(iterations: pd.DataFrame) -> np.ndarray:
    return (iterations["start_s"] + iterations["step_s"]).to_numpy()  # SimPy's now + delay


def _at_step_ends(monkeypatch, seed: int) -> np.ndarray:
    """Arrivals placed one by one on the run so far (steps before an arrival do not depend on it): on
    the same instant as the one before, on one of the next step ends, on the last (the executor falling
    idle), or inside a step, whose end the next one may then take. An arrival on a step's end runs
    before the commit when its timeout was made first; one made while that step ran (after an arrival
    inside it) runs after."""
    rng = np.random.default_rng(seed)
    arrivals = np.full(DATA["workload"]["num_requests"], 1e6)  # not yet placed: long after the rest
    arrivals[:3] = 0.0
    for j in range(3, len(arrivals)):
        its = _run(monkeypatch, arrivals, spans=False)[1]
        ends = _ends(its)
        after = (ends >= arrivals[j - 1]) & (ends < 1e5)
        later, pick = np.unique(ends[after]), rng.random()
        if pick < 0.25:  # inside one of the next steps
            step = its[after].iloc[min(int(rng.integers(0, 3)), int(after.sum()) - 1)]
            arrivals[j] = step["start_s"] + step["step_s"] / 2
        else:
            arrivals[j] = later[-1] if pick < 0.4 else later[min(int(rng.integers(0, 3)), len(later) - 1)]
    return arrivals


@pytest.mark.parametrize("seed", range(3))
def test_spans_submitting_arrivals_match_simpy_at_every_tie(monkeypatch, seed):
    """Arrivals all at once, on a coarse grid (many at one instant) and exactly on step ends and on the
    executor falling idle; recycling slots at every completion or every 256; stopping at
    ``max_sim_time`` halfway: every table the same as SimPy's one step at a time, and the arrival
    times the frontend records."""
    n = DATA["workload"]["num_requests"]
    rng = np.random.default_rng(seed)
    ties = _at_step_ends(monkeypatch, seed)
    slow = _run(monkeypatch, ties, spans=False)
    assert np.isin(ties[3:], _ends(slow[1])).sum() >= 8  # most land on a step's end
    cases = [np.zeros(n), np.round(rng.exponential(0.02, n).cumsum(), 1), ties]
    for arrivals in cases:
        end = float(_run(monkeypatch, arrivals, spans=False)[0]["finish_s"].max())
        for max_sim_time in (None, end / 2):
            want = _run(monkeypatch, arrivals, spans=False, max_sim_time=max_sim_time)
            for recycle_at in (1, None):
                got = _run(monkeypatch, arrivals, spans=True, max_sim_time=max_sim_time, recycle_at=recycle_at)
                for a, b in zip(got[:3], want[:3]):
                    pd.testing.assert_frame_equal(a, b, check_exact=True)
                np.testing.assert_array_equal(got[3], want[3])


def test_admit_gives_the_slots_add_gives():
    """The span's admission (``open_loop.admit``) against ``RequestState.add`` then ``admit``: batches of
    one to six requests, finished ones released (and recycled every 4) between them; where ``admit``
    declines (``add`` grows the state first), Python admits, as the span's return has it do. Both
    states hold the same requests in the same slots, in the same active order, all along."""
    from specplan.simulator import state
    from specplan.simulator.open_loop import ADMITTED, admit
    from specplan.simulator.state import N_ACTIVE, RequestState, empty_results

    rng = np.random.default_rng(7)
    plen, olen = rng.integers(1, 900, 300), rng.integers(1, 300, 300)
    order = rng.permutation(300).astype(np.int64)
    py, co = RequestState(4, empty_results(300)), RequestState(4, empty_results(300))
    ints, declined = np.zeros(4, dtype=np.int64), 0
    with pytest.MonkeyPatch.context() as m:
        m.setattr(state, "RECYCLE_AT", 4)
        while ints[ADMITTED] < 280:
            count, first = int(rng.integers(1, 7)), int(ints[ADMITTED])
            py.admit(py.add(order[first:first + count].tolist(), plen, olen))
            if not admit(order, ints, count, plen, olen, co.rid, co.plen, co.olen, co.ctx_target, co.act, co.free,
                         co.counters):
                declined += 1
                co.admit(co.add(order[first:first + count].tolist(), plen, olen))
                ints[ADMITTED] += count
            for s in (py, co):  # the same requests finish in both: leave the active set, released
                active = s.act[:s.counters[N_ACTIVE]]
                done = active[rng.random(len(active)) < 0.4] if s is py else done
                keep = active[~np.isin(active, done)]
                s.act[:len(keep)], s.counters[N_ACTIVE] = keep, len(keep)
                s.release(done)
            for name in ("rid", "plen", "olen", "ctx_target", "free", "released", "counters"):
                np.testing.assert_array_equal(getattr(co, name), getattr(py, name), err_msg=name)
            np.testing.assert_array_equal(co.act[:co.counters[N_ACTIVE]], py.act[:py.counters[N_ACTIVE]])
    assert 0 < declined < 60  # both paths ran


def test_completions_nothing_hears_are_released_in_the_span(monkeypatch, count_calls):
    """Open-loop requests without sessions, and no prefix cache, legacy gate or drafter that hears a
    completion: only the request state does, so the span releases the finished slots itself and runs on
    (``Executor._quiet_finish``), returning to Python to recycle them (here every 1, 3 and
    ``RECYCLE_AT`` completions). That must give the run every step through SimPy gives, on one replica
    (queued arrivals admitted as completions free room) and on a fleet."""
    from specplan.simulator import state as request_state
    from specplan.simulator.engine import Executor

    # DATA's, busier: arrivals faster than the room (queued ones admitted as completions free it), and
    # requests admitted together finishing together
    data = {**DATA, "seed": 3, "engine": {**DATA["engine"], "max_batch_size": 8, "max_num_active_requests": 6},
            "workload": {**DATA["workload"], "num_requests": 80, "rate": 400.0, "prompt_len": 300, "output_len": 40}}
    built = []  # each run's executors: whether completions were quiet, and the slots the run took
    init = Executor.__init__
    monkeypatch.setattr(Executor, "__init__", lambda self, *a, **kw: (init(self, *a, **kw), built.append(self))[0])
    finishes = count_calls(Executor, "_on_finish")
    for over in ({}, {"engine": {"engine": "vllm"}}, {"cluster": {"replicas": 2, "router": "least_outstanding"}}):
        cfg = build_config({**data, **{k: {**data.get(k, {}), **v} for k, v in over.items()}})
        for recycle_at in (1, 3, request_state.RECYCLE_AT):
            runs = {}
            for spans in (False, True):
                finishes.clear()
                built.clear()
                with monkeypatch.context() as m:
                    m.setattr(request_state, "RECYCLE_AT", recycle_at)
                    if not spans:
                        m.setattr(Executor, "_spans", lambda self: False)
                    runs[spans] = simulate(cfg), [ex.st.n for ex in built]
                assert all(ex._quiet_finish for ex in built)
                assert bool(finishes) != spans  # one step at a time each completion goes through Python, else none
            (fast, fast_slots), (slow, slow_slots) = runs[True], runs[False]
            assert fast.summary["completed_requests"] == 80
            assert fast_slots == slow_slots  # the same slots recycled for the same requests
            for a, b in zip((fast.requests, fast.iterations, fast.emissions), (slow.requests, slow.iterations, slow.emissions)):
                pd.testing.assert_frame_equal(a, b, check_exact=True)
            assert fast.summary == slow.summary
