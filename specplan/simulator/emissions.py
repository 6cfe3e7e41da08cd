"""The per-chunk emission log of a run, kept as growing numpy columns rather than one Python tuple of
arrays per iteration: a 100,000-request run emits millions of chunks, and per-object overhead would
dominate its memory."""

from __future__ import annotations

import numpy as np

_FIRST_CAPACITY = 1 << 12


class EmissionLog:
    """Rows of (request index, time, tokens committed) in the order the executor emitted them, which
    is simulated-time order. Columns double in capacity when full, so appends are amortised O(1)."""

    def __init__(self) -> None:
        self._n = 0
        self._request = np.empty(_FIRST_CAPACITY, dtype=np.int32)
        self._time = np.empty(_FIRST_CAPACITY, dtype=np.float64)
        self._tokens = np.empty(_FIRST_CAPACITY, dtype=np.int32)

    def __len__(self) -> int:
        return self._n

    def append(self, requests: np.ndarray, time: float, tokens: np.ndarray) -> None:
        """Record one iteration's chunks: ``tokens[i]`` committed to request ``requests[i]`` at ``time``."""
        m = len(requests)
        end = self._n + m
        if end > len(self._request):
            capacity = max(2 * len(self._request), end)
            self._request, self._time, self._tokens = (np.resize(a, capacity) for a in
                                                       (self._request, self._time, self._tokens))
        self._request[self._n:end] = requests
        self._time[self._n:end] = time
        self._tokens[self._n:end] = tokens
        self._n = end

    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Request, time and tokens columns, trimmed to the rows recorded (the spare capacity is freed)."""
        if len(self._request) != self._n:
            self._request, self._time, self._tokens = (a[:self._n].copy() for a in
                                                       (self._request, self._time, self._tokens))
        return self._request, self._time, self._tokens
