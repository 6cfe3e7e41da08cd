"""Triton kernels for suffix-automaton drafting, with TensorRT-LLM's work shape.

``sa_extend_draft_kernel`` is TRT's ``suffixAutomatonExtend[Ngram]Kernel``: one program per request
(TRT launches one block of one thread per request; a Triton program with ``num_warps=1`` running
scalar code is the closest equivalent), which appends that step's accepted tokens to the request's
slot, looks up the longest suffix that occurs earlier (or the n-gram countdown), and writes
``match_len`` and up to K draft tokens. With ``DO_LOOKUP=False`` it is TRT's
``suffixAutomatonGlobalExtendKernel`` (extend only).

``sa_global_search_kernel`` is TRT's ``suffixAutomatonGlobalSearchKernel``: one program per request,
one lane per slot (TRT: one thread per slot in a block of ``nextPow2(maxSlots)`` threads). Each lane
walks the request's suffix (at most 64 tokens) through its slot's automaton; a max-reduction picks
the winner.

The layout and all constants come from :mod:`.automaton`; :data:`INTERPRETED` covers CPU runs. Draft
positions past the end of the text (and whole rows without a match) are written as -1; TRT leaves
them stale, which a fixed-shape, comparable output cannot. Every loop is written with flags rather
than ``break``/early ``return``, which Triton does not compile, and loops with runtime bounds are
``while`` loops, because the interpreter of older Triton releases (3.6, on the H200 machines here)
cannot take a tensor as a ``range`` bound.
"""

from __future__ import annotations

import triton.language as tl

from specplan.calibration.sa_kernel.primitives import (
    F_LEN, F_LINK, F_POS, HF, H_ARENA, H_LAST, H_NNODES, H_NTOK, KEY_CONT_MASK, KEY_CONT_SHIFT,
    KEY_LEN_SHIFT, KEY_OWN_SHIFT, KEY_SLOT_MASK, NF, _add_combine, _extend, _jit, _lookup_fixed,
    _lookup_longest, _max_combine, _vedge_get,
)


@_jit
def sa_extend_draft_kernel(
    nodes, tokens, arena, header,
    batch_slots, accepted, accepted_lens, draft_out, match_len_out,
    node_stride, token_stride, arena_stride, accepted_stride, draft_stride,
    K, max_ngram,
    K_BLOCK: tl.constexpr, DO_LOOKUP: tl.constexpr,
):
    """Extend each request's slot with its accepted tokens, then (``DO_LOOKUP``) draft.

    ``max_ngram == -1``: longest match; ``n > 0``: ``lookupFixed(n)``, ``n-1``, ... 1, first hit.
    """
    i = tl.program_id(0)
    slot = tl.load(batch_slots + i).to(tl.int64)
    nbase = slot * node_stride
    tbase = slot * token_stride
    abase = slot * arena_stride
    hdr = header + slot * HF
    ntok = tl.load(hdr + H_NTOK)
    nnodes = tl.load(hdr + H_NNODES)
    last = tl.load(hdr + H_LAST)
    used = tl.load(hdr + H_ARENA)

    n_new = tl.load(accepted_lens + i)
    j = n_new * 0
    while j < n_new:
        c = tl.load(accepted + i * accepted_stride + j)
        ntok, nnodes, last, used = _extend(nodes, tokens, arena, nbase, tbase, abase, ntok, nnodes, last, used, c)
        j = j + 1
    tl.store(hdr + H_NTOK, ntok)
    tl.store(hdr + H_NNODES, nnodes)
    tl.store(hdr + H_LAST, last)
    tl.store(hdr + H_ARENA, used)

    if DO_LOOKUP:
        mlen = ntok * 0
        start = ntok * 0
        if max_ngram < 0:
            mlen, start = _lookup_longest(nodes, nbase, ntok, last)
        else:
            size = ntok * 0 + max_ngram
            counting = size > 0
            while counting:
                hit, s = _lookup_fixed(nodes, nbase, ntok, last, size)
                if hit:
                    mlen = size
                    start = s
                    counting = False
                else:
                    size = size - 1
                    counting = size > 0
        tl.store(match_len_out + i, mlen)
        offs = tl.arange(0, K_BLOCK)
        n_copy = tl.where(mlen > 0, tl.minimum(ntok - start, K), 0)
        vals = tl.load(tokens + tbase + start + offs, mask=offs < n_copy, other=-1)
        tl.store(draft_out + i * draft_stride + offs, vals, mask=offs < K)


