"""Suffix decoding (vLLM ``v1/spec_decode/suffix_decoding.py`` over Arctic Inference's suffix cache).

Per request a local tree over its prompt and its own output; one global tree over the responses
(not prompts) of up to ``max_cached_requests`` requests, in-flight ones included: a request gets a
global slot when it first drafts and the oldest other slot is evicted FIFO (0 disables the tree).
Each step (vLLM's ``propose``): append the newly committed tokens to both trees, take the last
``max_tree_depth`` tokens as context, ``speculate`` on both with ``max_spec_tokens =
min(K, max_model_len - num_tokens - 1)`` and keep the global draft only if its score is higher.
vLLM has no rule at the request's ``max_tokens`` here (``limits``); without ``max_model_len`` set
the bound is K alone. A request vLLM never drafted for (one output token) still enters the trees:
the proposer sees it after its prefill sample.

``SuffixTree::speculate`` (``_speculate_path``): for match_len = 1 .. len(context)-1, stopping at
the first length that does not occur: ``max_tokens = min(max_spec_tokens, int(match_len *
max_spec_factor + max_spec_offset + 1e-6))``; walk the head child, ``prob *= child/node``,
emitting while ``prob >= min_token_prob``; score = sum of probs; ``>=`` keeps the longer match on
ties. All in float32, as in the C++.

Arctic's tree (arctic-inference 0.3.0, ``csrc/suffix_decoding/suffix_tree.cc``) is a compressed
suffix tree whose node counts are the numbers of stored suffixes (each cut at ``max_depth``
tokens) passing through; the walk only reads counts and each node's first child. This module keeps
the same counts in a plain trie of depth ``max_depth`` (numba, one hash table per tree): every
count change in Arctic's tree is a count change of one trie node, so the trie can replay Arctic's
child lists exactly. Those are sorted by count, and which of equal-count children comes first
depends on history (``_increment_count`` / ``_decrement_count`` move a node within its run of equal
counts): a new child goes last; a child whose count rises from c goes to the front of the children
of count c + 1 if it was the first of count c, else to their back; one whose count falls from c
goes to the front of the children of count c - 1; ``remove`` takes a child whose count would reach
0 out of the list with its subtree.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
from numba import njit

from specplan.acceptance.drafters._hashtable import grown_table, ht_get, ht_put, table_capacity
from specplan.acceptance.drafters.base import DrafterOracle
from specplan.acceptance.drafters.settings import DrafterSettings

# Node rows. Children of a node form a doubly linked list (FIRST .. LAST through NEXT / PREV) kept in
# non-increasing count; GROUP is the run of equal-count siblings the node belongs to.
COUNT, TOKEN, FIRST, LAST, NEXT, PREV, PARENT, GROUP = range(8)
# Run rows: its first and last node. Meta: nodes used, runs ever allocated, free runs on the stack.
RUN_HEAD, RUN_TAIL = 0, 1
M_NODES, M_RUNS, M_FREE = 0, 1, 2


@njit(cache=True)
def _unlink(nodes, runs, free, meta, x):
    """Take node x out of its parent's child list and out of its run (a run left empty is freed)."""
    g, p, n = nodes[GROUP, x], nodes[PREV, x], nodes[NEXT, x]
    if runs[RUN_HEAD, g] == x and runs[RUN_TAIL, g] == x:
        free[meta[M_FREE]] = g
        meta[M_FREE] += 1
    elif runs[RUN_HEAD, g] == x:
        runs[RUN_HEAD, g] = n
    elif runs[RUN_TAIL, g] == x:
        runs[RUN_TAIL, g] = p
    par = nodes[PARENT, x]
    if p == -1:
        nodes[FIRST, par] = n
    else:
        nodes[NEXT, p] = n
    if n == -1:
        nodes[LAST, par] = p
    else:
        nodes[PREV, n] = p


