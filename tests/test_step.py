"""The compiled step, called directly: scheduling, pricing terms and commit on hand-worked batches,
the terms against an independent numpy reduction, and spans against one step at a time."""

from __future__ import annotations

from typing import Optional

import numpy as np
import pandas as pd
from hypothesis import given, settings, strategies as st

from specplan.config import build_config
from specplan.cost_models.base import StepBatch
from specplan.cost_models.terms import BatchTerms
from specplan.simulator import prefix_cache, span, step
from specplan.simulator.control import BUDGETS, VERIFY_WIDTHS
from specplan.simulator.emissions import ITERATION_FIELDS
from specplan.simulator.run import simulate
from specplan.simulator.scheduler import GUARANTEED_NO_EVICT, MAX_UTILIZATION, schedule_step
from specplan.simulator.state import DONE, KV_USED, N_ACTIVE, PREEMPTIONS, RECYCLE_AT, RESERVED_TOTAL, RequestState

BLOCK = 16


def filled(plen, olen) -> RequestState:
    """A RequestState holding requests ``0..n-1`` with these lengths, request i in slot i."""
    plen, olen = np.asarray(plen, dtype=np.int64), np.asarray(olen, dtype=np.int64)
    st_ = RequestState(len(plen))
    assert st_.add(list(range(len(plen))), plen, olen) == list(range(len(plen)))
    return st_


def state(plen, olen, computed=None, generated=None, started=None):
    """A RequestState with the given progress, every request active in index order (slot = id)."""
    st_ = filled(plen, olen)
    if computed is not None:
        st_.computed[:] = computed
    if generated is not None:
        st_.generated[:] = generated
    if started is not None:
        st_.started[:] = started
    st_.admit(list(range(st_.n)))
    return st_


def schedule(st_, held, *, max_num_tokens, max_batch_size=8, chunked=True, policy=GUARANTEED_NO_EVICT,
             spec=True, stamp=False, k=4, k_static=4, k_charge=None, budget="v2", width="static", num_blocks=1000,
             equal_progress=False):
    out = [np.zeros(max_batch_size, dtype=np.int64) for _ in range(2)] + [np.zeros(max_batch_size, dtype=bool),
                                                                        np.zeros(max_batch_size, dtype=np.int64)]
    n = schedule_step(st_.act, st_.counters, st_.plen, st_.olen, st_.computed, st_.ctx_target, st_.generated,
                      st_.started, st_.reserved, held, st_.disable_spec, st_.pending_drafted, spec, stamp, k, k_static,
                      k if k_charge is None else k_charge, BUDGETS[budget], VERIFY_WIDTHS[width], policy, max_num_tokens, max_batch_size, chunked,
                      num_blocks, BLOCK, *out, st_.rid, *prefix_cache.arrays(None), st_.pc_done, equal_progress)
    rows, q, ctx, _ = (a[:n] for a in out)
    return rows.tolist(), q.tolist(), ctx.tolist()