@_jit
def sa_global_search_kernel(
    nodes, tokens, arena, header,
    batch_slots, active_mask, draft_out, match_len_out, match_slot_out,
    node_stride, token_stride, arena_stride, draft_stride,
    num_slots, K, suffix_cap,
    K_BLOCK: tl.constexpr, SLOT_BLOCK: tl.constexpr,
):
    """Match each request's suffix against every active slot and draft from the best match.

    Per lane: feed the suffix through the slot's automaton from the root, following suffix links on a
    miss (matching statistics), so it ends in the state of the longest suffix that occurs in that slot;
    then walk suffix links while the state's earliest end is the slot's last position (no continuation).
    Winner: longest match, then the request's own slot, then the longest continuation, then the lowest
    slot index.
    """
    i = tl.program_id(0)
    own = tl.load(batch_slots + i)
    own64 = own.to(tl.int64)
    own_ntok = tl.load(header + own64 * HF + H_NTOK)
    slen = tl.minimum(own_ntok, suffix_cap)
    suffix_base = own64 * token_stride + own_ntok - slen

    s = tl.arange(0, SLOT_BLOCK)
    lane = (s < num_slots) & (tl.load(active_mask + s, mask=s < num_slots, other=0) != 0)
    s64 = s.to(tl.int64)
    nbase = s64 * node_stride
    abase = s64 * arena_stride
    ntok = tl.load(header + s64 * HF + H_NTOK, mask=lane, other=0)

    v = s * 0
    l = s * 0
    j = slen * 0
    while j < slen:
        c = tl.load(tokens + suffix_base + j)
        t = _vedge_get(nodes, arena, nbase, abase, v, c, lane)
        miss = lane & (t < 0) & (v != 0)
        while tl.reduce(miss.to(tl.int32), 0, _max_combine) > 0:
            v = tl.where(miss, tl.load(nodes + nbase + v.to(tl.int64) * NF + F_LINK, mask=miss, other=0), v)
            l = tl.where(miss, tl.load(nodes + nbase + v.to(tl.int64) * NF + F_LEN, mask=miss, other=0), l)
            t = tl.where(miss, _vedge_get(nodes, arena, nbase, abase, v, c, miss), t)
            miss = lane & (t < 0) & (v != 0)
        v = tl.where(t >= 0, t, 0)
        l = tl.where(t >= 0, l + 1, 0)
        j = j + 1

    pos = tl.load(nodes + nbase + v.to(tl.int64) * NF + F_POS, mask=lane, other=0)
    at_end = lane & (v != 0) & (pos + 1 >= ntok)
    while tl.reduce(at_end.to(tl.int32), 0, _max_combine) > 0:
        v = tl.where(at_end, tl.load(nodes + nbase + v.to(tl.int64) * NF + F_LINK, mask=at_end, other=0), v)
        row = nodes + nbase + v.to(tl.int64) * NF
        l = tl.where(at_end, tl.load(row + F_LEN, mask=at_end, other=0), l)
        pos = tl.where(at_end, tl.load(row + F_POS, mask=at_end, other=0), pos)
        at_end = lane & (v != 0) & (pos + 1 >= ntok)

    matched = lane & (v != 0)
    start = pos + 1
    key = (
        (l.to(tl.int64) << KEY_LEN_SHIFT)
        | ((s == own).to(tl.int64) << KEY_OWN_SHIFT)
        | ((ntok - start).to(tl.int64) << KEY_CONT_SHIFT)
        | (s * -1 + KEY_SLOT_MASK).to(tl.int64)
    )
    key = tl.where(matched, key, -1)
    best = tl.reduce(key, 0, _max_combine)

    offs = tl.arange(0, K_BLOCK)
    if best >= 0:
        best_slot = ((best & KEY_SLOT_MASK) * -1 + KEY_SLOT_MASK).to(tl.int32)
        cont = ((best >> KEY_CONT_SHIFT) & KEY_CONT_MASK).to(tl.int32)
        best_start = tl.reduce(tl.where(s == best_slot, start, 0), 0, _add_combine)
        tl.store(match_len_out + i, (best >> KEY_LEN_SHIFT).to(tl.int32))
        tl.store(match_slot_out + i, best_slot)
        src = tokens + best_slot.to(tl.int64) * token_stride + best_start
        vals = tl.load(src + offs, mask=offs < tl.minimum(cont, K), other=-1)
        tl.store(draft_out + i * draft_stride + offs, vals, mask=offs < K)
    else:
        tl.store(match_len_out + i, own * 0)
        tl.store(match_slot_out + i, own * 0 - 1)
        tl.store(draft_out + i * draft_stride + offs, tl.full([K_BLOCK], -1, tl.int32), mask=offs < K)
