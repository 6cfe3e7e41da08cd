"""The Triton SA drafting kernels, step for step against the brute-force reference (``sa_reference``).

Without a GPU the kernels run in the Triton interpreter on CPU tensors (``primitives.INTERPRETED``); with
CUDA available the same tests run the compiled kernels on the GPU.
The interpreter is slow (tens of milliseconds per request-step), so automata and step counts are small.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")
pytest.importorskip(
    "triton", reason="triton is not installed (the CPU build of torch does not ship it): pip install 'triton==3.9.0'"
)

import sa_reference as ref  # noqa: E402

from specplan.calibration.sa_kernel import automaton as A  # noqa: E402
from specplan.calibration.sa_kernel import primitives  # noqa: E402
from specplan.calibration.sa_kernel.slots import SACapacityError, SAKernelPool  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu" and not primitives.INTERPRETED:
    pytest.skip("no CUDA device and TRITON_INTERPRET=0: the SA kernels can neither compile nor be interpreted",
                allow_module_level=True)

TRACE = Path(__file__).parent / "data" / "sa_kernel" / "specbench_eagle.jsonl"


def _pool(num_slots=4, max_seq_len=64, max_batch=4, max_draft_len=4) -> SAKernelPool:
    return SAKernelPool(num_slots, max_seq_len, max_batch, max_draft_len, DEVICE)


def _assert_row(draft_row, match_len, expected_len, expected_draft, where):
    assert match_len == expected_len, where
    k = len(draft_row)
    assert list(draft_row) == expected_draft + [-1] * (k - len(expected_draft)), where


def _assert_same_automaton(pool, slot, text):
    """The device slot equals, array for array, the host build of the whole text."""
    got, want = pool.snapshot(slot), A.build_automaton(text, pool.max_seq_len)
    for field in ("header", "tokens", "nodes", "arena"):
        assert np.array_equal(getattr(got, field), getattr(want, field)), f"slot {slot}: {field} differs"


@st.composite
def per_slot_cases(draw):
    alphabet = draw(st.integers(1, 3))
    k = draw(st.integers(1, 4))
    tok = st.integers(0, alphabet - 1)
    n_req = draw(st.integers(1, 3))
    slots = draw(st.permutations(range(4)))[:n_req]  # arbitrary slot order within the batch
    prompts = [draw(st.lists(tok, min_size=1, max_size=10)) for _ in range(n_req)]
    steps = draw(st.lists(st.lists(st.lists(tok, max_size=k + 1), min_size=n_req, max_size=n_req),
                          min_size=1, max_size=5))
    max_ngram = draw(st.sampled_from([-1, -1, 1, 2, 3]))
    return k, slots, prompts, steps, max_ngram


@settings(max_examples=10)
@given(per_slot_cases())
def test_extend_and_draft_matches_reference(case):
    k, slots, prompts, steps, max_ngram = case
    pool = _pool()
    texts = {}
    for slot, prompt in zip(slots, prompts):
        pool.build(slot, prompt)
        texts[slot] = list(prompt)
    seen = []
    for n, step in enumerate(steps):
        for slot, toks in zip(slots, step):
            texts[slot] += toks
        draft, match_len = pool.extend_and_draft(slots, step, k, max_ngram)
        for row, slot in enumerate(slots):
            want_len, want_draft = ref.draft(texts[slot], k, max_ngram)
            _assert_row(draft[row], match_len[row], want_len, want_draft, f"step {n}, slot {slot}")
            seen.append((slot, len(texts[slot]), match_len[row], draft[row]))
    for slot in slots:
        _assert_same_automaton(pool, slot, texts[slot])
    # Second opinion: the simulator's CPU SA drafter, over every history length at once.
    from specplan.acceptance.drafters.suffix_automaton import scan_longest

    for slot, hist, got_len, got_draft in seen:
        full = np.asarray(texts[slot], dtype=np.int32)
        ell, src = scan_longest(full, hist, hist, max(max_ngram, 0), 1)
        cpu_draft = full[src[0]:min(src[0] + k, hist)].tolist() if ell[0] else []
        _assert_row(got_draft, got_len, int(ell[0]), cpu_draft, f"slot {slot}, history {hist} (CPU drafter)")


def test_kernel_grows_hash_tables():
    """Forty distinct tokens appended on the device push the root's table through 6 -> 30 -> 150 buckets
    (growth and re-insertion run in the kernel), then a repeat must find every edge again."""
    pool = _pool(num_slots=1, max_seq_len=64, max_batch=1, max_draft_len=4)
    pool.build(0, [0])
    text = [0]
    for start in range(1, 41, 5):
        step = list(range(start, start + 5))
        text += step
        pool.extend_and_draft([0], [step], 4)
    assert int(pool.snapshot(0).nodes[0, A.F_ECAP]) == 150
    for step in ([17, 18, 19], [20, 33]):
        text += step
        draft, mlen = pool.extend_and_draft([0], [step], 4)
        want_len, want_draft = ref.longest(text, 4)
        _assert_row(draft[0], mlen[0], want_len, want_draft, f"after {step}")
    _assert_same_automaton(pool, 0, text)


def _replay_trace(max_ngram: int, max_steps: int | None = None):
    """Replay the Spec-Bench fixture: all requests in one batch, each step committing EAGLE's logged accept
    length; requests leave the batch as they finish. Every step is checked against both the brute-force
    reference and the simulator's CPU SA drafter (``scan_longest``; its length cap equals TRT's n-gram
    countdown, since every shorter suffix of an earlier-occurring suffix occurs earlier too)."""
    from specplan.acceptance.drafters.suffix_automaton import scan_longest

    records = [json.loads(line) for line in TRACE.read_text().splitlines()]
    k = max(max(r["accept_lengths"]) for r in records) - 1
    longest = max(len(r["prompt_ids"]) + len(r["output_ids"]) for r in records)
    pool = _pool(num_slots=len(records), max_seq_len=longest, max_batch=len(records), max_draft_len=k)
    texts, chunks, cpu = {}, {}, {}
    for slot, r in enumerate(records):
        pool.build(slot, r["prompt_ids"])
        texts[slot] = list(r["prompt_ids"])
        bounds = np.cumsum([0] + r["accept_lengths"])
        chunks[slot] = [r["output_ids"][a:b] for a, b in zip(bounds[:-1], bounds[1:])]
        full = np.asarray(r["prompt_ids"] + r["output_ids"], dtype=np.int32)
        cpu[slot] = (full, len(r["prompt_ids"]), *scan_longest(full, len(r["prompt_ids"]), len(full),
                                                               max(max_ngram, 0), 1))
    n_steps = max(len(c) for c in chunks.values())
    matched = 0
    for n in range(n_steps if max_steps is None else max_steps):
        slots = [s for s in chunks if n < len(chunks[s])]
        step = [chunks[s][n] for s in slots]
        for slot, toks in zip(slots, step):
            texts[slot] += toks
        draft, match_len = pool.extend_and_draft(slots, step, k, max_ngram)
        for row, slot in enumerate(slots):
            where = f"step {n}, {records[slot]['id']}"
            want_len, want_draft = ref.draft(texts[slot], k, max_ngram)
            _assert_row(draft[row], match_len[row], want_len, want_draft, where)
            full, lo, ell, src = cpu[slot]
            hist = len(texts[slot])
            cpu_len, cpu_src = int(ell[hist - lo]), int(src[hist - lo])
            cpu_draft = full[cpu_src:min(cpu_src + k, hist)].tolist() if cpu_len else []
            _assert_row(draft[row], match_len[row], cpu_len, cpu_draft, where + " (CPU drafter)")
            matched += want_len > 0
    assert matched > 0  # the trace exercises real matches, not only misses
    return pool, texts


def test_real_trace_longest_match():
    pool, texts = _replay_trace(max_ngram=-1)
    for slot, text in texts.items():
        _assert_same_automaton(pool, slot, text)


def test_real_trace_ngram_first_steps():
    _replay_trace(max_ngram=3, max_steps=10)


@pytest.mark.slow
def test_real_trace_ngram_all_steps():
    _replay_trace(max_ngram=3)


@st.composite
def global_cases(draw):
    alphabet = draw(st.integers(2, 3))
    tok = st.integers(0, alphabet - 1)
    k = draw(st.integers(1, 3))
    active = sorted(draw(st.sets(st.integers(0, 4), min_size=1, max_size=3)))
    prompts = {s: draw(st.lists(tok, min_size=1, max_size=7)) for s in active}
    batch = draw(st.permutations(active))[:draw(st.integers(1, len(active)))]
    steps = draw(st.lists(st.lists(st.lists(tok, max_size=k + 1), min_size=len(batch), max_size=len(batch)),
                          min_size=1, max_size=2))
    max_ngram = draw(st.sampled_from([-1, 2, 4]))
    return k, active, prompts, batch, steps, max_ngram


@settings(max_examples=15)
@given(global_cases())
def test_global_search_matches_reference(case):
    k, active, prompts, batch, steps, max_ngram = case
    pool = _pool(num_slots=5, max_batch=3, max_draft_len=3)
    texts = {}
    for slot in active:
        pool.build(slot, prompts[slot])
        texts[slot] = list(prompts[slot])
    for n, step in enumerate(steps):
        for slot, toks in zip(batch, step):
            texts[slot] += toks
        draft, match_len, match_slot = pool.global_search(batch, step, k, max_ngram)
        for row, slot in enumerate(batch):
            want_len, want_slot, want_draft = ref.global_search(texts, slot, k, max_ngram)
            _assert_row(draft[row], match_len[row], want_len, want_draft, f"step {n}, slot {slot}")
            assert match_slot[row] == want_slot, f"step {n}, slot {slot}"
    for slot in active:
        _assert_same_automaton(pool, slot, texts[slot])


def test_global_search_tie_breaks():
    """Explicit expectations, so the reference's order is pinned too: longest match first, then the
    request's own slot, then the longest continuation, then the lowest slot index."""
    pool = _pool(num_slots=5, max_batch=1)
    pool.build(0, [7, 8, 5, 5])              # "7 8": continuation 2
    pool.build(1, [7, 8, 6, 6, 6, 6, 6])     # "7 8": continuation 5
    pool.build(3, [1, 7, 8, 6, 6, 6, 6, 6])  # "7 8": continuation 5, higher slot than 1
    pool.build(2, [3, 7, 8, 4, 7, 8])        # own: "7 8" earlier, continuation 3
    draft, mlen, mslot = pool.global_search([2], [[]], 3)
    assert (mlen[0], mslot[0], list(draft[0])) == (2, 2, [4, 7, 8])  # own slot beats longer continuations
    pool.free(2)
    pool.build(2, [9, 7, 8])                 # own: "7 8" only at its end
    draft, mlen, mslot = pool.global_search([2], [[]], 3)
    assert (mlen[0], mslot[0], list(draft[0])) == (2, 1, [6, 6, 6])  # longest continuation, then lowest slot
    pool.build(4, [9, 7, 8, 0])              # "9 7 8": the longer match wins outright
    draft, mlen, mslot = pool.global_search([2], [[]], 3)
    assert (mlen[0], mslot[0], list(draft[0])) == (3, 4, [0, -1, -1])
    draft, mlen, mslot = pool.global_search([2], [[]], 3, active_slots=[0, 2, 3])  # slot 4 not searched
    assert (mlen[0], mslot[0], list(draft[0])) == (2, 3, [6, 6, 6])
    texts = {s: pool.snapshot(s).tokens.tolist() for s in range(5)}
    assert ref.global_search(texts, 2, 3) == (3, 4, [0])
    assert ref.global_search({s: texts[s] for s in (0, 1, 2, 3)}, 2, 3) == (2, 1, [6, 6, 6])


