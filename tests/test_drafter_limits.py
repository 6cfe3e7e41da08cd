"""The drafters' rules at the generation limit, on hand-worked examples, and the trace field stating it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from specplan.errors import TraceError
from specplan.acceptance.drafters import DrafterSettings, build_drafter
from specplan.acceptance.drafters.limits import UNBOUNDED, generation_limit
from specplan.workloads.request import Request
from specplan.workloads.tokentrace import read_token_trace, write_token_trace


def _req(prompt, output, max_new_tokens=None):
    return Request(id="r", prompt_ids=prompt, output_ids=output, max_new_tokens=max_new_tokens)


# ---- the limit a request ran with -------------------------------------------------------------------

def test_generation_limit_stated_eos_or_output_length():
    assert generation_limit(_req([1], [4, 5, 2], 9), (2,)) == 9  # stated wins, EOS or not
    assert generation_limit(_req([1], [4, 5, 2]), (2,)) == UNBOUNDED  # stopped on EOS: not at a limit
    assert generation_limit(_req([1], [4, 5, 2])) == 3  # no EOS configured: ran to its limit
    assert generation_limit(_req([1], [4, 5, 6]), (2,)) == 3


def test_trace_field_round_trips(tmp_path):
    reqs = [_req([1, 2], [3, 4], 8), Request(id="s", prompt_ids=[1], output_ids=[5])]
    path = write_token_trace(reqs, tmp_path / "t.jsonl")
    back = read_token_trace(path)
    assert [r.max_new_tokens for r in back] == [8, None]
    assert all(a.same_as(b) for a, b in zip(reqs, back))


@pytest.mark.parametrize("value, words", [(1, "below the 2 output tokens"), ("8", "wrong type")])
def test_trace_field_rejects_bad_values(tmp_path, value, words):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"id": "a", "prompt_ids": [1], "output_ids": [3, 4], "max_new_tokens": value}) + "\n")
    with pytest.raises(TraceError, match="max_new_tokens") as err:
        read_token_trace(path)
    assert words in str(err.value) and f"{path}:1" in str(err.value)


# ---- TensorRT-LLM NGram: at most max_new_tokens - 1 - committed tokens, none with one left ------------

@pytest.mark.parametrize("limit, eos, want", [
    (None, (), ([3], [])),  # at its limit (5 = output length): rem = 1 at c=3, 0 at c=4
    (7, (), ([3, 1, 2], [1, 2])),  # stated 7: rem = 3 and 2
    (None, (1,), ([3, 1, 2], [1, 2, 3])),  # output ends in EOS: no limit
])
def test_ngram_pool_at_the_limit(limit, eos, want):
    """Prompt 1 2 3 1 2, output 3 1 2 3 1, K=3, N=2, private pool, drafting at c=3 then c=4.

    c=3 (history 1 2 3 1 2 3 1 2): the lazy first scan maps (1,2) -> {(3,1,2)}, (2,3) -> {(1,2,3),
    (1,2)}; lookup (1,2) gives 3 1 2. c=4 (history ... 3): the update from start_index 4 re-adds
    (1,2,3) under (2,3), whose oldest match is 1 2 3.
    """
    r = _req([1, 2, 3, 1, 2], [3, 1, 2, 3, 1], limit)
    oracle = build_drafter(DrafterSettings(kind="ngram", max_draft_len=3, max_matching_ngram_size=2,
                                           is_public_pool=False, eos_token_ids=eos), [r])
    got = tuple(oracle.propose(0, c, 3).tolist() for c in (3, 4))
    assert got == want


# ---- transformers prompt lookup: no candidates with one token left, accepted cut to the budget ------

@pytest.mark.parametrize("limit, want", [
    (None, ((3, 1), (0, 0))),  # limit 5: c=3 accepts 1 of the 2 matching tokens, c=4 proposes nothing
    (7, ((3, 2), (3, 1))),
])
def test_hf_prompt_lookup_at_the_limit(limit, want):
    """Prompt 4 5 6 4 5, output 6 4 5 6 4, K=3, ngram 2.

    c=3 (history 4 5 6 4 5 6 4 5): (4,5) first at 0, draft 6 4 5; the truth 6 4 matches 2 tokens,
    but ``_assisted_decoding`` keeps at most max_length - input_length = 2 tokens at limit 5 (1
    accepted + 1). c=4 (history ... 6): one token left at limit 5; at 7, (5,6) first at 1 drafts
    4 5 6 and the truth 4 matches 1.
    """
    r = _req([4, 5, 6, 4, 5], [6, 4, 5, 6, 4], limit)
    oracle = build_drafter(DrafterSettings(kind="pld", pld_variant="hf", max_draft_len=3), [r])
    drafted, accepted = oracle.draft(np.array([0, 0]), np.array([3, 4]), 3)
    assert tuple(zip(drafted.tolist(), accepted.tolist())) == want


# ---- vLLM suffix decoding: bounded by max_model_len, not by max_tokens -------------------------------

@pytest.mark.parametrize("max_model_len, want", [(None, [2, 3, 4, 1]), (12, [2, 3]), (10, []), (9, [])])
def test_suffix_bound_is_max_model_len(max_model_len, want):
    """Prompt 1 2 3 4 1 2 3 4, output 1 2 (one token left at c=1, which vLLM ignores), K=4.

    History 1 2 3 4 1 2 3 4 1 (9 tokens): the match "1 2 3 4 1" (count 2) continues 2 3 4 1 with
    probability 1/2 each, score 2.0, as high as "2 3 4 1"'s and longer. ``max_model_len`` 12 leaves
    12 - 9 - 1 = 2 tokens; 10 leaves none; 9 skips the request.
    """
    r = _req([1, 2, 3, 4, 1, 2, 3, 4], [1, 2])
    oracle = build_drafter(DrafterSettings(kind="suffix", suffix_max_cached_requests=0, max_model_len=max_model_len),
                           [r])
    assert oracle.propose(0, 1, 4).tolist() == want
