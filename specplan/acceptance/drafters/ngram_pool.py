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
pool is shared by all requests in the simulated order of calls, never freed, and always online: one
compiled call per step drafts all its rows in the order given (``ngram_kernels.pool_draft``).

Patterns and matches are token windows; the kernels (``ngram_kernels``) work on integer ids that are
equal exactly when the windows' tokens are, so sets compare by content as tuples do.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from specplan.acceptance.drafters.base import DrafterOracle, shared_offsets
from specplan.acceptance.drafters.cache import DEFAULT_CACHE
from specplan.acceptance.drafters.limits import generation_limit
from specplan.acceptance.drafters.ngram_kernels import (M_ENTRIES, M_MLEN, M_PATTERNS, M_PLEN, accepted_len,
                                                        new_pool, pool_call, pool_draft, window_ids, with_room)
from specplan.acceptance.drafters.settings import DrafterSettings


@njit(cache=True)
def pool_trajectory(tokens, ids, ends, P, O, maxlen, k, n, keep_all, oldest, c0):
    """A private pool's whole trajectory at fixed K: one call per step, commit accepted + 1.

    ``ids`` and ``ends`` are ``window_ids`` of width N + K, ``maxlen`` is prompt_len + max_new_tokens.
    Returns per step (committed, draft source, drafted, accepted), from ``committed = c0``.
    """
    seen, hdr, ent, mk, meta = new_pool(ends[n - 1], ends[-1], k, n * (P + 1 + O * (k + n + 1)))
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
        ent, mk = with_room(ent, mk, meta, n * (L - max(start, 0)))
        src, d, start = pool_call(tokens, ids, 0, L, maxlen, k, n, keep_all, oldest, start,
                                  seen, hdr, ent, mk, meta)
        a = accepted_len(tokens, src, d, L, P + O)
        out_c[i], out_s[i], out_d[i], out_a[i] = c, src, d, a
        i += 1
        c += min(a + 1, O - c)
    return out_c[:i], out_s[:i], out_d[:i], out_a[:i]


def ngram_trajectory(req, settings: DrafterSettings, k: int, c0: int = 1) -> dict:
    """A request's steps under a private pool at fixed K from ``committed = c0`` (the first
    generation step is 1): per step ``c`` (committed), ``src`` (draft source), ``d`` (drafted), ``a`` (accepted)."""
    tokens = req.tokens
    n = settings.ngram_size
    ids, ends = window_ids(tokens, np.array([[0, len(tokens)]], dtype=np.int64), n + k)
    maxlen = req.prompt_len + generation_limit(req, settings.eos_token_ids)
    c, src, d, a = pool_trajectory(tokens, ids, ends, req.prompt_len, req.output_len, maxlen, k, n,
                                   settings.is_keep_all, settings.is_use_oldest, c0)
    return {"c": c, "src": src, "d": d, "a": a}


