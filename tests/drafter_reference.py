"""Brute-force references for the exact drafters: literal ports of the engines' code and plain scans.

Nothing here is fast or clever; each function is the engine's own algorithm on Python lists (the
NGram pool and the PLD variants are line-by-line ports) or an O(L^2) scan of the definition, so
that the fast kernels in ``specplan.acceptance.drafters`` can be checked step by step against them.
"""

from __future__ import annotations

from collections import Counter

import numpy as np


# --------------------------------------------------------------------------------------------------
# TensorRT-LLM NGram pool: tensorrt_llm/_torch/speculative/ngram.py, with ordered_set 4.1's OrderedSet.


class OrderedSet:
    """The parts of ``ordered_set.OrderedSet`` the pool uses, with the library's semantics.

    Iteration walks the ``items`` list itself and ``discard`` deletes from it, which is why removing
    while iterating skips the element after each removed one.
    """

    def __init__(self, initial=()):
        self.items, self.map = [], {}
        for x in initial:
            self.add(x)

    def add(self, key):
        if key not in self.map:
            self.map[key] = len(self.items)
            self.items.append(key)

    def remove(self, key):
        if key not in self.map:
            raise KeyError(key)
        i = self.map[key]
        del self.items[i]
        del self.map[key]
        for k, v in self.map.items():
            if v >= i:
                self.map[k] = v - 1

    def __contains__(self, key):
        return key in self.map

    def __iter__(self):
        return iter(self.items)

    def __getitem__(self, i):
        return self.items[i]

    def __len__(self):
        return len(self.items)


class NGramPoolManagerRef:
    """``NGramPoolManager`` verbatim (get_draft_tokens and the completion branch of update_resources)."""

    def __init__(self, max_total_draft_tokens, max_matching_ngram_size, is_keep_all=True, is_use_oldest=True,
                 is_public_pool=True):
        self.max_total_draft_tokens = max_total_draft_tokens
        self.max_matching_ngram_size = max_matching_ngram_size
        self.is_keep_all = is_keep_all
        self.is_use_oldest = is_use_oldest
        self.is_public_pool = is_public_pool
        self.pool = {}
        self.start_index = {}

    def finish(self, request_id):
        if self.is_public_pool:
            return
        if request_id in self.pool:
            self.pool.pop(request_id)
            self.start_index.pop(request_id)

    def get_draft_tokens(self, prefix, request_id, max_sequence_length):
        prefix_len = len(prefix)
        max_draft_token_length_this_step = max_sequence_length - 1 - prefix_len
        if max_draft_token_length_this_step <= 0:
            return []
        if request_id not in self.start_index:
            self.start_index[request_id] = 0
            if not self.is_public_pool:
                self.pool[request_id] = {}
        pool = self.pool if self.is_public_pool else self.pool[request_id]
        sequence = prefix[self.start_index[request_id]:]
        for size in range(min(self.max_matching_ngram_size, prefix_len - 1), 0, -1):
            for l in range(len(sequence) - size):
                r = min(l + size + self.max_total_draft_tokens, len(sequence))
                pattern = tuple(sequence[l:l + size])
                new_match = tuple(sequence[l + size:r])
                if pattern not in pool or (not self.is_keep_all and len(new_match) > len(pool[pattern][0])):
                    pool[pattern] = OrderedSet((new_match,))
                elif new_match not in pool[pattern]:
                    for match in pool[pattern]:
                        if len(match) < len(new_match):
                            pool[pattern].remove(match)
                    pool[pattern].add(new_match)
        draft_tokens = []
        for size in range(min(self.max_matching_ngram_size, prefix_len - 1), 0, -1):
            pattern = tuple(prefix[-size:])
            if pattern not in pool:
                continue
            draft_tokens = pool[pattern][0 if self.is_use_oldest else -1]
            draft_tokens = list(draft_tokens)[:max_draft_token_length_this_step]
            break
        self.start_index[request_id] = max(
            0, prefix_len - (self.max_total_draft_tokens + self.max_matching_ngram_size - 1))
        return draft_tokens

# --------------------------------------------------------------------------------------------------
# Plain scans of the match definitions (SA, vLLM, HF prompt lookup).


def earliest_start(text, pattern, last_start):
    """Smallest start j <= last_start with text[j:j+len(pattern)] == pattern, or -1 (a window scan)."""
    m = len(pattern)
    if last_start < 0 or m == 0:
        return -1
    windows = np.lib.stride_tricks.sliding_window_view(np.asarray(text[:last_start + m]), m)
    hits = np.flatnonzero((windows == np.asarray(pattern)).all(axis=1))
    return int(hits[0]) if len(hits) else -1


