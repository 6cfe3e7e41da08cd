"""Per-request state of one executor run, as numpy arrays indexed by request (``LlmRequest`` fields),
and the run's counters, shared with the compiled step."""

from __future__ import annotations

import numpy as np

# Slots of ``RequestState.counters`` (an int64 array, so the compiled step can update them in place).
N_ACTIVE, KV_USED, RESERVED_TOTAL, PREEMPTIONS, DONE = range(5)


class RequestState:
    """Lengths, progress and flags of every request, and the active set in admission order."""

    def __init__(self, prompt_lens: np.ndarray, output_lens: np.ndarray) -> None:
        n = len(prompt_lens)
        self.n = n
        self.plen = prompt_lens.astype(np.int64)
        self.olen = output_lens.astype(np.int64)
        self.first_token = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.computed = np.zeros(n, dtype=np.int64)  # context positions computed toward ctx_target
        self.ctx_target = self.plen.copy()
        self.generated = np.zeros(n, dtype=np.int64)
        self.started = np.zeros(n, dtype=bool)
        self.reserved = np.zeros(n, dtype=np.int64)  # GUARANTEED_NO_EVICT reservations, in blocks
        self.emits = np.zeros(n, dtype=np.int64)  # decoding iterations that committed tokens
        # TensorRT-LLM py_disable_speculative_decoding: set on requests scheduled while speculation
        # is off and never cleared (the executor only ever sets it).
        self.disable_spec = np.zeros(n, dtype=bool)
        # vLLM: the draft proposed after a request's last step, verified when it is next scheduled.
        self.pending_drafted = np.zeros(n, dtype=np.int64)
        self.pending_accepted = np.zeros(n, dtype=np.int64)
        # The active requests, admission order, in act[:counters[N_ACTIVE]]; counters also hold the
        # KV blocks in use, reserved.sum() (no sum over every request per step), preemptions, done.
        self.act = np.zeros(max(n, 1), dtype=np.int64)
        self.counters = np.zeros(5, dtype=np.int64)

    @property
    def num_active(self) -> int:
        return int(self.counters[N_ACTIVE])

    def admit(self, rids: list[int]) -> None:
        """Append requests to the active set."""
        a = int(self.counters[N_ACTIVE])
        self.act[a:a + len(rids)] = rids
        self.counters[N_ACTIVE] = a + len(rids)
