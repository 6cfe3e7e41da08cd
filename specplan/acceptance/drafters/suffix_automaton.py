"""TensorRT-LLM's suffix automaton (SA) drafter, and the automaton kernels the n-gram drafters share.

Engine semantics (TRT ``_torch/speculative/suffix_automaton.py`` and the SA kernels, SEMANTICS.md §2):

- ``max_matching_ngram_size = -1`` (``lookup()``): the longest suffix of the history that also ends
  at an earlier position (occurrences may overlap the final one); ``pos`` is the end of its
  **earliest** occurrence (a clone copies ``pos`` from the state it splits).
- ``n > 0`` (``extend_ngram``): ``lookupFixed(n)``, ``lookupFixed(n-1)``, ... 1, the first size that
  occurs earlier; again the earliest occurrence of that size.
- The draft is ``tokens[pos+1 : pos+1+K]``, cut at the end of the history. Standalone SA has no
  threshold and no truncation to the remaining length: a match always drafts.

Because the history of a request only grows, every history length L needs the same automaton built
one token further, so one online build over the request answers all positions: after appending
token L-1 the new state's suffix link is the longest suffix occurring earlier, its length is the match
length and its ``firstpos`` the earliest end. That is the fast path (``scan_longest``), shared by
vLLM's n-gram proposer (the same match with a ``[min_n, max_n]`` window) and HF's prompt lookup.

The global pool (``enable_global_pool``) is cross-request state and runs online (``SAGlobalPoolOracle``).
"""

from __future__ import annotations

from collections import deque

import numpy as np
from numba import njit

from specplan.errors import SpecplanError
from specplan.acceptance.drafters._hashtable import ht_get, ht_put, table_capacity
from specplan.acceptance.drafters.settings import DrafterSettings
from specplan.config_rules import SA_GLOBAL_MATCH_CAP
from specplan.acceptance.drafters.base import DrafterOracle, lcp
from specplan.acceptance.drafters.table import TableOracle, match_table

# Rows of the state array and of the edge array.
LEN, LINK, FPOS, EHEAD = 0, 1, 2, 3
ETOK, ENEXT = 0, 1


@njit(cache=True)
def sam_capacity(n_tokens):
    """(states, transitions) an automaton over ``n_tokens`` tokens can need: at most 2n-1 states plus
    the root, and 3n-4 transitions (for n >= 3), with room to spare."""
    return 2 * n_tokens + 2, 3 * n_tokens + 4


@njit(cache=True)
def sam_new(n_tokens):
    """Empty automaton storage for ``n_tokens`` tokens: (states, edges, hash keys, hash values, counters).

    Transitions live in one hash table keyed by ``state << 31 | token``; each state also keeps a
    list of its tokens so that a clone can copy the transitions of the state it splits.
    """
    ns, ne = sam_capacity(n_tokens)
    st = np.full((4, ns), -1, dtype=np.int32)
    ed = np.empty((2, ne), dtype=np.int32)
    cap = table_capacity(ne)
    hk = np.full(cap, -1, dtype=np.int64)
    hv = np.full(cap, -1, dtype=np.int32)
    meta = np.zeros(2, dtype=np.int64)  # [states used, edges used]
    return st, ed, hk, hv, meta


@njit(cache=True)
def _take(meta, i, limit):
    """The next id of counter ``i`` (0: states, 1: transitions), refused past the storage's ``limit``
    (a shared arena sized from the requests' tokens would otherwise be overrun silently)."""
    x = meta[i]
    if x >= limit:
        raise IndexError("suffix automaton: more states or transitions than its storage holds")
    meta[i] += 1
    return x


@njit(cache=True)
def sam_root(st, meta):
    """Allocate a root state (an empty automaton) and return its id."""
    r = _take(meta, 0, st.shape[1])
    st[LEN, r] = 0
    st[LINK, r] = -1
    st[FPOS, r] = -1
    st[EHEAD, r] = -1
    return r


@njit(cache=True)
def _add_edge(st, ed, meta, s, c):
    e = _take(meta, 1, ed.shape[1])
    ed[ETOK, e] = c
    ed[ENEXT, e] = st[EHEAD, s]
    st[EHEAD, s] = e


