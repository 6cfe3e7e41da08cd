"""Drafting iterations in compiled spans: the drafter's part of ``span.run_span``.

An exact drafter that answers from per-request tables (``TableOracle``: SA without the global pool,
vLLM's n-gram proposer, prompt lookup) keeps no state across requests, so its drafts and
acceptances can be read in compiled code, in any order. A ``SurvivalOracle`` (alpha, per-position,
length distribution) keeps only per-request state too: each request's step count and its block of
a uniform stream, drawn into a window (``oracles._PerRequestUniforms``) that Python draws again
between spans where it misses an active request (``window_covers``, at each loop top). When the
executor runs such an oracle on one replica, priced by a built-in cost model
(``cost_models.compiled``) with ``DraftCost`` drafting, the profile's host terms or a constant a step,
every iteration goes through ``span.run_span``, which calls these functions around the compiled
step, in the executor's order:

- ``before_schedule``: K and on/off before scheduling (``Executor._setup_drafter``), and the
  placeholders each generation row is charged (``control.placeholder_charge``);
- ``draft_step``: ``update_draft_len`` on the one-model path, then ``prepare_draft_tokens`` from the
  oracle (``oracle_draft``: ``TableOracle.draft`` with its subclass's ``limit``, or
  ``SurvivalOracle.draft``), for the rows the executor asks in its order;
- ``draft_seconds``: ``Executor._draft_time`` with the oracle's ``state_size``;
- ``after_commit``: the gate sample of the step (logged for ``trace.gate_samples``), the
  SpeculationGate (one iteration late with the overlap scheduler), and vLLM's proposals for the
  next step (``propose_draft_token_ids``).

What they read is the executor's ``draft_state.Drafter``: K comes from tables the executor's own
lookups filled (``Executor._lookup`` and ``control.update_draft_len`` at every batch size), and the
gate is the ``_LatchingWindow``'s arrays, so a latch (or a legacy gate's, set in Python at a
completion, which ends a span) switches speculation off inside the spans. A span stops when the
gate trips (the executor records it) or its sample log is full. Everything else keeps the
step-at-a-time path; results are the same bit for bit.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from specplan.acceptance.oracles import in_window, survival_draw
from specplan.simulator.control import concurrency_allows, latch_push, sample_rate, verified_width
from specplan.simulator.draft_state import (
    BAD_SAMPLE, DRAFT, K_NEXT, LAST_SCHEDULED, LIMIT_HF, LIMIT_MODEL_LEN, NEXT_STEP, NUM_DRAFTING, PENDING_SAMPLE,
    SAME_STEP, SAMPLES, STATIC, STEP_K, STEP_SPEC, TRIPPED,
)
from specplan.simulator.state import N_ACTIVE
from specplan.simulator.step import ACCEPTED, DRAFTED, MAX_LEN, MAX_SEQ_LEN, VERIFIED

BAD = -1  # ``after_commit``'s result when a sample cannot be recorded


@njit(cache=True)
def lookup(d, size, context_len):
    """``Executor._lookup``: K for a request count and (vLLM) the context bucket of ``context_len``."""
    b = 0
    while b < len(d.bounds) - 1 and context_len > d.bounds[b]:
        b += 1
    return d.k_table[min(size, d.k_table.shape[0] - 1), b]


@njit(cache=True)
def before_schedule(d, a, num_active):
    """(K, speculates, charge) before scheduling: ``Executor._setup_drafter`` (``control.setup_drafter``)
    and ``control.placeholder_charge`` of the path's ``PathRules.budget``."""
    size = d.ints[LAST_SCHEDULED] if d.k_from_scheduled else num_active
    k, spec = 0, False
    if d.gate_counts[1]:
        pass
    elif d.k_timing == NEXT_STEP:
        k = d.ints[K_NEXT]
        spec = k > 0
    elif d.k_timing == SAME_STEP and d.k_from_scheduled:
        k, spec = a.k_static, True
    else:
        k = lookup(d, size, 0)
        spec = k > 0 and (not d.batch_gate or d.max_concurrency < 0 or concurrency_allows(
            num_active, a.max_batch_size, a.max_num_tokens, k, d.max_concurrency))
    if d.budget == DRAFT:  # vLLM: a row pays its own proposed draft
        return k, spec, 0
    if d.budget == STATIC:  # the one-model path: K_static
        return k, spec, a.k_static
    return k, spec, (k if spec else lookup(d, size, 0))


