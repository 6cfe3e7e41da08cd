"""vLLM's n-gram proposer (``vllm/v1/spec_decode/ngram_proposer.py``), from precomputed tables.

The engine runs KMP over the reversed history and finds the longest suffix n-gram with
``prompt_lookup_min <= n <= prompt_lookup_max`` that occurs earlier; among occurrences of that
length it takes the earliest (``prev_lps >= longest`` moves the position toward earlier original
indices), and once a match reaches ``max_n`` the LPS resets so matches are capped there. The draft
is up to ``k = min(k, max_model_len - num_tokens)`` tokens after the match, fewer when the history
ends sooner; nothing when no match or ``num_tokens < min_n``. Drafts have variable length.

That is the suffix automaton's capped longest match with a lower bound, so the table comes from
the same scan. ``max_model_len`` is the engine's (``DrafterSettings.max_model_len``; None: no bound):
vLLM drafts past the request's ``max_tokens`` (it counts the accepted ones before its stop check), so
the draft is not cut at the recorded output's end; what is accepted stays within it.
"""

from __future__ import annotations

import numpy as np

from specplan.acceptance.drafters.settings import DrafterSettings
from specplan.acceptance.drafters.suffix_automaton import scan_longest
from specplan.acceptance.drafters.table import TableOracle, match_table


def vllm_ngram_tables(req, settings: DrafterSettings):
    """Per-position matches of vLLM's n-gram proposer for one request (committed 0 .. output_len-1)."""
    lo, hi = settings.lookup_range
    P, O = req.prompt_len, req.output_len
    tokens = req.tokens
    ell, src = scan_longest(tokens, P, P + O - 1, hi, lo)
    return match_table(tokens, P, ell, src)


class VllmNgramOracle(TableOracle):
    """vLLM n-gram: drafted = min(K, tokens after the match, max_model_len - num_tokens)."""

    def __init__(self, settings: DrafterSettings, requests, cache=None) -> None:
        super().__init__(settings, requests, lambda r: vllm_ngram_tables(r, settings), cache)

    def limit(self, rids, committed, k):
        mml = self.settings.max_model_len
        if mml is None:
            return np.full(np.shape(committed), k, dtype=np.int64)
        return np.minimum(k, mml - (self.prompt_lens[rids] + committed))
