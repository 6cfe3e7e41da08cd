"""Host-side build of a suffix automaton in the flat, array-based layout the GPU kernels use.

This mirrors TensorRT-LLM's ``buildAutomatonFromTokens`` (``suffixAutomaton.h``, adapted from
basetenlabs/sa_spec): the prompt's automaton is built on the CPU, then copied into a device slot. The
layout is defined here, once, and the Triton kernels in :mod:`.kernels` read and extend exactly these
arrays, so a slot built here and then extended on the device is bit-for-bit the slot the host would
have built from the whole text (the tests check that).

Layout of one slot (all ``int32``):

``nodes[max_nodes, NODE_FIELDS]``
    One row per state (array of structs, like TRT's ``SAFlatGraph::Node``, so a state's fields share a
    cache sector). ``len``; ``link`` (suffix link, ``-1`` for the root); ``pos`` (end of the state's
    *earliest* occurrence, copied on clone; ``-1`` for the root); the outgoing edges, stored as in TRT:
    none (``ikey == -1`` and ``eptr == -1``), one inlined edge ``ikey -> ival``, or a pointer ``eptr``
    to an open-addressing hash table of ``ecap`` buckets in the arena.
``tokens[max_seq_len]``
    The text.
``arena[arena_capacity, 2]``
    Hash-table buckets ``(key, target)``; key ``-1`` marks an empty bucket. Tables are bump-allocated
    and never freed (TRT's ``SAHashMapAllocator::free`` is a no-op too): a table starts at 6 buckets,
    is probed linearly from ``token % capacity``, and grows 5x (a fresh table, old buckets re-inserted
    in bucket order) only when it is completely full. A clone copies its source's table bucket for
    bucket.
``header[HEADER_FIELDS]``
    ``n_tokens``, ``n_nodes``, ``last`` (state of the whole text), ``arena_used`` (buckets).

All indices are slot-relative, so TRT's ``relocateAutomaton`` step (rebasing pointers from the host
block to the device block) has nothing to do here: copying the used prefix of each array is the
whole transfer.

Capacity: a text of ``L`` tokens has at most ``2L`` states (``2L - 1`` for ``L >= 2``) and at most
``3L`` transitions. A node with ``d >= 2`` edges has allocated at most ``1.25 x`` its final table
capacity, which is below ``5d`` (a table grows only when full; a clone's first table has its source's
capacity, which was below 5x the same degree), so the arena never needs more than
``6.25 x 3L < 20L`` buckets. ``20 * max_seq_len`` buckets of 8 bytes is also exactly TRT's allocator
size (``10 * maxNodes * (sizeof(Token) + sizeof(NodeIndex))`` bytes with ``maxNodes = 2 *
maxSeqLen``), so neither the host nor the kernel can run out of arena for a text within capacity.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

import numpy as np

# Node row fields.
F_LEN = 0
F_LINK = 1
F_POS = 2
F_IKEY = 3
F_IVAL = 4
F_EPTR = 5
F_ECAP = 6
F_PAD = 7  # unused, always 0: pads rows to 32 bytes, one sector each
NODE_FIELDS = 8

# Header fields.
H_NTOK = 0
H_NNODES = 1
H_LAST = 2
H_ARENA = 3
HEADER_FIELDS = 4

INITIAL_TABLE_CAPACITY = 6  # TRT: mAllocator.alloc(6) when a node gets its second edge
TABLE_GROWTH = 5  # TRT: newCapacity = edges.capacity() * 5
ARENA_BUCKETS_PER_TOKEN = 20  # see the capacity argument in the module docstring
NODES_PER_TOKEN = 2

EMPTY = -1


def max_nodes_for(max_seq_len: int) -> int:
    """States a slot must hold for texts up to ``max_seq_len`` tokens (root included)."""
    return NODES_PER_TOKEN * max_seq_len + 1


def arena_capacity_for(max_seq_len: int) -> int:
    """Hash-table buckets a slot must hold for texts up to ``max_seq_len`` tokens."""
    return ARENA_BUCKETS_PER_TOKEN * max_seq_len + INITIAL_TABLE_CAPACITY


@dataclass(frozen=True)
class FlatAutomaton:
    """The used prefix of one slot's arrays, ready to be copied into a device slot."""

    nodes: np.ndarray  # int32 [n_nodes, NODE_FIELDS]
    tokens: np.ndarray  # int32 [n_tokens]
    arena: np.ndarray  # int32 [arena_used, 2]
    header: np.ndarray  # int32 [HEADER_FIELDS]


