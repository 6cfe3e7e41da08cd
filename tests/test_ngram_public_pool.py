"""The compiled public NGram pool against the engine's code (``drafter_reference.NGramPoolManagerRef``).

Seeded random executors: many interleaved requests over a small alphabet (so patterns collect long
match lists, shorter matches get removed and the skipped-element quirk fires), steps drafting a
batch of rows in one ``draft`` call or one row through ``propose``, K changing between steps, rows
that skip drafting. Every row's drafted and accepted counts, and at the end the whole pool (each
pattern's matches in order), must equal the engine code's.
"""

from __future__ import annotations

from pathlib import Path

import drafter_reference as ref
import numpy as np
import pytest

from specplan.acceptance.drafters import DrafterSettings, build_drafter
from specplan.acceptance.drafters.ngram_kernels import E_LEN, E_NEXT, E_SRC, H_HEAD, H_TAIL, window_ids
from specplan.workloads.request import Request
from specplan.workloads.tokentrace import read_token_trace

FIXTURE = Path(__file__).parent / "data" / "drafters" / "specbench_vanilla.jsonl"


def _random_requests(rng, n, alphabet, max_len=40):
    out = []
    for i in range(n):
        prompt = rng.integers(0, alphabet, int(rng.integers(1, max_len))).tolist()
        output = rng.integers(0, alphabet, int(rng.integers(1, max_len))).tolist()
        limit = None if rng.random() < 0.7 else len(output) + int(rng.integers(0, 3))
        out.append(Request(id=str(i), prompt_ids=prompt, output_ids=output, max_new_tokens=limit))
    return out


def _max_length(r):
    """prompt + the generation limit (no EOS configured): the stated one, else the output's length."""
    return r.prompt_len + (r.max_new_tokens if r.max_new_tokens is not None else r.output_len)


def _pool_contents(oracle) -> dict:
    """The compiled public pool as the engine's dict: pattern tuple -> its matches in list order."""
    pool, tokens = oracle._pool, oracle._pool.tokens
    out = {}
    for size in range(1, oracle.n + 1):
        for a in range(len(tokens)):
            pid = int(pool.ids[a, size - 1])
            if pid < 0 or pool.hdr[pid, H_TAIL] < 0:
                continue
            key = tuple(tokens[a:a + size].tolist())
            if key in out:
                continue
            matches, e = [], int(pool.hdr[pid, H_HEAD])
            while e != -1:
                s, m = int(pool.ent[e, E_SRC]), int(pool.ent[e, E_LEN])
                matches.append(tuple(tokens[s:s + m].tolist()))
                e = int(pool.ent[e, E_NEXT])
            out[key] = matches
    return out


def _run(requests, settings, rng, steps, batch, skip_p=0.1, propose_p=0.2, tiny=False):
    """One executor run, the oracle and the engine code side by side; returns the drafting rows.
    ``tiny``: the pool starts with room for 16 entries and 8 member keys, so that both grow."""
    oracle = build_drafter(settings, requests)
    if tiny:
        oracle._pool.ent = np.empty((16, oracle._pool.ent.shape[1]), dtype=np.int32)
        oracle._pool.mk = np.full(16, -1, dtype=np.int64)
    engine = ref.NGramPoolManagerRef(settings.max_draft_len, settings.ngram_size, settings.is_keep_all,
                                     settings.is_use_oldest, True)
    committed = np.ones(len(requests), dtype=np.int64)
    rows_drafted = 0
    for _ in range(steps):
        alive = np.flatnonzero(committed < oracle.output_lens)
        if not len(alive):
            break
        rows = rng.permutation(alive)[:batch]
        k = int(rng.integers(1, settings.max_draft_len + 1))
        skip = rng.random(len(rows)) < skip_p
        for rid in rows[skip].tolist():  # no speculation this step: the pool is not called
            committed[rid] += 1
        rows = rows[~skip]
        if not len(rows):
            continue
        want = []
        for rid in rows.tolist():
            r = requests[rid]
            engine.max_total_draft_tokens = k
            toks = r.tokens.tolist()
            draft = engine.get_draft_tokens(toks[:r.prompt_len + committed[rid]], rid, _max_length(r))
            want.append((len(draft), ref.lcp(draft, toks[r.prompt_len + committed[rid]:])))
        if len(rows) == 1 and rng.random() < propose_p:
            rid = int(rows[0])
            toks = oracle.propose(rid, int(committed[rid]), k)
            got = [(len(toks), ref.lcp(toks.tolist(), requests[rid].tokens[requests[rid].prompt_len + committed[rid]:].tolist()))]
        else:
            drafted, accepted = oracle.draft(rows, committed[rows], k)
            got = list(zip(drafted.tolist(), accepted.tolist()))
        assert got == want, (rows.tolist(), committed[rows].tolist(), k)
        rows_drafted += len(rows)
        committed[rows] += np.minimum([a + 1 for _, a in want], oracle.output_lens[rows] - committed[rows])
    assert _pool_contents(oracle) == {p: list(m.items) for p, m in engine.pool.items()}
    m = oracle.metrics()
    assert m["public_pool_patterns"] == len(engine.pool)
    assert m["public_pool_entries"] == sum(len(v) for v in engine.pool.values())
    return rows_drafted


@pytest.mark.parametrize("keep_all", [True, False])
@pytest.mark.parametrize("oldest", [True, False])
def test_public_pool_matches_engine_code_on_random_executors(keep_all, oldest):
    rng = np.random.default_rng(11 + 2 * keep_all + oldest)
    rows = 0
    for _ in range(12):
        n, kmax = int(rng.integers(1, 4)), int(rng.integers(1, 6))
        settings = DrafterSettings(kind="ngram", max_draft_len=kmax, max_matching_ngram_size=n, is_keep_all=keep_all,
                                   is_use_oldest=oldest, is_public_pool=True)
        requests = _random_requests(rng, int(rng.integers(2, 24)), int(rng.integers(2, 5)))
        rows += _run(requests, settings, rng, steps=400, batch=int(rng.integers(1, 9)), tiny=True)
    assert rows > 2000


def test_public_pool_matches_engine_code_on_real_trace_batches():
    """The Spec-Bench fixture, copies included (they share one span of the pool's token buffer)."""
    trace = read_token_trace(FIXTURE)
    requests = trace + trace[:5]
    rng = np.random.default_rng(5)
    settings = DrafterSettings(kind="ngram", max_draft_len=4, max_matching_ngram_size=2)
    assert _run(requests, settings, rng, steps=600, batch=8, propose_p=0.0) > 800


def test_window_ids_are_equal_exactly_when_windows_are():
    rng = np.random.default_rng(2)
    tokens = rng.integers(0, 3, 60).astype(np.int32)
    bounds = np.array([[0, 25], [25, 26], [26, 60]], dtype=np.int64)
    ids, ends = window_ids(tokens, bounds, 5)
    seen = {}
    for lo, hi in bounds.tolist():
        for a in range(lo, hi):
            for m in range(1, 6):
                if a + m > hi:
                    assert ids[a, m - 1] == -1
                    continue
                i = int(ids[a, m - 1])
                assert (ends[m - 2] if m > 1 else 1) <= i < ends[m - 1]  # a length's ids follow the shorter ones'
                assert seen.setdefault(tuple(tokens[a:a + m].tolist()), i) == i
    assert len(set(seen.values())) == len(seen) == ends[-1] - 1