def test_free_and_reuse_slot():
    """A freed slot rebuilt with another prompt drafts from the new text only (stale nodes and tables of
    the previous occupant are never read)."""
    pool = _pool(num_slots=2, max_batch=1)
    pool.build(1, [1, 2, 3, 1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5])
    pool.extend_and_draft([1], [[6, 4]], 4)
    pool.free(1)
    assert not pool.in_use(1) and pool.allocate() == 0
    pool.build(1, [9, 8, 9])
    draft, mlen = pool.extend_and_draft([1], [[8]], 4)
    assert (mlen[0], list(draft[0])) == (2, [9, 8, -1, -1])
    _assert_same_automaton(pool, 1, [9, 8, 9, 8])


def test_graph_style_launch_with_caller_inputs():
    """The benchmark's path: inputs in caller-owned tensors, tokens reserved up front, one launch per step."""
    pool = _pool(num_slots=2, max_batch=2, max_draft_len=2)
    prompts = {0: [1, 2, 1], 1: [3, 3]}
    for slot, prompt in prompts.items():
        pool.build(slot, prompt)
    pool.stage([1, 0], [[], []])
    pool.reserve([0, 1], 6)
    steps = [[[2, 1, 2], [3, 0, 3]], [[1], [0, 3]]]
    texts = {0: list(prompts[0]), 1: list(prompts[1])}
    for step in steps:
        acc = torch.full((2, 3), -7, dtype=torch.int32, device=DEVICE)
        for row, toks in enumerate(step):
            acc[row, :len(toks)] = torch.tensor(toks, dtype=torch.int32)
        lens = torch.tensor([len(t) for t in step], dtype=torch.int32, device=DEVICE)
        pool.launch_extend(2, 2, accepted=acc, accepted_lens=lens)
        texts[1] += step[0]
        texts[0] += step[1]
        for row, slot in enumerate([1, 0]):
            want_len, want_draft = ref.longest(texts[slot], 2)
            _assert_row(pool.draft[row, :2].tolist(), int(pool.match_len[row]), want_len, want_draft, f"slot {slot}")
    with pytest.raises(SACapacityError, match="SA slot 0 would hold 65 tokens, over its capacity of 64"):
        pool.reserve([0], 56)