@njit(cache=True)
def draft_step(d, a, n, k, spec):
    """After scheduling ``n`` rows: ``update_draft_len`` (one-model path), then the drafts, the
    query tokens ``a.q`` and the step's K and drafting rows in ``d.ints``; returns (K, speculates,
    rows drafting)."""
    d.ints[LAST_SCHEDULED] = n
    if spec and d.k_timing == SAME_STEP and d.k_from_scheduled:
        k = d.k_update[min(n, len(d.k_update) - 1)]
        spec = k > 0
    num = step_drafts(d, a, n, k) if spec else 0
    d.ints[STEP_K], d.ints[STEP_SPEC], d.ints[NUM_DRAFTING] = k, spec, num
    return k, spec, num


@njit(cache=True)
def step_drafts(d, a, n, k):
    """``drafts.prepare_draft_tokens`` from the tables, for the scheduled rows: ``d.drafting`` per
    row, drafted and accepted per drafting row in row order, and each row's query tokens; returns
    the drafting rows."""
    # The fields once into locals: a field read in the loop is a load the compiler cannot hoist.
    rows, q_sched, q, ctx, generated, rid, pending = a.rows, a.q_sched, a.q, a.ctx, a.generated, a.rid, a.pending
    computed, ctx_target, verify_width, k_static = a.computed, a.ctx_target, a.verify_width, a.k_static
    drafting, drafted_out, accepted_out, pending_accepted = d.drafting, d.drafted, d.accepted, d.pending_accepted
    proposed_before, at_prefill, tables = d.proposed_before, d.drafts_at_prefill, _tables(d)
    j = 0
    for i in range(n):
        r = rows[i]
        q[i] = q_sched[i]
        drafting[i] = False
        now = not ctx[i] and not proposed_before
        if at_prefill and ctx[i] and generated[r] == 0 and computed[r] + q_sched[i] >= ctx_target[r]:
            now = True  # the chunk that completes the prompt drafts too
        if now:
            drafted, accepted = oracle_draft(tables, rid[r], generated[r], k)
        elif proposed_before and not ctx[i] and pending[r] > 0 and q_sched[i] > 1:
            # vLLM verifies the draft proposed after the last step, trimmed to the tokens scheduled
            drafted = min(pending[r], q_sched[i] - 1)
            accepted = min(pending_accepted[r], drafted)
        else:
            continue
        drafting[i] = True
        drafted_out[j], accepted_out[j] = drafted, accepted
        q[i] = (q_sched[i] if ctx[i] else 1) + verified_width(verify_width, k, k_static, drafted)
        j += 1
    return j


@njit(cache=True)
def _tables(d):
    # What ``oracle_draft`` reads, as one tuple of locals.
    return (d.off, d.tables, d.row_of, d.o_olen, d.o_plen, d.max_new_tokens, d.limit, d.limit_len, d.survival, d.u,
            d.u_base, d.u_meta, d.curve)


@njit(cache=True)
def oracle_draft(tables, rid, committed, k):
    """The oracle's draft of one request at ``committed`` tokens: (drafted, accepted). ``tables`` is
    ``_tables`` of the ``DraftState``. A ``SurvivalOracle`` counts the step (as its ``draft`` does
    for every row it is asked, none when K is 0)."""
    if k <= 0:
        return 0, 0
    if tables[8]:
        return survival_draw(tables[9], tables[10], tables[11], tables[3], tables[12], k, rid, committed)
    return table_draft(tables, rid, committed, k)


@njit(cache=True)
def window_covers(d, a):
    """Whether a ``SurvivalOracle``'s window holds every uniform of the active requests (always, for
    another oracle); a span ends at a loop top where it does not (``span.WINDOW``)."""
    if not d.survival:
        return True
    u_meta, olen, rid, act, base, size = d.u_meta, d.o_olen, a.rid, a.act, d.u_base, len(d.u)
    for i in range(a.counters[N_ACTIVE]):
        if not in_window(base, size, u_meta, olen, rid[act[i]]):
            return False
    return True


@njit(cache=True)
def table_draft(tables, rid, committed, k):
    """``TableOracle.draft`` of one request at ``committed`` tokens (``k`` > 0), with its class's
    ``limit`` rule and (HF prompt lookup) its cut of the accepted tokens: (drafted, accepted)."""
    off, table, row_of, o_olen, o_plen, max_new_tokens, limit_rule, limit_len = tables[:8]
    olen = o_olen[rid]
    at = table[row_of[k], off[rid] + min(committed, olen - 1)]  # src, avail, run
    limit = k
    if limit_rule == LIMIT_MODEL_LEN:
        limit = min(k, limit_len - (o_plen[rid] + committed))
    elif limit_rule == LIMIT_HF and committed == max_new_tokens[rid] - 1:
        limit = 0
    drafted = min(min(limit, np.int64(at[1])), k)
    drafted = max(drafted, 0) if committed < olen and at[0] >= 0 else 0
    accepted = min(np.int64(at[2]), drafted)
    if limit_rule == LIMIT_HF:
        accepted = min(accepted, max(max_new_tokens[rid] - committed - 1, 0))
    return drafted, accepted


