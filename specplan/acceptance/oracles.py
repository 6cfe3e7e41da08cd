"""Acceptance oracles: what the drafter proposes and how much of it the target accepts.

The simulator asks an oracle once per iteration for all scheduled generation rows that speculate.
Each row is a request index and its committed output length; the oracle answers how many tokens
were drafted (<= k) and how many of them were accepted (<= drafted). Parametric oracles draw from
a distribution with one random stream per request, so a request's outcomes do not depend on what
else is in the batch. The exact drafters (``specplan.acceptance.drafters``) implement the same
interface from real token histories.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Sequence

import numpy as np
from numba import njit


class AcceptanceOracle(ABC):
    """Interface between the executor loop and whatever decides acceptance.

    Requests are identified by their index in the workload list given at construction.
    ``committed`` is the number of output tokens the request has committed so far, so the history a
    drafter sees is ``prompt + output[:committed]``.
    """

    #: True when the drafter also proposes on the chunk that completes a prompt (HF prompt lookup:
    #: the prefill forward verifies a draft built from the prompt).
    drafts_at_prefill = False

    #: True when everything the oracle keeps is per request (no pools across requests): a fleet's
    #: replicas can then share one instance, since each request is only ever on one replica.
    per_request_state = False

    def __init__(self, prompt_lens: Sequence[int], output_lens: Sequence[int]) -> None:
        self.prompt_lens = np.asarray(prompt_lens, dtype=np.int64)
        self.output_lens = np.asarray(output_lens, dtype=np.int64)

    @abstractmethod
    def draft(self, rids: np.ndarray, committed: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Return ``(drafted, accepted)`` arrays, one entry per row, with 0 <= accepted <= drafted <= k."""

    def on_commit(self, rids: np.ndarray, committed: np.ndarray) -> None:
        """Called after every iteration with the new committed counts of the rows that produced tokens.

        Stateful drafters (public pools, global trees) update their cross-request state here, in
        the simulated order of commits.
        """

    def on_finish(self, rids: np.ndarray) -> None:
        """Called when requests complete (private pools are freed, global pools keep them)."""

    def metrics(self) -> dict:
        """Drafter-specific summary figures (pool sizes, hit rates), merged into the run summary."""
        return {}

    def state_size(self, rids: np.ndarray, committed: np.ndarray) -> int:
        """What drafting cost scales with (``CostModel.draft_time``'s ``pool_entries``): by default the
        mean history length of the drafting rows, i.e. the suffix automaton's size."""
        # The integer floor of the exact mean (what int(mean()) gives for these sizes), without numpy's mean.
        return int((self.prompt_lens[rids] + committed).sum()) // len(rids) if len(rids) else 0

    def remaining_draft_budget(self, rids: np.ndarray, committed: np.ndarray, k: int) -> np.ndarray:
        """TensorRT-LLM's truncation: at most ``max_seq_len - 1 - len(history)`` = output_len - committed - 1."""
        return draft_budget(self.output_lens, rids, committed, k)


@njit(cache=True)
def draft_budget(output_lens, rids, committed, k):
    """``AcceptanceOracle.remaining_draft_budget`` per row: ``min(k, output_len - committed - 1)``, at least 0."""
    out = np.empty(len(rids), dtype=np.int64)
    for i in range(len(rids)):
        out[i] = _budget(k, output_lens[rids[i]], committed[i])
    return out


@njit(cache=True)
def _budget(k, output_len, committed):
    return max(min(k, output_len - committed - 1), 0)


_OFFSET, _STEPS = range(2)  # the columns of ``_PerRequestUniforms._meta``


class _PerRequestUniforms:
    """A fixed block of uniforms per request, indexed by that request's speculative step count.

    Request r owns ``u[offset[r] : offset[r] + output_len[r]]`` (a request takes at most one step per
    output token). Its i-th speculative step always uses the same value, whatever the batch around
    it, so runs that differ only in scheduling see identical per-request acceptance sequences, and
    the lookup is one compiled pass per iteration. A request's offset and step count are one row of
    ``_meta`` (its block size and output length come from the output lengths it was given): 16 bytes
    a request, held for every request of the run.
    """

    def __init__(self, seed: int, output_lens: np.ndarray) -> None:
        self._olen = np.asarray(output_lens, dtype=np.int64)  # the oracle's own array, not a copy
        sizes = np.maximum(self._olen, 1)
        self._meta = np.zeros((len(sizes), 2), dtype=np.int64)
        np.cumsum(sizes[:-1], out=self._meta[1:, _OFFSET])
        self._seed = seed
        self._total = int(sizes.sum())
        # The uniforms from ``_base``, drawn when first needed (a run without speculation never
        # asks): a window of the stream around the requests drafting, not the whole of it (4 bytes
        # an output token: 0.6 GB for a million requests).
        self._u, self._base = np.zeros(0, dtype=np.float32), 0

    def draft(self, rids: np.ndarray, committed: np.ndarray, k: int, survival: np.ndarray):
        """Each row's drafted count (``draft_budget``'s rule) and accepted count: how many of the
        first ``k`` of ``survival`` its next uniform is below, capped at drafted (the inverse-CDF
        draw of the accepted prefix); one compiled pass."""
        drafted, accepted, lo, hi = _draw_accepted(rids, committed, k, survival, self._u, self._base, self._meta,
                                                   self._olen)
        if len(drafted) == len(rids):
            return drafted, accepted
        self._window(lo, hi)
        return _draw_accepted(rids, committed, k, survival, self._u, self._base, self._meta, self._olen)[:2]

    def cover(self, rids: np.ndarray) -> bool:
        """Draw the window again, where it does not hold every uniform of requests ``rids``, so that
        it does (the compiled spans draw from it without leaving); True if it was drawn."""
        if not len(rids):
            return False
        lo, hi = _blocks(rids, self._meta, self._olen)
        if self._base <= lo and hi <= self._base + len(self._u):
            return False
        self._window(lo, hi)
        return True

    def _window(self, lo: int, hi: int) -> None:
        # The stream's uniforms lo..hi and on, as one draw of them all would give them: the float32
        # draws take 32-bit halves of the generator's 64-bit words, low half first, so value i is
        # word i // 2's, reached by advancing the generator (the same values, bit for bit).
        end = min(self._total, hi + _WINDOW)  # room ahead: a window ending at hi would be drawn again next step
        bits = np.random.default_rng(self._seed).bit_generator
        bits.advance(lo // 2)
        self._u = np.random.Generator(bits).random(end - lo + lo % 2, dtype=np.float32)[lo % 2:]
        self._base = lo


_WINDOW = 1 << 22  # uniforms drawn at a time (16 MiB)


@njit(cache=True)
def _draw_accepted(rids, committed, k, survival, u, base, meta, olen):
    # Drafted and accepted per row; when a row's uniforms lie outside u (from ``base``), nothing is
    # drawn: two empty arrays and the span of offsets the rows need.
    lo, hi = _blocks(rids, meta, olen)
    if len(rids) and (lo < base or hi > base + len(u)):
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64), lo, hi
    drafted, accepted = np.empty(len(rids), dtype=np.int64), np.empty(len(rids), dtype=np.int64)
    for i in range(len(rids)):
        drafted[i], accepted[i] = survival_draw(u, base, meta, olen, survival, k, rids[i], committed[i])
    return drafted, accepted, lo, hi


