"""Prefix caching's block ids (``simulator.prefix_cache``): chained block hashes, and the dense ids of a
trace whose copies share their token arrays equal those of the same requests each with its own arrays."""

from __future__ import annotations

import numpy as np

from specplan.simulator.prefix_cache import PrefixCache, block_hashes
from specplan.workloads.request import Request


def test_a_block_hash_names_the_block_and_every_block_before_it():
    base = np.arange(64, dtype=np.int32)
    same_start = base.copy()
    same_start[40] = 999  # third block differs
    other_first = base.copy()
    other_first[3] = 999  # first block differs: every later block's hash differs too (the chain)
    a, b, c = (block_hashes(t, 16) for t in (base, same_start, other_first))
    assert len(a) == 4 and len(block_hashes(base[:63], 16)) == 3  # full blocks only
    assert a[:2] == b[:2] and a[2] != b[2] and a[3] != b[3]
    assert all(x != y for x, y in zip(a, c))
    assert block_hashes(base[:15], 16) == []


def test_copies_sharing_token_arrays_get_the_ids_of_the_same_requests_with_their_own_arrays():
    rng = np.random.default_rng(7)
    stem = rng.integers(0, 50, 48)
    bases = []
    for i in range(20):  # shared stems (prefix hits), and prompts short of a full block
        prompt = np.concatenate([stem[: rng.integers(0, 48)], rng.integers(0, 50, rng.integers(1, 40))])
        bases.append(Request(id=f"b{i}", prompt_ids=prompt, output_ids=rng.integers(0, 50, rng.integers(1, 30))))
    # mostly whole copies; some pair one request's prompt with another's output
    picks = [(k, k if rng.random() < 0.7 else int(rng.integers(0, len(bases))))
             for k in rng.integers(0, len(bases), 120).tolist()]
    shared = [Request(id=str(n), prompt_ids=bases[k].prompt_ids, output_ids=bases[j].output_ids)
              for n, (k, j) in enumerate(picks)]
    assert shared[0].prompt_ids is bases[picks[0][0]].prompt_ids  # the copies hold the same arrays
    own = [Request(id=str(n), prompt_ids=bases[k].prompt_ids.copy(), output_ids=bases[j].output_ids.copy())
           for n, (k, j) in enumerate(picks)]
    for block in (4, 16):
        a, b = PrefixCache(shared, block), PrefixCache(own, block)
        np.testing.assert_array_equal(a.off, b.off)
        np.testing.assert_array_equal(a.ids, b.ids)
        assert a.cached.shape == b.cached.shape
        # by hand: request g's ids are its blocks' hashes numbered in order of first appearance
        first: dict[int, int] = {}
        for g, r in enumerate(own):
            hashes = block_hashes(np.concatenate([r.prompt_ids, r.output_ids]), block)
            want = [first.setdefault(h, len(first)) for h in hashes]
            assert a.ids[a.off[g]:a.off[g + 1]].tolist() == want
