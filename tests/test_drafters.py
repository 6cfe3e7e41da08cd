"""Exact drafters: seed 000's worked NGram examples, hand-worked replays, properties, settings, cache."""

from __future__ import annotations

from pathlib import Path

import drafter_reference as ref
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from specplan.config import SpeculationConfig
from specplan.errors import ConfigError, SpecplanError
from specplan.acceptance.drafters import (DrafterSettings, PrecomputeCache, build_drafter, make_drafter_oracle,
                                         replay_trace, summarize_replay)
from specplan.workloads.request import Request
from specplan.workloads.tokentrace import read_token_trace

FIXTURE = Path(__file__).parent / "data" / "drafters" / "specbench_vanilla.jsonl"

ALL_KINDS = [
    dict(kind="ngram"), dict(kind="ngram", is_public_pool=False), dict(kind="sa"),
    dict(kind="sa", enable_global_pool=True), dict(kind="vllm_ngram"), dict(kind="suffix"), dict(kind="pld"),
    dict(kind="pld", pld_variant="hf", eos_token_ids=(2,)),
]


def _ids(kw):
    return "-".join(str(v) for v in kw.values())


# ---- seed 000: TensorRT-LLM blog's NGram examples ---------------------------------------------------

def test_seed_first_scan_of_8_tokens_adds_18_pairs():
    # max_matching_ngram_size=3, max_draft_len=5, 8-token input: 5 + 6 + 7 windows of sizes 3, 2, 1.
    req = Request(id="a", prompt_ids=list(range(10, 17)), output_ids=[17, 18, 19, 20])
    oracle = build_drafter(DrafterSettings(kind="ngram", max_draft_len=5, max_matching_ngram_size=3), [req])
    oracle.draft(np.array([0]), np.array([1]), 5)  # first call: prefix = 7 prompt tokens + 1 generated
    m = oracle.metrics()
    assert m["public_pool_entries"] == 18 and m["public_pool_patterns"] == 18


def _words(text):
    words = text.split()
    vocab = {w: i + 3 for i, w in enumerate(dict.fromkeys(words))}
    return [vocab[w] for w in words], {i: w for w, i in vocab.items()}


def test_seed_lookup_tries_the_longest_key_first():
    # "[..., retry, with, exponential, backoff]": the 3-token key wins over the older 1-token key (backoff ->
    # "is slow . use retry"), and its value is cut to max_draft_len = 5.
    ids, words = _words("backoff is slow . use retry with exponential backoff and jitter to avoid storms . "
                        "we retry with exponential backoff and jitter")
    prompt, output = ids[:-3], ids[-3:]
    req = Request(id="a", prompt_ids=prompt, output_ids=output + [1, 1, 1, 1, 1, 1])
    oracle = build_drafter(DrafterSettings(kind="ngram", max_draft_len=5, max_matching_ngram_size=3), [req])
    draft = oracle.propose(0, 1, 5)
    assert [words[t] for t in draft] == ["and", "jitter", "to", "avoid", "storms"]


def test_seed_no_fallback_to_a_shorter_key_with_a_longer_value():
    # Prefix "a a a a a" (N=3, K=5): the 3-gram key holds [(a, a), (a,)], the 2-gram key (a, a, a) first; the
    # lookup stops at the 3-gram key and drafts 2 tokens although shorter keys hold longer values.
    req = Request(id="a", prompt_ids=[7] * 4, output_ids=[7] * 10)
    oracle = build_drafter(DrafterSettings(kind="ngram", max_draft_len=5, max_matching_ngram_size=3), [req])
    assert oracle.propose(0, 1, 5).tolist() == [7, 7]


def test_ngram_truncates_to_remaining_length():
    # rem = max_seq_len - 1 - L: with 3 output tokens left to generate after the history, at most 2 are drafted.
    req = Request(id="a", prompt_ids=[1, 2, 3, 4, 5, 6, 1], output_ids=[2, 3, 4, 5])
    oracle = build_drafter(DrafterSettings(kind="ngram", max_draft_len=4), [req])
    assert oracle.propose(0, 1, 4).tolist() == [3, 4]  # L = 8, max_seq_len = 11, rem = 2
    assert oracle.propose(0, 3, 4).tolist() == []  # L = 10, rem = 0: no call at all


# ---- hand-worked replays -----------------------------------------------------------------------------