@njit(cache=True)
def _link(nodes, runs, free, meta, x, p, n):
    """Put node x between siblings p and n (-1: the list's end); it joins an equal-count neighbour's run.

    The list is sorted by count, so runs are contiguous and x can never sit between two nodes of one
    run without having their count: no two runs ever need merging.
    """
    par = nodes[PARENT, x]
    nodes[PREV, x], nodes[NEXT, x] = p, n
    if p == -1:
        nodes[FIRST, par] = x
    else:
        nodes[NEXT, p] = x
    if n == -1:
        nodes[LAST, par] = x
    else:
        nodes[PREV, n] = x
    c = nodes[COUNT, x]
    if p != -1 and nodes[COUNT, p] == c:
        g = nodes[GROUP, p]
        if runs[RUN_TAIL, g] == p:
            runs[RUN_TAIL, g] = x
    elif n != -1 and nodes[COUNT, n] == c:
        g = nodes[GROUP, n]
        if runs[RUN_HEAD, g] == n:
            runs[RUN_HEAD, g] = x
    else:
        if meta[M_FREE] > 0:
            meta[M_FREE] -= 1
            g = free[meta[M_FREE]]
        else:
            g = meta[M_RUNS]
            meta[M_RUNS] += 1
        runs[RUN_HEAD, g] = x
        runs[RUN_TAIL, g] = x
    nodes[GROUP, x] = g


@njit(cache=True)
def _increment(nodes, runs, free, meta, x):
    """Arctic's ``_increment_count``: count + 1, and where the node lands among siblings of count + 1.

    The first node of its run goes to the front of the run above (it stays put when there is none);
    any other node goes just before its run's first node, i.e. to the back of the run above.
    """
    if nodes[PARENT, x] == -1:
        nodes[COUNT, x] += 1
        return
    c = nodes[COUNT, x]
    head = runs[RUN_HEAD, nodes[GROUP, x]]
    if head == x:
        p = nodes[PREV, x]
        if p != -1 and nodes[COUNT, p] == c + 1:
            anchor = runs[RUN_HEAD, nodes[GROUP, p]]
            p, n = nodes[PREV, anchor], anchor
        else:
            n = nodes[NEXT, x]
    else:
        p, n = nodes[PREV, head], head
    _unlink(nodes, runs, free, meta, x)
    nodes[COUNT, x] += 1
    _link(nodes, runs, free, meta, x, p, n)


@njit(cache=True)
def _decrement(nodes, runs, free, meta, x):
    """Arctic's ``_decrement_count``: count - 1, the node moving just after its run's last node
    (the front of the run below)."""
    if nodes[PARENT, x] == -1:
        nodes[COUNT, x] -= 1
        return
    tail = runs[RUN_TAIL, nodes[GROUP, x]]
    if tail == x:
        p, n = nodes[PREV, x], nodes[NEXT, x]
    else:
        p, n = tail, nodes[NEXT, tail]
    _unlink(nodes, runs, free, meta, x)
    nodes[COUNT, x] -= 1
    _link(nodes, runs, free, meta, x, p, n)


@njit(cache=True)
def _child(nodes, hk, hv, meta, runs, free, p, t):
    """The child of p for token t, one count more; a new (or revived) child goes last with count 1."""
    key = (np.int64(p) << 31) | t
    c = ht_get(hk, hv, key)
    if c != -1 and nodes[COUNT, c] > 0:
        _increment(nodes, runs, free, meta, c)
        return c
    if c == -1:
        c = meta[M_NODES]
        meta[M_NODES] += 1
        ht_put(hk, hv, key, c)
    nodes[COUNT, c] = 1
    nodes[TOKEN, c] = t
    nodes[FIRST, c] = -1
    nodes[LAST, c] = -1
    nodes[PARENT, c] = p
    _link(nodes, runs, free, meta, c, nodes[LAST, p], -1)
    return c


@njit(cache=True)
def _append(nodes, hk, hv, meta, runs, free, active, window, depth, tokens):
    """Append tokens to one sequence: every live suffix (at most ``depth`` of them) grows by one.

    ``active`` is a ring of node ids of the sequence's live suffixes, ``window = [head, size]``.
    """
    for i in range(tokens.shape[0]):
        t = tokens[i]
        if window[1] == depth:  # the longest suffix reached max_depth and stops growing
            window[0] = (window[0] + 1) % depth
            window[1] -= 1
        active[(window[0] + window[1]) % depth] = 0
        window[1] += 1
        nodes[COUNT, 0] += 1
        for j in range(window[1]):
            slot = (window[0] + j) % depth
            active[slot] = _child(nodes, hk, hv, meta, runs, free, active[slot], t)


