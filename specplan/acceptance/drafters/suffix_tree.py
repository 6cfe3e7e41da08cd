"""Suffix decoding (vLLM ``v1/spec_decode/suffix_decoding.py`` over Arctic Inference's suffix cache).

Per request a local tree over its prompt and its own output; one global tree over the responses
(not prompts) of up to ``max_cached_requests`` requests, in-flight ones included: a request gets a
global slot when it first drafts and the oldest other slot is evicted FIFO (0 disables the tree).
Each step (vLLM's ``propose``): append the newly committed tokens to both trees, take the last
``max_tree_depth`` tokens as context, ``speculate`` on both with ``max_spec_tokens =
min(K, max_model_len - num_tokens - 1)`` and keep the global draft only if its score is higher.

``SuffixTree::speculate`` (``_speculate_path``): for match_len = 1 .. len(context)-1, stopping at
the first length that does not occur: ``max_tokens = min(max_spec_tokens, int(match_len *
max_spec_factor + max_spec_offset + 1e-6))``; walk the highest-count child, ``prob *= child/node``,
emitting while ``prob >= min_token_prob``; score = sum of probs; ``>=`` keeps the longer match on
ties. All in float32, as in the C++.

Arctic's tree is a compressed suffix tree whose node counts are the numbers of stored suffixes
(each cut at ``max_depth`` tokens) passing through; the walk only reads counts (inside a
compressed node they are equal, so the ratio is 1). This module keeps the same counts in a plain
trie of depth ``max_depth`` (numba, one hash table per tree), which proposes the same drafts.
Children with equal counts are an unspecified order in Arctic's hash map; here the smallest token
wins. ``max_model_len`` is taken as the request's own length limit, prompt + output.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
from numba import njit

from specplan.acceptance.drafters._hashtable import grown_table, ht_get, ht_put, table_capacity
from specplan.acceptance.drafters.base import DrafterOracle
from specplan.acceptance.drafters.settings import DrafterSettings

COUNT, TOKEN, CHILD, SIBLING = 0, 1, 2, 3


@njit(cache=True)
def _append(nodes, hk, hv, meta, active, window, depth, tokens):
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
            p = active[slot]
            key = (np.int64(p) << 31) | t
            c = ht_get(hk, hv, key)
            if c == -1:
                c = meta[0]
                meta[0] += 1
                nodes[COUNT, c] = 0
                nodes[TOKEN, c] = t
                nodes[CHILD, c] = -1
                nodes[SIBLING, c] = nodes[CHILD, p]
                nodes[CHILD, p] = c
                ht_put(hk, hv, key, c)
            nodes[COUNT, c] += 1
            active[slot] = c


@njit(cache=True)
def _remove(nodes, hk, hv, depth, tokens):
    """Take a whole sequence out: every suffix's path (up to ``depth``) loses one count."""
    n = tokens.shape[0]
    for i in range(n):
        nodes[COUNT, 0] -= 1
        p = 0
        for m in range(min(depth, n - i)):
            p = ht_get(hk, hv, (np.int64(p) << 31) | tokens[i + m])
            nodes[COUNT, p] -= 1


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
            best, best_c, best_t = -1, 0, 0
            c = nodes[CHILD, s]
            while c != -1:
                cnt = nodes[COUNT, c]
                if cnt > best_c or (cnt == best_c and cnt > 0 and nodes[TOKEN, c] < best_t):
                    best, best_c, best_t = c, cnt, nodes[TOKEN, c]
                c = nodes[SIBLING, c]
            if best == -1:
                break
            prob = np.float32(prob * (np.float32(best_c) / np.float32(nodes[COUNT, s])))
            if prob < min_prob:
                break
            buf[n] = best_t
            n += 1
            score = np.float32(score + prob)
            s = best
        if score >= best_score:
            best_n, best_score, best_len = n, score, match_len
            out[:n] = buf[:n]
    return out[:best_n], best_score, best_len


class SuffixTrie:
    """A depth-limited suffix trie with counts, holding any number of sequences (grows as needed)."""

    def __init__(self, depth: int, n_tokens_hint: int = 256) -> None:
        self.depth = depth
        cap = max(64, n_tokens_hint * depth)
        self.nodes = np.full((4, cap), -1, dtype=np.int32)
        self.nodes[COUNT, 0] = 0
        self.hk = np.full(table_capacity(cap), -1, dtype=np.int64)
        self.hv = np.full(self.hk.shape[0], -1, dtype=np.int32)
        self.meta = np.ones(1, dtype=np.int64)  # nodes used (the root is node 0)

    def new_sequence(self) -> tuple[np.ndarray, np.ndarray]:
        """Empty live-suffix state for a new sequence."""
        return np.zeros(self.depth, dtype=np.int32), np.zeros(2, dtype=np.int64)

    def append(self, seq: tuple[np.ndarray, np.ndarray], tokens: np.ndarray) -> None:
        if len(tokens) == 0:
            return
        need = int(self.meta[0]) + len(tokens) * self.depth
        if need > self.nodes.shape[1]:
            grown = np.full((4, max(need, 2 * self.nodes.shape[1])), -1, dtype=np.int32)
            grown[:, :self.nodes.shape[1]] = self.nodes
            self.nodes = grown
        self.hk, self.hv = grown_table(self.hk, self.hv, need)
        _append(self.nodes, self.hk, self.hv, self.meta, seq[0], seq[1], self.depth,
                np.ascontiguousarray(tokens, dtype=np.int32))

    def remove(self, tokens: np.ndarray) -> None:
        """Remove a sequence, given all the tokens it holds."""
        _remove(self.nodes, self.hk, self.hv, self.depth, np.ascontiguousarray(tokens, dtype=np.int32))

    def speculate(self, context, max_spec_tokens, factor, offset, min_prob):
        """(draft tokens, score, match_len) for a context (its last ``depth`` tokens at most)."""
        return _speculate(self.nodes, self.hk, self.hv, np.ascontiguousarray(context, dtype=np.int32),
                          int(max_spec_tokens), np.float32(factor), np.float32(offset), np.float32(min_prob))

    @property
    def num_nodes(self) -> int:
        return int(self.meta[0])


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
        if rid not in self._local:
            self._start(rid)
        self._add_response(rid, committed)
        L = P + committed
        context = self._tokens[rid][max(0, L - self.depth):L]
        max_spec = min(k, P + O - L - 1)
        tokens, score, _ = self._local[rid][0].speculate(context, max_spec, *self._params)
        if self._global is not None:
            g_tokens, g_score, _ = self._global.speculate(context, max_spec, *self._params)
            if g_score > score:
                tokens = g_tokens
        return tokens

    def on_finish(self, rids) -> None:
        for rid in np.asarray(rids).tolist():
            if rid in self._local:
                # the finishing step's propose still adds its sampled tokens, then stop_request
                self._add_response(rid, int(self.output_lens[rid]))
                del self._local[rid]

    def metrics(self) -> dict:
        if self._global is None:
            return {}
        return {"suffix_global_cached_requests": len(self._cached), "suffix_global_evictions": self.evictions,
                "suffix_global_tree_nodes": self._global.num_nodes}