def test_fcfs_with_break_and_the_chunk_of_the_first_context_request_that_does_not_fit():
    # 0 decodes (1 + K = 5 placeholders), 1 still needs 300 prompt tokens, 2 and 3 decode.
    # TensorRT-LLM's PyMicroBatchScheduler.schedule with chunking: the context is set aside and does not
    # stop the pass; 2 and 3 behind it are charged first (5 + 5 + 5 = 15), then the context gets the
    # 85 left, truncated, so rounded down to the chunk unit (the KV block, 16): 80. Generation rows
    # come first in the rows, the context after them.
    plen, olen = [10, 300, 10, 10], [50] * 4
    computed, generated, started = [10, 0, 10, 10], [3, 0, 3, 3], [True, False, True, True]
    held = np.zeros(4, dtype=np.int64)
    st_ = state(plen, olen, computed, generated, started)
    assert schedule(st_, held, max_num_tokens=100) == ([0, 2, 3, 1], [5, 5, 5, 80], [False, False, False, True])
    st_ = state(plen, olen, computed, generated, started)
    assert schedule(st_, held, max_num_tokens=100, chunked=False) == ([0], [5], [False])  # the pass breaks at 1
    st_ = state(plen, olen, computed, generated, started)
    assert schedule(st_, held, max_num_tokens=1000) == ([0, 2, 3, 1], [5, 5, 5, 300], [False, False, False, True])
    st_ = state(plen, olen, computed, generated, started)
    # the set-aside context counts toward max_batch_size: the pass stops after it
    assert schedule(st_, held, max_num_tokens=1000, max_batch_size=2) == ([0, 1], [5, 300], [False, True])
    st_ = state(plen, olen, computed, generated, started)
    st_.disable_spec[2] = True  # py_disable_speculative_decoding: one token, no placeholders
    assert schedule(st_, held, max_num_tokens=1000)[1] == [5, 1, 5, 300]
    # Speculation off on the drafter path: one token per generation row (3), the context 97 // 16 x 16
    # = 96, and every scheduled row is stamped.
    st_ = state(plen, olen, computed, generated, started)
    assert schedule(st_, held, max_num_tokens=100, spec=False, stamp=True) == ([0, 2, 3, 1], [1, 1, 1, 96],
                                                                               [False, False, False, True])
    assert st_.disable_spec.tolist() == [True, True, True, True]
    # The default scheduler (v1) charges the C++ stamp [0] * K whatever the flag or on/off: 1 + 4 for
    # stamped 2 and for every row of a step with speculation off (only K = 0 charges 1).
    st_ = state(plen, olen, computed, generated, started)
    st_.disable_spec[2] = True
    assert schedule(st_, held, max_num_tokens=1000, budget="v1")[1] == [5, 5, 5, 300]
    st_ = state(plen, olen, computed, generated, started)
    assert schedule(st_, held, max_num_tokens=100, spec=False, budget="v1") == ([0, 2, 3, 1], [5, 5, 5, 80],
                                                                                [False, False, False, True])
    st_ = state(plen, olen, computed, generated, started)
    assert schedule(st_, held, max_num_tokens=100, spec=False, k=0, budget="v1") == ([0, 2, 3, 1], [1, 1, 1, 96],
                                                                                     [False, False, False, True])


def test_a_vllm_decode_row_that_does_not_fit_gets_the_tokens_left():
    # vLLM (Scheduler.schedule, running loop): num_new_tokens = min(num_new_tokens, token_budget).
    # Rows 0, 2, 3 decode holding drafts of 3, 4 and 2, row 1 is a fresh 300-token prompt; budget 9:
    # row 0 takes 1 + 3 = 4 and row 1 the 5 left as its chunk; nothing is left for 2 and 3.
    plen, olen = [10, 300, 10, 10], [50] * 4
    computed, generated, started = [10, 0, 10, 10], [3, 0, 3, 3], [True, False, True, True]
    held = np.zeros(4, dtype=np.int64)
    st_ = state(plen, olen, computed, generated, started)
    st_.pending_drafted[:] = [3, 0, 4, 2]
    assert schedule(st_, held, max_num_tokens=9, budget="draft", width="draft") == ([0, 1], [4, 5], [False, True])
    # Decode rows only, budget 11: 4 + 5 = 9 leaves 2 for the third row's 1 + 2: it runs with 2 tokens
    # (its draft cut to 1). With budget 9 nothing is left for it: the pass ends with the budget.
    st_ = state([10, 10, 10], [50] * 3, [10] * 3, [3] * 3, [True] * 3)
    st_.pending_drafted[:] = [3, 4, 2]
    assert schedule(st_, held[:3], max_num_tokens=11, budget="draft", width="draft") == ([0, 1, 2], [4, 5, 2],
                                                                                       [False] * 3)
    st_ = state([10, 10, 10], [50] * 3, [10] * 3, [3] * 3, [True] * 3)
    st_.pending_drafted[:] = [3, 4, 2]
    assert schedule(st_, held[:3], max_num_tokens=9, budget="draft", width="draft") == ([0, 1], [4, 5], [False] * 2)


def test_guaranteed_no_evict_stops_at_the_first_request_it_cannot_reserve():
    # Whole lives need ceil((plen + olen) / 16) blocks (getRemainingBlocksToCompletion: prompt + max
    # new tokens, no drafts): 5, 5, 2 (with K = 4 in it, 6, 6, 2 and only 0 would start); 11 free.
    st_ = state([40, 40, 10], [40, 40, 10])
    held = np.zeros(3, dtype=np.int64)
    rows, _, _ = schedule(st_, held, max_num_tokens=1000, num_blocks=11)
    assert rows == [0, 1]  # request 2 would fit, but the pass stops at the first that does not
    assert st_.reserved.tolist() == [5, 5, 0] and st_.counters[RESERVED_TOTAL] == 10
    assert st_.started.tolist() == [True, True, False]
    rows, _, _ = schedule(st_, held, max_num_tokens=1000, num_blocks=11)
    assert rows == [0, 1] and st_.counters[RESERVED_TOTAL] == 10  # no request is reserved twice