def earlier_match(history, n_max, n_min=1):
    """(n, source) of the longest suffix with n_min <= n <= n_max occurring before the final one.

    n_max None means no cap. The earliest such occurrence; the draft source is just after it.
    Lengths are tried upward until one fails: a suffix that occurs earlier has every shorter
    suffix occurring earlier too.
    """
    L = len(history)
    top = L - 1 if n_max is None else min(n_max, L - 1)
    best = (0, -1)
    for n in range(1, top + 1):
        j = earliest_start(history, history[L - n:], L - n - 1)
        if j < 0:
            break
        best = (n, j + n)
    return best if best[0] >= n_min else (0, -1)


def sa_draft(history, k, max_ngram=-1):
    """TRT SA standalone draft tokens."""
    n, src = earlier_match(history, None if max_ngram == -1 else max_ngram)
    return [] if src < 0 else history[src:src + k]


def vllm_ngram_draft(history, k, min_n, max_n, max_model_len):
    """vLLM n-gram proposer by plain scan."""
    if len(history) < min_n:
        return []
    k = min(k, max_model_len - len(history))
    if k <= 0:
        return []
    n, src = earlier_match(history, max_n, min_n)
    return [] if src < 0 else history[src:src + k]


def vllm_ngram_kmp(origin_tokens, min_ngram, max_ngram, max_model_len, k):
    """``_find_longest_matched_ngram_and_propose_tokens`` verbatim (vLLM's numba KMP, in Python)."""
    total_token = len(origin_tokens)
    if total_token < min_ngram:
        return []
    k = min(k, max_model_len - total_token)
    if k <= 0:
        return []
    tokens = origin_tokens[::-1]
    lps = [0] * max_ngram
    longest_ngram = 0
    position = 0
    prev_lps = 0
    i = 1
    while i < total_token:
        if tokens[prev_lps] == tokens[i]:
            prev_lps += 1
            if prev_lps >= longest_ngram:
                longest_ngram = prev_lps
                position = i
            if i < max_ngram:
                lps[i] = prev_lps
            if prev_lps == max_ngram:
                prev_lps = lps[max_ngram - 1]
            i += 1
        elif prev_lps != 0:
            prev_lps = lps[prev_lps - 1]
        else:
            i += 1
    if longest_ngram < min_ngram:
        return []
    start_position = total_token - 1 - position + longest_ngram
    k = min(k, total_token - start_position)
    return list(origin_tokens[start_position:start_position + k])


def pld_reference_draft(input_ids, max_ngram_size=3, num_pred_tokens=10):
    """apoorvumang/prompt-lookup-decoding ``find_candidate_pred_tokens``, on a list."""
    input_length = len(input_ids)
    arr = np.asarray(input_ids)
    for ngram_size in range(max_ngram_size, 0, -1):
        if ngram_size > input_length:
            continue  # torch's unfold would raise here; no window fits
        ngram = arr[-ngram_size:]
        windows = np.lib.stride_tricks.sliding_window_view(arr, ngram_size)
        for idx in np.flatnonzero((windows == ngram).all(axis=1)):
            start_idx = idx + ngram_size
            end_idx = start_idx + num_pred_tokens
            if end_idx <= input_length and start_idx < input_length - ngram_size:
                return arr[start_idx:end_idx].tolist()
    return []


def pld_hf_draft(input_ids, max_length, num_output_tokens, max_matching_ngram_size=2, eos_token_ids=()):
    """transformers ``PromptLookupCandidateGenerator.get_candidates`` (no logits processor), on a list."""
    input_length = len(input_ids)
    arr = np.asarray(input_ids)
    if max_length == input_length + 1:
        return []
    chosen_ids = None
    match_found = False
    for ngram_size in range(min(max_matching_ngram_size, input_length - 1), 0, -1):
        windows = np.lib.stride_tricks.sliding_window_view(arr, ngram_size)
        ngram_tensor = arr[-ngram_size:]
        for idx in np.flatnonzero((windows == ngram_tensor).all(axis=1)):
            start_idx = idx + ngram_size
            end_idx = min(start_idx + num_output_tokens, input_length, max_length)
            if start_idx < end_idx:
                chosen_ids = arr[start_idx:end_idx]
                match_found = True
                if len(eos_token_ids):
                    eos = np.flatnonzero(np.isin(chosen_ids, eos_token_ids))
                    if len(eos):
                        chosen_ids = chosen_ids[:eos[0]]
                break
        if match_found:
            break
    if not match_found or chosen_ids is None or len(chosen_ids) == 0:
        return []
    return chosen_ids.tolist()


