"""Device-side pieces of the Triton suffix automaton: the interpreter switch, the node/table layout as
constexprs, and the scalar and per-lane helpers (hash-table lookups, edge get/set, extend, lookups)
that ``kernels.py`` composes into TensorRT-LLM's kernels. Layout constants come from :mod:`.automaton`.
"""


from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from triton import knobs

from specplan.calibration.sa_kernel import automaton as layout

# Triton cannot compile without a CUDA device; its interpreter runs the same kernels on CPU tensors. An
# explicit TRITON_INTERPRET (Triton's own switch) decides; unset, the kernels are interpreted exactly
# when no CUDA device is available, so CPU-only machines need no environment set before this import.
INTERPRETED = knobs.runtime.interpret if "TRITON_INTERPRET" in os.environ else not torch.cuda.is_available()


def _jit(fn):
    """``triton.jit``, or the interpreter's wrapper of ``fn`` when :data:`INTERPRETED`."""
    if INTERPRETED:
        from triton.runtime.interpreter import InterpretedFunction

        return InterpretedFunction(fn)
    return triton.jit(fn)


NF = tl.constexpr(layout.NODE_FIELDS)
F_LEN = tl.constexpr(layout.F_LEN)
F_LINK = tl.constexpr(layout.F_LINK)
F_POS = tl.constexpr(layout.F_POS)
F_IKEY = tl.constexpr(layout.F_IKEY)
F_IVAL = tl.constexpr(layout.F_IVAL)
F_EPTR = tl.constexpr(layout.F_EPTR)
F_ECAP = tl.constexpr(layout.F_ECAP)
F_PAD = tl.constexpr(layout.F_PAD)
HF = tl.constexpr(layout.HEADER_FIELDS)
H_NTOK = tl.constexpr(layout.H_NTOK)
H_NNODES = tl.constexpr(layout.H_NNODES)
H_LAST = tl.constexpr(layout.H_LAST)
H_ARENA = tl.constexpr(layout.H_ARENA)
INIT_CAP = tl.constexpr(layout.INITIAL_TABLE_CAPACITY)
GROWTH = tl.constexpr(layout.TABLE_GROWTH)
COPY_BLOCK = tl.constexpr(64)  # ints moved per vector op when clearing or copying a table

# Sort key of a global-search candidate, packed so that one integer max picks the winner:
# match_len (<= 64) | own slot | continuation length (< 2**26) | 4095 - slot (slots <= 1024).
KEY_LEN_SHIFT = tl.constexpr(39)
KEY_OWN_SHIFT = tl.constexpr(38)
KEY_CONT_SHIFT = tl.constexpr(12)
KEY_SLOT_MASK = tl.constexpr(4095)
KEY_CONT_MASK = tl.constexpr((1 << 26) - 1)
MAX_CONTINUATION = 1 << 26  # host-side limit on max_seq_len implied by the packing
MAX_GLOBAL_SLOTS = 1024  # TRT: one thread per slot in one block


# --- scalar helpers (extend kernel) --------------------------------------------------------------------


@_jit
def _table_find(arena, abase, ptr, cap, key):
    """Bucket index (slot-relative) holding ``key`` or the first empty bucket on its probe path;
    -1 if the table is full and ``key`` is absent."""
    idx = key % cap
    found = idx * 0 - 1
    n = idx * 0
    probing = n == 0
    while probing:
        b = ptr + idx
        k = tl.load(arena + abase + b.to(tl.int64) * 2)
        if (k == key) | (k < 0):
            found = b
            probing = False
        else:
            idx = idx + 1
            idx = tl.where(idx == cap, 0, idx)
            n = n + 1
            probing = n < cap
    return found


@_jit
def _fill_table(arena, abase, ptr, cap):
    """Mark ``cap`` buckets empty (TRT clears a table on allocation)."""
    start = abase + ptr.to(tl.int64) * 2
    total = cap * 2
    offs = tl.arange(0, COPY_BLOCK)
    off = total * 0
    while off < total:
        o = off + offs
        # Keys at even offsets get -1, targets at odd offsets 0, matching the host build.
        tl.store(arena + start + o, tl.where(o % 2 == 0, -1, 0), mask=o < total)
        off = off + COPY_BLOCK


@_jit
def _edge_get(nodes, arena, nbase, abase, state, key):
    """Target of ``state --key-->`` or -1 (TRT ``SAFlatGraph::at(node, key)``)."""
    row = nodes + nbase + state.to(tl.int64) * NF
    eptr = tl.load(row + F_EPTR)
    res = eptr * 0 - 1
    if eptr < 0:
        if tl.load(row + F_IKEY) == key:
            res = tl.load(row + F_IVAL)
    else:
        b = _table_find(arena, abase, eptr, tl.load(row + F_ECAP), key)
        if b >= 0:
            bucket = arena + abase + b.to(tl.int64) * 2
            if tl.load(bucket) == key:
                res = tl.load(bucket + 1)
    return res


