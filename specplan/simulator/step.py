"""The compiled step: one iteration's scheduling, pricing terms and commit over the request arrays.

The SimPy process (``specplan.simulator.engine``) orders an iteration; these numba functions do its
per-row work in three calls, so an iteration costs a few microseconds whatever the batch size:

1. ``scheduler.schedule_step``: each active request's charge, the token budget and KV admission;
2. ``price_step``: the resident KV of each scheduled row, the KV growth to the verified width, and
   the ``BatchTerms`` the cost models price;
3. ``commit_step``: accepted + 1 per verify row, ``rewind_kv_cache``, the emission and iteration
   records, and completion (KV and reservations released, the request leaves the active set).

These are the only implementation of those rules; drafts (the acceptance oracle) and the cost model
stay in Python between the calls. Integer sums are exact, so the terms equal ``BatchTerms.of``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from specplan.simulator.kv import blocks_for
from specplan.simulator.state import DONE, KV_USED, N_ACTIVE, RESERVED_TOTAL

# price_step's out_terms: the BatchTerms fields, then the step's longest sequence (resident + query)
# and the KV positions the step grew (its reservation beyond the resident context).
NUM_TERMS = 12
MAX_SEQ_LEN, KV_GROWN = 10, 11

# commit_step's out_stats slots.
EMITTED, COMMITTED, ACCEPTED, DRAFTED, VERIFIED, FINISHED, MAX_LEN = range(7)
NUM_STATS = 7


@njit(cache=True)
def price_step(rows, q_sched, q, ctx, width, n, no_drafts, plen, generated, computed, held, counters, num_blocks,
               block_size, out_resident, out_terms):
    """Resident KV per row, KV grown to ``resident + max(q, width)`` (``width``: the row's KV growth
    from ``prepare_draft_requests``, e.g. TensorRT-LLM's ``1 + K_static`` reserve), and the step's
    ``BatchTerms`` into ``out_terms``.

    With ``no_drafts`` a generation row computes one token whatever its placeholders charged, and
    ``q`` is filled from ``q_sched``. Returns False when the KV accounting broke."""
    n_dec = kv_dec_c = qc_dec = qq_dec = 0
    n_pre = kv_pre_c = qc_pre = qq_pre = pre_rows = 0
    max_ctx = max_seq = ctx_sum = verify_rows = grown = 0
    for i in range(n):
        r = rows[i]
        if no_drafts:
            q[i] = q_sched[i] if ctx[i] else 1
        c = computed[r] if ctx[i] else plen[r] + generated[r] - 1
        out_resident[i] = c
        grow = max(q[i], width[i])
        grown += grow
        new = blocks_for(c + grow, block_size)
        counters[KV_USED] += new - held[r]
        held[r] = new
        max_ctx = max(max_ctx, c)
        max_seq = max(max_seq, c + q[i])
        ctx_sum += c
        if ctx[i]:
            pre_rows += 1
            n_pre += q[i]
            kv_pre_c += c
            qc_pre += q[i] * c
            qq_pre += q[i] * q[i]
        else:
            if q[i] > 1:
                verify_rows += 1
            n_dec += q[i]
            kv_dec_c += c
            qc_dec += q[i] * c
            qq_dec += q[i] * q[i]
    out_terms[0] = n
    out_terms[1] = n_dec + n_pre
    out_terms[2] = n_dec + pre_rows
    out_terms[3] = float(kv_dec_c) + n_dec
    out_terms[4] = float(kv_pre_c) + n_pre
    out_terms[5] = float(qc_dec) + 0.5 * (float(qq_dec) + n_dec)
    out_terms[6] = float(qc_pre) + 0.5 * (float(qq_pre) + n_pre)
    out_terms[7] = max_ctx
    out_terms[8] = ctx_sum
    out_terms[9] = verify_rows
    out_terms[MAX_SEQ_LEN] = max_seq
    out_terms[KV_GROWN] = grown
    used = counters[KV_USED]
    return 0 <= used <= num_blocks


@njit(cache=True)
def rewind_kv_cache(rows, ctx, emitted, n, plen, generated, computed, held, counters, block_size):
    """Rewind to the resident KV: rejected draft positions are freed; the newest committed token's KV
    is written by the next forward (a prefill chunk that emitted nothing keeps what it computed)."""
    for i in range(n):
        r = rows[i]
        resident = computed[r] if ctx[i] and not emitted[i] else plen[r] + generated[r] - 1
        new = blocks_for(resident, block_size)
        counters[KV_USED] += new - held[r]
        held[r] = new


@njit(cache=True)
def commit_step(rows, q_sched, q, ctx, n, drafting, drafted, accepted, accepted_hist, now, plen, olen, computed,
                ctx_target, generated, emits, first_token, finish, held, reserved, act, counters, num_blocks,
                block_size, rid, em_request, em_time, em_tokens, em_start, iteration_log, it_row, record, out_finished,
                out_stats):
    """Commit accepted + 1 tokens per verify row (never past the output), ``rewind_kv_cache``, append
    the step's emissions and its iteration record, and complete the requests that reached their
    output length (written to ``out_finished``). Returns False when the KV accounting broke. The
    emissions name each row's request (``rid`` of its slot): a slot serves many requests in a run.

    ``drafted`` and ``accepted`` hold one entry per drafting row, in row order; ``record`` is the
    iteration record's first fields (iteration, start, step, num_active, num_queued), then k, spec_on
    and the KV positions the step grew (``price_step``'s ``KV_GROWN``).
    """
    emitted = np.empty(n, dtype=np.bool_)
    m = em_start
    committed = acc_sum = drafted_sum = verified = n_ctx = prefill = prefill_done = max_len = 0
    j = 0
    for i in range(n):
        r = rows[i]
        commit = 1
        if ctx[i]:
            n_ctx += 1
            prefill += q_sched[i]
            computed[r] += q_sched[i]
            commit = 1 if computed[r] >= ctx_target[r] else 0
            if commit > 0 and generated[r] == 0:
                first_token[r] = now
        if drafting[i]:
            if drafted[j] > 0:
                accepted_hist[accepted[j]] += 1
            commit += accepted[j]
            acc_sum += accepted[j]
            drafted_sum += drafted[j]
            verified += q[i] - (q_sched[i] if ctx[i] else 1)  # draft positions, CUDA-graph padding included
            j += 1
        commit = min(commit, olen[r] - generated[r])
        generated[r] += commit
        emitted[i] = commit > 0
        if ctx[i] and commit > 0:
            prefill_done += 1
        if commit > 0:
            emits[r] += 1
            em_request[m], em_time[m], em_tokens[m] = rid[r], now, commit
            m += 1
        committed += commit
        max_len = max(max_len, plen[r] + generated[r])
    rewind_kv_cache(rows, ctx, emitted, n, plen, generated, computed, held, counters, block_size)
    ok = 0 <= counters[KV_USED] <= num_blocks
    total_q = charged = 0
    for i in range(n):
        total_q += q[i]
        charged += q_sched[i]
    rec = iteration_log[it_row]
    rec[0:5] = record[0:5]
    rec[5], rec[6], rec[7], rec[8] = n, n - n_ctx, prefill, record[5]
    rec[9], rec[10], rec[11], rec[12] = record[6], drafted_sum, acc_sum, total_q - prefill
    rec[13], rec[14], rec[15] = committed, prefill_done, counters[KV_USED]
    rec[16], rec[17], rec[18] = charged, record[7], verified
    nf = 0
    for i in range(n):
        r = rows[i]
        if generated[r] >= olen[r]:
            out_finished[nf] = r
            nf += 1
            finish[r] = now
            counters[KV_USED] -= held[r]
            held[r] = 0
            counters[RESERVED_TOTAL] -= reserved[r]
            reserved[r] = 0
    if nf:
        kept = 0
        for i in range(counters[N_ACTIVE]):
            r = act[i]
            if np.isnan(finish[r]):
                act[kept] = r
                kept += 1
        counters[N_ACTIVE] = kept
        counters[DONE] += nf
    out_stats[EMITTED], out_stats[COMMITTED], out_stats[ACCEPTED] = m - em_start, committed, acc_sum
    out_stats[DRAFTED], out_stats[VERIFIED], out_stats[FINISHED], out_stats[MAX_LEN] = drafted_sum, verified, nf, max_len
    return ok