@njit(cache=True)
def draft_seconds(d, a, n, k, num):
    """``Executor._draft_time`` of the step's ``num`` drafting rows: ``DraftCost.time`` at the
    oracle's ``state_size`` (their mean history length, floored), or a measured profile's host
    drafting terms (``ProfileCostModel.draft_time``), or a constant a drafting step
    (``compiled.fixed_draft_seconds``)."""
    if not np.isnan(d.draft_fixed):
        return d.draft_fixed
    drafting, rows, rid, generated, o_plen = d.drafting, a.rows, a.rid, a.generated, d.o_plen
    total = 0
    for i in range(n):
        if drafting[i]:
            r = rows[i]
            total += o_plen[rid[r]] + generated[r]
    pool = total // num
    if k <= 0:
        return 0.0
    if len(d.host_draft):  # the profile's draft_step_s + draft_per_seq_s per drafting row
        return d.host_draft[0] + d.host_draft[1] * num
    if d.sa_kernel:  # DraftCost.sa_kernel_s
        base_s, sm_count, doubling, reference = d.sa[0], d.sa[1], d.sa[2], d.sa[3]
        if len(d.sa_batch):
            base = np.interp(float(num), d.sa_batch, d.sa_seconds)
        else:
            base = base_s * math.ceil(num / sm_count)
        return base * (1.0 + doubling * max(0.0, math.log2(max(pool, 1) / reference)))
    x = math.log10(max(pool, 1))  # DraftCost.host_per_request_s
    per_k = np.empty(d.host_cols.shape[0])
    for j in range(d.host_cols.shape[0]):
        per_k[j] = np.interp(x, d.log_pool, d.host_cols[j])
    return num * np.interp(float(k), d.draft_lens, per_k) / d.speedup


@njit(cache=True)
def after_commit(d, a, n):
    """``Executor._after_commit``'s gate and vLLM proposals for the step just committed (its sums in
    ``a.stats``); returns ``BAD`` when a sample is out of [0, 1] (the gate refuses it), else 0."""
    k, spec, num = d.ints[STEP_K], d.ints[STEP_SPEC], d.ints[NUM_DRAFTING]
    stats = a.stats
    sample = -1.0
    if spec and num:
        generation, ctx = 0, a.ctx
        for i in range(n):
            if not ctx[i]:
                generation += 1
        sample = sample_rate(d.denominator, stats[ACCEPTED], stats[DRAFTED], stats[VERIFIED], k, a.k_static,
                             generation)
        if sample >= 0:
            d.samples[d.ints[SAMPLES]] = sample
            d.ints[SAMPLES] += 1
    if d.feeds_gate:
        if d.overlap:  # the sample of the step before is recorded now
            pending = d.floats[PENDING_SAMPLE]
            d.floats[PENDING_SAMPLE] = sample
            sample = pending
        if sample > 1.0:
            d.floats[BAD_SAMPLE] = sample
            return BAD
        if sample >= 0 and latch_push(d.gate_ring, d.gate_total, d.gate_counts, d.threshold, sample):
            d.ints[TRIPPED] = 1
    if d.k_timing == NEXT_STEP:
        d.ints[K_NEXT] = lookup(d, n, stats[MAX_LEN])
        if not d.gate_counts[1]:
            next_drafts(d, a, n, d.ints[K_NEXT], int(a.terms[MAX_SEQ_LEN]))
    return 0


@njit(cache=True)
def next_drafts(d, a, n, k, max_seq_len):
    """``drafts.propose_draft_token_ids`` from the tables, for the ``n`` rows that ran: vLLM's
    drafts for their next step."""
    rows, pending, pending_accepted = a.rows, a.pending, d.pending_accepted
    plen, olen, computed, ctx_target, generated, rid = a.plen, a.olen, a.computed, a.ctx_target, a.generated, a.rid
    max_model_len, num_spec_tokens, tables = d.max_model_len, d.num_spec_tokens, _tables(d)
    for i in range(n):
        pending[rows[i]] = 0
        pending_accepted[rows[i]] = 0
    if k == 0:
        return
    skip = d.ngram_skip and max_seq_len + num_spec_tokens > max_model_len
    for i in range(n):
        r = rows[i]
        if computed[r] < ctx_target[r] or generated[r] >= olen[r]:
            continue
        if skip:  # the n-gram drafter skipped for the whole batch: dummy tokens, never accepted
            drafted, accepted = num_spec_tokens, 0
        else:
            drafted, accepted = oracle_draft(tables, rid[r], generated[r], k)
        if max_model_len >= 0:
            drafted = max(min(drafted, max_model_len - 1 - (plen[r] + generated[r])), 0)
            accepted = min(accepted, drafted)
        pending[r], pending_accepted[r] = drafted, accepted
