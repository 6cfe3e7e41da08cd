"""Every fast drafter agrees step for step with its brute-force reference (``drafter_reference``).

Hypothesis draws short sequences over a 3-token alphabet, so that matches, repeated patterns and
ties are common; the same checks then run on a real Spec-Bench trace (``tests/data/drafters``).
"""

from __future__ import annotations

from pathlib import Path

import drafter_reference as ref
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from specplan.acceptance.drafters import DrafterSettings, build_drafter
from specplan.workloads.request import Request
from specplan.workloads.tokentrace import read_token_trace

FIXTURE = Path(__file__).parent / "data" / "drafters" / "specbench_vanilla.jsonl"
EOS = 2


def _requests(draw, n_max=3, alphabet=3, prompt_max=12, output_max=20):
    """Short requests; some state a generation limit (at or a little past the output's end)."""
    n = draw(st.integers(1, n_max))
    tok = st.integers(0, alphabet - 1)
    out = []
    for i in range(n):
        output = draw(st.lists(tok, min_size=1, max_size=output_max))
        limit = draw(st.none() | st.integers(0, 3).map(lambda extra, o=len(output): o + extra))
        out.append(Request(id=str(i), prompt_ids=draw(st.lists(tok, min_size=1, max_size=prompt_max)),
                           output_ids=output, max_new_tokens=limit))
    return out


def _max_length(r, settings):
    """prompt + the generation limit: the stated one, else none after an EOS, else the output's length."""
    if r.max_new_tokens is not None:
        return r.prompt_len + r.max_new_tokens
    if int(r.output_ids[-1]) in settings.eos_token_ids:
        return 10 ** 9
    return r.prompt_len + r.output_len


@st.composite
def traces(draw, **kw):
    return _requests(draw, **kw)


@pytest.fixture(scope="module")
def real_trace():
    return read_token_trace(FIXTURE)


# ---- per-request drafters: every position, any K --------------------------------------------------

def _table_reference(settings: DrafterSettings, k: int):
    """The reference draft for history h of request r (a function of the settings)."""
    kind = settings.kind
    if kind == "SA":
        return lambda h, r: ref.sa_draft(h, k, settings.ngram_size)
    if kind == "vllm_ngram":
        lo, hi = settings.lookup_range
        # vLLM bounds the draft by the engine's max_model_len only, not by the request's max_tokens.
        mml = settings.max_model_len if settings.max_model_len is not None else 2**31
        return lambda h, r: ref.vllm_ngram_kmp(h, lo, hi, mml, k)
    if settings.pld_variant == "reference":
        return lambda h, r: ref.pld_reference_draft(h, settings.ngram_size, k)
    return lambda h, r: ref.pld_hf_draft(h, _max_length(r, settings), k, settings.ngram_size,
                                         settings.eos_token_ids)


def _check_every_position(requests, settings, k):
    oracle = build_drafter(settings, requests)
    expect = _table_reference(settings, k)
    rids = np.repeat(np.arange(len(requests)), [r.output_len for r in requests])
    committed = np.concatenate([np.arange(r.output_len) for r in requests])
    drafted, accepted = oracle.draft(rids, committed, k)
    drafted_any = 0
    for i, (rid, c) in enumerate(zip(rids.tolist(), committed.tolist())):
        r = requests[rid]
        tokens = r.tokens.tolist()
        want = expect(tokens[:r.prompt_len + c], r)
        assert oracle.propose(rid, c, k).tolist() == want, (settings.key(), rid, c)
        assert drafted[i] == len(want)
        a = ref.lcp(want, tokens[r.prompt_len + c:])
        if settings.kind == "pld" and settings.pld_variant == "hf":  # _assisted_decoding keeps what fits
            a = min(a, _max_length(r, settings) - (r.prompt_len + c) - 1)
        assert accepted[i] == a
        drafted_any += len(want) > 0
    return drafted_any


TABLE_SETTINGS = [
    dict(kind="sa"),
    dict(kind="sa", max_matching_ngram_size=2),
    dict(kind="vllm_ngram", prompt_lookup_min=1, prompt_lookup_max=3),
    dict(kind="vllm_ngram", prompt_lookup_min=2, prompt_lookup_max=4),
    dict(kind="vllm_ngram", prompt_lookup_min=1, prompt_lookup_max=3, max_model_len=30),
    dict(kind="pld"),
    dict(kind="pld", pld_variant="hf", eos_token_ids=(EOS,)),
]


@pytest.mark.parametrize("kw", TABLE_SETTINGS, ids=lambda kw: "-".join(f"{v}" for v in kw.values()))
@settings(max_examples=25)
@given(requests=traces(), k=st.integers(1, 5))
def test_table_drafters_match_reference(kw, requests, k):
    _check_every_position(requests, DrafterSettings(max_draft_len=k, **kw), k)