@_jit
def _edge_set(nodes, arena, nbase, abase, state, key, target, used):
    """Insert or overwrite ``state --key--> target``; returns the new arena bump pointer.

    Same steps as the host build: inline the first edge; on a second key, move it into a fresh
    6-bucket table; when a table is full, grow it 5x and re-insert in bucket order.
    """
    row = nodes + nbase + state.to(tl.int64) * NF
    eptr = tl.load(row + F_EPTR)
    to_table = eptr >= 0
    if eptr < 0:
        ikey = tl.load(row + F_IKEY)
        if (ikey < 0) | (ikey == key):
            tl.store(row + F_IKEY, key)
            tl.store(row + F_IVAL, target)
        else:
            to_table = ikey >= 0  # True here, kept a scalar tensor like the other branch
            eptr = used
            used = used + INIT_CAP
            _fill_table(arena, abase, eptr, eptr * 0 + INIT_CAP)
            b0 = _table_find(arena, abase, eptr, eptr * 0 + INIT_CAP, ikey)
            tl.store(arena + abase + b0.to(tl.int64) * 2, ikey)
            tl.store(arena + abase + b0.to(tl.int64) * 2 + 1, tl.load(row + F_IVAL))
            tl.store(row + F_EPTR, eptr)
            tl.store(row + F_ECAP, eptr * 0 + INIT_CAP)
    if to_table:
        cap = tl.load(row + F_ECAP)
        b = _table_find(arena, abase, eptr, cap, key)
        if b < 0:
            new_cap = cap * GROWTH
            new_ptr = used
            used = used + new_cap
            _fill_table(arena, abase, new_ptr, new_cap)
            i = cap * 0
            while i < cap:
                src = arena + abase + (eptr + i).to(tl.int64) * 2
                k = tl.load(src)
                if k >= 0:
                    nb = _table_find(arena, abase, new_ptr, new_cap, k)
                    tl.store(arena + abase + nb.to(tl.int64) * 2, k)
                    tl.store(arena + abase + nb.to(tl.int64) * 2 + 1, tl.load(src + 1))
                i = i + 1
            tl.store(row + F_EPTR, new_ptr)
            tl.store(row + F_ECAP, new_cap)
            b = _table_find(arena, abase, new_ptr, new_cap, key)
        tl.store(arena + abase + b.to(tl.int64) * 2, key)
        tl.store(arena + abase + b.to(tl.int64) * 2 + 1, target)
    return used


@_jit
def _extend(nodes, tokens, arena, nbase, tbase, abase, ntok, nnodes, last, used, c):
    """Append token ``c`` (TRT ``SuffixAutomaton::extend``); returns the updated header values."""
    tl.store(tokens + tbase + ntok.to(tl.int64), c)
    ntok = ntok + 1
    cur = nnodes
    nnodes = nnodes + 1
    cur_row = nodes + nbase + cur.to(tl.int64) * NF
    zero = cur * 0
    tl.store(cur_row + F_LEN, tl.load(nodes + nbase + last.to(tl.int64) * NF + F_LEN) + 1)
    tl.store(cur_row + F_LINK, zero - 1)
    tl.store(cur_row + F_POS, ntok - 1)
    tl.store(cur_row + F_IKEY, zero - 1)
    tl.store(cur_row + F_IVAL, zero)
    tl.store(cur_row + F_EPTR, zero - 1)
    tl.store(cur_row + F_ECAP, zero)
    tl.store(cur_row + F_PAD, zero)

    # Walk suffix links from the old last state, adding c-edges to cur until one already has a c-edge.
    p = last
    q = zero - 1
    walking = p >= 0
    while walking:
        t = _edge_get(nodes, arena, nbase, abase, p, c)
        if t >= 0:
            q = t
            walking = False
        else:
            used = _edge_set(nodes, arena, nbase, abase, p, c, cur, used)
            p = tl.load(nodes + nbase + p.to(tl.int64) * NF + F_LINK)
            walking = p >= 0

    if p < 0:
        tl.store(cur_row + F_LINK, zero)
    else:
        q_row = nodes + nbase + q.to(tl.int64) * NF
        plen = tl.load(nodes + nbase + p.to(tl.int64) * NF + F_LEN)
        if plen + 1 == tl.load(q_row + F_LEN):
            tl.store(cur_row + F_LINK, q)
        else:
            clone = nnodes
            nnodes = nnodes + 1
            clone_row = nodes + nbase + clone.to(tl.int64) * NF
            tl.store(clone_row + F_LEN, plen + 1)
            tl.store(clone_row + F_LINK, tl.load(q_row + F_LINK))
            tl.store(clone_row + F_POS, tl.load(q_row + F_POS))
            tl.store(clone_row + F_IKEY, tl.load(q_row + F_IKEY))
            tl.store(clone_row + F_IVAL, tl.load(q_row + F_IVAL))
            tl.store(clone_row + F_PAD, zero)
            qptr = tl.load(q_row + F_EPTR)
            qcap = tl.load(q_row + F_ECAP)
            tl.store(clone_row + F_ECAP, qcap)
            if qptr >= 0:
                # The clone gets its own copy of q's table, same capacity, same bucket positions.
                new_ptr = used
                used = used + qcap
                src = arena + abase + qptr.to(tl.int64) * 2
                dst = arena + abase + new_ptr.to(tl.int64) * 2
                total = qcap * 2
                offs = tl.arange(0, COPY_BLOCK)
                off = total * 0
                while off < total:
                    o = off + offs
                    m = o < total
                    tl.store(dst + o, tl.load(src + o, mask=m), mask=m)
                    off = off + COPY_BLOCK
                tl.store(clone_row + F_EPTR, new_ptr)
            else:
                tl.store(clone_row + F_EPTR, qptr)
            # Redirect the c-edges that pointed to q along the suffix-link path to the clone.
            redirecting = p >= 0
            while redirecting:
                if _edge_get(nodes, arena, nbase, abase, p, c) == q:
                    used = _edge_set(nodes, arena, nbase, abase, p, c, clone, used)
                    p = tl.load(nodes + nbase + p.to(tl.int64) * NF + F_LINK)
                    redirecting = p >= 0
                else:
                    redirecting = False
            tl.store(q_row + F_LINK, clone)
            tl.store(cur_row + F_LINK, clone)
    return ntok, nnodes, cur, used


