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
from specplan.simulator.control import prepare_draft_requests
from specplan.simulator.kv import blocks_for
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
def admit_guaranteed(rows, n, plen, olen, started, reserved, counters, num_blocks, block_size, k_static):
    """``GUARANTEED_NO_EVICT``: a request starts only when KV for its whole output (and drafts) can be
    reserved; the first one that cannot be stops the pass. Returns how many leading rows run."""
    for i in range(n):
        r = rows[i]
        if not started[r]:
            need = blocks_for(plen[r] + olen[r] + k_static, block_size)
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
def schedule_step(act, counters, plen, olen, computed, ctx_target, generated, started, reserved, held, disabled,
                  pending, spec, stamp, k, k_static, budget_rule, verify_width, policy, max_num_tokens,
                  max_batch_size, chunked, num_blocks, block_size, out_rows, out_q, out_ctx, out_width):
    """Schedule the active requests (``act[:counters[N_ACTIVE]]``, admission order) into ``out_*``;
    returns the number of rows. ``out_q`` is each row's charge: its prefill chunk, or 1 + placeholders.
    With ``stamp`` (the drafter path, speculation off this step) the scheduled requests are stamped
    ``py_disable_speculative_decoding`` (``disabled``)."""
    n_act = counters[N_ACTIVE]
    cum = 0
    n = 0
    partial = 0
    while n < n_act and n < max_batch_size:
        r = act[n]
        is_ctx = computed[r] < ctx_target[r]
        if is_ctx:
            cost = ctx_target[r] - computed[r]
            width = 1
        else:
            cost, width = prepare_draft_requests(spec, budget_rule, verify_width, k, k_static, disabled[r], pending[r])
        if cum + cost > max_num_tokens:
            if chunked and is_ctx:
                partial = max_num_tokens - cum
            break
        cum += cost
        out_rows[n], out_q[n], out_ctx[n], out_width[n] = r, cost, is_ctx, width
        n += 1
    if partial > 0:
        out_rows[n], out_q[n], out_ctx[n], out_width[n] = act[n], partial, True, 1
        n += 1
    if policy == GUARANTEED_NO_EVICT:
        m = admit_guaranteed(out_rows, n, plen, olen, started, reserved, counters, num_blocks, block_size, k_static)
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