@pytest.mark.parametrize("kw", [kw for kw in TABLE_SETTINGS if "max_model_len" not in kw] + [dict(kind="vllm_ngram")],
                         ids=lambda kw: "-".join(f"{v}" for v in kw.values()))
def test_table_drafters_match_reference_on_real_trace(real_trace, kw):
    for k in (3, 10):
        assert _check_every_position(real_trace, DrafterSettings(max_draft_len=k, **kw), k) > 50


def test_vllm_plain_scan_agrees_with_kmp_port():
    """The KMP port (the engine's code) and the plain scan of its definition agree, so either is a reference."""
    rng = np.random.default_rng(0)
    for _ in range(300):
        h = rng.integers(0, 3, rng.integers(1, 30)).tolist()
        lo = int(rng.integers(1, 4))
        hi = lo + int(rng.integers(0, 3))
        k, max_len = int(rng.integers(1, 6)), len(h) + int(rng.integers(0, 6))
        assert ref.vllm_ngram_kmp(h, lo, hi, max_len, k) == ref.vllm_ngram_draft(h, k, lo, hi, max_len)


def test_vllm_docstring_example():
    # ngram_proposer.propose: [1,2,3,4,2,3], min_n 2, max_n 3, k 4 -> [4, 2, 3]
    r = Request(id="x", prompt_ids=[1, 2, 3, 4, 2], output_ids=[3, 4, 2, 3, 9, 9])
    oracle = build_drafter(DrafterSettings(kind="vllm_ngram", prompt_lookup_min=2, prompt_lookup_max=3), [r])
    assert oracle.propose(0, 1, 4).tolist() == [4, 2, 3]


# ---- NGram pool: trajectories with varying K, skipped iterations and interleaved requests ------------

def _drive_ngram(requests, settings, actions):
    """Run the oracle and the verbatim engine code side by side; returns the number of drafting calls."""
    oracle = build_drafter(settings, requests)
    pool = ref.NGramPoolManagerRef(settings.max_draft_len, settings.ngram_size, settings.is_keep_all,
                                   settings.is_use_oldest, settings.is_public_pool)
    committed = [1] * len(requests)
    calls = 0
    for pick, k, skip in actions:
        alive = [i for i, r in enumerate(requests) if committed[i] < r.output_len]
        if not alive:
            break
        rid = alive[pick % len(alive)]
        r = requests[rid]
        c = committed[rid]
        tokens = r.tokens.tolist()
        if skip:  # an iteration without speculation: the pool is not called, one token commits
            committed[rid] += 1
        else:
            pool.max_total_draft_tokens = k
            want = pool.get_draft_tokens(tokens[:r.prompt_len + c], rid, _max_length(r, settings))
            drafted, accepted = oracle.draft(np.array([rid]), np.array([c]), k)
            a = ref.lcp(want, tokens[r.prompt_len + c:])
            assert (drafted[0], accepted[0]) == (len(want), a), (rid, c, k)
            committed[rid] += min(a + 1, r.output_len - c)
            calls += 1
        if committed[rid] >= r.output_len:
            pool.finish(rid)
            oracle.on_finish(np.array([rid]))
    if settings.is_public_pool:
        m = oracle.metrics()
        assert m["public_pool_patterns"] == len(pool.pool)
        assert m["public_pool_entries"] == sum(len(v) for v in pool.pool.values())
    return calls


@settings(max_examples=40)
@given(requests=traces(), n=st.integers(1, 4), kmax=st.integers(1, 5),
       flags=st.tuples(st.booleans(), st.booleans(), st.booleans()), eos=st.sampled_from([(), (EOS,)]),
       actions=st.lists(st.tuples(st.integers(0, 5), st.integers(1, 5), st.booleans()), min_size=0, max_size=60))
def test_ngram_pool_matches_engine_code(requests, n, kmax, flags, eos, actions):
    keep_all, oldest, public = flags
    settings = DrafterSettings(kind="ngram", max_draft_len=kmax, max_matching_ngram_size=n, is_keep_all=keep_all,
                               is_use_oldest=oldest, is_public_pool=public, eos_token_ids=eos)
    _drive_ngram(requests, settings, [(p, min(k, kmax), s) for p, k, s in actions])


@settings(max_examples=30)
@given(requests=traces(), n=st.integers(1, 4), k=st.integers(1, 5),
       flags=st.tuples(st.booleans(), st.booleans(), st.booleans()))
def test_ngram_fixed_k_trajectory_matches_engine_code(requests, n, k, flags):
    """The precomputed private trajectory (and the public pool) along the replay's own path."""
    keep_all, oldest, public = flags
    settings = DrafterSettings(kind="ngram", max_draft_len=k, max_matching_ngram_size=n, is_keep_all=keep_all,
                               is_use_oldest=oldest, is_public_pool=public)
    actions = [(0, k, False)] * sum(r.output_len for r in requests)
    _drive_ngram(requests, settings, actions)