@_jit
def _lookup_longest(nodes, nbase, ntok, last):
    """TRT ``lookup()``: the first state on the suffix-link path from ``last`` whose earliest end is not
    the final position. Returns (match_len, draft start); match_len 0 when there is none."""
    state = last
    best = last * 0
    searching = state != 0
    while searching:
        row = nodes + nbase + state.to(tl.int64) * NF
        if tl.load(row + F_POS) + 1 < ntok:
            best = state
            searching = False
        else:
            state = tl.load(row + F_LINK)
            searching = state > 0
    mlen = last * 0
    start = last * 0
    if best != 0:
        best_row = nodes + nbase + best.to(tl.int64) * NF
        mlen = tl.load(best_row + F_LEN)
        start = tl.load(best_row + F_POS) + 1
    return mlen, start


@_jit
def _lookup_fixed(nodes, nbase, ntok, last, n):
    """TRT ``lookupFixed(n)``: the state on the suffix-link path whose length interval holds n, if its
    earliest end is not the final position. Returns (found, draft start)."""
    found = n < 0  # False, as a scalar tensor
    start = n * 0
    state = last
    going = (ntok >= n + 1) & (state != 0)
    while going:
        row = nodes + nbase + state.to(tl.int64) * NF
        slen = tl.load(row + F_LEN)
        link = tl.load(row + F_LINK)
        min_len = tl.load(nodes + nbase + link.to(tl.int64) * NF + F_LEN) + 1
        if (slen >= n) & (min_len <= n):
            pos = tl.load(row + F_POS)
            if pos < ntok - 1:
                found = n >= 0
                start = pos + 1
                going = False
        if going:
            if slen < n:
                going = False
            else:
                state = link
                going = state != 0
    return found, start


# --- vector helpers (global search: one lane per slot) -------------------------------------------------
# Reductions go through tl.reduce with these combine functions rather than tl.max/tl.sum: those are
# triton.jit functions of Triton's own library, which the interpreter cannot call unless TRITON_INTERPRET
# was set before triton was first imported; the compiled code is the same.


@_jit
def _max_combine(a, b):
    return tl.maximum(a, b)


@_jit
def _add_combine(a, b):
    return a + b



@_jit
def _vedge_get(nodes, arena, nbase, abase, state, key, mask):
    """Per-lane ``_edge_get``: lanes probe their own tables until every lane has stopped."""
    row = nodes + nbase + state.to(tl.int64) * NF
    eptr = tl.load(row + F_EPTR, mask=mask, other=0)
    ikey = tl.load(row + F_IKEY, mask=mask, other=0)
    ival = tl.load(row + F_IVAL, mask=mask, other=0)
    cap = tl.load(row + F_ECAP, mask=mask, other=0)
    res = tl.where(mask & (eptr < 0) & (ikey == key), ival, -1)
    probing = mask & (eptr >= 0)
    safe_cap = tl.where(probing, cap, 1)
    idx = key % safe_cap
    n = idx * 0
    while tl.reduce(probing.to(tl.int32), 0, _max_combine) > 0:
        bucket = arena + abase + (eptr + idx).to(tl.int64) * 2
        k = tl.load(bucket, mask=probing, other=-1)
        hit = probing & (k == key)
        res = tl.where(hit, tl.load(bucket + 1, mask=hit, other=-1), res)
        n = n + 1
        probing = probing & (k != key) & (k >= 0) & (n < safe_cap)
        idx = idx + 1
        idx = tl.where(idx == safe_cap, 0, idx)
    return res
