"""Host build of the flat suffix automaton (``specplan.calibration.sa_kernel.automaton``), checked against
brute-force definitions: no Triton, no torch."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specplan.calibration.sa_kernel import automaton as A

texts = st.integers(1, 4).flatmap(lambda a: st.lists(st.integers(0, a - 1), min_size=1, max_size=30))


def _endpos(text: list[int], pattern: list[int]) -> frozenset[int]:
    m = len(pattern)
    return frozenset(e for e in range(m - 1, len(text)) if text[e - m + 1:e + 1] == pattern)


def _walk(flat: A.FlatAutomaton, pattern: list[int]) -> int:
    """State reached from the root by reading ``pattern`` through the flat edges, or -1."""
    state = 0
    for tok in pattern:
        row = flat.nodes[state]
        if row[A.F_EPTR] < 0:
            state = int(row[A.F_IVAL]) if row[A.F_IKEY] == tok else -1
        else:
            ptr, cap = int(row[A.F_EPTR]), int(row[A.F_ECAP])
            keys = flat.arena[ptr:ptr + cap, 0]
            hits = np.flatnonzero(keys == tok)
            state = int(flat.arena[ptr + hits[0], 1]) if len(hits) else -1
        if state < 0:
            return -1
    return state


@settings(max_examples=40)
@given(texts)
def test_every_substring_reaches_its_endpos_class(text):
    """Reading any substring from the root lands in a state whose len/link/pos describe that substring's
    end-position class: pos is the earliest end, the class holds lengths (len[link], len], and the longest
    string of the link has strictly more end positions. Non-substrings are rejected."""
    flat = A.build_automaton(text, len(text))
    n = len(text)
    for i in range(n):
        for j in range(i + 1, n + 1):
            sub = text[i:j]
            state = _walk(flat, sub)
            assert state > 0
            length, link, pos = (int(x) for x in flat.nodes[state, [A.F_LEN, A.F_LINK, A.F_POS]])
            ends = _endpos(text, sub)
            assert pos == min(ends)
            assert int(flat.nodes[link, A.F_LEN]) < len(sub) <= length
            longest = text[pos - length + 1:pos + 1]
            assert _endpos(text, longest) == ends
            shorter = longest[length - int(flat.nodes[link, A.F_LEN]):]
            if shorter:
                assert _endpos(text, shorter) > ends
    alphabet = sorted(set(text))
    assert _walk(flat, [max(alphabet) + 1]) == -1


@settings(max_examples=40)
@given(texts)
def test_header_and_sizes(text):
    flat = A.build_automaton(text, len(text))
    n_tok, n_nodes, last, used = (int(x) for x in flat.header)
    assert n_tok == len(text) and list(flat.tokens) == text
    assert n_nodes == len(flat.nodes) <= A.max_nodes_for(len(text))
    assert used == len(flat.arena) <= A.arena_capacity_for(len(text))
    assert int(flat.nodes[last, A.F_LEN]) == len(text)  # last is the state of the whole text


@pytest.mark.parametrize("n_distinct,capacity", [(2, 6), (6, 6), (7, 30), (31, 150), (151, 750), (800, 3750)])
def test_hash_tables_grow_and_keep_every_edge(n_distinct, capacity):
    """A root with many distinct successors crosses TRT's 6 -> 30 -> 150 -> 750 -> 3750 growth steps (a table
    grows only when full); every edge must survive the re-insertions."""
    text = list(range(n_distinct)) + list(range(n_distinct))
    flat = A.build_automaton(text, len(text))
    assert int(flat.nodes[0, A.F_ECAP]) == capacity
    for tok in range(n_distinct):
        assert _walk(flat, [tok]) > 0
        assert _walk(flat, [tok, (tok + 1) % n_distinct]) > 0 or tok == n_distinct - 1


@settings(max_examples=15)
@given(st.integers(2, 400), st.integers(50, 3000), st.integers(0, 2**31 - 1))
def test_arena_never_exceeds_its_bound(alphabet, length, seed):
    """The module's capacity argument: bump-allocated tables stay under 20 buckets per token."""
    rng = np.random.default_rng(seed)
    text = ((rng.zipf(1.3, length) - 1) % alphabet).tolist()
    flat = A.build_automaton(text, length)
    assert int(flat.header[A.H_ARENA]) <= A.ARENA_BUCKETS_PER_TOKEN * length


def test_capacity_and_token_errors():
    sa = A.HostAutomaton(3)
    sa.extend_many([1, 2, 3])
    with pytest.raises(ValueError, match="max_seq_len=3"):
        sa.extend(4)
    with pytest.raises(ValueError, match="non-negative"):
        A.HostAutomaton(5).extend(-1)
    with pytest.raises(ValueError, match="at least 1"):
        A.HostAutomaton(0)
