"""The cost-model interface: the time of one executor step from its batch composition."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class StepBatch:
    """The shape of one forward: one entry per scheduled sequence.

    ``query_tokens[i]`` is the number of positions computed for sequence i in this step (a prefill
    chunk, or 1 + verified draft positions for a generation row); ``context_tokens[i]`` is the KV
    already resident for it before the step. ``is_prefill[i]`` marks context-phase rows.
    """

    query_tokens: np.ndarray
    context_tokens: np.ndarray
    is_prefill: np.ndarray

    @property
    def num_seqs(self) -> int:
        return int(self.query_tokens.shape[0])

    @property
    def num_tokens(self) -> int:
        return int(self.query_tokens.sum())

    @staticmethod
    def decode(batch_size: int, query_len: int = 1, context: int = 1024) -> "StepBatch":
        """A uniform generation batch: B rows of ``query_len`` tokens over ``context`` tokens each."""
        return StepBatch(
            query_tokens=np.full(batch_size, query_len, dtype=np.int64),
            context_tokens=np.full(batch_size, context, dtype=np.int64),
            is_prefill=np.zeros(batch_size, dtype=bool),
        )


class CostModel(ABC):
    """Prices one executor step in seconds.

    ``step_time`` covers the target forward (verification included) and the fixed per-step host
    overhead. ``draft_time`` is the drafter's cost for the step; the simulator adds it on the
    critical path (host NGram pool before the forward, SA kernel inside it).
    """

    name: str = "cost"

    @abstractmethod
    def step_time(self, batch: StepBatch) -> float:
        """Seconds for one forward over ``batch``, per-step host overhead included."""

    def draft_time(self, drafter: str, num_requests: int, k: int, pool_entries: int = 0) -> float:
        """Seconds of drafting on the critical path for ``num_requests`` rows drafting up to ``k``."""
        return 0.0

    def describe(self) -> str:
        """One line saying what this model is and where its numbers come from."""
        return self.name

    def gamma(self, batch_size: int, k: int, context: int = 1024) -> float:
        """gamma(B, K) = (T(B, 1+K) - T(B, 1)) / (K * T(B, 1)), derived from step_time, never fitted."""
        t1 = self.step_time(StepBatch.decode(batch_size, 1, context))
        tk = self.step_time(StepBatch.decode(batch_size, 1 + k, context))
        return (tk - t1) / (k * t1)
