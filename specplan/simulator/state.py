"""Per-request state of one executor run, as numpy arrays indexed by request (``LlmRequest`` fields)."""

from __future__ import annotations

import numpy as np


class RequestState:
    """Lengths, progress and flags of every request; shared by the loop and the scheduler."""

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
        self.reserved_total = 0  # reserved.sum(), kept up to date: no sum over every request per step
        self.emits = np.zeros(n, dtype=np.int64)  # decoding iterations that committed tokens
        # TensorRT-LLM py_disable_speculative_decoding: set on requests scheduled while speculation
        # is off and never cleared (the executor only ever sets it).
        self.disable_spec = np.zeros(n, dtype=bool)
        # vLLM: the draft proposed after a request's last step, verified when it is next scheduled.
        self.pending_drafted = np.zeros(n, dtype=np.int64)
        self.pending_accepted = np.zeros(n, dtype=np.int64)

    def resident(self, rows: np.ndarray, ctx_rows: np.ndarray) -> np.ndarray:
        """KV positions held before this step: the computed prefix, or the sequence minus its newest
        token (written by the next forward)."""
        return np.where(ctx_rows, self.computed[rows], self.plen[rows] + self.generated[rows] - 1)
