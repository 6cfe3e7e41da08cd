"""Suffix decoding against Arctic Inference's own suffix tree (arctic-inference 0.3.0, C++).

The table ``tests/data/drafters/arctic_suffix_drafts.json`` holds Arctic's drafts at every step of
the first requests of three bundled traces, made by ``scripts/arctic_suffix_drafts.py table`` with
Arctic's module built from its PyPI source; this test needs neither Arctic nor a compiler. The
hand-worked orders below were also checked against that module (``SuffixTree.speculate`` returns
the head child's token).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from specplan.acceptance.drafters import DrafterSettings, build_drafter
from specplan.acceptance.drafters.base import lcp
from specplan.acceptance.drafters.suffix_trie import SuffixTrie
from specplan.workloads.bundled import get_bundled
from specplan.workloads.request import Request
from specplan.workloads.tokentrace import read_token_trace

TABLE = Path(__file__).parent / "data" / "drafters" / "arctic_suffix_drafts.json"


def _children_of_9(trie):
    node = next(n for n, t, _ in trie.children(0) if t == 9)
    return [(t, c) for _, t, c in trie.children(node)]


def test_equal_counts_keep_arctic_order():
    """Children of token 9 under the rules of ``_increment_count`` / ``_decrement_count``, worked by hand.

    X = 9 1 9 2 9 3 9 3 9 2 9 1: 1, 2, 3 arrive last in turn; 3 rises to 2 (not first of the count-1
    run: to the back of the count-2 run, i.e. the front), 2 likewise (behind 3), 1 is first of its
    run, so it jumps to the front of the count-2 run.
    """
    trie = SuffixTrie(2)
    seqs = {name: trie.new_sequence() for name in "XYZ"}
    x = np.array([9, 1, 9, 2, 9, 3, 9, 3, 9, 2], dtype=np.int32)
    trie.append(seqs["X"], x)
    assert _children_of_9(trie) == [(3, 2), (2, 2), (1, 1)]  # smallest-token ties would put 2 first
    trie.append(seqs["X"], np.array([9, 1], dtype=np.int32))
    assert _children_of_9(trie) == [(1, 2), (3, 2), (2, 2)]
    trie.append(seqs["Y"], np.array([9, 2], dtype=np.int32))  # 2 is not first of its run: front (alone)
    assert _children_of_9(trie) == [(2, 3), (1, 2), (3, 2)]
    trie.append(seqs["Z"], np.array([9, 1], dtype=np.int32))  # 1 first of its run: front of count 3
    assert _children_of_9(trie) == [(1, 3), (2, 3), (3, 2)]
    trie.remove(np.array([9, 1], dtype=np.int32))  # Z out: 1 falls to the front of the count-2 run
    assert _children_of_9(trie) == [(2, 3), (1, 2), (3, 2)]
    trie.remove(np.array([9, 2], dtype=np.int32))  # Y out: 2 was last of its run, it stays first
    assert _children_of_9(trie) == [(2, 2), (1, 2), (3, 2)]
    trie.remove(np.concatenate([x, [9, 1]]).astype(np.int32))
    assert trie.children(0) == []


def test_first_arrived_child_wins_a_tie():
    """Prompt 5 9 5 8, output 5 ...: after "5" both 9 and 8 were seen once; Arctic drafts 9 (the
    first to arrive), with match length 1 capping the draft at 1 token (max_spec_factor 1)."""
    r = Request(id="a", prompt_ids=[5, 9, 5, 8], output_ids=[5, 9, 9, 9])
    oracle = build_drafter(DrafterSettings(kind="suffix", suffix_max_cached_requests=0), [r])
    assert oracle.propose(0, 1, 4).tolist() == [9]


@pytest.fixture(scope="module")
def table():
    return json.loads(TABLE.read_text())


def test_drafts_equal_arctic_at_every_step(table):
    steps_checked = drafted = 0
    for case in table["cases"]:
        requests = read_token_trace(get_bundled(case["trace"]).path)[:len(case["ids"])]
        assert [r.id for r in requests] == case["ids"], "the bundled trace changed; rebuild the table"
        k = case["k"]
        settings = DrafterSettings(kind="suffix", max_draft_len=k, suffix_max_tree_depth=case["max_tree_depth"],
                                   suffix_max_cached_requests=case["max_cached_requests"])
        oracle = build_drafter(settings, requests)
        by_rid: dict[int, list] = {}
        for rid, c, draft in case["steps"]:
            by_rid.setdefault(rid, []).append((c, draft))
        for rid, req in enumerate(requests):
            c_expected = 1  # the table is Arctic's own trajectory: each step commits accepted + 1
            for c, draft in by_rid.get(rid, []):
                assert c == c_expected
                got = oracle.propose(rid, c, k).tolist()
                assert got == draft, (case["trace"], rid, c)
                steps_checked += 1
                drafted += len(draft) > 0
                c_expected = c + min(lcp(np.asarray(draft, dtype=np.int32), req.output_ids[c:]) + 1,
                                     req.output_len - c)
            oracle.on_finish(np.array([rid]))
    assert steps_checked == sum(len(c["steps"]) for c in table["cases"]) > 5000
    assert drafted > 3000