@pytest.mark.parametrize("public", [False, True])
def test_ngram_pool_matches_engine_code_on_real_trace(real_trace, public):
    for n, k in ((2, 4), (5, 3)):
        settings = DrafterSettings(kind="ngram", max_draft_len=k, max_matching_ngram_size=n, is_public_pool=public)
        assert _drive_ngram(real_trace, settings, [(0, k, False)] * 2000) > 500


def test_ngram_is_keep_all_changes_drafts_when_k_varies():
    """A changing K makes is_keep_all matter (so the comparisons above exercise both branches)."""
    rng = np.random.default_rng(3)
    differ = 0
    for _ in range(200):
        seqs = [rng.integers(0, 3, int(rng.integers(2, 14))).tolist() for _ in range(4)]
        ks = rng.integers(1, 5, 60).tolist()
        out = []
        for keep in (True, False):
            pool = ref.NGramPoolManagerRef(4, 2, keep, True, True)
            drafts = []
            for rid, s in enumerate(seqs):
                for L in range(2, len(s)):
                    pool.max_total_draft_tokens = ks[L]
                    drafts.append(pool.get_draft_tokens(s[:L], rid, len(s) + 3))
            out.append(drafts)
        differ += out[0] != out[1]
    assert differ > 0


# ---- online cross-request drafters ------------------------------------------------------------------

@settings(max_examples=30)
@given(requests=traces(n_max=4), depth=st.integers(2, 8), max_cached=st.sampled_from([0, 1, 2, -1]),
       factor=st.sampled_from([0.5, 1.0, 2.0]), offset=st.sampled_from([0.0, 1.0, -0.5]),
       min_prob=st.sampled_from([0.0, 0.1, 0.3, 0.6]), max_model_len=st.sampled_from([None, 12, 20]),
       actions=st.lists(st.tuples(st.integers(0, 5), st.integers(1, 5)), min_size=1, max_size=50))
def test_suffix_decoding_matches_reference(requests, depth, max_cached, factor, offset, min_prob, max_model_len,
                                           actions):
    _drive_suffix(requests, depth, max_cached, factor, offset, min_prob, actions, max_model_len)


def _drive_suffix(requests, depth, max_cached, factor, offset, min_prob, actions, max_model_len=None, check=None):
    """Drafts equal step for step; ``check(oracle, cache)`` runs after every proposal and finish."""
    settings = DrafterSettings(kind="suffix", max_draft_len=5, suffix_max_tree_depth=depth,
                               suffix_max_cached_requests=max_cached, suffix_max_spec_factor=factor,
                               suffix_max_spec_offset=offset, suffix_min_token_prob=min_prob,
                               max_model_len=max_model_len)
    oracle = build_drafter(settings, requests)
    cache = ref.SuffixDecodingRef(depth, max_cached, factor, offset, min_prob)
    committed = [1] * len(requests)
    for rid, r in enumerate(requests):  # one output token: finished by the prefill, never drafted for
        if r.output_len == 1:
            cache.finish(rid, r.prompt_ids.tolist(), r.output_ids.tolist())
            oracle.on_finish(np.array([rid]))
            if check is not None:
                check(oracle, cache)
    nonempty = 0
    for pick, k in actions:
        alive = [i for i, r in enumerate(requests) if committed[i] < r.output_len]
        if not alive:
            break
        rid = alive[pick % len(alive)]
        r = requests[rid]
        c = committed[rid]
        tokens = r.tokens.tolist()
        want = cache.propose(rid, tokens[:r.prompt_len], tokens[r.prompt_len:r.prompt_len + c], k,
                             10 ** 9 if max_model_len is None else max_model_len)
        got = oracle.propose(rid, c, k).tolist()
        assert got == want, (rid, c, k)
        if check is not None:
            check(oracle, cache)
        nonempty += len(got) > 0
        committed[rid] += min(ref.lcp(got, tokens[r.prompt_len + c:]) + 1, r.output_len - c)
        if committed[rid] >= r.output_len:
            cache.finish(rid, tokens[:r.prompt_len], tokens[r.prompt_len:])
            oracle.on_finish(np.array([rid]))
            if check is not None:
                check(oracle, cache)
    return nonempty


def test_suffix_decoding_matches_reference_on_real_trace(real_trace):
    short = sorted(real_trace, key=lambda r: r.prompt_len + r.output_len)[:6]
    actions = [(i % 6, 5) for i in range(400)]
    assert _drive_suffix(short, 24, 3, 1.0, 0.0, 0.1, actions) > 50


