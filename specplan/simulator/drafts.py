"""Drafts of one step: who drafts, how many tokens, and how wide each row is verified.

``prepare_draft_tokens`` is TensorRT-LLM's ``Drafter.prepare_draft_tokens`` followed by
``pad_draft_tokens_for_cuda_graph`` (or the one-model forward's K-wide drafts); vLLM proposes after
a step instead (``propose_draft_token_ids``) and the next step verifies what was proposed.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from specplan.acceptance.oracles import AcceptanceOracle
from specplan.simulator.control import verified_width
from specplan.simulator.scheduler import ScheduleDecision
from specplan.simulator.state import RequestState


def prepare_draft_tokens(oracle: AcceptanceOracle, st: RequestState, d: ScheduleDecision, gid: np.ndarray, k: int,
                         k_static: int, verify_width: int, proposed_before: bool, order: Optional[np.ndarray] = None):
    """Drafts of this step's rows and their verified widths.

    Generation rows draft (with ``proposed_before``, vLLM: those holding a proposed draft); a drafter
    that drafts at prefill (HF prompt lookup) also drafts on the chunk that completes a prompt.
    Verified width per drafting row: ``control.verified_width`` of the ``VERIFY_WIDTHS`` code
    ``verify_width``. Rows are slots of ``st``; the oracle knows requests by id
    (``gid[slot]``). Returns the drafting mask, drafted and accepted per drafting row, and the query
    tokens per row. ``order`` (one sort key per row, TensorRT-LLM's drafter path: ``batch_order``) is
    the order in which the rows draft, which a shared pool sees; without it, row order.
    """
    rows, ctx = d.rows, d.is_prefill
    q = d.query_tokens.copy()
    now = np.zeros(len(rows), dtype=bool) if proposed_before else ~ctx
    if oracle.drafts_at_prefill:
        now |= ctx & (st.generated[rows] == 0) & (st.computed[rows] + q >= st.ctx_target[rows])
    if not proposed_before:
        drafting, drows = now, rows[now]
        if len(drows):
            perm = np.argsort(order[now], kind="stable") if order is not None else slice(None)
            drafted, accepted = np.empty(len(drows), np.int64), np.empty(len(drows), np.int64)
            drafted[perm], accepted[perm] = oracle.draft(gid[drows[perm]], st.generated[drows[perm]], k)
        else:
            drafted = accepted = np.zeros(0, dtype=np.int64)
    else:
        drafted, accepted = np.zeros(len(rows), np.int64), np.zeros(len(rows), np.int64)
        if now.any():
            drafted[now], accepted[now] = oracle.draft(gid[rows[now]], st.generated[rows[now]], k)
        # A row the token budget cut verifies only the drafts its scheduled tokens hold (vLLM's spec-token trim).
        room = d.query_tokens - 1
        drafting = now | (~ctx & (st.pending_drafted[rows] > 0) & (room > 0))
        held = drafting & ~now
        drafted[held] = np.minimum(st.pending_drafted[rows[held]], room[held])
        accepted[held] = np.minimum(st.pending_accepted[rows[held]], drafted[held])
        drafted, accepted = drafted[drafting], accepted[drafting]
    q[drafting] = np.where(ctx[drafting], q[drafting], 1) + verified_width.py_func(verify_width, k, k_static, drafted)
    return drafting, drafted, accepted, q


def batch_order(seq_slot: np.ndarray, request_id: np.ndarray) -> np.ndarray:
    """TensorRT-LLM's drafting order key (``NGramDrafter.prepare_draft_tokens`` sorts the generation
    requests by ``(py_batch_idx is None, py_batch_idx or request_id)``; ``py_batch_idx`` is the
    sequence slot, so slot 0 sorts by its request id)."""
    return np.where(seq_slot != 0, seq_slot, request_id)


class SeqSlots:
    """TensorRT-LLM's ``SeqSlotManager``: a request takes a slot when first scheduled
    (``prepare_resources``, context requests then generation requests) and gives it back when it
    completes (``free_resources``). Slots come from ``SlotManager``'s Python set
    (``free_slots = set(range(max_num_requests))``, ``add_slot``: ``free_slots.pop()``), so this uses
    the same set, whose ``pop`` resumes where the last one stopped: a freed slot is not the next
    one given."""

    def __init__(self, max_num_requests: int) -> None:
        self.free_slots = set(range(max_num_requests))

    def order(self, st: RequestState, rows: np.ndarray, max_batch_size: int) -> np.ndarray:
        """Slots for the scheduled ``rows`` (in the batch's order) that have none; returns the rows'
        ``batch_order`` keys. Request ids are given from ``max_batch_size`` up in arrival order
        (``ExecutorRequestQueue.next_request_id``); here arrival order is the workload's."""
        for r in rows[st.seq_slot[rows] < 0].tolist():
            st.seq_slot[r] = self.free_slots.pop()
        return batch_order(st.seq_slot[rows], max_batch_size + st.rid[rows])

    def remove(self, st: RequestState, rows: np.ndarray) -> None:
        """Completed ``rows`` give their slots back."""
        for r in rows.tolist():
            if st.seq_slot[r] >= 0:
                self.free_slots.add(int(st.seq_slot[r]))
                st.seq_slot[r] = -1


def propose_draft_token_ids(oracle: AcceptanceOracle, st: RequestState, rows: np.ndarray, gid: np.ndarray, k: int,
                            max_model_len: Optional[int], ngram: bool, max_seq_len: int,
                            num_spec_tokens: int) -> None:
    """vLLM, after a step: the drafts of the rows that ran, verified when each is next scheduled.

    Rows still prefilling or finished propose nothing. When the step's longest sequence
    (``max_seq_len``: context + scheduled tokens over every row that ran, finishing ones included) plus
    the configured ``num_spec_tokens`` passes ``max_model_len``, the n-gram drafter is skipped for the
    whole batch and every row gets ``num_spec_tokens`` dummy tokens that are never accepted
    (``gpu_model_runner._input_fits_in_drafter``, which reads the attention metadata's
    ``max_seq_len`` and the static ``num_spec_tokens``). Either way the
    scheduler verifies at most ``max_model_len - 1 - num_tokens`` of a row's drafts (``schedule``: a
    row's new tokens stop at ``max_model_len - num_computed_tokens - 1``).
    """
    st.pending_drafted[rows] = 0
    st.pending_accepted[rows] = 0
    live = (st.computed[rows] >= st.ctx_target[rows]) & (st.generated[rows] < st.olen[rows])
    if k == 0 or not live.any():
        return
    prop = rows[live]
    tokens = st.plen[prop] + st.generated[prop]
    if max_model_len is not None and ngram and max_seq_len + num_spec_tokens > max_model_len:
        drafted = np.full(len(prop), num_spec_tokens, dtype=np.int64)
        accepted = np.zeros(len(prop), dtype=np.int64)
    else:
        drafted, accepted = oracle.draft(gid[prop], st.generated[prop], k)
    if max_model_len is not None:
        drafted = np.clip(np.minimum(drafted, max_model_len - 1 - tokens), 0, None)
        accepted = np.minimum(accepted, drafted)
    st.pending_drafted[prop], st.pending_accepted[prop] = drafted, accepted
