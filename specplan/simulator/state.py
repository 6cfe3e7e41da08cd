"""Per-request state of one executor run, as numpy arrays indexed by request slot (``LlmRequest``
fields), and the run's counters, shared with the compiled step."""

from __future__ import annotations

from typing import Optional

import numpy as np

# Slots of ``RequestState.counters`` (an int64 array, so the compiled step can update them in place);
# RELEASED: finished requests' slots waiting in ``RequestState.released`` to be recycled; SLOTS: slots
# given out so far (``RequestState.n``); FREE: recycled slots waiting in ``RequestState.free``.
N_ACTIVE, KV_USED, RESERVED_TOTAL, PREEMPTIONS, DONE, RELEASED, SLOTS, FREE = range(8)

# Each field's dtype and value before the request runs.
_FIELDS = {
    "plen": (np.int64, 0), "olen": (np.int64, 0),
    "first_token": (np.float64, np.nan), "finish": (np.float64, np.nan),
    "computed": (np.int64, 0),  # context positions computed toward ctx_target
    "ctx_target": (np.int64, 0),
    "generated": (np.int64, 0),
    "started": (np.bool_, False),
    "reserved": (np.int64, 0),  # GUARANTEED_NO_EVICT reservations, in blocks
    "emits": (np.int64, 0),  # decoding iterations that committed tokens
    # TensorRT-LLM py_disable_speculative_decoding: set on requests scheduled while speculation is
    # off and never cleared (the executor only ever sets it).
    "disable_spec": (np.bool_, False),
    # vLLM: the draft proposed after a request's last step, verified when it is next scheduled.
    "pending_drafted": (np.int64, 0), "pending_accepted": (np.int64, 0),
    "act": (np.int64, 0),  # the active slots, admission order, in act[:counters[N_ACTIVE]]
    "rid": (np.int64, 0),  # the request in each slot (its index in the workload)
    "kv_held": (np.int64, 0),  # KV blocks held (``KVBlockPool.held``)
    "pc_done": (np.int64, 0),  # full blocks registered in the prefix cache (``prefix_cache.register``)
    "seq_slot": (np.int64, -1),  # TensorRT-LLM's sequence slot (``SeqSlotManager``), -1 before the first schedule
}


# The fields a recycled slot starts again from: all but the active set (by position, not slot) and
# those ``add`` sets.
_RESETS = tuple((name, fill) for name, (_, fill) in _FIELDS.items()
                if name not in ("act", "rid", "plen", "olen", "ctx_target"))

#: Finished requests' slots recycled together (a step finishes one or two; a field reset over many
#: slots at once costs what one slot's scalar stores cost).
RECYCLE_AT = 256