@njit(cache=True)
def sam_extend(st, ed, hk, hv, meta, root, last, c):
    """Append token ``c`` to the text whose whole-text state is ``last``; returns the new whole-text state.

    The classic online construction, with ``firstpos`` (the end of the earliest occurrence) kept per
    state: a new state ends at the new position, a clone inherits it from the state it splits.
    """
    cur = _take(meta, 0, st.shape[1])
    st[LEN, cur] = st[LEN, last] + 1
    st[FPOS, cur] = st[LEN, cur] - 1
    st[EHEAD, cur] = -1
    st[LINK, cur] = -1
    p = last
    while p != -1:
        key = (np.int64(p) << 31) | c
        if ht_get(hk, hv, key) != -1:
            break
        ht_put(hk, hv, key, cur)
        _add_edge(st, ed, meta, p, c)
        p = st[LINK, p]
    if p == -1:
        st[LINK, cur] = root
        return cur
    q = ht_get(hk, hv, (np.int64(p) << 31) | c)
    if st[LEN, p] + 1 == st[LEN, q]:
        st[LINK, cur] = q
        return cur
    clone = _take(meta, 0, st.shape[1])
    st[LEN, clone] = st[LEN, p] + 1
    st[FPOS, clone] = st[FPOS, q]
    st[LINK, clone] = st[LINK, q]
    st[EHEAD, clone] = -1
    e = st[EHEAD, q]
    while e != -1:
        t = ed[ETOK, e]
        ht_put(hk, hv, (np.int64(clone) << 31) | t, ht_get(hk, hv, (np.int64(q) << 31) | t))
        _add_edge(st, ed, meta, clone, t)
        e = ed[ENEXT, e]
    while p != -1:
        key = (np.int64(p) << 31) | c
        if ht_get(hk, hv, key) != q:
            break
        ht_put(hk, hv, key, clone)
        p = st[LINK, p]
    st[LINK, q] = clone
    st[LINK, cur] = clone
    return cur


@njit(cache=True, inline="always")
def state_with_length(st, s, n):
    """Walk suffix links from ``s`` to the state whose length interval holds ``n`` (1 <= n <= len(s))."""
    while st[LEN, st[LINK, s]] >= n:
        s = st[LINK, s]
    return s


@njit(cache=True)
def scan_longest(tokens, l_lo, l_hi, cap, min_n):
    """For every history length L in [l_lo, l_hi]: the match length and the draft source position.

    The match is the longest suffix of ``tokens[:L]`` of length n <= ``cap`` (no cap when cap <= 0)
    that also ends before L-1; its earliest occurrence ends at ``e`` and the draft starts at
    ``e + 1`` (< L). Lengths under ``min_n`` count as no match (source -1).
    """
    m = l_hi - l_lo + 1
    ell = np.zeros(m, dtype=np.int32)
    src = np.full(m, -1, dtype=np.int32)
    st, ed, hk, hv, meta = sam_new(l_hi)
    root = sam_root(st, meta)
    last = root
    lo = max(min_n, 1)
    for i in range(l_hi):
        last = sam_extend(st, ed, hk, hv, meta, root, last, tokens[i])
        L = i + 1
        if L < l_lo:
            continue
        s = st[LINK, last]
        n = st[LEN, s]
        if cap > 0 and n > cap:
            n = cap
        if n >= lo:
            s = state_with_length(st, s, n)
            ell[L - l_lo] = n
            src[L - l_lo] = st[FPOS, s] + 1
    return ell, src


def sa_tables(req, settings: DrafterSettings, cap: int | None = None) -> dict:
    """Per-position matches of standalone SA for one request (committed 0 .. output_len-1).

    ``cap`` overrides the match-length cap (the global pool caps its own-slot match at 64 tokens).
    """
    n = settings.ngram_size if cap is None else cap
    P, O = req.prompt_len, req.output_len
    tokens = req.tokens
    ell, src = scan_longest(tokens, P, P + O - 1, n, 1)
    return match_table(tokens, P, ell, src)


class SAOracle(TableOracle):
    """Standalone SA (no global pool): drafted = min(K, tokens after the match), no remaining-length cut."""

    def __init__(self, settings: DrafterSettings, requests, cache=None) -> None:
        super().__init__(settings, requests, lambda r: sa_tables(r, settings), cache)

    def draft_with_match(self, rids, committed, k):
        """``draft`` plus the match length per row (what the SA enhancer compares to its threshold)."""
        drafted, accepted = self.draft(rids, committed, k)
        rids = np.asarray(rids, dtype=np.int64)
        committed = np.asarray(committed, dtype=np.int64)
        idx = self._index(rids, np.minimum(committed, self.output_lens[rids] - 1))
        return drafted, accepted, np.where(self._src[idx] >= 0, self._ell[idx], 0).astype(np.int64)