# --------------------------------------------------------------------------------------------------
# TRT SA global pool, by plain scans (this project's documented reading).


def sa_global_draft(texts, own, k, max_ngram=-1):
    """Draft of request ``own`` from the pool ``texts`` (slot -> list of committed tokens).

    Every slot: the longest suffix of the own history (capped at 64, or n) occurring with a token
    after it, earliest occurrence. Winner: longest, then own slot, then most tokens after, then
    lowest slot.
    """
    history = texts[own]
    cap = max_ngram if max_ngram > 0 else 64
    query = history[max(0, len(history) - cap):]
    best_key, best = None, []
    for slot, text in texts.items():
        for m in range(len(query), 0, -1):
            j = earliest_start(text, query[len(query) - m:], len(text) - m - 1)
            if j >= 0:
                key = (m, slot == own, len(text) - j - m, -slot)
                if best_key is None or key > best_key:
                    best_key, best = key, text[j + m:j + m + k]
                break
    return best


class SAGlobalPoolRef:
    """Slots for the SA global pool: lowest free slot first, else evict the oldest completed request."""

    def __init__(self, num_slots, max_ngram=-1):
        self.num_slots, self.max_ngram = num_slots, max_ngram
        self.texts, self.slot_of, self.retained = {}, {}, []

    def commit(self, rid, history):
        if rid not in self.slot_of:
            free = sorted(set(range(self.num_slots)) - set(self.texts))
            if free:
                slot = free[0]
            else:
                slot = self.retained.pop(0)
                del self.slot_of[next(r for r, s in self.slot_of.items() if s == slot)]
            self.slot_of[rid] = slot
        self.texts[self.slot_of[rid]] = list(history)

    def finish(self, rid, history):
        self.commit(rid, history)
        self.retained.append(self.slot_of[rid])


# --------------------------------------------------------------------------------------------------
# Suffix decoding (Arctic Inference): counts by brute force over the stored sequences.


class SuffixTreeRef:
    """A depth-limited suffix tree's counts, recomputed from the sequences on every question.

    ``count(s)`` is the number of (sequence, start) with the window equal to s (|s| <= depth): the
    number of stored suffixes that pass through s's node in Arctic's tree.

    Ties among children follow Arctic's sibling lists (``suffix_tree.cc``), kept here as one plain
    Python list per node, sorted by count, changed event by event:

    - a new child goes last;
    - a count going up from c: the child moves to the front of the children of count c + 1 when it
      was the first of those with count c, else to the back of those with count c + 1;
    - a count going down from c: the child moves to the front of the children of count c - 1;
    - a child whose count would reach 0 leaves the list (with its subtree).
    """

    def __init__(self, depth):
        self.depth = depth
        self.seqs = {}
        self.order = {}  # node (tuple of tokens) -> its children's tokens, in list order
        self.live = {}  # node -> count, maintained alongside the lists

    def _move(self, node, new):
        """Set a node's count and reposition it in its parent's list by the rules above."""
        parent, t = node[:-1], node[-1]
        lst = self.order.setdefault(parent, [])
        old = self.live.get(node, 0)
        if old == 0:
            lst.append(t)
            self.live[node] = new
            return
        i = lst.index(t)
        first = i == 0 or self.live[parent + (lst[i - 1],)] != old
        del lst[i]
        self.live[node] = new
        counts = [self.live[parent + (u,)] for u in lst]
        if new > old and not first:
            j = next((j for j, c in enumerate(counts) if c < new), len(lst))
        else:
            j = next((j for j, c in enumerate(counts) if c <= new), len(lst))
        lst.insert(j, t)

    def extend(self, seq_id, tokens):
        seq = self.seqs.setdefault(seq_id, [])
        for t in tokens:
            seq.append(int(t))
            n = len(seq)
            for m in range(min(self.depth, n), 0, -1):  # every live suffix ending at the new token
                node = tuple(seq[n - m:])
                self._move(node, self.live.get(node, 0) + 1)

    def remove(self, seq_id):
        seq = self.seqs.pop(seq_id)
        for i in range(len(seq)):
            for m in range(1, min(self.depth, len(seq) - i) + 1):
                node = tuple(seq[i:i + m])
                if self.live[node] > 1:
                    self._move(node, self.live[node] - 1)
                    continue
                self.order[node[:-1]].remove(node[-1])
                for key in [k for k in self.live if k[:len(node)] == node]:
                    del self.live[key]
                    self.order.pop(key, None)
                break

    def _starts(self, s):
        """(sequence, start) of every window equal to s."""
        m = len(s)
        for seq in self.seqs.values():
            if len(seq) >= m:
                windows = np.lib.stride_tricks.sliding_window_view(np.asarray(seq), m)
                for i in np.flatnonzero((windows == np.asarray(s, dtype=int)).all(axis=1)):
                    yield seq, int(i)

    def count(self, s):
        return sum(1 for _ in self._starts(s))

    def children(self, s):
        m = len(s)
        if m + 1 > self.depth:
            return Counter()
        kids = Counter(seq[i + m] for seq, i in self._starts(s) if i + m < len(seq))
        # the event-driven lists must hold exactly the brute-force counts, in sorted order
        listed = [self.live[tuple(s) + (t,)] for t in self.order.get(tuple(s), [])]
        assert dict(zip(self.order.get(tuple(s), []), listed)) == dict(kids) and listed == sorted(listed, reverse=True)
        return kids

    def speculate(self, context, max_spec_tokens, factor, offset, min_prob):
        """``SuffixTree::speculate`` with ``_speculate_path`` in float32; ties among children in list order."""
        best_tokens, best_score, best_len = [], np.float32(0.0), 0
        for match_len in range(1, len(context)):
            s = list(context[len(context) - match_len:])
            if self.count(s) == 0:
                break
            max_tokens = int(float(np.float32(np.float32(match_len) * np.float32(factor) + np.float32(offset))) + 1e-6)
            max_tokens = max(min(max_spec_tokens, max_tokens), 0)
            tokens, prob, score = [], np.float32(1.0), np.float32(0.0)
            node = list(s)
            while len(tokens) < max_tokens:
                kids = self.children(node)
                if not kids:
                    break
                top = max(kids.values())
                tok = next(t for t in self.order[tuple(node)] if kids[t] == top)
                prob = np.float32(prob * (np.float32(top) / np.float32(self.count(node))))
                if prob < np.float32(min_prob):
                    break
                tokens.append(tok)
                score = np.float32(score + prob)
                node.append(tok)
            if score >= best_score:
                best_tokens, best_score, best_len = tokens, score, match_len
        return best_tokens, best_score, best_len


