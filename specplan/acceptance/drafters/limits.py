"""The generation limit each request ran with, which the drafters' "one token left" rules read.

A token trace may state a request's ``max_new_tokens`` (``SamplingParams.max_tokens`` in vLLM and
TensorRT-LLM, ``max_new_tokens`` in transformers). Where it does not, an output that ends in one of
the configured ``eos_token_ids`` stopped on its own, so it is not at its limit and no limit rule
applies (the limit is ``UNBOUNDED``); any other output is taken to have run to its limit
(``max_new_tokens = output_len``).

The rules at the limit G, for a history of ``committed`` output tokens:

- TensorRT-LLM NGram (``_torch/speculative/ngram.py``, ``NGramDrafter.prepare_draft_tokens`` passes
  ``max_sequence_length = py_orig_prompt_len + py_max_new_tokens`` to
  ``NGramPoolManager.get_draft_tokens``): at most ``G - 1 - committed`` draft tokens, none (and no
  pool update) when that is <= 0.
- transformers prompt lookup (``PromptLookupCandidateGenerator.get_candidates``,
  ``max_length = prompt + max_new_tokens``): no candidates when ``max_length == input_length + 1``,
  i.e. committed = G - 1; the draft itself is not cut to the budget, but ``_assisted_decoding``
  keeps at most ``max_length - input_length`` tokens, so at most ``G - 1 - committed`` accepted.
- vLLM suffix decoding has no rule at ``max_tokens``: its bound is ``max_model_len``
  (``SuffixDecodingProposer.propose``: ``max_spec_tokens = min(K, max_model_len - num_tokens - 1)``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: The limit of a request that stopped on EOS without a stated ``max_new_tokens``: never reached.
UNBOUNDED = 1 << 40


def generation_limit(req, eos_token_ids: Sequence[int] = ()) -> int:
    """One request's ``max_new_tokens``: stated, else ``UNBOUNDED`` after EOS, else its output length."""
    if req.max_new_tokens is not None:
        return int(req.max_new_tokens)
    if req.output_len and int(req.output_ids[-1]) in eos_token_ids:
        return UNBOUNDED
    return req.output_len


def generation_limits(requests: Sequence, eos_token_ids: Sequence[int] = ()) -> np.ndarray:
    """``generation_limit`` of every request, as int64."""
    eos = frozenset(int(t) for t in eos_token_ids)
    return np.array([generation_limit(r, eos) for r in requests], dtype=np.int64)
