"""The run's trace and its logs, kept as growing numpy columns rather than Python objects per iteration: a
100,000-request run emits millions of chunks, and per-object overhead would dominate its memory and
time. The compiled step writes rows in place; the executor only makes room.

A log holds at most a chunk in memory (``spill.CHUNK_ROWS`` emission rows, an eighth as many of the
ten-times-wider iteration rows): when the executor makes room in a full one, its rows go to disk and
it starts again in the same arrays, between steps, so compiled code never sees them change."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Iterator, Optional

import numpy as np

from specplan import memory
from specplan.simulator import spill
from specplan.simulator.spill import Spill

_FIRST_CAPACITY = 1 << 12
_MOST_AT_FIRST = 1 << 26

#: The iteration log's columns, in order (``metrics.iteration_table``).
ITERATION_FIELDS = (
    "iteration", "start_s", "step_s", "num_active", "num_queued", "batch_rows", "gen_rows",
    "prefill_tokens", "k", "spec_on", "drafted", "accepted", "verified_tokens", "committed", "prefill_done",
    "kv_blocks_used", "charged_tokens", "kv_reserved_tokens", "verified_draft_tokens",
)
_FLOAT_FIELDS = ("start_s", "step_s")
EMISSION_FIELDS = ("request", "time", "tokens")


def _grown(a: np.ndarray, n: int, capacity: int) -> np.ndarray:
    """``a``'s first ``n`` rows in a new array of ``capacity`` rows (the rest uninitialised)."""
    out = memory.empty((capacity,) + a.shape[1:], a.dtype)
    out[:n] = a[:n]
    return out