@njit(cache=True)
def _remove(nodes, hk, hv, meta, runs, free, depth, tokens):
    """Arctic's ``remove``: each suffix's path loses one count, top down; a node whose count would
    reach 0 leaves its sibling list with the rest of the path below it (a chain of count-1 nodes)."""
    n = tokens.shape[0]
    for i in range(n):
        nodes[COUNT, 0] -= 1
        p = 0
        for m in range(min(depth, n - i)):
            c = ht_get(hk, hv, (np.int64(p) << 31) | tokens[i + m])
            if c == -1 or nodes[COUNT, c] == 0:  # cannot happen for a stored sequence
                break
            if nodes[COUNT, c] > 1:
                _decrement(nodes, runs, free, meta, c)
                p = c
                continue
            _unlink(nodes, runs, free, meta, c)
            while c != -1:
                nodes[COUNT, c] = 0
                c = nodes[FIRST, c]
            break


@njit(cache=True)
def _speculate(nodes, hk, hv, context, max_spec_tokens, factor, offset, min_prob):
    """``SuffixTree::speculate`` with ``_speculate_path``: (draft length, score, match_len); tokens in ``out``."""
    out = np.empty(max(max_spec_tokens, 0), dtype=np.int32)
    buf = np.empty(max(max_spec_tokens, 0), dtype=np.int32)
    best_n, best_score, best_len = 0, np.float32(0.0), 0
    nctx = context.shape[0]
    for match_len in range(1, nctx):
        s = 0
        for i in range(nctx - match_len, nctx):
            s = ht_get(hk, hv, (np.int64(s) << 31) | context[i])
            if s == -1 or nodes[COUNT, s] == 0:
                s = -1
                break
        if s == -1:
            break
        cap = np.int64(np.float64(np.float32(np.float32(match_len) * factor + offset)) + 1e-6)
        max_tokens = max(min(max_spec_tokens, cap), 0)
        prob = np.float32(1.0)
        score = np.float32(0.0)
        n = 0
        while n < max_tokens:
            c = nodes[FIRST, s]  # the head of the list: the highest count, ties in Arctic's order
            if c == -1:
                break
            prob = np.float32(prob * (np.float32(nodes[COUNT, c]) / np.float32(nodes[COUNT, s])))
            if prob < min_prob:
                break
            buf[n] = nodes[TOKEN, c]
            n += 1
            score = np.float32(score + prob)
            s = c
        if score >= best_score:
            best_n, best_score, best_len = n, score, match_len
            out[:n] = buf[:n]
    return out[:best_n], best_score, best_len


class SuffixTrie:
    """A depth-limited suffix trie with counts and Arctic's child order, holding any number of sequences."""

    def __init__(self, depth: int, n_tokens_hint: int = 256) -> None:
        self.depth = depth
        cap = max(64, n_tokens_hint * depth)
        self.nodes = np.full((8, cap), -1, dtype=np.int32)
        self.nodes[COUNT, 0] = 0
        self.runs = np.full((2, cap), -1, dtype=np.int32)  # a run holds at least one node, so cap suffices
        self.free = np.empty(cap, dtype=np.int32)
        self.hk = np.full(table_capacity(cap), -1, dtype=np.int64)
        self.hv = np.full(self.hk.shape[0], -1, dtype=np.int32)
        self.meta = np.array([1, 0, 0], dtype=np.int64)  # nodes used (the root is node 0), runs, free runs

    def new_sequence(self) -> tuple[np.ndarray, np.ndarray]:
        """Empty live-suffix state for a new sequence."""
        return np.zeros(self.depth, dtype=np.int32), np.zeros(2, dtype=np.int64)

    def _reserve(self, need: int) -> None:
        old = self.nodes.shape[1]
        if need > old:
            cap = max(need, 2 * old)
            self.nodes = np.concatenate([self.nodes, np.full((8, cap - old), -1, dtype=np.int32)], axis=1)
            self.runs = np.concatenate([self.runs, np.full((2, cap - old), -1, dtype=np.int32)], axis=1)
            self.free = np.concatenate([self.free, np.empty(cap - old, dtype=np.int32)])
        self.hk, self.hv = grown_table(self.hk, self.hv, need)

    def append(self, seq: tuple[np.ndarray, np.ndarray], tokens: np.ndarray) -> None:
        """Append tokens to a sequence (``new_sequence`` state), Arctic's ``extend``."""
        if len(tokens) == 0:
            return
        self._reserve(int(self.meta[M_NODES]) + len(tokens) * self.depth)
        _append(self.nodes, self.hk, self.hv, self.meta, self.runs, self.free, seq[0], seq[1], self.depth,
                np.ascontiguousarray(tokens, dtype=np.int32))

    def remove(self, tokens: np.ndarray) -> None:
        """Remove a sequence, given all the tokens it holds."""
        _remove(self.nodes, self.hk, self.hv, self.meta, self.runs, self.free, self.depth,
                np.ascontiguousarray(tokens, dtype=np.int32))

    def speculate(self, context, max_spec_tokens, factor, offset, min_prob):
        """(draft tokens, score, match_len) for a context (its last ``depth`` tokens at most)."""
        return _speculate(self.nodes, self.hk, self.hv, np.ascontiguousarray(context, dtype=np.int32),
                          int(max_spec_tokens), np.float32(factor), np.float32(offset), np.float32(min_prob))

    def children(self, node: int = 0) -> list[tuple[int, int, int]]:
        """(node, token, count) of a node's children in list order (highest count first)."""
        out, c = [], int(self.nodes[FIRST, node])
        while c != -1:
            out.append((c, int(self.nodes[TOKEN, c]), int(self.nodes[COUNT, c])))
            c = int(self.nodes[NEXT, c])
        return out

    @property
    def num_nodes(self) -> int:
        return int(self.meta[M_NODES])