class SuffixDecodingRef:
    """vLLM's ``SuffixDecodingProposer`` over Arctic's ``SuffixDecodingCache``, with brute-force trees."""

    def __init__(self, depth, max_cached, factor, offset, min_prob):
        self.depth, self.max_cached = depth, max_cached
        self.factor, self.offset, self.min_prob = factor, offset, min_prob
        self.global_tree = SuffixTreeRef(depth)
        self.local = {}
        self.cached = []  # request ids in the global tree, oldest first
        self.seen = {}  # request id -> number of response tokens added

    def propose(self, rid, prompt, output_so_far, k, max_len):
        if len(prompt) + len(output_so_far) >= max_len:  # vLLM: at max_model_len, skipped untouched
            return []
        self._start(rid, prompt)
        new = output_so_far[self.seen[rid]:]
        self.seen[rid] = len(output_so_far)
        self.local[rid].extend(0, new)
        if rid in self.cached:
            self.global_tree.extend(rid, new)
        history = list(prompt) + list(output_so_far)
        pattern = history[max(0, len(history) - self.depth):]
        max_spec = min(k, max_len - len(history) - 1)
        best = self.local[rid].speculate(pattern, max_spec, self.factor, self.offset, self.min_prob)
        if self.max_cached != 0:
            cand = self.global_tree.speculate(pattern, max_spec, self.factor, self.offset, self.min_prob)
            if cand[1] > best[1]:
                best = cand
        return best[0]

    def _start(self, rid, prompt):
        """``start_request`` on a request's first proposal; evicts the oldest other global slot."""
        if rid not in self.seen:
            self.local[rid] = SuffixTreeRef(self.depth)
            self.local[rid].extend(0, prompt)
            self.seen[rid] = 0
            if self.max_cached != 0:
                self.cached.append(rid)
                while self.max_cached > 0 and len(self.cached) > self.max_cached:
                    victim = next(r for r in self.cached if r != rid)
                    self.cached.remove(victim)
                    self.global_tree.remove(victim)

    def finish(self, rid, prompt, output):
        """The finishing step adds the last tokens (a request never proposed for is started first)."""
        self._start(rid, prompt)
        new = output[self.seen[rid]:]
        if rid in self.cached:
            self.global_tree.extend(rid, new)
        del self.local[rid]


def lcp(a, b):
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