def test_capacity_errors_name_slot_and_limit():
    pool = _pool(num_slots=2, max_seq_len=5, max_batch=2, max_draft_len=2)
    with pytest.raises(SACapacityError, match="prompt of 6 tokens exceeds SA slot 1's capacity of 5 tokens"):
        pool.build(1, [1] * 6)
    pool.build(0, [1, 2, 3])
    pool.build(1, [1])
    with pytest.raises(SACapacityError, match="all 2 SA slots are in use"):
        pool.allocate()
    with pytest.raises(SACapacityError, match="SA slot 0 is already in use"):
        pool.build(0, [1])
    with pytest.raises(SACapacityError, match="SA slot 0 would hold 6 tokens, over its capacity of 5"):
        pool.extend_and_draft([0], [[1, 2, 3]], 2)
    with pytest.raises(ValueError, match="slot 1: 4 accepted tokens in one step; at most max_draft_len \\+ 1 = 3"):
        pool.extend_and_draft([1], [[1, 2, 3, 4]], 2)
    with pytest.raises(ValueError, match="slot 0: token ids must be in \\[0, 2\\*\\*31\\), got \\[-1\\]"):
        pool.extend_and_draft([0], [[-1]], 2)
    with pytest.raises(SACapacityError, match="SA slot 7 is out of range: the pool has 2 slots"):
        pool.free(7)
    pool.free(1)
    with pytest.raises(SACapacityError, match="SA slot 1 is not in use"):
        pool.extend_and_draft([1], [[1]], 2)
    with pytest.raises(ValueError, match="max_ngram must be -1 or in \\[1, 64\\]"):
        pool.extend_and_draft([0], [[1]], 2, max_ngram=0)
    # Failed calls changed nothing: slot 0 still holds [1, 2, 3] and drafts from it.
    draft, mlen = pool.extend_and_draft([0], [[1]], 2)
    assert (mlen[0], list(draft[0])) == (1, [2, 3])


