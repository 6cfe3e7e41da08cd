"""TensorRT-LLM's NGram pool drafter (``_torch/speculative/ngram.py``, ``NGramPoolManager``), exactly.

``get_draft_tokens(prefix, rid, max_sequence_length)`` with K = ``max_total_draft_tokens`` (the
current K) and N = ``max_matching_ngram_size``:

1. ``rem = max_sequence_length - 1 - len(prefix)``; ``rem <= 0`` returns [] before touching the pool.
   ``max_sequence_length`` is prompt_len + the request's generation limit (``limits``): no draft when
   one token is left, and drafts cut to ``rem`` before that.
2. A request seen for the first time starts at ``start_index = 0`` (the lazy scan of the whole prefix).
3. Update: for size = min(N, L-1) .. 1 and each window of ``seq = prefix[start:]``: pattern = the
   window, match = up to K following tokens of ``seq``. A new pattern (or, with ``is_keep_all``
   off, a match longer than the oldest one) replaces the set; otherwise a match not yet in the set
   first removes the shorter ones (iterating the ``OrderedSet`` while removing from it, so the
   element after each removed one is skipped and survives) and is appended.
4. Lookup from size min(N, L-1) down: the first pattern in the pool gives its oldest match
   (``is_use_oldest``) or newest, cut to ``rem``. No fallback to a shorter key.
5. ``start_index = max(0, L - (K + N - 1))``.

The pool is path dependent: it changes only at the positions where drafting happened, with the K
of that call. With a private pool and a fixed K a request's whole trajectory (draft, accept a,
commit a+1, draft again) is precomputed once; a call off that trajectory (another K, a skipped
iteration) replays the request's calls so far into a live pool and continues online. The public
pool is shared by all requests in the simulated order of calls, never freed, and always online.

Patterns and matches are token windows; the kernels work on integer ids that are equal exactly when
the windows' tokens are (a trie over window prefixes), so sets compare by content as tuples do.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from specplan.acceptance.drafters._hashtable import ht_get, ht_put, grown_table, table_capacity
from specplan.acceptance.drafters.base import DrafterOracle, shared_offsets
from specplan.acceptance.drafters.cache import DEFAULT_CACHE
from specplan.acceptance.drafters.limits import generation_limit
from specplan.acceptance.drafters.settings import DrafterSettings

# Rows of the entry array: match id, match length, where its tokens start in the token buffer, next entry.
E_MID, E_LEN, E_SRC, E_NEXT = 0, 1, 2, 3
# Counters: entries allocated, patterns present, entries present, sum of pattern lengths, sum of
# match lengths, member-table keys used.
M_ALLOC, M_PATTERNS, M_ENTRIES, M_PLEN, M_MLEN, M_KEYS = range(6)


@njit(cache=True)
def window_ids(tokens, bounds, width):
    """``ids[a, m-1]``: an id of the window ``tokens[a:a+m]`` (m <= width), equal iff the tokens are.

    Windows stop at the end of their request (``bounds`` holds each request's [start, end)); past
    it the id is -1. Ids are trie nodes over window prefixes, so they are dense and start at 1.
    """
    n = tokens.shape[0]
    ids = np.full((n, width), -1, dtype=np.int32)
    cap = table_capacity(n * width + 1)
    hk = np.full(cap, -1, dtype=np.int64)
    hv = np.full(cap, -1, dtype=np.int32)
    next_id = 1
    for b in range(bounds.shape[0]):
        lo, hi = bounds[b, 0], bounds[b, 1]
        for a in range(lo, hi):
            node = 0
            for m in range(width):
                if a + m >= hi:
                    break
                key = (np.int64(node) << 31) | tokens[a + m]
                child = ht_get(hk, hv, key)
                if child == -1:
                    child = next_id
                    next_id += 1
                    ht_put(hk, hv, key, child)
                node = child
                ids[a, m] = node
    return ids, next_id


@njit(cache=True)
def _unlink_all(head, tail, ent, mk, mv, meta, pid):
    e = head[pid]
    while e != -1:
        ht_put(mk, mv, (np.int64(pid) << 31) | ent[E_MID, e], -1)
        meta[M_ENTRIES] -= 1
        meta[M_MLEN] -= ent[E_LEN, e]
        e = ent[E_NEXT, e]
    head[pid] = -1
    tail[pid] = -1


@njit(cache=True)
def with_room(ent, mk, mv, meta, n_new):
    """The entry array and member table, grown (copied) where ``n_new`` more would not fit."""
    need = meta[M_ALLOC] + n_new
    if need > ent.shape[1]:
        ent = np.concatenate((ent, np.empty((4, max(need - ent.shape[1], ent.shape[1])), dtype=np.int32)), axis=1)
    mk, mv = grown_table(mk, mv, meta[M_KEYS] + n_new)
    return ent, mk, mv


@njit(cache=True)
def _append(head, tail, ent, mk, mv, meta, pid, mid, mlen, src):
    e = meta[M_ALLOC]
    if e >= ent.shape[1] or 2 * (meta[M_KEYS] + 1) > mk.shape[0]:
        raise IndexError("NGram pool: more entries than reserved (with_room)")
    meta[M_ALLOC] += 1
    ent[E_MID, e] = mid
    ent[E_LEN, e] = mlen
    ent[E_SRC, e] = src
    ent[E_NEXT, e] = -1
    if head[pid] == -1:
        head[pid] = e
    else:
        ent[E_NEXT, tail[pid]] = e
    tail[pid] = e
    meta[M_KEYS] += ht_put(mk, mv, (np.int64(pid) << 31) | mid, e)
    meta[M_ENTRIES] += 1
    meta[M_MLEN] += mlen


@njit(cache=True)
def _insert(head, tail, ent, mk, mv, meta, keep_all, pid, plen, mid, mlen, src):
    if tail[pid] == -2:  # tail -2 marks a pattern never seen: "pattern not in pool"
        meta[M_PATTERNS] += 1
        meta[M_PLEN] += plen
        tail[pid] = -1
        _append(head, tail, ent, mk, mv, meta, pid, mid, mlen, src)
        return
    if not keep_all and mlen > ent[E_LEN, head[pid]]:
        _unlink_all(head, tail, ent, mk, mv, meta, pid)
        _append(head, tail, ent, mk, mv, meta, pid, mid, mlen, src)
        return
    if ht_get(mk, mv, (np.int64(pid) << 31) | mid) != -1:
        return
    # `for match in pool[p]: if shorter: pool[p].remove(match)` walks a list it deletes from, so
    # the element right after each removed one is never visited.
    prev = -1
    e = head[pid]
    skip = False
    while e != -1:
        nxt = ent[E_NEXT, e]
        if skip:
            skip = False
            prev = e
        elif ent[E_LEN, e] < mlen:
            if prev == -1:
                head[pid] = nxt
            else:
                ent[E_NEXT, prev] = nxt
            if tail[pid] == e:
                tail[pid] = prev
            ht_put(mk, mv, (np.int64(pid) << 31) | ent[E_MID, e], -1)
            meta[M_ENTRIES] -= 1
            meta[M_MLEN] -= ent[E_LEN, e]
            skip = True
        else:
            prev = e
        e = nxt
    _append(head, tail, ent, mk, mv, meta, pid, mid, mlen, src)


@njit(cache=True)
def pool_call(tokens, ids, base, L, maxlen, k, n, keep_all, oldest, start,
              head, tail, ent, mk, mv, meta):
    """One ``get_draft_tokens`` call for the request whose tokens start at ``tokens[base]``.

    ``L`` is the prefix length, ``maxlen`` = prompt_len + max_new_tokens, ``start`` the request's
    ``start_index`` (-1 before its first call). Returns (draft source in ``tokens`` or -1, draft
    length, new start_index). ``with_room`` first: each window of each size adds at most one entry.
    """
    rem = maxlen - 1 - L
    if rem <= 0:
        return -1, 0, start
    if start < 0:
        start = 0
    top = min(n, L - 1)
    for size in range(top, 0, -1):
        for l in range(start, L - size):
            a = base + l
            mlen = min(k, L - l - size)
            _insert(head, tail, ent, mk, mv, meta, keep_all, ids[a, size - 1], size,
                    ids[a + size, mlen - 1], mlen, a + size)
    src, d = -1, 0
    for size in range(top, 0, -1):
        pid = ids[base + L - size, size - 1]
        e = head[pid] if oldest else tail[pid]
        if tail[pid] != -2:
            src = ent[E_SRC, e]
            d = min(ent[E_LEN, e], rem)
            break
    return src, d, max(0, L - (k + n - 1))


@njit(cache=True)
def new_pool_arrays(n_ids, n_entries):
    """Empty pool storage: pattern heads and tails (tail -2: pattern never seen), entries, member table."""
    head = np.full(n_ids, -1, dtype=np.int32)
    tail = np.full(n_ids, -2, dtype=np.int32)
    ent = np.empty((4, max(16, n_entries)), dtype=np.int32)
    mk = np.full(table_capacity(n_entries), -1, dtype=np.int64)
    mv = np.full(mk.shape[0], -1, dtype=np.int32)
    return head, tail, ent, mk, mv, np.zeros(6, dtype=np.int64)


@njit(cache=True)
def pool_trajectory(tokens, ids, n_ids, P, O, maxlen, k, n, keep_all, oldest, c0):
    """A private pool's whole trajectory at fixed K: one call per step, commit accepted + 1.

    ``maxlen`` is prompt_len + max_new_tokens. Returns per step (committed, draft source, drafted,
    accepted), from ``committed = c0``.
    """
    head, tail, ent, mk, mv, meta = new_pool_arrays(n_ids, n * (P + 1 + O * (k + n + 1)))
    steps = max(O - c0, 0)
    out_c = np.empty(steps, dtype=np.int32)
    out_s = np.empty(steps, dtype=np.int32)
    out_d = np.empty(steps, dtype=np.int32)
    out_a = np.empty(steps, dtype=np.int32)
    c = c0
    start = -1
    i = 0
    while c < O:
        L = P + c
        ent, mk, mv = with_room(ent, mk, mv, meta, n * (L - max(start, 0)))
        src, d, start = pool_call(tokens, ids, 0, L, maxlen, k, n, keep_all, oldest, start,
                                  head, tail, ent, mk, mv, meta)
        a = 0
        while a < d and L + a < P + O and tokens[src + a] == tokens[L + a]:
            a += 1
        out_c[i], out_s[i], out_d[i], out_a[i] = c, src, d, a
        i += 1
        c += min(a + 1, O - c)
    return out_c[:i], out_s[:i], out_d[:i], out_a[:i]


def ngram_trajectory(req, settings: DrafterSettings, k: int, c0: int = 1) -> dict:
    """A request's steps under a private pool at fixed K from ``committed = c0`` (the first
    generation step is 1): per step ``c`` (committed), ``src`` (draft source), ``d`` (drafted), ``a`` (accepted)."""
    tokens = req.tokens
    n = settings.ngram_size
    ids, n_ids = window_ids(tokens, np.array([[0, len(tokens)]], dtype=np.int64), max(n, k))
    maxlen = req.prompt_len + generation_limit(req, settings.eos_token_ids)
    c, src, d, a = pool_trajectory(tokens, ids, n_ids, req.prompt_len, req.output_len, maxlen, k, n,
                                   settings.is_keep_all, settings.is_use_oldest, c0)
    return {"c": c, "src": src, "d": d, "a": a}


class _Pool:
    """One live pool (the public one, or a request's private one) with growable storage."""

    def __init__(self, n_ids: int, n_entries: int) -> None:
        self.head, self.tail, self.ent, self.mk, self.mv, self.meta = new_pool_arrays(n_ids, n_entries)

    def call(self, tokens, ids, base, L, maxlen, k, n, keep_all, oldest, start):
        self.ent, self.mk, self.mv = with_room(self.ent, self.mk, self.mv, self.meta, n * (L - max(start, 0)))
        return pool_call(tokens, ids, base, L, maxlen, k, n, keep_all, oldest, start,
                         self.head, self.tail, self.ent, self.mk, self.mv, self.meta)


def pool_bytes(meta: np.ndarray) -> int:
    """Rough CPython footprint of the engine's pool dict, from its counts (an estimate, not a measurement).

    Per pattern: a dict slot (~42 B), the key tuple (40 + 8 per token) and an ``OrderedSet`` (object,
    instance dict, ``items`` list, ``map`` dict: ~440 B). Per match: its tuple (40 + 8 per token),
    a list slot (8 B) and a map slot (~42 B). Every stored token also keeps a 28-byte int alive.
    """
    patterns, entries, plen, mlen = (int(meta[i]) for i in (M_PATTERNS, M_ENTRIES, M_PLEN, M_MLEN))
    return patterns * (42 + 40 + 440) + entries * (40 + 8 + 42) + (8 + 28) * (plen + mlen)


class NGramPoolOracle(DrafterOracle):
    """The TRT NGram pool as an acceptance oracle (private pools precomputed at fixed K, else online)."""

    def __init__(self, settings: DrafterSettings, requests, cache=None) -> None:
        super().__init__(settings, requests)
        self.n = settings.ngram_size
        self.k0 = settings.max_draft_len
        self.width = max(self.n, self.k0)
        self.keep_all, self.oldest, self.public = settings.is_keep_all, settings.is_use_oldest, settings.is_public_pool
        self._cache = cache if cache is not None else DEFAULT_CACHE
        self._maxlen = self.prompt_lens + self.max_new_tokens
        self._start = np.full(len(self.requests), -1, dtype=np.int64)
        if self.public:
            self._build_shared_ids()
            self._pool = _Pool(self._n_ids, 1024)
        else:
            tables = self._cache.tables(settings.key() + f"|k={self.k0}", self.distinct,
                                        lambda r: ngram_trajectory(r, settings, self.k0))
            lens = np.array([len(t["c"]) for t in tables], dtype=np.int64)
            self._t_off = shared_offsets(lens, self.copy_of)
            self._t_len = lens[self.copy_of]
            self._t = {f: np.concatenate([t[f] for t in tables]) for f in ("c", "src", "d", "a")}
            self._cursor = np.zeros(len(self.requests), dtype=np.int64)
            self._live: dict[int, tuple[_Pool, np.ndarray]] = {}  # requests that left their trajectory
            self.offtrack_requests = 0

    # -- ids ---------------------------------------------------------------------------------
    def _build_shared_ids(self) -> None:
        histories = [r.tokens for r in self.distinct]  # copies share one span of the buffer
        self._buf = np.concatenate(histories).astype(np.int32)
        ends = np.cumsum([len(t) for t in histories])
        starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)
        self._base = starts[self.copy_of]
        bounds = np.stack([starts, ends]).T.astype(np.int64)
        self._ids, self._n_ids = window_ids(self._buf, bounds, self.width)

    def _local_ids(self, rid: int, width: int):
        tokens = self._tokens[rid]
        return window_ids(tokens, np.array([[0, len(tokens)]], dtype=np.int64), width)

    # -- online calls ------------------------------------------------------------------------
    def _live_pool(self, rid: int):
        """The private pool of a request that left its trajectory, rebuilt from its calls so far."""
        if rid not in self._live:
            ids, n_ids = self._local_ids(rid, self.width)
            pool = _Pool(n_ids, 1024)
            tokens = self._tokens[rid]
            lo = self._t_off[rid]
            for j in range(int(self._cursor[rid])):
                L = int(self.prompt_lens[rid] + self._t["c"][lo + j])
                _, _, start = pool.call(tokens, ids, 0, L, int(self._maxlen[rid]), self.k0, self.n,
                                        self.keep_all, self.oldest, int(self._start[rid]))
                self._start[rid] = start
            self._live[rid] = (pool, ids)
            self.offtrack_requests += 1
        return self._live[rid]

    def _call_online(self, rid: int, committed: int, k: int) -> np.ndarray:
        if k > self.width:
            raise ValueError(f"NGram pool: K={k} exceeds max_draft_len={self.k0} (window ids are sized for it)")
        L = int(self.prompt_lens[rid] + committed)
        if self.public:
            tokens, ids, base, pool = self._buf, self._ids, int(self._base[rid]), self._pool
        else:
            pool, ids = self._live_pool(rid)
            tokens, base = self._tokens[rid], 0
        src, d, start = pool.call(tokens, ids, base, L, int(self._maxlen[rid]), k, self.n,
                                  self.keep_all, self.oldest, int(self._start[rid]))
        self._start[rid] = start
        return tokens[src:src + d] if d > 0 else np.empty(0, dtype=np.int32)

    # -- oracle interface --------------------------------------------------------------------
    def _on_track(self, rids: np.ndarray, committed: np.ndarray, k: int) -> np.ndarray:
        if self.public or k != self.k0:
            return np.zeros(len(rids), dtype=bool)
        cur = self._cursor[rids]
        ok = cur < self._t_len[rids]
        idx = self._t_off[rids] + np.minimum(cur, np.maximum(self._t_len[rids] - 1, 0))
        ok &= self._t["c"][idx] == committed
        if self._live:
            ok &= ~np.isin(rids, np.fromiter(self._live, dtype=np.int64))
        return ok

    def draft(self, rids, committed, k):
        rids = np.asarray(rids, dtype=np.int64)
        committed = np.asarray(committed, dtype=np.int64)
        drafted = np.zeros(len(rids), dtype=np.int64)
        accepted = np.zeros(len(rids), dtype=np.int64)
        if k <= 0 or len(rids) == 0:
            return drafted, accepted
        on = self._on_track(rids, committed, k)
        if on.any():
            r = rids[on]
            idx = self._t_off[r] + self._cursor[r]
            drafted[on] = self._t["d"][idx]
            accepted[on] = self._t["a"][idx]
            self._cursor[r] += 1
        off = np.flatnonzero(~on)
        if len(off):
            d, a = DrafterOracle.draft(self, rids[off], committed[off], k)
            drafted[off], accepted[off] = d, a
        return drafted, accepted

    def propose(self, rid: int, committed: int, k: int) -> np.ndarray:
        if k <= 0:
            return np.empty(0, dtype=np.int32)
        if self._on_track(np.array([rid]), np.array([committed]), k)[0]:
            i = int(self._t_off[rid] + self._cursor[rid])
            self._cursor[rid] += 1
            s, d = int(self._t["src"][i]), int(self._t["d"][i])
            return self._tokens[rid][s:s + d] if d > 0 else np.empty(0, dtype=np.int32)
        return self._call_online(rid, committed, k)

    def on_finish(self, rids) -> None:
        if not self.public:  # update_resources pops a completed request's private pool
            for rid in np.asarray(rids).tolist():
                self._live.pop(rid, None)

    def state_size(self, rids, committed) -> int:
        """Pattern keys in the pool a lookup hashes into: the shared pool's count, or about N keys per
        history token of the drafting rows' private pools."""
        if self.public:
            return int(self._pool.meta[M_PATTERNS])
        return self.n * super().state_size(rids, committed)

    def metrics(self) -> dict:
        if self.public:
            meta = self._pool.meta
            return {"public_pool_patterns": int(meta[M_PATTERNS]), "public_pool_entries": int(meta[M_ENTRIES]),
                    "public_pool_bytes": pool_bytes(meta)}
        return {"ngram_offtrack_requests": self.offtrack_requests}
