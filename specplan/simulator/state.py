"""Per-request state of one executor run, as numpy arrays indexed by request slot (``LlmRequest``
fields), and the run's counters, shared with the compiled step."""

from __future__ import annotations

import numpy as np

# Slots of ``RequestState.counters`` (an int64 array, so the compiled step can update them in place).
N_ACTIVE, KV_USED, RESERVED_TOTAL, PREEMPTIONS, DONE = range(5)

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


class RequestState:
    """Lengths, progress and flags of the requests in ``n`` slots (room for ``capacity``), and the
    active set. Given lengths fill slot = request id; ``add`` gives the next slots to admitted
    requests instead (a fleet's replica holds its own requests only, so a step's rows lie close in
    memory). Counters hold the active count, KV blocks in use, reserved.sum() (no sum over every
    request per step), preemptions and completions."""

    def __init__(self, prompt_lens: np.ndarray, output_lens: np.ndarray, capacity: int = 0) -> None:
        n = len(prompt_lens)
        self.n = n
        self.capacity = max(n, capacity, 1)
        for name, (dtype, fill) in _FIELDS.items():
            setattr(self, name, np.full(self.capacity, fill, dtype=dtype))
        self.plen[:n], self.olen[:n], self.ctx_target[:n] = prompt_lens, output_lens, prompt_lens
        self.rid[:] = np.arange(self.capacity)
        self.counters = np.zeros(5, dtype=np.int64)

    @property
    def num_active(self) -> int:
        return int(self.counters[N_ACTIVE])

    def add(self, rids: list[int], prompt_lens: np.ndarray, output_lens: np.ndarray) -> list[int]:
        """Requests ``rids`` in the next slots (doubling the room as needed), their lengths taken from
        the workload's ``prompt_lens`` and ``output_lens``; returns their slots."""
        first, end = self.n, self.n + len(rids)
        if end > self.capacity:
            while self.capacity < end:
                self.capacity *= 2
            for name, (dtype, fill) in _FIELDS.items():
                grown = np.full(self.capacity, fill, dtype=dtype)
                grown[:first] = getattr(self, name)[:first]
                setattr(self, name, grown)
        if end - first <= 4:  # a step's usual one or two: scalar stores cost a third of numpy's gathers
            for slot, r in enumerate(rids, first):
                self.rid[slot], self.olen[slot] = r, output_lens.item(r)
                self.plen[slot] = self.ctx_target[slot] = prompt_lens.item(r)
        else:
            ids = np.asarray(rids, dtype=np.int64)
            self.rid[first:end] = ids
            self.plen[first:end], self.olen[first:end] = prompt_lens[ids], output_lens[ids]
            self.ctx_target[first:end] = self.plen[first:end]
        self.n = end
        return list(range(first, end))

    def by_request(self, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """First-token times, finish times and generated counts of requests ``0..n-1`` (NaN, NaN,
        0 for a request that never came to this state)."""
        out = np.full(n, np.nan), np.full(n, np.nan), np.zeros(n, dtype=np.int64)
        self.scatter(*out)
        return out

    def scatter(self, first: np.ndarray, finish: np.ndarray, generated: np.ndarray) -> None:
        """Write this state's first-token times, finish times and generated counts at its requests'
        ids (a fleet's replicas each fill their own requests' entries of the fleet's arrays)."""
        rids = self.rid[:self.n]
        first[rids], finish[rids], generated[rids] = self.first_token[:self.n], self.finish[:self.n], self.generated[:self.n]

    def admit(self, slots: list[int]) -> None:
        """Append requests to the active set."""
        a = int(self.counters[N_ACTIVE])
        self.act[a:a + len(slots)] = slots
        self.counters[N_ACTIVE] = a + len(slots)