# ---------------------------------------------------------------------------------------------
# Global pool: one automaton per slot in a shared arena, queried with matching statistics.


@njit(cache=True)
def _extend_many(st, ed, hk, hv, meta, root, last, tokens):
    for i in range(tokens.shape[0]):
        last = sam_extend(st, ed, hk, hv, meta, root, last, tokens[i])
    return last


@njit(cache=True)
def _match_in_slot(st, hk, hv, root, text_len, query):
    """Longest suffix of ``query`` that occurs in the slot's text with a token after it; (length, end).

    Matching statistics over the slot's automaton give the longest suffix of the query that occurs
    anywhere; if its occurrences all end at the text's last token there is nothing to copy, so
    shorter suffixes (suffix-link ancestors, whose earliest end can only be earlier) are tried.
    """
    s = root
    length = 0
    for i in range(query.shape[0]):
        c = query[i]
        while True:
            nxt = ht_get(hk, hv, (np.int64(s) << 31) | c)
            if nxt != -1:
                s = nxt
                length += 1
                break
            if s == root:
                length = 0
                break
            s = st[LINK, s]
            length = st[LEN, s]
    while s != root and st[FPOS, s] > text_len - 2:
        s = st[LINK, s]
        length = st[LEN, s]
    if s == root:
        return 0, -1
    return length, st[FPOS, s]


@njit(cache=True)
def _best_other_slot(st, hk, hv, roots, lens, slots, query):
    """Best match among other slots: longest, then most tokens after it, then lowest slot index."""
    best_m, best_slot, best_end, best_cont = 0, -1, -1, -1
    for j in range(roots.shape[0]):
        m, end = _match_in_slot(st, hk, hv, roots[j], lens[j], query)
        if m == 0:
            continue
        cont = lens[j] - end - 1
        if (m > best_m or (m == best_m and (cont > best_cont or (cont == best_cont and slots[j] < best_slot)))):
            best_m, best_slot, best_end, best_cont = m, slots[j], end, cont
    return best_m, best_slot, best_end