def _runs_held(tree):
    """Runs of equal counts over every sibling list of a reference tree."""
    n = 0
    for parent, kids in tree.order.items():
        counts = [tree.live[parent + (t,)] for t in kids]
        n += sum(1 for i, c in enumerate(counts) if i == 0 or counts[i - 1] != c)
    return n


@pytest.mark.parametrize("max_cached", [1, 2, 4])
def test_suffix_eviction_frees_ids_on_real_trace(real_trace, max_cached):
    """Regression: each evicted path stored again leaked run ids (``SuffixTrie.runs``) until the compiled
    code wrote past the array's end (heap corruption at ``--suffix-max-cached-requests 1``).

    Three requests in flight at a time, so in-flight slots are evicted too. Besides equal drafts, the
    global trie holds exactly the reference's nodes at every step and its runs at every finish;
    freed ids are taken first, so node ids ever allocated equal the peak of nodes held, and run ids
    stay below it (a run holds at least one node besides the root).
    """
    requests, depth = sorted(real_trace, key=lambda r: r.prompt_len + r.output_len)[:8], 24
    peak, finished = [0], set()

    def check(oracle, cache):
        g, tree = oracle._global, cache.global_tree
        assert g.num_nodes == 1 + len(tree.live)
        peak[0] = max(peak[0], g.num_nodes)
        node_ids, run_ids = g.ids_allocated
        assert node_ids == peak[0] and run_ids < node_ids
        done = oracle._added.keys() - oracle._local.keys()
        if done - finished:
            assert g.num_runs == _runs_held(tree)
            finished.update(done)

    actions = [(i % 3, 4) for i in range(3000)]
    assert _drive_suffix(requests, depth, max_cached, 1.0, 0.0, 0.1, actions, check=check) > 100
    assert len(finished) == len(requests)
    # at most max_cached responses held, each position starting one stored suffix of <= depth nodes
    longest = sorted(r.output_len for r in requests)[-max_cached:]
    assert peak[0] <= 1 + depth * sum(longest)


def _drive_sa_global(requests, k_max, n, slots, batch, ks):
    settings = DrafterSettings(kind="sa", max_draft_len=k_max, max_matching_ngram_size=n, enable_global_pool=True,
                               global_pool_size=slots)
    oracle = build_drafter(settings, requests, max_batch_size=batch)
    pool = ref.SAGlobalPoolRef(slots, n)
    committed = [1] * len(requests)
    waiting, active = list(range(len(requests))), []
    it, from_other = 0, 0
    while waiting or active:
        while len(active) < batch and waiting:
            rid = waiting.pop(0)
            active.append(rid)
            pool.commit(rid, requests[rid].tokens[:requests[rid].prompt_len + 1].tolist())
            oracle.on_commit(np.array([rid]), np.array([1]))
        rows = [r for r in active if committed[r] < requests[r].output_len]
        k = ks[it % len(ks)]
        it += 1
        drafted, accepted = oracle.draft(np.array(rows, dtype=np.int64), np.array([committed[r] for r in rows]), k)
        for i, rid in enumerate(rows):
            r = requests[rid]
            own = pool.texts[pool.slot_of[rid]]
            want = ref.sa_global_draft(pool.texts, pool.slot_of[rid], k, n)
            assert (drafted[i], accepted[i]) == (len(want), ref.lcp(want, r.tokens[len(own):].tolist())), (rid, k)
            from_other += len(want) > 0 and want != ref.sa_draft(own, k, n if n > 0 else 64)
        for i, rid in enumerate(rows):
            committed[rid] += min(int(accepted[i]) + 1, requests[rid].output_len - committed[rid])
            pool.commit(rid, requests[rid].tokens[:requests[rid].prompt_len + committed[rid]].tolist())
        oracle.on_commit(np.array(rows, dtype=np.int64), np.array([committed[r] for r in rows]))
        for rid in [r for r in active if committed[r] >= requests[r].output_len]:
            pool.finish(rid, requests[rid].tokens.tolist())
            oracle.on_finish(np.array([rid]))
            active.remove(rid)
    return from_other, oracle.metrics()


@settings(max_examples=30)
@given(requests=traces(n_max=6), k_max=st.integers(1, 5), n=st.sampled_from([-1, 1, 2, 3]),
       slots=st.integers(2, 4), ks=st.lists(st.integers(1, 5), min_size=1, max_size=5))
def test_sa_global_pool_matches_reference(requests, k_max, n, slots, ks):
    _drive_sa_global(requests, k_max, n, slots, 2, [min(k, k_max) for k in ks])


def test_sa_global_pool_matches_reference_on_real_trace(real_trace):
    from_other, metrics = _drive_sa_global(real_trace, 4, -1, 4, 2, [4])
    assert from_other > 0  # some drafts came from another request's slot
    assert metrics["global_pool_evictions"] == len(real_trace) - 4
