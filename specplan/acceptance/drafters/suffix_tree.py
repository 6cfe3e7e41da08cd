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

The trees are ``suffix_trie.SuffixTrie``: Arctic's counts and child order in a plain trie.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from specplan.acceptance.drafters.base import DrafterOracle
from specplan.acceptance.drafters.settings import DrafterSettings
from specplan.acceptance.drafters.suffix_trie import SuffixTrie


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