def test_replay_steps_commit_accepted_plus_one():
    # SA, K=2: c=1 history 5 6 7 8 9 | 5 -> "5" earliest at 0, draft [6, 7], both right, commit 3;
    # c=4 history ... 5 6 7 8 -> "5 6 7 8" at 0, draft [9, 5], truth [9, 1]: accept 1, commit 2 = the end.
    req = Request(id="a", prompt_ids=[5, 6, 7, 8, 9], output_ids=[5, 6, 7, 8, 9, 1])
    steps = replay_trace([req], DrafterSettings(kind="sa", max_draft_len=2), keep_drafts=True)
    assert steps[["position", "committed", "drafted", "accepted", "commit"]].values.tolist() == [
        [6, 1, 2, 2, 3], [9, 4, 2, 1, 2]]
    assert steps["draft"].tolist() == [[6, 7], [9, 5]]


def test_reference_pld_drafts_in_the_prefill_and_needs_full_continuations():
    # N=3, K=2. c=0 (prompt only) 1 2 3 1 2: "3 1 2" only at the end, "1 2" at 0 -> [3, 1], accept 2.
    # c=3: "3 1 2" earliest at 2 but 2+3 < 8-3 fails (no self-overlap), "1 2" at 0 -> [3, 1], accept 1.
    req = Request(id="a", prompt_ids=[1, 2, 3, 1, 2], output_ids=[3, 1, 2, 3, 9])
    steps = replay_trace([req], DrafterSettings(kind="pld", max_draft_len=2), keep_drafts=True)
    assert steps[["position", "committed", "drafted", "accepted"]].values.tolist() == [[5, 0, 2, 2], [8, 3, 2, 1]]
    assert steps["draft"].tolist() == [[3, 1], [3, 1]]


def test_hf_pld_cuts_at_eos_and_skips_the_last_token():
    # "1 2" earliest at 0, continuation 9 EOS 5: cut before EOS -> [9]; nothing with one token left.
    req = Request(id="a", prompt_ids=[1, 2, 9, 2, 5, 1, 2], output_ids=[9, 2, 7])
    oracle = build_drafter(DrafterSettings(kind="pld", pld_variant="hf", max_draft_len=3, eos_token_ids=(2,)), [req])
    assert oracle.propose(0, 0, 3).tolist() == [9]
    assert oracle.propose(0, 2, 3).tolist() == []
    no_eos = build_drafter(DrafterSettings(kind="pld", pld_variant="hf", max_draft_len=3), [req])
    assert no_eos.propose(0, 0, 3).tolist() == [9, 2, 5]


def test_summary_uses_vllm_metric_definitions():
    steps = pd.DataFrame({"rid": [0, 0, 0, 1], "category": ["x", "x", "x", "y"], "drafted": [3, 0, 2, 3],
                          "accepted": [2, 0, 2, 0], "commit": [3, 1, 3, 1]})
    s = summarize_replay(steps, k=3).set_index("group")
    o = s.loc["overall"]
    assert (o.drafts, o.draft_tokens, o.accepted_tokens) == (3, 8, 4)
    assert o.mean_acceptance_length == pytest.approx(1 + 4 / 3)
    assert o.acceptance_rate == pytest.approx(0.5)
    assert o.histogram == [1, 0, 2, 0]  # acceptance lengths 1, 3, 3
    assert o.per_position == pytest.approx([2 / 3, 2 / 3, 0.0])
    assert o.tokens_per_step == pytest.approx(2.0)
    assert s.loc["y"].mean_acceptance_length == 1.0 and s.loc["x"].drafts == 2


# ---- properties ------------------------------------------------------------------------------------

@st.composite
def small_traces(draw):
    tok = st.integers(0, 2)
    return [Request(id=str(i), prompt_ids=draw(st.lists(tok, min_size=1, max_size=12)),
                    output_ids=draw(st.lists(tok, min_size=1, max_size=20))) for i in range(draw(st.integers(1, 3)))]