def empty_results(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``RequestState.results`` for ``n`` requests before any ran: first-token and finish times NaN,
    generated counts 0 (what a request that never completes keeps)."""
    return np.full(n, np.nan), np.full(n, np.nan), np.zeros(n, dtype=np.int64)


class RequestState:
    """Lengths, progress and flags of the requests in ``n`` slots (room for ``capacity``), and the
    active set. ``add`` gives admitted requests slots, recycled ones first: a run holds slots for the
    requests in flight and at most ``RECYCLE_AT`` finished ones, not for every request it serves (ten
    million requests in a few hundred slots). ``results`` (first-token times, finish times and
    generated counts by request id) is where a recycled slot's request leaves its figures. Counters
    hold the active count, KV blocks in use, reserved.sum() (no sum over every request per step),
    preemptions and completions, and the room's bookkeeping. The recycled and released slots are
    arrays, so a span can give and take slots as ``add`` and ``release`` do."""

    def __init__(self, capacity: int = 1, results: Optional[tuple[np.ndarray, np.ndarray, np.ndarray]] = None) -> None:
        self.capacity = max(capacity, 1)
        for name, (dtype, fill) in _FIELDS.items():
            setattr(self, name, np.full(self.capacity, fill, dtype=dtype))
        self.counters = np.zeros(8, dtype=np.int64)
        self.results = results
        self.free = np.zeros(self.capacity, dtype=np.int64)  # recycled slots in free[:counters[FREE]], given again by ``add``
        # finished requests' slots, in finishing order, in released[:counters[RELEASED]] until recycled
        self.released = np.zeros(self.capacity, dtype=np.int64)

    @property
    def n(self) -> int:
        """Slots given out so far (the next new slot's index)."""
        return int(self.counters[SLOTS])

    @property
    def num_active(self) -> int:
        return int(self.counters[N_ACTIVE])

    def add(self, rids: list[int], prompt_lens: np.ndarray, output_lens: np.ndarray) -> list[int]:
        """Requests ``rids`` in slots (recycled ones first, then the next ones, doubling the room as
        needed), their lengths taken from the workload's ``prompt_lens`` and ``output_lens``;
        returns their slots. A new slot is given only when none is free, so at most the requests in
        flight and ``RECYCLE_AT - 1`` released ones hold slots: recycling a handful early instead
        would send a span back to Python at every admission (``open_loop.admit`` declines)."""
        c = self.counters
        free = int(c[FREE])
        take = min(len(rids), free)
        slots = self.free[free - take:free][::-1].tolist()  # popped from the end
        c[FREE] = free - take
        first = int(c[SLOTS])
        end = first + len(rids) - take
        if end > self.capacity:  # (every free slot was taken; the released ones wait on)
            while self.capacity < end:
                self.capacity *= 2
            for name, (dtype, fill) in _FIELDS.items():
                grown = np.full(self.capacity, fill, dtype=dtype)
                grown[:first] = getattr(self, name)[:first]
                setattr(self, name, grown)
            released, k = self.released, int(c[RELEASED])
            self.free, self.released = np.zeros(self.capacity, dtype=np.int64), np.zeros(self.capacity, dtype=np.int64)
            self.released[:k] = released[:k]
        c[SLOTS] = end
        slots.extend(range(first, end))
        if len(slots) <= 4:  # a step's usual one or two: scalar stores cost a third of numpy's gathers
            for slot, r in zip(slots, rids):
                self.rid[slot], self.olen[slot] = r, output_lens.item(r)
                self.plen[slot] = self.ctx_target[slot] = prompt_lens.item(r)
        else:
            ids, at = np.asarray(rids, dtype=np.int64), np.asarray(slots, dtype=np.int64)
            self.rid[at], self.plen[at], self.olen[at] = ids, prompt_lens[ids], output_lens[ids]
            self.ctx_target[at] = self.plen[at]
        return slots

    def release(self, slots: np.ndarray) -> None:
        """Finished requests' slots, to be recycled once ``RECYCLE_AT`` have finished: their figures go
        to ``results``, their fields back to a new request's."""
        k = int(self.counters[RELEASED])
        self.released[k:k + len(slots)] = slots
        self.counters[RELEASED] = k + len(slots)
        self.recycle_due()

    def recycle_due(self) -> None:
        """Recycle the released slots once ``RECYCLE_AT`` are waiting."""
        if self.counters[RELEASED] >= RECYCLE_AT:
            self._recycle()

    def _recycle(self) -> None:
        at = self.released[:self.counters[RELEASED]].copy()
        self.scatter(at)
        for name, fill in _RESETS:
            getattr(self, name)[at] = fill
        self.rid[at] = -1
        free = int(self.counters[FREE])
        self.free[free:free + len(at)] = at
        self.counters[FREE] = free + len(at)
        self.counters[RELEASED] = 0

    def scatter(self, slots: Optional[np.ndarray] = None) -> None:
        """Write the first-token times, finish times and generated counts of the requests in
        ``slots`` (every slot holding one: those recycled left theirs) into ``results``."""
        if slots is None:
            slots = np.flatnonzero(self.rid[:self.n] >= 0)
        first, finish, generated = self.results
        rids = self.rid[slots]
        first[rids], finish[rids], generated[rids] = self.first_token[slots], self.finish[slots], self.generated[slots]

    def admit(self, slots: list[int]) -> None:
        """Append requests to the active set."""
        a = int(self.counters[N_ACTIVE])
        self.act[a:a + len(slots)] = slots
        self.counters[N_ACTIVE] = a + len(slots)
