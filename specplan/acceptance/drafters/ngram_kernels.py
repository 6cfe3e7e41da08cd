"""The NGram pool's compiled storage and calls (``NGramPoolManager.get_draft_tokens``, see ``ngram_pool``).

A pool is five arrays, made by ``new_pool``: ``seen`` (per window id, whether that pattern and
full-length match were added, see ``pool_call``), ``hdr`` (per pattern id: the head and tail of its
match list, -1 while the pattern is not in the pool, then per match length 1 .. full-1 a stack of its
entries of that length), ``ent`` (per entry:
match id, length, source in the token buffer, next and previous in its pattern's list, next on its
length's stack; freed entries are reused), the member set ``mk`` ((pattern, match) keys; a removed
one keeps its slot with the ``DEAD`` bit until the set is rebuilt) and the counters ``meta``.

A pattern's list is the engine's ``OrderedSet``. Adding a match longer than some stored ones
removes the shorter ones while iterating the list (``_remove_shorter``); only the entries of the
lengths below the new one are visited, which in a long-running public pool are a handful among
thousands of full-length matches. ``pool_draft`` runs one call per row, in the rows' order, with
greedy acceptance, and grows the storage itself: other compiled code can call it as it is.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from specplan.acceptance.drafters._hashtable import ht_get, ht_home, ht_put, table_capacity

# Columns of an entry: match id, match length (negated while marked for removal), where its tokens
# start in the token buffer, next and previous entry of its pattern's list, next entry on its
# length's stack (and next free entry once freed).
E_MID, E_LEN, E_SRC, E_NEXT, E_PREV, E_LNEXT = range(6)
# Columns of a header row: the list's head and tail, then the stack of length m at H_LEN + m - 1.
H_HEAD, H_TAIL, H_LEN = 0, 1, 2
# Counters: entries allocated, patterns present, entries present, sum of pattern
# lengths, sum of match lengths, member-set slots used, full length (the longest match the pool
# takes), first free entry.
M_ALLOC, M_PATTERNS, M_ENTRIES, M_PLEN, M_MLEN, M_KEYS, M_FULL, M_FREE = range(8)
# Flag of a removed key in the member set (keys are pattern << 31 | match, below 2**62).
DEAD = np.int64(1) << 62


@njit(cache=True)
def window_ids(tokens, bounds, width):
    """``ids[a, m-1]``: an id of the window ``tokens[a:a+m]`` (m <= width), equal iff the tokens are.

    Windows stop at the end of their request (``bounds`` holds each request's [start, end)); past
    it the id is -1. Ids are dense and start at 1: the windows of length m get theirs from the pair
    (id of the first m-1 tokens, last token), one length at a time, so each pass's table holds only
    that length's windows and a length's ids follow the shorter ones': ``ends[m-1]`` is one past
    the last id of length m.
    """
    n = tokens.shape[0]
    ids = np.full((n, width), -1, dtype=np.int32)
    cap = table_capacity(n + 1)
    hk = np.empty(cap, dtype=np.int64)
    hv = np.empty(cap, dtype=np.int32)
    next_id = 1
    ends = np.empty(width, dtype=np.int64)
    for m in range(width):
        hk[:] = -1
        for b in range(bounds.shape[0]):
            lo, hi = bounds[b, 0], bounds[b, 1]
            for a in range(lo, hi - m):
                key = ((np.int64(ids[a, m - 1]) << 31) if m else np.int64(0)) | tokens[a + m]
                node = ht_get(hk, hv, key)
                if node == -1:
                    node = next_id
                    next_id += 1
                    ht_put(hk, hv, key, node)
                ids[a, m] = node
        ends[m] = next_id
    return ids, ends


@njit(cache=True)
def new_pool(n_patterns, n_ids, full, n_entries):
    """An empty pool for pattern ids below ``n_patterns`` and window ids below ``n_ids``, taking
    matches of up to ``full`` tokens, with room for ``n_entries`` entries before it grows."""
    seen = np.zeros(n_ids, dtype=np.bool_)
    hdr = np.full((n_patterns, 1 + full), -1, dtype=np.int32)
    ent = np.empty((max(16, n_entries), 6), dtype=np.int32)
    mk = np.full(table_capacity(1024), -1, dtype=np.int64)  # holds only shorter matches' keys: grown as needed
    meta = np.zeros(8, dtype=np.int64)
    meta[M_FULL] = full
    meta[M_FREE] = -1
    return seen, hdr, ent, mk, meta


@njit(cache=True)
def _member_slot(mk, key):
    """The slot holding ``key``, live or dead, or the empty slot ending its probe run."""
    mask = mk.shape[0] - 1
    i = ht_home(key, mask)
    while mk[i] != -1 and (mk[i] & ~DEAD) != key:
        i = (i + 1) & mask
    return i


@njit(cache=True)
def _members_rebuilt(mk, n_new):
    """The live keys (dead slots dropped) in a set where ``n_new`` more stay under a quarter load,
    and their count."""
    live = 0
    for key in mk:
        live += key != -1 and key & DEAD == 0
    out = np.full(table_capacity(2 * (live + n_new)), -1, dtype=np.int64)
    for key in mk:
        if key != -1 and key & DEAD == 0:
            out[_member_slot(out, key)] = key
    return out, live


@njit(cache=True)
def with_room(ent, mk, meta, n_new):
    """The entries and member set, grown (copied) where ``n_new`` more would not fit."""
    if meta[M_ALLOC] + n_new > ent.shape[0]:
        grown = np.empty((max(meta[M_ALLOC] + n_new, 2 * ent.shape[0]), 6), dtype=np.int32)
        grown[:ent.shape[0]] = ent
        ent = grown
    if 2 * (meta[M_KEYS] + n_new) > mk.shape[0]:
        mk, live = _members_rebuilt(mk, n_new)
        meta[M_KEYS] = live
    return ent, mk


@njit(cache=True)
def _member(pid, mid):
    return (np.int64(pid) << 31) | mid


@njit(cache=True)
def _append(hdr, ent, mk, meta, pid, mid, mlen, src, in_set):
    e = meta[M_FREE]
    if e != -1:
        meta[M_FREE] = ent[e, E_LNEXT]
    elif meta[M_ALLOC] < ent.shape[0]:
        e = meta[M_ALLOC]
        meta[M_ALLOC] += 1
    else:
        raise IndexError("NGram pool: more entries than reserved (with_room)")
    tail = hdr[pid, H_TAIL]
    ent[e, E_MID], ent[e, E_LEN], ent[e, E_SRC] = mid, mlen, src
    ent[e, E_NEXT], ent[e, E_PREV], ent[e, E_LNEXT] = -1, tail, -1
    if tail == -1:
        hdr[pid, H_HEAD] = e
    else:
        ent[tail, E_NEXT] = e
    hdr[pid, H_TAIL] = e
    if mlen < meta[M_FULL]:  # full-length matches are never shorter than a new one: no stack
        ent[e, E_LNEXT] = hdr[pid, H_LEN + mlen - 1]
        hdr[pid, H_LEN + mlen - 1] = e
    if in_set:
        key = _member(pid, mid)
        i = _member_slot(mk, key)
        if mk[i] == -1:
            if 2 * (meta[M_KEYS] + 1) > mk.shape[0]:
                raise IndexError("NGram pool: more member keys than reserved (with_room)")
            meta[M_KEYS] += 1
        mk[i] = key
    meta[M_ENTRIES] += 1
    meta[M_MLEN] += mlen


@njit(cache=True)
def _drop(ent, mk, meta, pid, e):
    """Entry ``e`` leaves the member set and the counts and joins the free entries (never a tracked
    one: only shorter matches are removed, and sets are replaced only without ``is_keep_all``)."""
    mk[_member_slot(mk, _member(pid, ent[e, E_MID]))] |= DEAD
    meta[M_ENTRIES] -= 1
    meta[M_MLEN] -= abs(ent[e, E_LEN])
    ent[e, E_LNEXT] = meta[M_FREE]
    meta[M_FREE] = e


@njit(cache=True)
def _clear(hdr, ent, mk, meta, pid):
    """``pool[pattern] = OrderedSet()``: every entry of the pattern dropped."""
    e = hdr[pid, H_HEAD]
    while e != -1:
        nxt = ent[e, E_NEXT]
        _drop(ent, mk, meta, pid, e)
        e = nxt
    hdr[pid, :] = -1


@njit(cache=True, inline="always")
def _is_shorter(ent, e, mlen):
    return e != -1 and abs(ent[e, E_LEN]) < mlen


@njit(cache=True)
def _remove_shorter(hdr, ent, mk, meta, pid, mlen):
    """``for match in pool[p]: if len(match) < mlen: pool[p].remove(match)``.

    The loop walks a list it deletes from, so the element right after each removed one is never
    visited and survives whatever its length: in each run of consecutive shorter entries the
    first, third, ... go. Every run is found from its first entry (one whose predecessor is not
    shorter) on the stacks of the shorter lengths, marked along the list, then the marked entries
    are unlinked.
    """
    for m in range(1, mlen):
        e = hdr[pid, H_LEN + m - 1]
        while e != -1:
            if not _is_shorter(ent, ent[e, E_PREV], mlen):
                x, go = e, True
                while _is_shorter(ent, x, mlen):
                    if go:
                        ent[x, E_LEN] = -ent[x, E_LEN]
                    go = not go
                    x = ent[x, E_NEXT]
            e = ent[e, E_LNEXT]
    for m in range(1, mlen):
        h = H_LEN + m - 1
        below, e = -1, hdr[pid, h]
        while e != -1:
            nxt = ent[e, E_LNEXT]
            if ent[e, E_LEN] > 0:
                below = e
            else:
                if below == -1:
                    hdr[pid, h] = nxt
                else:
                    ent[below, E_LNEXT] = nxt
                prev, after = ent[e, E_PREV], ent[e, E_NEXT]
                if prev == -1:
                    hdr[pid, H_HEAD] = after
                else:
                    ent[prev, E_NEXT] = after
                if after == -1:
                    hdr[pid, H_TAIL] = prev
                else:
                    ent[after, E_PREV] = prev
                _drop(ent, mk, meta, pid, e)
            e = nxt


@njit(cache=True)
def _insert(hdr, ent, mk, meta, keep_all, pid, plen, mid, mlen, src, tracked):
    """One window of the update loop: pattern ``pid`` (``plen`` tokens) followed by match ``mid``;
    ``tracked``: a full-length match under ``is_keep_all`` known not to be in the pool (``pool_call``)."""
    if hdr[pid, H_TAIL] == -1:  # pattern not in pool (a set in it is never left empty)
        meta[M_PATTERNS] += 1
        meta[M_PLEN] += plen
    elif not keep_all and mlen > ent[hdr[pid, H_HEAD], E_LEN]:
        _clear(hdr, ent, mk, meta, pid)
    elif not tracked and mk[_member_slot(mk, _member(pid, mid))] == _member(pid, mid):
        return
    else:
        _remove_shorter(hdr, ent, mk, meta, pid, mlen)
    _append(hdr, ent, mk, meta, pid, mid, mlen, src, not tracked)


@njit(cache=True)
def pool_call(tokens, ids, base, L, maxlen, k, n, keep_all, oldest, start, seen, hdr, ent, mk, meta):
    """One ``get_draft_tokens`` call for the request whose tokens start at ``tokens[base]``.

    ``L`` is the prefix length, ``maxlen`` = prompt_len + max_new_tokens, ``start`` the request's
    ``start_index`` (-1 before its first call). Returns (draft source in ``tokens`` or -1, draft
    length, new start_index). ``with_room`` first: each window of each size adds at most one entry.

    ``ids`` spans N + full tokens: with ``is_keep_all`` a full-length match is never removed (only
    shorter ones are, and only a replaced set drops all), so ``seen[w]`` (w: the id of the pattern
    and its match as one window) says for good whether it is in the pool. Adding it again changes
    nothing and is skipped; a first one needs no member-set lookup and takes no key there.
    """
    rem = maxlen - 1 - L
    if rem <= 0:
        return -1, 0, start
    if k > meta[M_FULL]:
        raise ValueError("NGram pool: K above the longest match the pool was made for")
    if start < 0:
        start = 0
    top = min(n, L - 1)
    for size in range(top, 0, -1):
        for l in range(start, L - size):
            a = base + l
            mlen = min(k, L - l - size)
            tracked = keep_all and mlen == meta[M_FULL]
            if tracked:
                w = ids[a, size + mlen - 1]
                if seen[w]:
                    continue
                seen[w] = True
            _insert(hdr, ent, mk, meta, keep_all, ids[a, size - 1], size,
                    ids[a + size, mlen - 1], mlen, a + size, tracked)
    for size in range(top, 0, -1):
        pid = ids[base + L - size, size - 1]
        if hdr[pid, H_TAIL] != -1:
            e = hdr[pid, H_HEAD] if oldest else hdr[pid, H_TAIL]
            return ent[e, E_SRC], min(ent[e, E_LEN], rem), max(0, L - (k + n - 1))
    return -1, 0, max(0, L - (k + n - 1))


@njit(cache=True)
def accepted_len(tokens, src, d, at, end):
    """Greedy acceptance: how many of the ``d`` draft tokens at ``tokens[src]`` equal the request's
    own continuation ``tokens[at:end]``."""
    a = 0
    while a < d and at + a < end and tokens[src + a] == tokens[at + a]:
        a += 1
    return a


@njit(cache=True)
def pool_draft(tokens, ids, base, prompt_lens, output_lens, maxlen, start, rids, committed, k, n, keep_all,
               oldest, seen, hdr, ent, mk, meta):
    """One call per row, in the rows' order, each accepted greedily against the request's own tokens.

    Per request (indexed by ``rids``): ``base`` (where its tokens start in ``tokens``), prompt and
    output lengths, ``maxlen`` and ``start`` (updated in place). Returns per row (draft source,
    drafted, accepted) and the storage arrays, which are new ones where they had to grow.
    """
    m = rids.shape[0]
    src = np.full(m, -1, dtype=np.int64)
    drafted = np.zeros(m, dtype=np.int64)
    accepted = np.zeros(m, dtype=np.int64)
    for i in range(m):
        r = rids[i]
        L = prompt_lens[r] + committed[i]
        ent, mk = with_room(ent, mk, meta, n * (L - max(start[r], 0)))
        s, d, nxt = pool_call(tokens, ids, base[r], L, maxlen[r], k, n, keep_all, oldest, start[r],
                              seen, hdr, ent, mk, meta)
        start[r] = nxt
        src[i], drafted[i] = s, d
        accepted[i] = accepted_len(tokens, s, d, base[r] + L, base[r] + prompt_lens[r] + output_lens[r])
    return src, drafted, accepted, ent, mk