class _Pool:
    """A live pool (the public one, or one request's private one) and the requests that draft from it.

    ``tokens`` holds the requests' histories back to back (``bounds``: each one's [start, end));
    request ``i`` starts at ``base[i]`` (copies of one request share its span).
    """

    def __init__(self, tokens, bounds, base, prompt_lens, output_lens, maxlen, settings) -> None:
        self.tokens = tokens
        # windows up to a pattern and its full-length match (max_draft_len: the engine never drafts more)
        self.ids, ends = window_ids(tokens, bounds, settings.ngram_size + settings.max_draft_len)
        self.base, self.prompt_lens, self.output_lens, self.maxlen = base, prompt_lens, output_lens, maxlen
        self.start = np.full(len(base), -1, dtype=np.int64)  # start_index; -1: not seen yet
        self.n, self.keep_all, self.oldest = settings.ngram_size, settings.is_keep_all, settings.is_use_oldest
        # entries: about one a window and size (ones with full-length matches stay), allocated lazily
        self.seen, self.hdr, self.ent, self.mk, self.meta = new_pool(
            ends[settings.ngram_size - 1], ends[-1], settings.max_draft_len, settings.ngram_size * len(tokens) + 1024)

    def draft(self, rids: np.ndarray, committed: np.ndarray, k: int):
        """(draft source in ``tokens``, drafted, accepted) per row: one engine call each, in row order."""
        src, drafted, accepted, self.ent, self.mk = pool_draft(
            self.tokens, self.ids, self.base, self.prompt_lens, self.output_lens, self.maxlen, self.start,
            rids, committed, k, self.n, self.keep_all, self.oldest, self.seen, self.hdr, self.ent,
            self.mk, self.meta)
        return src, drafted, accepted


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
        self.public = settings.is_public_pool
        self._cache = cache if cache is not None else DEFAULT_CACHE
        self._maxlen = self.prompt_lens + self.max_new_tokens
        if self.public:
            self._pool = self._shared_pool()
        else:
            tables = self._cache.tables(settings.key() + f"|k={self.k0}", self.distinct,
                                        lambda r: ngram_trajectory(r, settings, self.k0))
            lens = np.array([len(t["c"]) for t in tables], dtype=np.int64)
            self._t_off = shared_offsets(lens, self.copy_of)
            self._t_len = lens[self.copy_of]
            self._t = {f: np.concatenate([t[f] for t in tables]) for f in ("c", "src", "d", "a")}
            self._cursor = np.zeros(len(self.requests), dtype=np.int64)
            self._live: dict[int, _Pool] = {}  # requests that left their trajectory
            self.offtrack_requests = 0

    # -- pools -------------------------------------------------------------------------------
    def _shared_pool(self) -> _Pool:
        """The public pool over every distinct history, back to back (copies share one span)."""
        histories = [r.tokens for r in self.distinct]
        ends = np.cumsum([len(t) for t in histories])
        starts = np.concatenate([[0], ends[:-1]]).astype(np.int64)
        bounds = np.stack([starts, ends]).T.astype(np.int64)
        return _Pool(np.concatenate(histories).astype(np.int32), bounds, starts[self.copy_of], self.prompt_lens,
                     self.output_lens, self._maxlen, self.settings)

    def _live_pool(self, rid: int) -> _Pool:
        """The private pool of a request that left its trajectory, rebuilt from its calls so far."""
        if rid not in self._live:
            tokens = self._tokens[rid]
            one = lambda a: np.array([a[rid]], dtype=np.int64)  # noqa: E731
            pool = _Pool(tokens, np.array([[0, len(tokens)]], dtype=np.int64), np.zeros(1, dtype=np.int64),
                         one(self.prompt_lens), one(self.output_lens), one(self._maxlen), self.settings)
            lo, calls = int(self._t_off[rid]), int(self._cursor[rid])
            if calls:
                pool.draft(np.zeros(calls, dtype=np.int64), self._t["c"][lo:lo + calls].astype(np.int64), self.k0)
            self._live[rid] = pool
            self.offtrack_requests += 1
        return self._live[rid]

    def _check_k(self, k: int) -> None:
        if k > self.k0:
            raise ValueError(f"NGram pool: K={k} exceeds max_draft_len={self.k0} (the pool is sized for it)")

    def _call_online(self, rid: int, committed: int, k: int) -> np.ndarray:
        self._check_k(k)
        pool, row = (self._pool, rid) if self.public else (self._live_pool(rid), 0)
        src, drafted, _ = pool.draft(np.array([row], dtype=np.int64), np.array([committed], dtype=np.int64), k)
        s, d = int(src[0]), int(drafted[0])
        return pool.tokens[s:s + d] if d > 0 else np.empty(0, dtype=np.int32)

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
        if self.public:  # the whole step in one compiled call, rows in the order given
            self._check_k(k)
            _, drafted, accepted = self._pool.draft(rids, committed, k)
            return drafted, accepted
        on = self._on_track(rids, committed, k)
        if on.any():
            r = rids[on]
            idx = self._t_off[r] + self._cursor[r]
            drafted[on] = self._t["d"][idx]
            accepted[on] = self._t["a"][idx]
            self._cursor[r] += 1
        if not on.all():  # requests off their trajectory: one live private pool each
            self._check_k(k)
            row = np.zeros(1, dtype=np.int64)
            for i in np.flatnonzero(~on).tolist():
                _, d, a = self._live_pool(int(rids[i])).draft(row, committed[i:i + 1], k)
                drafted[i], accepted[i] = d[0], a[0]
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