@njit(cache=True)
def _blocks(rids, meta, olen):
    # The offsets from the first of the requests' uniforms to one past their last (a request's block
    # holds max(output_len, 1)).
    lo, hi = np.iinfo(np.int64).max, 0
    for i in range(len(rids)):
        m = meta[rids[i]]
        lo, hi = min(lo, m[_OFFSET]), max(hi, m[_OFFSET] + max(olen[rids[i]], 1))
    return lo, hi


@njit(cache=True)
def in_window(base, size, meta, olen, rid):
    """Whether a window of ``size`` uniforms from offset ``base`` holds every one of request ``rid``'s."""
    lo = meta[rid, _OFFSET]
    return base <= lo and lo + max(olen[rid], 1) <= base + size


@njit(cache=True)
def survival_draw(u, base, meta, olen, survival, k, rid, committed):
    """Request ``rid``'s next speculative step at ``committed`` tokens, its uniforms in ``u`` (from
    offset ``base``): (drafted, accepted), the step counted in ``meta``. Also what the compiled
    spans draw (``draft_span.oracle_draft``)."""
    m, output_len = meta[rid], olen[rid]
    drafted = _budget(k, output_len, committed)
    x = u[m[_OFFSET] - base + min(m[_STEPS], max(output_len, 1) - 1)]
    m[_STEPS] += 1
    hits = 0
    for j in range(min(k, len(survival))):
        if x < survival[j]:
            hits += 1
    return drafted, min(hits, drafted)


class SurvivalOracle(AcceptanceOracle):
    """Acceptance from a survival curve S_i = P(accepted >= i), i = 1..K_max.

    With one uniform u per step, ``accepted = #{i <= drafted : u < S_i}``; since S is
    non-increasing this is the inverse-CDF draw of the accepted-prefix length, capped at drafted.
    Positions past the end of the curve are never accepted.
    """

    per_request_state = True  # one uniform stream and step count per request

    def __init__(self, survival: np.ndarray, prompt_lens, output_lens, seed: int) -> None:
        super().__init__(prompt_lens, output_lens)
        survival = np.asarray(survival, dtype=float)
        if survival.ndim != 1 or np.any(np.diff(survival) > 1e-12) or np.any((survival < 0) | (survival > 1)):
            raise ValueError("survival curve must be non-increasing values in [0, 1]")
        self.survival = survival
        self._uniforms = _PerRequestUniforms(seed, self.output_lens)

    def draft(self, rids, committed, k):
        if k <= 0 or len(rids) == 0:
            drafted = self.remaining_draft_budget(rids, committed, k)
            return drafted, np.zeros_like(drafted)
        return self._uniforms.draft(rids, committed, k, self.survival)


def alpha_oracle(alpha: float, prompt_lens, output_lens, seed: int, max_k: int = 64) -> SurvivalOracle:
    """i.i.d. per-position acceptance alpha: S_i = alpha^i."""
    return SurvivalOracle(alpha ** np.arange(1, max_k + 1), prompt_lens, output_lens, seed)


def per_position_oracle(conditional: Sequence[float], prompt_lens, output_lens, seed: int) -> SurvivalOracle:
    """Conditional rates a_1..a_K (a_i = P(accept i | accepted i-1)): S_i = prod_{j<=i} a_j.

    Positions past the vector are never accepted (the vector defines K_max).
    """
    cond = np.asarray(conditional, dtype=float)
    return SurvivalOracle(np.cumprod(cond), prompt_lens, output_lens, seed)


def length_dist_oracle(probs: Sequence[float], prompt_lens, output_lens, seed: int) -> SurvivalOracle:
    """Empirical distribution of the accepted count: probs[a] = P(accepted = a), a = 0..K_max.

    Acceptance length is 1 + accepted. When fewer tokens are drafted the draw is capped (a shorter
    draft cannot accept more than it proposed).
    """
    p = np.asarray(probs, dtype=float)
    p = p / p.sum()
    survival = 1.0 - np.cumsum(p)[:-1]  # S_i = P(A >= i) for i = 1..K_max
    return SurvivalOracle(np.clip(survival, 0.0, 1.0), prompt_lens, output_lens, seed)