def test_global_slot_limit():
    with pytest.raises(ValueError, match=f"num_slots must be in \\[1, {primitives.MAX_GLOBAL_SLOTS}\\]"):
        _pool(num_slots=primitives.MAX_GLOBAL_SLOTS + 1)


_COMPILE_SCRIPT = """
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from specplan.calibration.sa_kernel import kernels

WIDE = {"node_stride", "token_stride", "arena_stride"}
SCALARS = {"accepted_stride", "draft_stride", "K", "max_ngram", "num_slots", "suffix_cap"}
for name, constexprs in [
    ("sa_extend_draft_kernel", {"K_BLOCK": 8, "DO_LOOKUP": True}),
    ("sa_extend_draft_kernel", {"K_BLOCK": 16, "DO_LOOKUP": False}),
    ("sa_global_search_kernel", {"K_BLOCK": 8, "SLOT_BLOCK": 1024}),
    # Triton turns integer arguments equal to 1 into constants: K = 1, n-gram size 1, one slot.
    ("sa_extend_draft_kernel", {"K_BLOCK": 1, "DO_LOOKUP": True, "K": 1, "max_ngram": 1, "draft_stride": 1}),
    ("sa_global_search_kernel", {"K_BLOCK": 1, "SLOT_BLOCK": 1, "K": 1, "num_slots": 1, "suffix_cap": 1}),
]:
    fn = getattr(kernels, name)
    signature = {a: "constexpr" if a in constexprs else "i64" if a in WIDE else "i32" if a in SCALARS else "*i32"
                 for a in fn.arg_names}
    compiled = triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constexprs),
                              target=GPUTarget("cuda", 90, 32))
    assert compiled.asm["cubin"], name
    print(name, constexprs, len(compiled.asm["cubin"]), "bytes of sm_90 cubin")
"""


def test_kernels_compile_for_h200():
    """Ahead-of-time compile to sm_90 cubins (H100/H200) with no GPU present. The interpreter accepts
    Python that the compiler rejects (break, mixed loop-carried types), so this is the check that the
    kernels build. A fresh process with the interpreter off, because interpreted kernels cannot be compiled."""
    env = dict(os.environ, TRITON_INTERPRET="0", TRITON_DEFAULT_FP_FUSION="1")
    proc = subprocess.run([sys.executable, "-c", _COMPILE_SCRIPT], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("bytes of sm_90 cubin") == 5