@pytest.mark.parametrize("kw", ALL_KINDS, ids=_ids)
@settings(max_examples=15)
@given(requests=small_traces(), k=st.integers(1, 6))
def test_accepted_within_drafted_within_k(kw, requests, k):
    steps = replay_trace(requests, DrafterSettings(max_draft_len=k, **kw), keep_drafts=True)
    assert (steps["accepted"] <= steps["drafted"]).all() and (steps["drafted"] <= k).all()
    for r, g in steps.groupby("rid"):
        out = requests[r].output_ids
        assert g["commit"].sum() == len(out) - g["committed"].iloc[0]  # the steps cover the rest of the output
        # HF keeps at most the tokens left before the limit (the output's end unless it ends in EOS)
        cap = len(out) if kw.get("pld_variant") == "hf" and out[-1] not in kw["eos_token_ids"] else 10 ** 9
        for c, d, a in zip(g["committed"], g["draft"], g["accepted"]):
            assert a == min(ref.lcp(d, out[c:].tolist()), cap - 1 - c)


@pytest.mark.parametrize("kw", ALL_KINDS, ids=_ids)
def test_repeated_span_is_accepted_in_full(kw):
    span = list(range(10, 40))
    req = Request(id="a", prompt_ids=[1] + span + [2], output_ids=span + [3])
    k = 4
    steps = replay_trace([req], DrafterSettings(max_draft_len=k, **kw))
    first = 5 if kw["kind"] == "vllm_ngram" else 1  # vLLM's default prompt_lookup_min is 5
    inside = steps[(steps["committed"] >= first) & (steps["committed"] + k <= len(span))]
    assert len(inside) >= 5
    assert (inside["accepted"] == inside["drafted"]).all() and (inside["drafted"] > 0).all()
    if kw["kind"] != "suffix":  # copy drafters draft K tokens; suffix trees cap by match length and probability
        assert (inside["drafted"] == k).all()


LEAKS = {  # settings -> does request A change request B's drafts?
    "ngram-private": (dict(kind="ngram", is_public_pool=False), False),
    "ngram-public": (dict(kind="ngram", is_public_pool=True), True),
    "sa": (dict(kind="sa"), False),
    "sa-global": (dict(kind="sa", enable_global_pool=True), True),
    "suffix-local": (dict(kind="suffix", suffix_max_cached_requests=0), False),
    "suffix-global": (dict(kind="suffix"), True),
}


@pytest.mark.parametrize("name", LEAKS)
def test_nothing_leaks_between_requests_without_shared_state(name):
    kw, leaks = LEAKS[name]
    a = Request(id="a", prompt_ids=list(range(100, 110)), output_ids=list(range(200, 240)))
    b = Request(id="b", prompt_ids=list(range(300, 310)), output_ids=list(range(200, 240)))  # copies A's output
    s = DrafterSettings(max_draft_len=4, **kw)
    alone = replay_trace([b], s)[["committed", "drafted", "accepted"]].values
    after = replay_trace([a, b], s)
    after = after[after["rid"] == 1][["committed", "drafted", "accepted"]].values
    if leaks:
        assert after[:, 2].sum() > alone[:, 2].sum()
    else:
        assert np.array_equal(alone, after)


def test_ngram_leaves_its_trajectory_when_k_changes():
    requests = read_token_trace(FIXTURE)[:3]
    s = DrafterSettings(kind="ngram", max_draft_len=4, is_public_pool=False)
    oracle = build_drafter(s, requests)
    pool = ref.NGramPoolManagerRef(4, 2, True, True, False)
    r = requests[0]
    tokens = r.tokens.tolist()
    c = 1
    for i in range(40):
        k = 4 if i < 10 else 2  # 10 steps on the precomputed path, then K drops
        pool.max_total_draft_tokens = k
        want = pool.get_draft_tokens(tokens[:r.prompt_len + c], 0, r.prompt_len + r.output_len)
        assert oracle.propose(0, c, k).tolist() == want
        c += ref.lcp(want, tokens[r.prompt_len + c:]) + 1
    assert oracle.metrics()["ngram_offtrack_requests"] == 1


# ---- SA global pool slots ----------------------------------------------------------------------------

def test_sa_global_pool_raises_when_every_slot_is_in_flight():
    reqs = [Request(id=str(i), prompt_ids=[1, 2, 3], output_ids=[4, 5, 6]) for i in range(3)]
    oracle = build_drafter(DrafterSettings(kind="sa", enable_global_pool=True, global_pool_size=2), reqs,
                           max_batch_size=2)
    oracle.on_commit(np.array([0, 1]), np.array([1, 1]))
    with pytest.raises(SpecplanError, match="global_pool_size"):
        oracle.on_commit(np.array([2]), np.array([1]))
    oracle.on_finish(np.array([0]))  # a completed request's slot can be evicted and reused
    oracle.on_commit(np.array([2]), np.array([1]))
    assert oracle.metrics()["global_pool_evictions"] == 1


