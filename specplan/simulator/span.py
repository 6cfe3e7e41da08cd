"""Spans: iterations run back to back in one compiled call while nothing else can happen.

An iteration whose end comes strictly before the next event in the SimPy queue (an arrival, a
client's think time, another replica's step) cannot be touched by anything else in the
environment: no other process runs before it ends. The executor runs such iterations in
``run_span`` with the same compiled ``schedule_step``, ``price_step`` and ``commit_step`` it uses one
at a time: iterations without drafts (no drafter, or a latched gate), and drafting ones when the
drafter answers from per-request tables or the acceptance is parametric
(``specplan.simulator.draft_span``, which does the K rules, the drafts, the gate and vLLM's
proposals in the executor's order). It returns to SimPy when

- the next iteration would end at or after the next queued event (``PENDING``: it comes back
  scheduled and priced, and the executor yields its timeout as usual);
- a step completed a request that something hears finish (the prefix cache caches its blocks, a
  closed-loop client sends its next request; ``Executor._quiet_finish`` says none does), or reached
  ``max_sim_time`` (``COMMITTED``: the executor does the Python side of that step). A completion
  nothing hears releases its slot here, as ``RequestState.release`` does; the span returns once
  ``RECYCLE_AT`` slots wait to be recycled, or no request is left active;
- a resumed pending step was committed and requests that arrived during it have room
  (``COMMITTED`` as well: they are admitted in Python);
- the SpeculationGate tripped (``COMMITTED``: the executor records it);
- the logs need room (``FULL``), a ``SurvivalOracle``'s uniforms window misses an active request
  (``WINDOW``, at a loop top: Python draws it again), or a step cannot be scheduled or broke the KV
  accounting.

Where the spans submit the arrivals themselves (``open_loop``: one replica, no drafts, completions
heard by nothing but the request state), no step is pending: at the next arrival's time the span
submits the arrivals SimPy would have run by the step's end, commits it, and admits them at the
executor's loop top, which it runs itself after each commit (waiting for the next arrival when nothing is
active). It returns ``ADMIT`` where ``RequestState.add`` must grow the state first. Where the spans serve
closed-loop clients themselves (``closed_loop``: one replica, no think time), a completion caches its
blocks and sends its client's next request in the span, and the loop top admits it when SimPy would.

A pending step's timeout ends in the executor, which hands it back to the next span to commit
first (its commit needs no Python unless one of the stops above follows it). In a fleet, whose
replicas' steps interleave, the pending step is held by the fleet's loop instead
(``specplan.simulator.fleet_loop``), which calls ``run_span`` for each replica in turn.

Only costs the compiled code can price (every built-in model: ``cost_models.compiled``) span; a
profile's range warnings come when the span returns, in its steps' order. The clock each span
advances is the one SimPy would have computed, step by step, so results are identical to running
every step through it.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
from numba import njit

from specplan.cost_models.compiled import PROFILE, step_seconds
from specplan.errors import ConfigError
from specplan.simulator import closed_loop, draft_state
from specplan.simulator.closed_loop import CLOSED, VISIBLE
from specplan.simulator.draft_span import after_commit, before_schedule, draft_seconds, draft_step, window_covers
from specplan.simulator.draft_state import SAMPLES, STEP_K, STEP_SPEC, TRIPPED
from specplan.simulator.open_loop import MUST_ADMIT, RUNNING, SUBMITTED, loop_top, next_event, num_waiting, submit_during
from specplan.simulator.scheduler import NOTHING_FITS_MESSAGE, schedule_step
from specplan.simulator.span_state import span_charge, state_for
from specplan.simulator.state import N_ACTIVE, RELEASED
from specplan.simulator.step import EMITTED, FINISHED, KV_GROWN, commit_step, price_step

PENDING, COMMITTED, FULL, NOTHING_FITS, KV_BROKEN, ADMIT, WINDOW = range(7)

def warn_outside(ex) -> None:
    """A measured profile's range warnings of the steps the spans priced, as those steps would have
    given them (``ProfileCostModel.warn_outside``): after each span and once the run is over."""
    if ex._span_cost is not None and ex._span_cost[0] == PROFILE:
        ex.cost.warn_outside()


def spans(ex) -> bool:
    """Whether an executor's steps run in compiled spans from now on (``Executor._spans``): the cost
    is one ``compiled.span_pricing`` knows, nothing needs each step in Python (recorded batches, an oracle that
    hears commits), and either no drafter will draft again (none, or a latched gate) and every step
    charges the same placeholders, or the drafter is one ``draft_span`` runs (its
    ``draft_state.Drafter``, made once, is kept on the executor)."""
    if ex._span_cost is None or ex.record_batches or ex._hears_commits:
        return False
    gate = ex.gate or ex.legacy_gate
    if not ex.s.speculate or (gate is not None and gate.disabled):
        return span_charge(ex) is not None
    if ex._drafter is None:
        ex._drafter = draft_state.drafter_for(ex) or False
    return bool(ex._drafter)


def quiet_finish(ex) -> bool:
    """Whether a completion matters to nothing but an executor's request state (``Executor._on_finish``
    only releases the slot): no legacy gate, SeqSlots, prefix cache or oracle hears it, nor the
    frontend (an open loop without sessions). Its spans then release finished slots themselves."""
    return not closed_loop.heard_in_python(ex) and ex.prefix_cache is None and not ex.frontend.hears_finish


def run(ex, it: int, resume: Optional[tuple[int, float, float]]) -> tuple[int, int, int, float]:
    """Run a span of an executor from now, first committing ``resume`` (the rows, start and seconds
    of the last span's pending step, which ends now) when given; returns ``result``."""
    log, its = ex.trace.emissions, ex.trace.iterations
    log.reserve(ex.s.max_batch_size)
    its.reserve()
    if ex._drafter:
        ex._drafter.cover(ex)
    horizon = ex.env.peek() if ex.stepper is None else ex.stepper.horizon()
    # (the clock as a float: SimPy's starts at the int 0, and a second signature is a second kernel to load)
    run_span(state_for(ex), log.n, its.n, float(ex.env.now), float(horizon), it, len(ex.waiting),
             *(resume or (0, 0.0, 0.0)))
    return result(ex)


def result(ex) -> tuple[int, int, int, float]:
    """An executor's last span: its status, last iteration number, that iteration's rows and, when
    pending, its step seconds. The logs' row counts and the clock follow it; a step that cannot be
    scheduled or broke the KV accounting raises."""
    log, its, clock = ex.trace.emissions, ex.trace.iterations, ex._span_time
    status, it, n, log.n, its.n = ex._span_out.tolist()
    if status == NOTHING_FITS:
        raise ConfigError(NOTHING_FITS_MESSAGE)
    ex.kv.check(status != KV_BROKEN)
    ex.st.recycle_due()  # the slots the span released
    warn_outside(ex)
    advance_clock(ex.env, float(clock[0]))
    if ex._drafter:
        ex._drafter.after_span(ex, it)
    return status, it, n, float(clock[1])


def advance_clock(env, t: float) -> None:
    """Move a SimPy environment's clock to ``t`` after a span: strictly before the next queued event,
    so SimPy would have reached the same time with nothing run in between (it has no public call
    for this)."""
    env._now = t


@njit(cache=True)
def run_span(a, em_n, it_n, now, horizon, it, num_queued, resume_n, resume_start, resume_step):
    """Run iterations from ``now`` until one of the module's stops; ``out`` returns (status, last
    iteration number, its rows, emission rows, iteration rows) and ``out_time`` the clock and, when
    pending, that step's seconds; both are fields of ``a``, the replica's ``SpanState``. The
    arguments are what changes from call to call. With ``a.drafter`` on, iterations draft as
    ``draft_span`` says; else none does.

    With ``resume_n`` rows, the last span's pending step (still in the step buffers, begun at
    ``resume_start`` for ``resume_step`` seconds) ends now and is committed first. Every committed
    step comes back ``COMMITTED`` when Python has something to do after it: the module's stops, or
    a waiting request with room in the active set (``max_active``), which only a resumed step meets
    without a completion: requests arrive during its timeout, never inside a span."""
    # The fields once into locals, read once a call rather than some sixty times a step.
    act, counters, plen, olen, computed, ctx_target = a.act, a.counters, a.plen, a.olen, a.computed, a.ctx_target
    generated, started, reserved, held = a.generated, a.started, a.reserved, a.held
    disabled, pending = a.disabled, a.pending
    emits, first_token, finish, rows, q_sched, q, ctx = a.emits, a.first_token, a.finish, a.rows, a.q_sched, a.q, a.ctx
    width, resident, terms, no_drafting, none = a.width, a.resident, a.terms, a.no_drafting, a.none
    hist = a.accepted_hist
    em_request, em_time, em_tokens, iteration_log = a.em_request, a.em_time, a.em_tokens, a.iteration_log
    record, finished, stats, coefficients = a.record, a.finished, a.stats, a.coefficients
    k_static, budget_rule, verify_width, policy, stamp = a.k_static, a.budget_rule, a.verify_width, a.policy, a.stamp
    max_num_tokens, max_batch_size, chunked, num_blocks, block_size = (a.max_num_tokens, a.max_batch_size, a.chunked,
                                                                       a.num_blocks, a.block_size)
    quiet_finish, owns = a.quiet_finish, a.owns_arrivals
    arrived = a.arrival_ints
    d = a.drafter
    drafts, samples, ints = d.on, d.samples, d.ints
    k, spec, charge = 0, False, a.k_charge
    t = now
    n, start, step = resume_n, resume_start, resume_step  # the step that ends at t, if any
    while True:
        if n:
            spec = drafts and ints[STEP_SPEC] != 0
            k = ints[STEP_K] if spec else 0
            record[0], record[1], record[2], record[3], record[4], record[5], record[6], record[7] = (
                it, start, step, counters[N_ACTIVE], num_queued, k, spec, terms[KV_GROWN])
            drafting, drafted, accepted = (d.drafting, d.drafted, d.accepted) if spec else (no_drafting, none, none)
            ok = commit_step(rows, q_sched, q, ctx, n, drafting, drafted, accepted, hist, t, plen, olen, computed,
                             ctx_target, generated, emits, first_token, finish, held, reserved, act, counters,
                             num_blocks, block_size, a.rid, em_request, em_time, em_tokens, em_n, iteration_log, it_n,
                             record, finished, stats)
            em_n += stats[EMITTED]
            it_n += 1
            if not ok:
                status = KV_BROKEN
                break
            if owns == CLOSED:
                closed_loop.on_finish(a, stats[FINISHED], t)
            if quiet_finish:
                _release(finished, stats[FINISHED], a.released, counters)
            refused = drafts and after_commit(d, a, n) != 0  # the gate and vLLM's proposals, in Python's order
            if (refused or ints[TRIPPED] or _stops(stats, t, a.max_sim_time, quiet_finish)
                    or counters[RELEASED] >= a.recycle_at
                    or (not owns and (not counters[N_ACTIVE] or (num_queued and counters[N_ACTIVE] < a.max_active)))):
                status = COMMITTED
                break
        if owns:  # the executor's loop top: admit; with nothing active, wait for arrivals
            top, t = closed_loop.loop_top(a, t) if owns == CLOSED else loop_top(a, t)
            if top != RUNNING:
                status = ADMIT if top == MUST_ADMIT else COMMITTED
                break
            num_queued = num_waiting(arrived)
            horizon = np.inf if owns == CLOSED else next_event(a.arrival_times, arrived)
        if it_n == len(iteration_log) or em_n + max_batch_size > len(em_request) or ints[SAMPLES] == len(samples):
            status = FULL
            break
        if drafts and not window_covers(d, a):
            status = WINDOW
            break
        if drafts:
            k, spec, charge = before_schedule(d, a, counters[N_ACTIVE])
        stamps = stamp and not spec  # py_disable_speculative_decoding on the rows of a step without drafts
        n = schedule_step(act, counters, plen, olen, computed, ctx_target, generated, started, reserved, held,
                          disabled, pending, spec, stamps, k, k_static, charge, budget_rule, verify_width,
                          policy, max_num_tokens, max_batch_size, chunked, num_blocks, block_size, rows, q_sched, ctx,
                          width, a.rid, a.pc_mode, a.pc_off, a.pc_ids, a.pc_cached, a.pc_hits, a.pc_done,
                          a.equal_progress)
        if n == 0:
            status = NOTHING_FITS
            break
        num_drafting = 0
        if drafts:
            k, spec, num_drafting = draft_step(d, a, n, k, spec)
        if not price_step(rows, q_sched, q, ctx, width, n, not spec, plen, generated, computed, held, counters,
                          num_blocks, block_size, resident, terms):
            status = KV_BROKEN
            break
        step = step_seconds(a.pricing, coefficients, a.outside, terms)
        if a.slowdown > 0:
            step /= 1.0 - a.slowdown
        if num_drafting:
            step += draft_seconds(d, a, n, k, num_drafting)
        it += 1
        if not t + step < horizon:
            if not owns:
                status = PENDING
                a.out_time[1] = step
                break
            num_queued = submit_during(a, t + step)  # the step's timeout is made now: no step pending
        if owns == CLOSED:  # the clients woken at t run once the step's timeout is made: next loop top
            arrived[VISIBLE] = arrived[SUBMITTED]
        start = t
        t = t + step
    out = a.out
    out[0], out[1], out[2], out[3], out[4] = status, it, n, em_n, it_n
    a.out_time[0] = t


@njit(cache=True)
def _stops(stats, t, max_sim_time, quiet_finish):
    # A committed step after which Python has work: a completion something hears, or the end of
    # simulated time.
    return (stats[FINISHED] > 0 and not quiet_finish) or t >= max_sim_time


@njit(cache=True)
def _release(finished, num_finished, released, counters):
    # ``RequestState.release`` of a step's finished slots, in the step's order (recycled in Python).
    k = counters[RELEASED]
    for j in range(num_finished):
        released[k + j] = finished[j]
    counters[RELEASED] = k + num_finished