class SuffixDecodingOracle(DrafterOracle):
    """vLLM suffix decoding: local trees per request, a FIFO-bounded global tree of responses."""

    def __init__(self, settings: DrafterSettings, requests) -> None:
        super().__init__(settings, requests)
        s = settings
        self.depth = s.suffix_max_tree_depth
        self.max_cached = s.suffix_max_cached_requests
        self._params = (s.suffix_max_spec_factor, s.suffix_max_spec_offset, s.suffix_min_token_prob)
        self._global = SuffixTrie(self.depth, 4096) if self.max_cached != 0 else None
        self._local: dict[int, tuple[SuffixTrie, tuple]] = {}
        self._added: dict[int, int] = {}  # response tokens already in the trees
        self._cached: OrderedDict[int, tuple] = OrderedDict()  # global slots, oldest first
        self.evictions = 0

    def _start(self, rid: int) -> None:
        """``start_request``: a local tree over the prompt; a global slot, evicting the oldest other."""
        req = self.requests[rid]
        trie = SuffixTrie(self.depth, req.prompt_len + req.output_len)
        seq = trie.new_sequence()
        trie.append(seq, req.prompt_ids)
        self._local[rid] = (trie, seq)
        self._added[rid] = 0
        if self._global is not None:
            self._cached[rid] = self._global.new_sequence()
            while 0 < self.max_cached < len(self._cached):
                victim = next(r for r in self._cached if r != rid)
                del self._cached[victim]
                self._global.remove(self.requests[victim].output_ids[:self._added[victim]])
                self.evictions += 1

    def _add_response(self, rid: int, upto: int) -> None:
        """``add_active_response``: newly committed tokens go into the local tree and the global slot."""
        new = self.requests[rid].output_ids[self._added[rid]:upto]
        if len(new) == 0:
            return
        trie, seq = self._local[rid]
        trie.append(seq, new)
        if rid in self._cached:
            self._global.append(self._cached[rid], new)
        self._added[rid] = upto

    def propose(self, rid: int, committed: int, k: int) -> np.ndarray:
        P, O = int(self.prompt_lens[rid]), int(self.output_lens[rid])
        if k <= 0 or committed >= O:
            return np.empty(0, dtype=np.int32)
        L = P + committed
        mml = self.settings.max_model_len
        if mml is not None and L >= mml:  # vLLM skips the request before touching the cache
            return np.empty(0, dtype=np.int32)
        if rid not in self._local:
            self._start(rid)
        self._add_response(rid, committed)
        context = self._tokens[rid][max(0, L - self.depth):L]
        max_spec = k if mml is None else min(k, mml - L - 1)
        tokens, score, _ = self._local[rid][0].speculate(context, max_spec, *self._params)
        if self._global is not None:
            g_tokens, g_score, _ = self._global.speculate(context, max_spec, *self._params)
            if g_score > score:
                tokens = g_tokens
        return tokens

    def on_finish(self, rids) -> None:
        for rid in np.asarray(rids).tolist():
            if rid not in self._added:  # never drafted for: vLLM's proposer still saw its prefill sample
                self._start(rid)
            if rid in self._local:
                # the finishing step's propose still adds its sampled tokens, then stop_request
                self._add_response(rid, int(self.output_lens[rid]))
                del self._local[rid]

    def metrics(self) -> dict:
        if self._global is None:
            return {}
        return {"suffix_global_cached_requests": len(self._cached), "suffix_global_evictions": self.evictions,
                "suffix_global_tree_nodes": self._global.num_nodes}