class EmissionLog:
    """Rows of (request index, time, tokens committed) in the order the executor emitted them, which
    is simulated-time order. Columns double in capacity when full, so appends are amortised O(1).

    ``capacity`` is the rows to make room for at first: the executor gives the output tokens it
    expects (a row commits at least one), so a run seldom grows its log. Room never written costs
    no memory, while each doubling copies the log into fresh pages; it grows to ``chunk_rows`` at
    most, and a full chunk goes to disk (``n`` counts the rows in memory, ``len`` all of them)."""

    def __init__(self, capacity: int = _FIRST_CAPACITY, chunk_rows: Optional[int] = None) -> None:
        self.n = 0
        self.chunk_rows = chunk_rows = spill.CHUNK_ROWS if chunk_rows is None else chunk_rows
        capacity = min(max(capacity, 1), _MOST_AT_FIRST, chunk_rows)
        self.request = memory.empty(capacity, np.int32)
        self.time = memory.empty(capacity, np.float64)
        self.tokens = memory.empty(capacity, np.int32)
        self.spill: Optional[Spill] = None  # the chunks on disk, once there are any

    def __len__(self) -> int:
        return self.n + (self.spill.rows if self.spill else 0)

    def reserve(self, m: int) -> None:
        """Make room for ``m`` more rows after the ``n`` recorded: a full chunk goes to disk first."""
        if self.n + m > len(self.request) and self.n and len(self.request) >= self.chunk_rows:
            self.spill = self.spill or Spill("emissions")
            self.spill.write(dict(zip(EMISSION_FIELDS, self._held())))
            self.n = 0
        end = self.n + m
        if end > len(self.request):
            capacity = max(min(2 * len(self.request), self.chunk_rows), end)
            self.request, self.time, self.tokens = (_grown(a, self.n, capacity) for a in (self.request, self.time, self.tokens))

    def _held(self, names: tuple[str, ...] = EMISSION_FIELDS) -> tuple[np.ndarray, ...]:
        return tuple(getattr(self, name)[:self.n] for name in names)

    def chunks(self, names: tuple[str, ...] = EMISSION_FIELDS) -> Iterator[tuple[np.ndarray, ...]]:
        """The ``names`` columns (of ``EMISSION_FIELDS``) chunk by chunk, in the order emitted: those
        on disk, then the rows in memory (views)."""
        if self.spill:
            yield from self.spill.read(names)
        yield self._held(names)

    def columns(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Request, time and tokens columns over the rows recorded: views, not copies (the spare
        capacity was never written, so it holds no memory, and a copy of a 100k-request log is
        hundreds of megabytes of fresh pages); a log with chunks on disk reads them all back."""
        if not self.spill:
            return self._held()
        parts = list(self.chunks())
        return tuple(np.concatenate([p[i] for p in parts]) for i in range(3))


class IterationLog:
    """One row of ``ITERATION_FIELDS`` per executor iteration, in a float64 matrix (integers are exact
    below 2**53) that doubles when full; ``column`` gives each field in its own dtype.

    ``capacity`` is the rows to make room for at first (the executor's estimate of its steps): room
    never written costs no memory, while each doubling copies the log into fresh pages. It grows to
    ``chunk_rows`` at most; a full chunk goes to disk, a file per field (``n`` counts the rows in
    memory, ``len`` all of them)."""

    def __init__(self, capacity: int = _FIRST_CAPACITY, chunk_rows: Optional[int] = None) -> None:
        self.n = 0
        self.chunk_rows = chunk_rows = spill.CHUNK_ROWS // 8 if chunk_rows is None else chunk_rows
        with memory.small_pages():  # zeroed lazily: only the rows written are ever touched
            rows = min(max(capacity, _FIRST_CAPACITY), _MOST_AT_FIRST // 8, max(chunk_rows, 1))
            self.rows = np.zeros((rows, len(ITERATION_FIELDS)))
        self.spill: Optional[Spill] = None

    def __len__(self) -> int:
        return self.n + (self.spill.rows if self.spill else 0)

    def reserve(self) -> None:
        """Make room for one more row: a full chunk goes to disk first."""
        if self.n == len(self.rows):
            if self.n >= self.chunk_rows:
                self.spill = self.spill or Spill("iterations")
                self.spill.write({name: self.rows[:self.n, j] for j, name in enumerate(ITERATION_FIELDS)})
                self.n = 0
            else:
                self.rows = _grown(self.rows, self.n, min(2 * len(self.rows), max(self.chunk_rows, 1)))

    def chunks(self, names: tuple[str, ...]) -> Iterator[tuple[np.ndarray, ...]]:
        """The ``names`` fields chunk by chunk, in the order run: those on disk, then the rows in
        memory (each field in ``column``'s dtype)."""
        if self.spill:
            for values in self.spill.read(names):
                yield tuple(_typed(name, v) for name, v in zip(names, values))
        yield tuple(_typed(name, self.rows[:self.n, ITERATION_FIELDS.index(name)]) for name in names)

    def column(self, name: str) -> np.ndarray:
        """One field over the recorded iterations (float seconds, bool ``spec_on``, int64 otherwise)."""
        return np.concatenate([values for values, in self.chunks((name,))])

    __getitem__ = column  # read like a table's columns


def _typed(name: str, values: np.ndarray) -> np.ndarray:
    # An iteration field in its own dtype (the log holds float64): seconds as they are, ``spec_on``
    # bool, the counts int64.
    if name in _FLOAT_FIELDS:
        return values
    return values.astype(bool if name == "spec_on" else np.int64)


@dataclass
class Trace:
    """What one run records; turned into DataFrames by ``specplan.simulator.metrics``.

    The per-request arrays (lengths, arrival, first token, finish, generated) are filled when the
    run ends."""

    iterations: IterationLog = field(default_factory=IterationLog)
    emissions: EmissionLog = field(default_factory=EmissionLog)  # one row per emitted chunk
    accepted_hist: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    batches: list = field(default_factory=list)  # (rows, query_tokens, resident, is_prefill) per iteration, if recorded
    gate_tripped_iteration: Optional[int] = None
    gate_tripped_time: Optional[float] = None
    preemptions: int = 0
    # Every SpeculationGate sample as the path counts it: 8 bytes each (a step's), not a Python float's 32.
    gate_samples: array = field(default_factory=lambda: array("d"))
    n: int = 0
    plen: Optional[np.ndarray] = None
    olen: Optional[np.ndarray] = None
    arrival: Optional[np.ndarray] = None
    first_token: Optional[np.ndarray] = None
    finish: Optional[np.ndarray] = None
    generated: Optional[np.ndarray] = None