def test_max_utilization_preempts_the_latest_started_request_and_moves_it_to_the_back():
    # Three decoding requests hold 2 blocks each (31 resident tokens); the next step grows each by
    # 1 + K = 5 positions to 36, a third block, and only 1 block is free: the latest started (2) goes.
    st_ = state([16, 16, 16], [40, 40, 40], computed=[16] * 3, generated=[16] * 3, started=[True] * 3)
    held = np.array([2, 2, 2], dtype=np.int64)
    st_.counters[KV_USED] = 6
    rows, q, ctx = schedule(st_, held, max_num_tokens=1000, policy=MAX_UTILIZATION, num_blocks=7, k=4, k_static=4)
    assert st_.counters[PREEMPTIONS] == 1 and rows == [0, 1]
    assert held[2] == 0 and st_.counters[KV_USED] == 4
    assert st_.computed[2] == 0 and st_.ctx_target[2] == 16 + 16 and not st_.started[2]
    assert st_.act[:3].tolist() == [0, 1, 2]
    # Order [1, 2, 0] with 0 not started yet: the victim is 2 (the last started), which moves to the
    # back; 0 then needs 3 new blocks with 2 to spare and does not start.
    st_ = state([16, 16, 16], [40, 40, 40], computed=[16] * 3, generated=[16] * 3, started=[False, True, True])
    st_.act[:3] = [1, 2, 0]
    held = np.array([0, 2, 2], dtype=np.int64)
    st_.counters[KV_USED] = 4
    rows, _, _ = schedule(st_, held, max_num_tokens=1000, policy=MAX_UTILIZATION, num_blocks=5)
    assert rows == [1] and st_.act[:3].tolist() == [1, 0, 2] and st_.counters[PREEMPTIONS] == 1
    assert st_.started.tolist() == [False, True, False]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 400), st.integers(0, 300), st.integers(1, 9), st.booleans()),
                min_size=1, max_size=12))
