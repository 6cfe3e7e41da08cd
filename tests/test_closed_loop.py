"""Closed-loop clients served by the spans (``simulator/closed_loop.py``) against SimPy itself: whole
runs one step at a time through SimPy (the clients its processes, ``Executor._spans`` off), with
sessions, prefix caching, drafters, the gate, room for fewer requests than clients, an executor falling
idle at each completion, slots recycled every 1, 3 and ``RECYCLE_AT`` completions and ``max_sim_time``."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from specplan.config import build_config
from specplan.simulator import state as request_state
from specplan.simulator.closed_loop import ClosedLoop
from specplan.simulator.engine import Executor
from specplan.simulator.run import simulate

BASE = {"seed": 5, "engine": {"max_batch_size": 8, "max_num_tokens": 4096},
        "workload": {"trace": "mtbench", "num_requests": 60, "arrival": "closed_loop", "concurrency": 6},
        "cost": {"model": "roofline", "gpu": "h200", "model_name": "llama-3.1-8b"}}
SA = {"speculation": {"decoding_type": "SA", "max_draft_len": 4, "max_matching_ngram_size": -1},
      "acceptance": {"mode": "drafter"}}
CASES = {
    # sessions (MT-Bench's second turns follow their first), TensorRT-LLM's block reuse, no drafts
    "draft-free": {"speculation": {"decoding_type": "none"}},
    "vllm, prefix caching, no sessions": {"engine": {"engine": "vllm"}, "speculation": {"decoding_type": "none"},
                                          "workload": {"trace": "alpacaeval"}},
    "SA drafting": SA,
    "vLLM n-gram": {"engine": {"engine": "vllm"}, "acceptance": {"mode": "drafter"},
                    "speculation": {"decoding_type": "vllm_ngram", "max_draft_len": 3, "max_matching_ngram_size": 3}},
    # more clients than room: requests wait, and those sent at a completion wait a loop top more
    "room for 4 of 6 clients": {**SA, "engine": {"max_num_active_requests": 4, "enable_prefix_caching": False}},
    # one client: the executor falls idle at every completion and admits the next request at once
    "one client": {**SA, "workload": {"concurrency": 1, "num_requests": 12}},
    "more clients than requests": {**SA, "workload": {"concurrency": 90, "num_requests": 40}},
    "the gate trips": {"speculation": {**SA["speculation"], "acceptance_rate_threshold": 0.9,
                                       "acceptance_rate_window_size": 8},
                       "acceptance": {"mode": "drafter"}},
}


def _config(over: dict):
    data = {k: dict(v) for k, v in BASE.items() if isinstance(v, dict)} | {"seed": BASE["seed"]}
    for key, value in over.items():
        data[key] = {**data.get(key, {}), **value}
    return build_config(data)


def _run(monkeypatch, cfg, spans: bool, recycle_at: int):
    built = []
    init = Executor.__init__
    with monkeypatch.context() as m:
        m.setattr(Executor, "__init__", lambda self, *a, **kw: (init(self, *a, **kw), built.append(self))[0])
        m.setattr(request_state, "RECYCLE_AT", recycle_at)
        if not spans:
            m.setattr(Executor, "_spans", lambda self: False)
        result = simulate(cfg)
    (ex,) = built
    return result, ex


@pytest.mark.parametrize("case", CASES)
def test_spans_serving_closed_loop_clients_match_simpy(monkeypatch, count_calls, case):
    """Every table, every request's arrival and the summary are those of the run one step at a time
    through SimPy, with slots recycled every 1, 3 or ``RECYCLE_AT`` completions and with the run cut at
    ``max_sim_time`` halfway; no completion goes through Python (``Executor._on_finish``)."""
    cfg = _config(CASES[case])
    finishes = count_calls(Executor, "_on_finish")
    slow, _ = _run(monkeypatch, cfg, False, request_state.RECYCLE_AT)
    end = float(slow.requests["finish_s"].max())
    for max_sim_time in (None, end / 2):
        timed = cfg.model_copy(update={"max_sim_time_s": max_sim_time})
        want, ex = _run(monkeypatch, timed, False, request_state.RECYCLE_AT)
        assert ex._arrivals is None and finishes
        for recycle_at in (1, 3, request_state.RECYCLE_AT):
            finishes.clear()
            got, ex = _run(monkeypatch, timed, True, recycle_at)
            assert isinstance(ex._arrivals, ClosedLoop) and not finishes
            for a, b in zip((got.requests, got.iterations, got.emissions), (want.requests, want.iterations, want.emissions)):
                pd.testing.assert_frame_equal(a, b, check_exact=True)
            assert got.summary == want.summary
    if case == "the gate trips":
        assert slow.summary["gate_tripped_iteration"] is not None


def test_think_time_leaves_the_clients_to_the_frontend(monkeypatch):
    """A client that thinks before its next request waits on a SimPy timeout: the frontend sends it."""
    cfg = _config({"workload": {"think_time_s": 0.05}, "speculation": {"decoding_type": "none"}})
    fast, ex = _run(monkeypatch, cfg, True, request_state.RECYCLE_AT)
    assert ex._arrivals is None
    slow, _ = _run(monkeypatch, cfg, False, request_state.RECYCLE_AT)
    assert fast.summary == slow.summary


def test_the_first_requests_and_each_ones_successor_are_the_clients_queues():
    """``ClosedLoop``'s first sends (every client's first request, client by client) and successors (the
    next request of the same client's queue, -1 after its last; ``g + C`` without sessions) against the
    frontend's own queues, with and without sessions."""
    import simpy

    from specplan.simulator.frontend import Frontend
    from specplan.simulator.run import build_workload, resolve

    for trace, concurrency in (("mtbench", 7), ("alpacaeval", 7), ("mtbench", 200)):
        cfg = resolve(_config({"workload": {"trace": trace, "concurrency": concurrency}}))
        w, _ = build_workload(cfg)
        frontend = Frontend(simpy.Environment(), w, lambda rid: None)
        queues = [list(q) for q in frontend.client_queues()]
        closed = ClosedLoop(frontend)
        firsts = [q[0] for q in queues]
        assert closed.sent[:len(firsts)].tolist() == firsts and closed.ints.tolist() == [len(firsts), 0, len(firsts), len(queues)]
        assert np.isnan(frontend.arrival).sum() == len(w.prompt_lens) - len(firsts)
        n, following = len(w.prompt_lens), {}
        for q in queues:
            following.update(zip(q, q[1:] + [-1]))
        got = closed.following if len(closed.following) else np.where(np.arange(n) + len(queues) < n,
                                                                      np.arange(n) + len(queues), -1)
        assert {g: int(got[g]) for g in following} == following
