"""Capacity and micro-batch scheduling of one iteration, returning a typed ``ScheduleDecision``.

TensorRT-LLM's ``PyMicroBatchScheduler`` charges every generation request its placeholder tokens
against ``max_num_tokens``; context and generation requests share that budget and the pass stops
at the first request that does not fit. ``PyCapacityScheduler`` admits by KV:
``GUARANTEED_NO_EVICT`` reserves a request's whole life up front, ``MAX_UTILIZATION`` allocates step
by step and preempts (recompute) the most recently started request when blocks run out.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specplan.simulator.kv import KVBlockPool


@dataclass(frozen=True)
class ScheduleDecision:
    """Which active requests run this iteration and how many query tokens each computes."""

    rows: np.ndarray  # request ids, in schedule order
    query_tokens: np.ndarray  # tokens charged per row: the prefill chunk, or 1 + placeholder drafts
    is_prefill: np.ndarray  # context-phase rows

    @property
    def chunk(self) -> np.ndarray:
        """Prefill positions computed this step per row (0 for generation rows)."""
        return np.where(self.is_prefill, self.query_tokens, 0)

    @property
    def num_generation(self) -> int:
        return int(len(self.rows) - self.is_prefill.sum())


def fit_token_budget(cost: np.ndarray, is_ctx: np.ndarray, budget: int, max_rows: int, chunked: bool) -> tuple[int, int]:
    """FCFS with break: how many leading rows fit fully, and the partial chunk of the next one.

    Returns ``(n_full, partial)``; ``partial > 0`` means row ``n_full`` is a context request that
    gets a chunk of that many tokens (chunked prefill only).
    """
    cum = np.cumsum(cost)
    n_full = min(int(np.searchsorted(cum, budget, side="right")), max_rows)
    partial = 0
    if chunked and n_full < len(cost) and n_full < max_rows and is_ctx[n_full]:
        partial = int(budget - (cum[n_full - 1] if n_full else 0))
    return n_full, max(partial, 0)


class CapacityScheduler:
    """Token budget, batch size and paged-KV admission over the executor's request arrays.

    The arrays (``RequestState``) are shared with the executor and updated in place: ``started``
    and ``reserved`` here, ``computed`` / ``ctx_target`` on preemption.
    """

    def __init__(self, policy: str, max_num_tokens: int, max_batch_size: int, chunked: bool,
                 kv: KVBlockPool, state, k_static: int) -> None:
        self.policy = policy
        self.max_num_tokens = max_num_tokens
        self.max_batch_size = max_batch_size
        self.chunked = chunked
        self.kv = kv
        self.st = state
        self.k_static = k_static
        self.preemptions = 0

    def schedule(self, active: list, act: np.ndarray, gen_cost: np.ndarray, kv_width: np.ndarray) -> ScheduleDecision:
        """Schedule the active requests (``active``, admission order; ``act`` the same as an array);
        ``gen_cost`` and ``kv_width`` give each one's token charge and KV growth as a generation row."""
        st = self.st
        is_ctx = st.computed[act] < st.ctx_target[act]
        cost = np.where(is_ctx, st.ctx_target[act] - st.computed[act], gen_cost)
        n_full, partial = fit_token_budget(cost, is_ctx, self.max_num_tokens, self.max_batch_size, self.chunked)
        n_rows = n_full + (1 if partial else 0)
        rows, q, ctx_rows, width = act[:n_rows], cost[:n_rows].copy(), is_ctx[:n_rows], kv_width[:n_rows]
        if partial:
            q[-1] = partial
        if self.policy == "GUARANTEED_NO_EVICT":
            keep = self._admit_guaranteed(rows)
        else:
            keep = self._admit_max_utilization(active, rows, q, ctx_rows, width)
        return ScheduleDecision(rows[keep], q[keep], ctx_rows[keep])

    def _admit_guaranteed(self, rows: np.ndarray) -> np.ndarray:
        """Start a request only when KV for its whole output (and drafts) can be guaranteed."""
        st = self.st
        keep = np.ones(len(rows), dtype=bool)
        new = ~st.started[rows]
        if new.any():
            need = np.where(new, self.kv.blocks_for(st.plen[rows] + st.olen[rows] + self.k_static), 0)
            fits = np.cumsum(need) <= self.kv.num_blocks - st.reserved_total
            if not fits.all():
                keep[int(np.argmin(fits)):] = False
            st.reserved[rows[keep & new]] = need[keep & new]
            st.reserved_total += int(need[keep & new].sum())
            st.started[rows[keep & new]] = True
        return keep

    def _admit_max_utilization(self, active: list, rows, q, ctx_rows, width) -> np.ndarray:
        """Allocate as needed; when KV runs out, preempt the latest-started request (recompute).

        Terminates: every request fits the cache alone (checked at construction), so preempting
        from the tail leaves at least the head running.
        """
        st = self.st
        keep = np.ones(len(rows), dtype=bool)
        resident = np.where(ctx_rows, st.computed[rows], st.plen[rows] + st.generated[rows] - 1)
        need = np.maximum(self.kv.blocks_for(resident + np.where(ctx_rows, q, width)) - self.kv.held[rows], 0)
        running = st.started[rows].copy()
        while int(need[keep & running].sum()) > self.kv.free:
            victim = next(r for r in reversed(active) if st.started[r])
            self._preempt(active, victim)
            keep &= rows != victim
            running &= st.started[rows]
        # New requests only start while blocks remain after the running ones (FCFS, break).
        budget = self.kv.free - int(need[keep & running].sum())
        fits = np.cumsum(np.where(keep & ~running, need, 0)) <= budget
        if not fits.all():
            keep[int(np.argmin(fits)):] = False
        st.started[rows[keep]] = True
        return keep

    def _preempt(self, active: list, rid: int) -> None:
        """Recompute preemption: drop the KV; the request re-prefills prompt + generated later."""
        st = self.st
        self.kv.release(np.array([rid]))
        st.computed[rid] = 0
        st.ctx_target[rid] = st.plen[rid] + st.generated[rid]
        st.started[rid] = False
        active.remove(rid)
        active.append(rid)
        self.preemptions += 1
