"""Prompt lookup decoding, in the two variants people run (``pld_variant``).

``reference`` (apoorvumang/prompt-lookup-decoding, ``find_candidate_pred_tokens``; defaults
``max_ngram_size`` 3, ``num_pred_tokens`` 10): n from the maximum down to 1; the first window
match, left to right, with ``end_idx <= input_length`` and ``start_idx < input_length - n`` wins.
Drafts are always exactly K tokens (a match whose continuation is shorter is skipped). Since both
conditions bound the start from above, only the earliest occurrence of each n can win.

``hf`` (transformers 5.x ``PromptLookupCandidateGenerator``; ``prompt_lookup_num_tokens`` = K,
``max_matching_ngram_size`` default 2): n from ``min(max, len-1)`` down to 1; the first n with any
occurrence other than the suffix itself wins, at its leftmost occurrence (overlap allowed); the
draft is the following tokens cut at the history's end and cut before the first EOS, with no
fallback when that leaves nothing; nothing is proposed when one token is left before the generation
limit (``max_length == input_length + 1``, ``limits``); the draft is not clipped to the remaining
budget, the accepted tokens are (``_assisted_decoding`` keeps at most ``max_length - input_length``).

Both verify a draft in the prefill forward (the first call sees the prompt alone), so they draft at
committed = 0. The reference loop's placeholder token (``[100]`` when no match) is modelled as no draft.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from specplan.acceptance.drafters.settings import DrafterSettings
from specplan.acceptance.drafters.suffix_automaton import (FPOS, LEN, LINK, sam_extend, sam_new, sam_root,
                                                          scan_longest, state_with_length)
from specplan.acceptance.drafters.table import TableOracle, match_table


@njit(cache=True)
def scan_reference_pld(tokens, l_lo, l_hi, max_n, k):
    """Reference PLD for every history length L in [l_lo, l_hi]: (n used, draft source or -1).

    The earliest occurrence of the n-suffix is the ``firstpos`` of its automaton state when the
    suffix occurs earlier; otherwise its only occurrence is the suffix itself, which never qualifies.
    """
    m = l_hi - l_lo + 1
    ell = np.zeros(m, dtype=np.int32)
    src = np.full(m, -1, dtype=np.int32)
    st, ed, hk, hv, meta = sam_new(l_hi)
    root = sam_root(st, meta)
    last = root
    for i in range(l_hi):
        last = sam_extend(st, ed, hk, hv, meta, root, last, tokens[i])
        L = i + 1
        if L < l_lo:
            continue
        s = st[LINK, last]
        top = min(max_n, st[LEN, s])
        for n in range(top, 0, -1):
            s = state_with_length(st, s, n)
            start = st[FPOS, s] - n + 1
            if start + n + k <= L and start + n < L - n:
                ell[L - l_lo] = n
                src[L - l_lo] = start + n
                break
    return ell, src


def pld_tables(req, settings: DrafterSettings, k: int):
    """Per-position drafts of the chosen PLD variant for one request (committed 0 .. output_len-1)."""
    P, O = req.prompt_len, req.output_len
    tokens = req.tokens
    n = settings.ngram_size
    if settings.pld_variant == "reference":
        ell, src = scan_reference_pld(tokens, P, P + O - 1, n, k)
        return match_table(tokens, P, ell, src, avail=np.where(src >= 0, k, 0))
    ell, src = scan_longest(tokens, P, P + O - 1, n, 1)
    L = P + np.arange(O)
    avail = np.where(src >= 0, L - src, 0)
    if settings.eos_token_ids:
        eos_at = np.flatnonzero(np.isin(tokens, settings.eos_token_ids))
        nxt = np.append(eos_at, len(tokens))[np.searchsorted(eos_at, np.maximum(src, 0))]
        avail = np.where(src >= 0, np.minimum(avail, nxt - src), 0)
    return match_table(tokens, P, ell, src, avail=avail)


class PLDOracle(TableOracle):
    """Prompt lookup decoding (reference or HF), drafting from the prefill on."""

    drafts_at_prefill = True

    def __init__(self, settings: DrafterSettings, requests, cache=None) -> None:
        self.k_dependent = settings.pld_variant == "reference"  # "continuation is full length" depends on K
        compute = (lambda r, k: pld_tables(r, settings, k)) if self.k_dependent else \
            (lambda r: pld_tables(r, settings, settings.max_draft_len))
        super().__init__(settings, requests, compute, cache)

    def limit(self, rids, committed, k):
        if self.settings.pld_variant == "hf":  # no candidates when one token is left before the limit
            return np.where(committed == self.max_new_tokens[rids] - 1, 0, k)
        return np.full(np.shape(committed), k, dtype=np.int64)

    def draft(self, rids, committed, k):
        """HF keeps at most the tokens left before the limit, so at most ``max_new_tokens - 1 - committed`` accepted."""
        drafted, accepted = super().draft(rids, committed, k)
        if self.settings.pld_variant == "hf" and len(drafted):
            left = self.max_new_tokens[np.asarray(rids, dtype=np.int64)] - np.asarray(committed, dtype=np.int64) - 1
            accepted = np.minimum(accepted, np.maximum(left, 0))
        return drafted, accepted