class HostAutomaton:
    """Online suffix-automaton construction on the host in the device layout.

    ``extend`` follows TRT's ``SuffixAutomaton::extend`` step for step (including where hash tables are
    allocated and how buckets are filled), so the device kernel continues a host-built slot exactly as
    if it had built the whole text itself. Pure Python lists: this is the CPU build whose cost the
    calibration times against prompt length.
    """

    def __init__(self, max_seq_len: int):
        if max_seq_len < 1:
            raise ValueError(f"max_seq_len must be at least 1, got {max_seq_len}")
        self.max_seq_len = max_seq_len
        # Flat Python lists (row-major nodes, interleaved arena buckets): indexing lists is several times
        # faster than indexing numpy arrays element by element.
        self._nodes: list[int] = [0, EMPTY, EMPTY, EMPTY, 0, EMPTY, 0, 0]  # the root
        self._tokens: list[int] = []
        self._arena: list[int] = []
        self._last = 0

    @property
    def n_tokens(self) -> int:
        return len(self._tokens)

    @property
    def n_nodes(self) -> int:
        return len(self._nodes) // NODE_FIELDS

    @property
    def arena_used(self) -> int:
        return len(self._arena) // 2

    # --- edges -------------------------------------------------------------------------------------------

    def _alloc_table(self, capacity: int) -> int:
        """Bump-allocate an empty table (TRT clears a table on allocation)."""
        ptr = len(self._arena) // 2
        self._arena.extend([EMPTY, 0] * capacity)
        return ptr

    def _table_slot(self, ptr: int, capacity: int, key: int) -> int:
        """Bucket holding ``key`` or the first empty bucket on its probe path; -1 when the table is full."""
        arena = self._arena
        idx = key % capacity
        for _ in range(capacity):
            k = arena[2 * (ptr + idx)]
            if k == key or k == EMPTY:
                return ptr + idx
            idx = (idx + 1) % capacity
        return -1

    def _edge(self, state: int, key: int) -> int:
        """Target of ``state --key-->``, or -1."""
        row = state * NODE_FIELDS
        nodes = self._nodes
        ptr = nodes[row + F_EPTR]
        if ptr == EMPTY:
            return nodes[row + F_IVAL] if nodes[row + F_IKEY] == key else -1
        bucket = self._table_slot(ptr, nodes[row + F_ECAP], key)
        if bucket < 0 or self._arena[2 * bucket] != key:
            return -1
        return self._arena[2 * bucket + 1]

    def _set_edge(self, state: int, key: int, target: int) -> None:
        """Insert or overwrite ``state --key--> target`` (TRT ``SAFlatGraph::at(node, key, true)``)."""
        nodes, arena = self._nodes, self._arena
        row = state * NODE_FIELDS
        if nodes[row + F_EPTR] == EMPTY:
            if nodes[row + F_IKEY] == EMPTY or nodes[row + F_IKEY] == key:
                nodes[row + F_IKEY] = key
                nodes[row + F_IVAL] = target
                return
            # Second distinct key: move the inlined edge into a fresh table (ikey is left stale, as in TRT).
            ptr = self._alloc_table(INITIAL_TABLE_CAPACITY)
            bucket = self._table_slot(ptr, INITIAL_TABLE_CAPACITY, nodes[row + F_IKEY])
            arena[2 * bucket] = nodes[row + F_IKEY]
            arena[2 * bucket + 1] = nodes[row + F_IVAL]
            nodes[row + F_EPTR] = ptr
            nodes[row + F_ECAP] = INITIAL_TABLE_CAPACITY
        ptr, cap = nodes[row + F_EPTR], nodes[row + F_ECAP]
        bucket = self._table_slot(ptr, cap, key)
        if bucket < 0:
            new_cap = cap * TABLE_GROWTH
            new_ptr = self._alloc_table(new_cap)
            for i in range(cap):  # re-insert in bucket order, as TRT's iterator does
                k = arena[2 * (ptr + i)]
                if k != EMPTY:
                    b = self._table_slot(new_ptr, new_cap, k)
                    arena[2 * b] = k
                    arena[2 * b + 1] = arena[2 * (ptr + i) + 1]
            nodes[row + F_EPTR] = new_ptr
            nodes[row + F_ECAP] = new_cap
            bucket = self._table_slot(new_ptr, new_cap, key)
        arena[2 * bucket] = key
        arena[2 * bucket + 1] = target

    # --- construction ------------------------------------------------------------------------------------

    def extend(self, token: int) -> None:
        """Append one token (TRT ``SuffixAutomaton::extend``)."""
        if token < 0:
            raise ValueError(f"token ids must be non-negative, got {token}")
        if len(self._tokens) >= self.max_seq_len:
            raise ValueError(
                f"text would exceed max_seq_len={self.max_seq_len} tokens; size the slot for the longest sequence"
            )
        nodes = self._nodes
        self._tokens.append(token)
        cur = len(nodes) // NODE_FIELDS
        nodes.extend([nodes[self._last * NODE_FIELDS + F_LEN] + 1, EMPTY, len(self._tokens) - 1, EMPTY, 0, EMPTY, 0, 0])
        p = self._last
        while p != EMPTY and self._edge(p, token) < 0:
            self._set_edge(p, token, cur)
            p = nodes[p * NODE_FIELDS + F_LINK]
        if p == EMPTY:
            nodes[cur * NODE_FIELDS + F_LINK] = 0
        else:
            q = self._edge(p, token)
            if nodes[p * NODE_FIELDS + F_LEN] + 1 == nodes[q * NODE_FIELDS + F_LEN]:
                nodes[cur * NODE_FIELDS + F_LINK] = q
            else:
                clone = len(nodes) // NODE_FIELDS
                qrow = nodes[q * NODE_FIELDS:(q + 1) * NODE_FIELDS]
                qrow[F_LEN] = nodes[p * NODE_FIELDS + F_LEN] + 1
                if qrow[F_EPTR] != EMPTY:  # a cloned table is a fresh copy of equal capacity
                    new_ptr = self._alloc_table(qrow[F_ECAP])
                    src = 2 * qrow[F_EPTR]
                    self._arena[2 * new_ptr:2 * (new_ptr + qrow[F_ECAP])] = self._arena[src:src + 2 * qrow[F_ECAP]]
                    qrow[F_EPTR] = new_ptr
                nodes.extend(qrow)
                while p != EMPTY and self._edge(p, token) == q:
                    self._set_edge(p, token, clone)
                    p = nodes[p * NODE_FIELDS + F_LINK]
                nodes[q * NODE_FIELDS + F_LINK] = clone
                nodes[cur * NODE_FIELDS + F_LINK] = clone
        self._last = cur

    def extend_many(self, tokens: Iterable[int]) -> None:
        """Append tokens in order."""
        for t in tokens:
            self.extend(int(t))

    def to_flat(self) -> FlatAutomaton:
        """The used prefix of every array, as ``int32`` numpy arrays in the device layout."""
        header = np.array([self.n_tokens, self.n_nodes, self._last, self.arena_used], dtype=np.int32)
        return FlatAutomaton(
            nodes=np.asarray(self._nodes, dtype=np.int32).reshape(-1, NODE_FIELDS),
            tokens=np.asarray(self._tokens, dtype=np.int32),
            arena=np.asarray(self._arena, dtype=np.int32).reshape(-1, 2),
            header=header,
        )


def build_automaton(tokens: Iterable[int], max_seq_len: int) -> FlatAutomaton:
    """Build the automaton of ``tokens`` for a slot of ``max_seq_len`` tokens (TRT's host build)."""
    sa = HostAutomaton(max_seq_len)
    sa.extend_many(tokens)
    return sa.to_flat()
