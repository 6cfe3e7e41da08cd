"""Capacity and micro-batch scheduling of one iteration (compiled), and the ``ScheduleDecision`` the
drafts read.

TensorRT-LLM's ``PyMicroBatchScheduler`` charges every generation request its placeholder tokens
against ``max_num_tokens``; context and generation requests share that budget and the pass stops
at the first request that does not fit (with chunked prefill that context request gets the rest of
the budget). ``PyCapacityScheduler`` admits by KV: ``GUARANTEED_NO_EVICT`` reserves a request's
whole life up front, ``MAX_UTILIZATION`` allocates step by step and preempts (recompute) the most
recently started request when blocks run out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from specplan.errors import ConfigError
from specplan.simulator.control import DRAFT_BUDGET, prepare_draft_requests
from specplan.simulator.kv import blocks_for
from specplan.simulator.paths import VLLM
from specplan.simulator.prefix_cache import AFTER_STEP, OFF, SAME_STEP, lookup, register
from specplan.simulator.state import KV_USED, N_ACTIVE, PREEMPTIONS, RESERVED_TOTAL

GUARANTEED_NO_EVICT, MAX_UTILIZATION = 0, 1
NOTHING_FITS_MESSAGE = "engine: nothing fits in one iteration (max_num_tokens below one request's need)"
POLICIES = {"GUARANTEED_NO_EVICT": GUARANTEED_NO_EVICT, "MAX_UTILIZATION": MAX_UTILIZATION}


@dataclass(frozen=True)
class ScheduleDecision:
    """Which active requests run this iteration and how many query tokens each computes."""

    rows: np.ndarray  # request ids, in schedule order
    query_tokens: np.ndarray  # tokens charged per row: the prefill chunk, or 1 + placeholder drafts
    is_prefill: np.ndarray  # context-phase rows


@njit(cache=True)
def admit_guaranteed(rows, n, plen, olen, started, reserved, counters, num_blocks, block_size):
    """``GUARANTEED_NO_EVICT``: a request starts only when KV for prompt + max new tokens can be
    reserved (``getRemainingBlocksToCompletion``: no draft tokens in it); the first one that cannot
    be stops the pass. Returns how many leading rows run."""
    for i in range(n):
        r = rows[i]
        if not started[r]:
            need = blocks_for(plen[r] + olen[r], block_size)
            if counters[RESERVED_TOTAL] + need > num_blocks:
                return i
            reserved[r] = need
            counters[RESERVED_TOTAL] += need
            started[r] = True
    return n


@njit(cache=True)
def _preempt(victim, act, plen, generated, computed, ctx_target, started, held, counters):
    """Recompute preemption: drop the KV; the request re-prefills prompt + generated later and moves
    to the back of the active order."""
    counters[KV_USED] -= held[victim]
    held[victim] = 0
    computed[victim] = 0
    ctx_target[victim] = plen[victim] + generated[victim]
    started[victim] = False
    n_act = counters[N_ACTIVE]
    j = 0
    while act[j] != victim:
        j += 1
    for i in range(j, n_act - 1):
        act[i] = act[i + 1]
    act[n_act - 1] = victim
    counters[PREEMPTIONS] += 1


@njit(cache=True)
def admit_max_utilization(rows, q, ctx, width, keep, n, act, plen, generated, computed, ctx_target, started,
                          held, counters, num_blocks, block_size):
    """``MAX_UTILIZATION``: allocate as needed; when KV runs out, preempt the latest-started active
    request (recompute) until the running rows fit; new requests then start while blocks remain
    (FCFS, break). Sets ``keep`` per row.

    Terminates: every request fits the cache alone (checked at construction), so preempting from the
    tail leaves at least the head running."""
    need = np.empty(n, dtype=np.int64)
    running = np.empty(n, dtype=np.bool_)
    for i in range(n):
        r = rows[i]
        resident = computed[r] if ctx[i] else plen[r] + generated[r] - 1
        grow = q[i] if ctx[i] else width[i]
        need[i] = max(blocks_for(resident + grow, block_size) - held[r], 0)
        running[i] = started[r]
        keep[i] = True
    while True:
        total = 0
        for i in range(n):
            if keep[i] and running[i]:
                total += need[i]
        if total <= num_blocks - counters[KV_USED]:
            break
        j = counters[N_ACTIVE] - 1
        while not started[act[j]]:
            j -= 1
        victim = act[j]
        _preempt(victim, act, plen, generated, computed, ctx_target, started, held, counters)
        for i in range(n):
            if rows[i] == victim:
                keep[i] = False
            running[i] = running[i] and started[rows[i]]
    budget = num_blocks - counters[KV_USED] - total
    cum = 0
    for i in range(n):
        if keep[i] and not running[i]:
            cum += need[i]
        if cum > budget:
            for j in range(i, n):
                keep[j] = False
            break
    for i in range(n):
        if keep[i]:
            started[rows[i]] = True


@njit(cache=True)
def chunk_contexts(remaining, m, capacity, max_context_length, unit, equal_progress, out):
    """TensorRT-LLM's chunk sizes for the ``m`` contexts that do not all fit in ``capacity`` tokens
    (``PyMicroBatchScheduler._set_ctx_requests_chunk_size``; ``unit`` is ``chunk_unit_size``, the KV
    block size; ``max_context_length`` is ``max_num_tokens``). ``FIRST_COME_FIRST_SERVED``
    (``_chunk_fcfs``): in order, each takes what it needs of the capacity left, rounded down to the
    unit when truncated. ``EQUAL_PROGRESS`` (``_chunk_equal_progress``): rounds of one unit per
    context (capped at what it needs) while an increment fits."""
    for i in range(m):
        out[i] = 0
    if not equal_progress:
        left = capacity
        for i in range(m):
            size = min(remaining[i], left, max_context_length)
            if size < remaining[i]:
                size = size // unit * unit
            out[i] = size
            left -= size
        return
    total = 0
    grew = 1
    while total < capacity and grew > 0:
        grew = 0
        for i in range(m):
            inc = min(out[i] + unit, remaining[i]) - out[i]
            if total + inc > capacity:
                continue
            out[i] += inc
            total += inc
            grew += inc


@njit(cache=True)
def schedule_step(act, counters, plen, olen, computed, ctx_target, generated, started, reserved, held, disabled,
                  pending, spec, stamp, k, k_static, k_charge, budget_rule, verify_width, policy, max_num_tokens,
                  max_batch_size, chunked, num_blocks, block_size, out_rows, out_q, out_ctx, out_width, rid, pc_mode,
                  pc_off, pc_ids, pc_cached, pc_hits, pc_done, equal_progress):
    """Schedule the active requests (``act[:counters[N_ACTIVE]]``, admission order) into ``out_*``;
    returns the number of rows. ``out_q`` is each row's charge (its prefill chunk, or its path's
    ``prepare_draft_requests`` charge with ``k_charge`` placeholders) and ``out_width`` its KV growth.
    With ``stamp`` (the drafter path, speculation off this step) the scheduled requests are stamped
    ``py_disable_speculative_decoding`` (``disabled``).

    TensorRT-LLM with chunked prefill (``PyMicroBatchScheduler.schedule``): a context does not stop
    the pass; it is set aside (it counts toward ``max_batch_size``), the generation rows behind it
    are charged first, and the contexts share what the budget has left (``chunk_contexts``), after
    the generation rows in the pass's order (KV admission, the engine's capacity scheduler, goes in
    that order). A generation row that does not fit ends the pass (``break``).

    A vLLM decode row (``budget_rule`` draft) that does not fit gets the tokens left and its draft is
    cut to them (``Scheduler.schedule``: ``num_new_tokens = min(num_new_tokens, token_budget)``); the
    pass ends when no budget is left; a context that does not fit gets the rest as its chunk, or, with
    chunked prefill off, ends the pass (``if not enable_chunked_prefill and num_new_tokens >
    token_budget: break``, the waiting loop).

    Prefix caching (``pc_mode``, ``specplan.simulator.prefix_cache``): a request reached with nothing
    computed looks its cached blocks up first; under ``SAME_STEP`` (vLLM) the blocks a context row
    will have computed are cached as it is scheduled, under ``AFTER_STEP`` (TensorRT-LLM) the blocks
    computed by earlier steps are cached before the pass."""
    n_act = counters[N_ACTIVE]
    if pc_mode == AFTER_STEP:
        for i in range(n_act):
            r = act[i]
            register(r, rid[r], min(computed[r], ctx_target[r]), block_size, pc_off, pc_ids, pc_cached, pc_done)
    defer_ctx = chunked and budget_rule != DRAFT_BUDGET  # TensorRT-LLM: contexts chunked after the pass
    deferred = np.empty(min(n_act, max_batch_size), dtype=np.int64)
    need = np.empty(min(n_act, max_batch_size), dtype=np.int64)
    n_def = 0
    cum = 0
    n = 0
    i = 0
    while i < n_act and i < max_batch_size:
        r = act[i]
        i += 1
        if pc_mode != OFF and computed[r] == 0 and not started[r] and cum < max_num_tokens:
            hit = lookup(rid[r], ctx_target[r], block_size, pc_off, pc_ids, pc_cached)
            computed[r] = hit
            pc_hits[0] += hit
        is_ctx = computed[r] < ctx_target[r]
        if is_ctx and defer_ctx:
            deferred[n_def] = r
            need[n_def] = ctx_target[r] - computed[r]
            n_def += 1
            continue
        if is_ctx:
            cost = ctx_target[r] - computed[r]
            if pc_mode == SAME_STEP:
                register(r, rid[r], computed[r] + min(cost, max_num_tokens - cum), block_size, pc_off, pc_ids,
                         pc_cached, pc_done)
            width = cost
        else:
            cost, width = prepare_draft_requests(spec, budget_rule, verify_width, k, k_static, k_charge, disabled[r],
                                                 pending[r])
        if cum + cost > max_num_tokens:
            left = max_num_tokens - cum
            if chunked and is_ctx and left > 0:
                out_rows[n], out_q[n], out_ctx[n], out_width[n] = r, left, True, left
                n += 1
            elif budget_rule == DRAFT_BUDGET and not is_ctx and left > 0:  # vLLM unchunked: a context waits
                out_rows[n], out_q[n], out_ctx[n], out_width[n] = r, left, False, left
                n += 1
            break
        cum += cost
        out_rows[n], out_q[n], out_ctx[n], out_width[n] = r, cost, is_ctx, width
        n += 1
    if n_def:
        sizes = need.copy()
        total = 0
        fit = True
        for j in range(n_def):
            total += min(need[j], max_num_tokens)  # a context longer than max_context_length is chunked
            fit = fit and need[j] <= max_num_tokens
        if not fit or total > max_num_tokens - cum:
            chunk_contexts(need, n_def, max_num_tokens - cum, max_num_tokens, block_size, equal_progress, sizes)
        for j in range(n_def):
            if sizes[j] > 0:
                r = deferred[j]
                out_rows[n], out_q[n], out_ctx[n], out_width[n] = r, sizes[j], True, sizes[j]
                n += 1
    if policy == GUARANTEED_NO_EVICT:
        m = admit_guaranteed(out_rows, n, plen, olen, started, reserved, counters, num_blocks, block_size)
    else:
        keep = np.empty(n, dtype=np.bool_)
        admit_max_utilization(out_rows, out_q, out_ctx, out_width, keep, n, act, plen, generated, computed,
                              ctx_target, started, held, counters, num_blocks, block_size)
        m = 0
        for i in range(n):
            if keep[i]:
                out_rows[m], out_q[m], out_ctx[m], out_width[m] = out_rows[i], out_q[i], out_ctx[i], out_width[i]
                m += 1
    if stamp:
        for i in range(m):
            disabled[out_rows[i]] = True
    return m


def check_fits(s, plen: np.ndarray, olen: np.ndarray, kv, k_static: int) -> None:
    """A request that can never be scheduled would wait forever: refuse the config up front
    (``s`` the ``EngineSettings``, ``plen``/``olen`` every request's lengths, ``kv`` the ``KVBlockPool``)."""
    n = len(plen)
    if not s.chunked_prefill and n and int(plen.max()) > s.max_num_tokens:
        worst = int(plen.argmax())
        raise ConfigError(
            f"engine.max_num_tokens: request {worst} has a {int(plen[worst])}-token prompt, over "
            f"max_num_tokens {s.max_num_tokens}; set engine.enable_chunked_prefill: true or raise it"
        )
    if (s.chunked_prefill and s.path != VLLM and n and int(plen.max()) > s.max_num_tokens
            and s.max_num_tokens < s.kv_block_size):
        raise ConfigError(
            f"engine.max_num_tokens: {s.max_num_tokens} is below one KV block ({s.kv_block_size} tokens), the "
            "chunk unit of TensorRT-LLM's chunked prefill, so a longer prompt never gets a chunk; raise it")
    if s.max_model_len is not None and n and int((plen + olen).max()) > s.max_model_len:
        worst = int((plen + olen).argmax())
        raise ConfigError(f"engine.max_model_len: request {worst} holds {int(plen[worst] + olen[worst])} "
                          f"tokens, over max_model_len {s.max_model_len}; raise it or shorten the workload")
    if not n:
        return
    need = blocks_for(np.asarray(plen + olen + k_static, dtype=np.int64), kv.block_size)
    worst = int(need.argmax())
    if need[worst] > kv.num_blocks:
        raise ConfigError(
            f"engine.kv_num_blocks: request {worst} needs {int(need[worst])} KV blocks "
            f"({int(plen[worst] + olen[worst])} tokens) but the cache holds {kv.num_blocks}; "
            "raise kv_num_blocks / kv_budget_gb or shorten the workload"
        )