class SAGlobalPoolOracle(TableOracle):
    """SA with ``enable_global_pool``: every request searches all slots (its own included).

    Reading of the engine (the SADecodingConfig docstrings; the kernel source was not available):

    - ``global_pool_size`` slots (default max(64, max_batch_size), at most 1024). A request takes a
      slot when first seen (its first context chunk in the engine); the lowest free slot first, else
      the slot of the oldest completed request is cleared and reused (evicted oldest-first). When
      every slot belongs to an in-flight request the engine's ``_allocate_slot`` raises, and so
      does this oracle.
    - The query is the request's history suffix, capped at 64 tokens (or at n in n-gram mode).
      In every slot the longest suffix of it that occurs with at least one token after it, earliest
      occurrence (in its own slot: earlier than the final position). The winner is the longest
      match, then the request's own slot, then the most tokens after the match, then the lowest
      slot index (the same reading as ``tests/sa_reference.py`` for the CUDA kernel).
    - Slots hold committed tokens only; all of an iteration's commits are in the pool before the
      next iteration's drafts (the extend kernel runs before the lookup).
    - The draft is the winning text after the match, up to K tokens, cut at that text's end.
    """

    precomputed = False  # the own-slot match is precomputed; the pool is online

    def __init__(self, settings: DrafterSettings, requests, max_batch_size: int, cache=None) -> None:
        self.cap = settings.ngram_size if settings.ngram_size > 0 else SA_GLOBAL_MATCH_CAP
        super().__init__(settings, requests, lambda r: sa_tables(r, settings, cap=self.cap), cache)
        self.num_slots = settings.pool_slots(max_batch_size)
        total = int(sum(r.prompt_len + r.output_len for r in requests))
        ns, ne = sam_capacity(total)
        ns += len(requests)
        self._st = np.full((4, ns), -1, dtype=np.int32)
        self._ed = np.empty((2, ne), dtype=np.int32)
        self._hk = np.full(table_capacity(ne), -1, dtype=np.int64)
        self._hv = np.full(self._hk.shape[0], -1, dtype=np.int32)
        self._meta = np.zeros(2, dtype=np.int64)
        self._slot_of: dict[int, int] = {}
        self._owner = np.full(self.num_slots, -1, dtype=np.int64)
        self._root = np.full(self.num_slots, -1, dtype=np.int64)
        self._last = np.full(self.num_slots, -1, dtype=np.int64)
        self._len = np.zeros(self.num_slots, dtype=np.int64)
        self._free = list(range(self.num_slots))  # kept sorted: lowest free slot first
        self._retained: deque[int] = deque()  # slots of completed requests, oldest completion first
        self.evictions = 0

    def _allocate(self, rid: int) -> int:
        if self._free:
            slot = self._free.pop(0)
        elif self._retained:
            slot = self._retained.popleft()
            del self._slot_of[int(self._owner[slot])]
            self.evictions += 1
        else:
            raise SpecplanError(
                f"SA global pool: all {self.num_slots} slots hold in-flight requests (global_pool_size); "
                "TensorRT-LLM's _allocate_slot fails here too")
        self._slot_of[rid] = slot
        self._owner[slot] = rid
        self._root[slot] = sam_root(self._st, self._meta)
        self._last[slot] = self._root[slot]
        self._len[slot] = 0
        return slot

    def _sync(self, rid: int, committed: int) -> int:
        """Make the request's slot hold prompt + output[:committed]; returns the slot."""
        slot = self._slot_of.get(rid)
        if slot is None:
            slot = self._allocate(rid)
        want = self.prompt_lens[rid] + committed
        if self._len[slot] < want:
            new = self._tokens[rid][self._len[slot]:want]
            self._last[slot] = _extend_many(self._st, self._ed, self._hk, self._hv, self._meta,
                                            self._root[slot], self._last[slot], new)
            self._len[slot] = want
        return slot

    def on_commit(self, rids, committed) -> None:
        for rid, c in zip(np.asarray(rids).tolist(), np.asarray(committed).tolist()):
            self._sync(rid, c)

    def on_finish(self, rids) -> None:
        for rid in np.asarray(rids).tolist():
            slot = self._slot_of.get(rid)
            if slot is not None:
                self._sync(rid, int(self.output_lens[rid]))
                self._retained.append(slot)

    def propose(self, rid: int, committed: int, k: int) -> np.ndarray:
        return self._lookup(rid, committed, k)[0]

    def draft_with_match(self, rids, committed, k):
        """``draft`` plus the match length per row (what the SA enhancer compares to its threshold)."""
        n = len(rids)
        drafted, accepted, match = (np.zeros(n, dtype=np.int64) for _ in range(3))
        for i, (rid, c) in enumerate(zip(np.asarray(rids).tolist(), np.asarray(committed).tolist())):
            toks, match[i] = self._lookup(rid, c, k)  # one search of the pool per row
            drafted[i] = len(toks)
            accepted[i] = lcp(toks, self._tokens[rid][self.prompt_lens[rid] + c:])
        return drafted, accepted, match

    def _lookup(self, rid: int, committed: int, k: int) -> tuple[np.ndarray, int]:
        """The draft tokens and the match length they come from."""
        if k <= 0 or committed >= self.output_lens[rid]:
            return np.empty(0, dtype=np.int32), 0
        own_slot = self._sync(rid, committed)
        L = int(self.prompt_lens[rid] + committed)
        tokens = self._tokens[rid]
        j = self._index(rid, committed)
        own_m, own_src = int(self._ell[j]), int(self._src[j])
        others = np.flatnonzero(self._owner >= 0)
        others = others[others != own_slot]
        query = tokens[max(0, L - self.cap):L]
        m, slot, end = 0, -1, -1
        if len(others):
            m, slot, end = _best_other_slot(self._st, self._hk, self._hv, self._root[others], self._len[others],
                                            others, query)
        if own_m > 0 and own_m >= m:
            return tokens[own_src:min(own_src + k, L)], own_m
        if m == 0:
            return np.empty(0, dtype=np.int32), 0
        text = self._tokens[int(self._owner[slot])]
        return text[end + 1:min(end + 1 + k, int(self._len[slot]))], m

    def draft(self, rids, committed, k):
        return DrafterOracle.draft(self, rids, committed, k)

    def metrics(self) -> dict:
        return {"global_pool_slots": self.num_slots, "global_pool_evictions": self.evictions,
                "global_pool_retained": len(self._retained)}