def test_price_step_terms_equal_the_numpy_reduction(rows_spec):
    """``price_step`` against ``BatchTerms.of`` of the same batch, and KV grown to resident + q."""
    n = len(rows_spec)
    plen = np.array([r[0] for r in rows_spec])
    st_ = filled(plen, plen + 500)
    st_.generated[:] = [r[1] for r in rows_spec]
    ctx = np.array([r[3] for r in rows_spec])
    st_.computed[:] = np.where(ctx, plen // 2, plen)
    q = np.array([r[2] for r in rows_spec], dtype=np.int64)
    rows = np.arange(n, dtype=np.int64)
    held = np.zeros(n, dtype=np.int64)
    resident, terms = np.zeros(n, dtype=np.int64), np.zeros(step.NUM_TERMS)
    ok = step.price_step(rows, q, q.copy(), ctx, q.copy(), n, False, st_.plen, st_.generated, st_.computed, held,
                         st_.counters, 10**9, BLOCK, resident, terms)
    expect_resident = np.where(ctx, st_.computed, plen + st_.generated - 1)
    assert ok and resident.tolist() == expect_resident.tolist()
    assert tuple(terms[:10].tolist()) == tuple(float(x) for x in BatchTerms.of(StepBatch(q, expect_resident, ctx)))
    assert held.tolist() == (-(-(expect_resident + q) // BLOCK)).tolist() and st_.counters[KV_USED] == held.sum()
    assert terms[step.MAX_SEQ_LEN] == (expect_resident + q).max()


def test_commit_step_commits_clamps_rewinds_and_completes():
    # Row 0 finishes its prompt chunk (first token); row 1 verifies 4 drafts and accepts 3 but has 2
    # tokens left (it completes); row 2 accepts 1 of 2.
    st_ = state([20, 8, 8], [5, 10, 10], computed=[12, 8, 8], generated=[0, 8, 3], started=[True] * 3)
    held = np.array([1, 1, 1], dtype=np.int64)
    st_.counters[KV_USED] = 3
    rows = np.array([0, 1, 2], dtype=np.int64)
    q_sched = np.array([8, 5, 5], dtype=np.int64)
    q = np.array([8, 5, 3], dtype=np.int64)
    ctx = np.array([True, False, False])
    drafting = np.array([False, True, True])
    drafted, accepted = np.array([4, 2], dtype=np.int64), np.array([3, 1], dtype=np.int64)
    hist = np.zeros(5, dtype=np.int64)
    em = (np.zeros(8, dtype=np.int32), np.zeros(8), np.zeros(8, dtype=np.int32))
    log = np.zeros((4, len(ITERATION_FIELDS)))
    record = np.array([7, 1.5, 0.25, 3, 2, 4, 1, 21], dtype=float)
    finished, stats = np.zeros(3, dtype=np.int64), np.zeros(step.NUM_STATS, dtype=np.int64)
    st_.rid[:3] = [7, 3, 11]  # slots serve requests by id: the emissions name the requests
    ok = step.commit_step(rows, q_sched, q, ctx, 3, drafting, drafted, accepted, hist, 1.75, st_.plen, st_.olen,
                          st_.computed, st_.ctx_target, st_.generated, st_.emits, st_.first_token, st_.finish, held,
                          st_.reserved, st_.act, st_.counters, 100, BLOCK, st_.rid, *em, 0, log, 0, record, finished,
                          stats)
    assert ok
    assert st_.generated.tolist() == [1, 10, 5] and st_.computed[0] == 20
    assert st_.first_token[0] == 1.75 and np.isnan(st_.first_token[1:]).all()
    assert em[0][:3].tolist() == [7, 3, 11] and em[2][:3].tolist() == [1, 2, 2] and (em[1][:3] == 1.75).all()
    assert hist.tolist() == [0, 1, 0, 1, 0]
    # Rewind: resident = plen + generated - 1 -> 20, 17, 12 tokens: 2, 2, 1 blocks (5 in the record);
    # the completed request's 2 are then released.
    assert held.tolist() == [2, 0, 1] and st_.counters[KV_USED] == 3
    assert finished[:stats[step.FINISHED]].tolist() == [1] and st_.finish[1] == 1.75
    assert st_.act[:st_.counters[N_ACTIVE]].tolist() == [0, 2] and st_.counters[DONE] == 1
    # the last column (verified_draft_tokens): the draft positions verified, 4 of row 1 and 2 of row 2
    assert log[0].tolist() == [7, 1.5, 0.25, 3, 2, 3, 2, 8, 4, 1, 6, 4, 16 - 8, 5, 1, 5, 8 + 5 + 5, 21, 4 + 2]
    assert stats[step.ACCEPTED] == 4 and stats[step.DRAFTED] == 6 and stats[step.VERIFIED] == 4 + 2


def _tables(res):
    return res.requests, res.iterations, res.emissions


def test_spans_match_one_step_at_a_time(count_calls):
    """Recording batches sends every step through SimPy one at a time; spans must give the same run."""
    calls = count_calls(span, "run_span")
    for over in ({"workload": {"arrival": "poisson", "rate": 40.0}},
                 {"engine": {"engine": "vllm"}, "workload": {"arrival": "closed_loop", "concurrency": 6}},
                 {"engine": {"capacity_scheduler_policy": "MAX_UTILIZATION", "kv_num_blocks": 400,
                             "enable_chunked_prefill": True, "max_num_tokens": 256}}):
        data = {"seed": 5, "engine": {"max_batch_size": 8, "max_num_tokens": 2048},
                "speculation": {"decoding_type": "none"},
                "workload": {"trace": "specbench", "num_requests": 40, "arrival": "closed_loop", "concurrency": 8},
                "cost": {"model": "roofline", "gpu": "h200", "model_name": "llama-3.1-8b"}}
        for key, value in over.items():
            data[key] = {**data[key], **value}
        cfg = build_config(data)
        calls.clear()
        fast = simulate(cfg)
        assert 0 < len(calls) < fast.summary["iterations"]  # spans ran, several steps each
        slow = simulate(cfg, record_batches=True)
        for a, b in zip(_tables(fast), _tables(slow)):
            pd.testing.assert_frame_equal(a, b, check_exact=True)
        assert fast.summary == slow.summary


def test_fleet_spans_match_one_step_at_a_time(monkeypatch, count_calls):
    """A fleet's replicas interleave, so their spans mostly end pending and the fleet's loop runs
    the held steps (``simulator/fleet_loop.py``); with a load-reading router and multi-turn
    sessions (MT-Bench), that must give the run every step through SimPy gives."""
    from specplan.simulator.engine import Executor

    commits = count_calls(Executor, "_commit")
    data = {"seed": 2, "engine": {"max_batch_size": 8, "max_num_tokens": 2048, "max_num_active_requests": 10},
            "speculation": {"decoding_type": "none"},
            "workload": {"trace": "mtbench", "num_requests": 60, "arrival": "poisson", "rate": 30.0},
            "cost": {"model": "roofline", "gpu": "h200", "model_name": "llama-3.1-8b"},
            "cluster": {"replicas": 3, "router": "least_outstanding"}}
    for workload in ({}, {"arrival": "closed_loop", "concurrency": 20}):
        cfg = build_config({**data, "workload": {**data["workload"], **workload}})
        commits.clear()
        fast = simulate(cfg)
        assert not commits  # every step was committed in a span, pending ones by the next span
        with monkeypatch.context() as m:
            m.setattr(Executor, "_spans", lambda self: False)
            slow = simulate(cfg)
        assert len(commits) == slow.summary["iterations"]
        for a, b in zip(_tables(fast), _tables(slow)):
            pd.testing.assert_frame_equal(a, b, check_exact=True)
        assert fast.summary == slow.summary
        assert fast.description == slow.description


def test_add_puts_admitted_requests_in_the_next_slots():
    """Batches of one to nine ids (a scalar and a gathered path), growing the room past its start:
    each slot holds the request's id and its lengths from the workload's arrays, and no progress."""
    rng = np.random.default_rng(0)
    plen, olen = rng.integers(1, 900, 50), rng.integers(1, 300, 50)
    st_ = RequestState(2)
    order = rng.permutation(50).tolist()
    at, slots = 0, []
    for size in [1, 3, 9, 2, 5, 1, 4, 7, 6, 1, 8, 3]:
        batch = order[at:at + size]
        slots += st_.add(batch, plen, olen)
        at += size
    assert slots == list(range(50)) and st_.n == 50 and st_.capacity >= 50
    ids = np.array(order)
    expected = {"plen": plen[ids], "olen": olen[ids], "ctx_target": plen[ids], "generated": 0, "computed": 0,
                "rid": ids}
    for name, want in expected.items():
        np.testing.assert_array_equal(getattr(st_, name)[:50], np.broadcast_to(want, 50), err_msg=name)


def test_spans_follow_state_and_logs_into_new_arrays(monkeypatch):
    """A replica's ``SpanState`` holds its arrays; when the request state (compact slots) or a log
    grows into new ones mid-run, the spans must write to those, as every step through SimPy does.
    Each starts at its least: the replica expects no share of the workload."""
    from specplan.simulator import emissions
    from specplan.simulator.engine import Executor

    monkeypatch.setattr(emissions, "_FIRST_CAPACITY", 16)
    monkeypatch.setattr(emissions, "_MOST_AT_FIRST", 64)
    init = Executor.__init__
    monkeypatch.setattr(Executor, "__init__", lambda self, *args, **kw: init(self, *args, **kw | {"share": 0.0}))
    data = {"seed": 4, "engine": {"max_batch_size": 8, "max_num_tokens": 2048},
            "speculation": {"decoding_type": "none"},
            "workload": {"trace": "specbench", "num_requests": 300, "arrival": "closed_loop", "concurrency": 16},
            "cost": {"model": "roofline", "gpu": "h200", "model_name": "llama-3.1-8b"},
            "cluster": {"replicas": 2, "router": "round_robin"}}
    cfg = build_config(data)
    fast = simulate(cfg)
    assert fast.summary["completed_requests"] == 300 and fast.summary["iterations"] > 16
    with monkeypatch.context() as m:
        m.setattr(Executor, "_spans", lambda self: False)
        slow = simulate(cfg)
    for a, b in zip(_tables(fast), _tables(slow)):
        pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert fast.summary == slow.summary


def test_a_latched_gate_spans_the_rest_of_the_run():
    data = {"seed": 1, "engine": {"max_batch_size": 8, "max_num_tokens": 2048},
            "speculation": {"decoding_type": "SA", "max_draft_len": 4, "max_matching_ngram_size": -1,
                            "acceptance_rate_window_size": 20, "acceptance_rate_threshold": 0.9},
            "acceptance": {"mode": "alpha", "alpha": 0.3},
            "workload": {"trace": "specbench", "num_requests": 30, "arrival": "closed_loop", "concurrency": 8},
            "cost": {"model": "roofline", "gpu": "h200", "model_name": "llama-3.1-8b"}}
    cfg = build_config(data)
    fast, slow = simulate(cfg), simulate(cfg, record_batches=True)
    assert fast.summary["gate_tripped_iteration"] is not None
    assert fast.summary["spec_iterations"] < fast.summary["iterations"]
    for a, b in zip(_tables(fast), _tables(slow)):
        pd.testing.assert_frame_equal(a, b, check_exact=True)


def _run_executor(cfg, monkeypatch, recycle_at: Optional[int]):
    """The run's tables, with finished slots recycled ``recycle_at`` at a time (None: never)."""
    from specplan.acceptance import build_oracle
    from specplan.simulator.engine import Executor
    from specplan.simulator.metrics import emission_table, iteration_table, request_table
    from specplan.simulator.run import build_cost, build_prefix_cache, build_workload, kv_num_blocks, resolve, resolve_engine
    from specplan.simulator import state as request_state

    cfg = resolve(cfg)
    wl, reqs = build_workload(cfg)
    ex = Executor(resolve_engine(cfg, kv_num_blocks(cfg)), wl,
                  build_oracle(cfg, reqs, wl.prompt_lens, wl.output_lens), build_cost(cfg),
                  prefix_cache=build_prefix_cache(cfg, reqs))
    with monkeypatch.context() as m:
        if recycle_at is None:  # every request in a slot of its own, in arrival order
            m.setattr(request_state.RequestState, "release", lambda st, slots: None)
        else:
            m.setattr(request_state, "RECYCLE_AT", recycle_at)
        trace = ex.run()
    # 30 requests, at most 8 active: recycled, the slots never outgrow those in flight and released
    assert ex.st.n == 30 if recycle_at is None else ex.st.n <= min(30, 8 + recycle_at - 1)
    return request_table(trace, reqs), iteration_table(trace), emission_table(trace)


def test_released_slots_change_nothing(monkeypatch):
    """Finished requests' slots are recycled for later ones (a run holds slots for the requests in
    flight and a few finished ones); that must give the run a slot of its own per request gives
    (drafters, the prefix cache and the frontend see request ids, the logs name requests, the active
    set keeps its order)."""
    for over in ({"speculation": {"decoding_type": "SA", "max_draft_len": 4, "max_matching_ngram_size": -1},
                  "acceptance": {"mode": "drafter"}, "workload": {"arrival": "poisson", "rate": 30.0}},
                 {"engine": {"engine": "vllm"}, "acceptance": {"mode": "drafter"},
                  "speculation": {"decoding_type": "vllm_ngram", "max_draft_len": 3, "max_matching_ngram_size": 3}},
                 {"engine": {"capacity_scheduler_policy": "MAX_UTILIZATION", "kv_num_blocks": 80},
                  "speculation": {"decoding_type": "NGram", "max_draft_len": 4, "max_matching_ngram_size": 3},
                  "acceptance": {"mode": "drafter"}}):  # 7 preemptions: victims keep their slots
        data = {"seed": 2, "engine": {"max_batch_size": 8, "max_num_tokens": 2048},
                "workload": {"trace": "mtbench", "num_requests": 30, "arrival": "closed_loop", "concurrency": 6},
                "cost": {"model": "roofline", "gpu": "h200", "model_name": "llama-3.1-8b"}}
        for key, value in over.items():
            data[key] = {**data.get(key, {}), **value}
        cfg = build_config(data)
        own = _run_executor(cfg, monkeypatch, None)
        # each slot recycled at once; and in batches, the state growing meanwhile
        for recycle_at in (1, RECYCLE_AT):
            for a, b in zip(own, _run_executor(cfg, monkeypatch, recycle_at)):
                pd.testing.assert_frame_equal(a, b, check_exact=True)
