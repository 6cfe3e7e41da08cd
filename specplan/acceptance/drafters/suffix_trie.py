"""The depth-limited suffix trie of suffix decoding (``suffix_tree``), in numba.

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

Like Arctic's ``remove`` (which deletes those nodes), the trie frees the ids of a removed subtree's
nodes and of their runs, and drops their hash keys, for reuse: the global tree's memory follows what
it holds, not every path it ever held. The compiled code checks each id it takes against the arrays
``_reserve`` sized and raises IndexError rather than write past them.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from specplan.acceptance.drafters._hashtable import grown_table, ht_delete, ht_get, ht_put, table_capacity


# Node rows. Children of a node form a doubly linked list (FIRST .. LAST through NEXT / PREV) kept in
# non-increasing count; GROUP is the run of equal-count siblings the node belongs to.
COUNT, TOKEN, FIRST, LAST, NEXT, PREV, PARENT, GROUP = range(8)
# Run rows: its first and last node. Free rows: stacks of freed run and node ids. Meta: node and run
# ids ever allocated (high-water marks), then the depths of the two free stacks.
RUN_HEAD, RUN_TAIL = 0, 1
FREE_RUN, FREE_NODE = 0, 1
M_NODES, M_RUNS, M_FREE, M_FREE_NODES = range(4)


@njit(cache=True)
def _take_id(free, meta, row, m_free, m_used, limit):
    """A freed id from the stack ``row``, else a new one below ``limit`` (the arrays' reserved size)."""
    if meta[m_free] > 0:
        meta[m_free] -= 1
        return free[row, meta[m_free]]
    x = meta[m_used]
    if x >= limit:
        raise IndexError("suffix trie: more ids than reserved")
    meta[m_used] += 1
    return x


@njit(cache=True)
def _give_id(free, meta, row, m_free, x):
    """Put a freed id on the stack ``row``."""
    if meta[m_free] >= free.shape[1]:
        raise IndexError("suffix trie: more freed ids than reserved")
    free[row, meta[m_free]] = x
    meta[m_free] += 1


@njit(cache=True)
def _unlink(nodes, runs, free, meta, x):
    """Take node x out of its parent's child list and out of its run (a run left empty is freed)."""
    g, p, n = nodes[GROUP, x], nodes[PREV, x], nodes[NEXT, x]
    if runs[RUN_HEAD, g] == x and runs[RUN_TAIL, g] == x:
        _give_id(free, meta, FREE_RUN, M_FREE, g)
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
        g = _take_id(free, meta, FREE_RUN, M_FREE, M_RUNS, runs.shape[1])
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
    """The child of p for token t, one count more; a new child goes last with count 1."""
    key = (np.int64(p) << 31) | t
    c = ht_get(hk, hv, key)
    if c != -1:
        _increment(nodes, runs, free, meta, c)
        return c
    c = _take_id(free, meta, FREE_NODE, M_FREE_NODES, M_NODES, nodes.shape[1])
    if 2 * (meta[M_NODES] - meta[M_FREE_NODES]) > hk.shape[0]:  # a full table would never end a probe
        raise IndexError("suffix trie: more keys than its hash table was sized for")
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
    reach 0 leaves its sibling list with the rest of the path below it, and their ids are freed.

    That rest is a chain of count-1 nodes, each its parent's only child (a node's count bounds the
    sum of its children's), so each below the first is alone in its run and frees it.
    """
    n = tokens.shape[0]
    for i in range(n):
        nodes[COUNT, 0] -= 1
        p = 0
        for m in range(min(depth, n - i)):
            c = ht_get(hk, hv, (np.int64(p) << 31) | tokens[i + m])
            if c == -1:  # cannot happen for a stored sequence
                break
            if nodes[COUNT, c] > 1:
                _decrement(nodes, runs, free, meta, c)
                p = c
                continue
            _unlink(nodes, runs, free, meta, c)
            head = c
            while c != -1:
                if c != head:  # _unlink took the head out of its run
                    _give_id(free, meta, FREE_RUN, M_FREE, nodes[GROUP, c])
                ht_delete(hk, hv, (np.int64(nodes[PARENT, c]) << 31) | nodes[TOKEN, c])
                nodes[COUNT, c] = 0
                _give_id(free, meta, FREE_NODE, M_FREE_NODES, c)
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
            if s == -1:
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
        self.free = np.empty((2, cap), dtype=np.int32)  # at most every id allocated is free at once
        self.hk = np.full(table_capacity(cap), -1, dtype=np.int64)
        self.hv = np.full(self.hk.shape[0], -1, dtype=np.int32)
        self.meta = np.array([1, 0, 0, 0], dtype=np.int64)  # the root is node 0 and is never freed

    def new_sequence(self) -> tuple[np.ndarray, np.ndarray]:
        """Empty live-suffix state for a new sequence."""
        return np.zeros(self.depth, dtype=np.int32), np.zeros(2, dtype=np.int64)

    def _reserve(self, need: int) -> None:
        """Room for ``need`` node ids: as many runs and free-stack slots, the hash table at half load."""
        old = self.nodes.shape[1]
        if need > old:
            cap = max(need, 2 * old)
            self.nodes = np.concatenate([self.nodes, np.full((8, cap - old), -1, dtype=np.int32)], axis=1)
            self.runs = np.concatenate([self.runs, np.full((2, cap - old), -1, dtype=np.int32)], axis=1)
            self.free = np.concatenate([self.free, np.empty((2, cap - old), dtype=np.int32)], axis=1)
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
        """Nodes held now, the root included."""
        return int(self.meta[M_NODES] - self.meta[M_FREE_NODES])

    @property
    def num_runs(self) -> int:
        """Runs of equal-count siblings held now."""
        return int(self.meta[M_RUNS] - self.meta[M_FREE])

    @property
    def ids_allocated(self) -> tuple[int, int]:
        """(node ids, run ids) ever allocated: the peaks of ``num_nodes`` and ``num_runs``, as freed ids
        are taken first."""
        return int(self.meta[M_NODES]), int(self.meta[M_RUNS])
