"""What every exact drafter adds to the acceptance-oracle interface: the draft tokens themselves."""

from __future__ import annotations

from abc import abstractmethod

import numpy as np

from specplan.acceptance.drafters.limits import generation_limits
from specplan.acceptance.oracles import AcceptanceOracle


def lcp(a: np.ndarray, b: np.ndarray) -> int:
    """Length of the common prefix of two token arrays."""
    n = min(len(a), len(b))
    diff = np.flatnonzero(a[:n] != b[:n])
    return int(diff[0]) if len(diff) else n


class DrafterOracle(AcceptanceOracle):
    """An acceptance oracle backed by a real drafter over the requests' token histories.

    ``propose(rid, committed, k)`` returns the draft tokens and has the same effect on drafter
    state as ``draft`` has for that row; accepted is always the common prefix of the draft and
    ``output_ids[committed:]`` (greedy verification). ``max_new_tokens`` holds each request's
    generation limit (``limits.generation_limit``) for the drafters whose engines have a rule there.
    """

    #: True when the drafter also drafts at committed == 0 (the prefill forward verifies a draft).
    drafts_at_prefill = False
    #: True when every answer comes from per-request tables (no state changes between calls).
    precomputed = False

    def __init__(self, settings, requests) -> None:
        super().__init__([r.prompt_len for r in requests], [r.output_len for r in requests])
        self.settings = settings
        self.requests = list(requests)
        self._tokens = [r.tokens for r in self.requests]
        self.max_new_tokens = generation_limits(self.requests, settings.eos_token_ids)

    @abstractmethod
    def propose(self, rid: int, committed: int, k: int) -> np.ndarray:
        """The draft tokens of request ``rid`` at history ``prompt + output[:committed]`` with budget ``k``."""

    def draft(self, rids, committed, k):
        """One ``propose`` per row in the given order (stateful drafters see rows in batch order)."""
        rids = np.asarray(rids, dtype=np.int64)
        committed = np.asarray(committed, dtype=np.int64)
        drafted = np.zeros(len(rids), dtype=np.int64)
        accepted = np.zeros(len(rids), dtype=np.int64)
        for i, (rid, c) in enumerate(zip(rids.tolist(), committed.tolist())):
            toks = self.propose(rid, c, k)
            drafted[i] = len(toks)
            accepted[i] = lcp(toks, self._tokens[rid][self.prompt_lens[rid] + c:])
        return drafted, accepted