# ---- settings ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("kw, field", [
    (dict(kind="sa", max_matching_ngram_size=0), "max_matching_ngram_size"),
    (dict(kind="sa", enable_global_pool=True, max_matching_ngram_size=65), "max_matching_ngram_size"),
    (dict(kind="ngram", max_matching_ngram_size=0), "max_matching_ngram_size"),
    (dict(kind="sa", global_pool_size=64), "global_pool_size"),
    (dict(kind="vllm_ngram", prompt_lookup_min=6, prompt_lookup_max=5), "prompt_lookup_min"),
    (dict(kind="pld", pld_variant="fast"), "pld_variant"),
    (dict(kind="lookahead"), "decoding_type"),
])
def test_invalid_settings_name_the_field(kw, field):
    with pytest.raises(ConfigError, match=field) as err:
        DrafterSettings(**kw)
    assert "\n" not in str(err.value)


def test_engine_defaults():
    assert DrafterSettings(kind="vllm_ngram").lookup_range == (5, 5)
    assert DrafterSettings(kind="vllm_ngram", prompt_lookup_min=3).lookup_range == (3, 3)
    assert DrafterSettings(kind="vllm_ngram", prompt_lookup_max=7).lookup_range == (7, 7)
    assert DrafterSettings(kind="sa", enable_global_pool=True).pool_slots(8) == 64
    assert DrafterSettings(kind="sa", enable_global_pool=True).pool_slots(100) == 100
    with pytest.raises(ConfigError, match="global_pool_size"):
        DrafterSettings(kind="sa", enable_global_pool=True, global_pool_size=4).pool_slots(8)
    with pytest.raises(ConfigError, match="1024"):
        DrafterSettings(kind="sa", enable_global_pool=True).pool_slots(2000)
    from_spec = DrafterSettings.from_spec
    assert from_spec(SpeculationConfig(decoding_type="SA")).ngram_size == -1
    assert from_spec(SpeculationConfig(decoding_type="SA", max_matching_ngram_size=3)).ngram_size == 3
    assert from_spec(SpeculationConfig(decoding_type="NGram")).ngram_size == 2
    assert from_spec(SpeculationConfig(decoding_type="pld")).ngram_size == 3
    assert from_spec(SpeculationConfig(decoding_type="pld", pld_variant="hf")).ngram_size == 2
    from specplan.config import EngineConfig
    from specplan.simulator.presets import resolve_speculation

    auto = SpeculationConfig(decoding_type="AUTO")
    assert from_spec(resolve_speculation(EngineConfig(max_batch_size=4), auto)).ngram_size == 3
    assert from_spec(resolve_speculation(EngineConfig(max_batch_size=8), auto)).ngram_size == 5
    with pytest.raises(ConfigError, match="decoding_type"):
        from_spec(SpeculationConfig(decoding_type="none"))


# ---- cache -------------------------------------------------------------------------------------------

def test_precompute_cache_round_trips_through_disk(tmp_path):
    requests = read_token_trace(FIXTURE)
    s = DrafterSettings(kind="sa", max_draft_len=4)
    first = PrecomputeCache(tmp_path)
    a = build_drafter(s, requests, cache=first).draft(np.arange(len(requests)), np.ones(len(requests), int), 4)
    assert first.misses == len(requests) and len(list(tmp_path.glob("*.npz"))) == 1
    second = PrecomputeCache(tmp_path)
    b = build_drafter(s, requests, cache=second).draft(np.arange(len(requests)), np.ones(len(requests), int), 4)
    assert second.misses == 0 and second.hits == len(requests)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    other = PrecomputeCache(tmp_path)
    build_drafter(s.with_(max_matching_ngram_size=3), requests, cache=other)
    assert other.misses == len(requests)  # other settings never read those tables


def test_make_drafter_oracle_from_speculation_config():
    requests = read_token_trace(FIXTURE)
    oracle = make_drafter_oracle(SpeculationConfig(decoding_type="NGram", is_public_pool=False), requests, 8)
    drafted, accepted = oracle.draft(np.arange(len(requests)), np.ones(len(requests), int), 4)
    assert (accepted <= drafted).all() and (drafted <= 4).all() and drafted.sum() > 0
