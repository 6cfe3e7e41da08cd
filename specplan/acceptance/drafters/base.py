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


def distinct_requests(requests) -> tuple[list, np.ndarray]:
    """The distinct requests by token arrays, and for each request the index of its distinct one.

    Copies of one trace request (sampling with replacement) share its token arrays, so they share
    one history and one set of precomputed tables instead of a copy each.
    """
    index: dict[tuple[int, int], int] = {}
    distinct = []
    copy_of = np.empty(len(requests), dtype=np.int64)
    for i, r in enumerate(requests):
        j = index.setdefault((id(r.prompt_ids), id(r.output_ids)), len(distinct))
        if j == len(distinct):
            distinct.append(r)
        copy_of[i] = j
    return distinct, copy_of


def shared_offsets(lengths: np.ndarray, copy_of: np.ndarray) -> np.ndarray:
    """Per request, where its distinct request's rows start in arrays concatenated over distinct requests."""
    return np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64)[copy_of]


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
        self.distinct, self.copy_of = distinct_requests(self.requests)
        histories = [r.tokens for r in self.distinct]
        self._tokens = [histories[j] for j in self.copy_of]
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
