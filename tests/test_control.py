"""Control-plane decisions on the engines' own examples (SEMANTICS.md §3, §5, §7; seed 000)."""

import pytest

from specplan.simulator.control import (
    SpeculationGate,
    draft_len_for_batch_size,
    should_use_spec_decode,
    vllm_schedule_table,
)


def test_upper_bound_lookup_trtllm_example():
    # {4:4, 8:2, 32:1}: bs 1-4 -> 4, 5-8 -> 2, 9-32 -> 1, 33+ -> 0 (bisect_left, keys are upper bounds).
    sched = {4: 4, 8: 2, 32: 1}
    expected = {1: 4, 4: 4, 5: 2, 8: 2, 9: 1, 32: 1, 33: 0, 1000: 0}
    assert {b: draft_len_for_batch_size(sched, b) for b in expected} == expected


def test_lower_bound_lookup_older_drafter_example():
    # {1:4, 4:2, 8:0}: bs 1-3 -> 4, 4-7 -> 2, 8+ -> 0 (bisect_right, keys are lower bounds).
    sched = {1: 4, 4: 2, 8: 0}
    expected = {1: 4, 3: 4, 4: 2, 7: 2, 8: 0, 100: 0}
    assert {b: draft_len_for_batch_size(sched, b, "lower_bound") for b in expected} == expected
    # Under the older rule {32: K} means "from 32 up", which is why the upper-bound rule replaced it.
    assert draft_len_for_batch_size({32: 5}, 4, "lower_bound") == 0
    assert draft_len_for_batch_size({32: 5}, 4, "upper_bound") == 5


def test_should_use_spec_decode_engine_example():
    # 8192 tokens, K = 3 -> token cap 2048; max_batch_size 64, 100 active, max_concurrency 32:
    # min(100, 64, 2048) = 64 > 32 -> off.
    assert should_use_spec_decode(100, 64, 8192, 3, 32) is False
    assert should_use_spec_decode(32, 64, 8192, 3, 32) is True
    assert should_use_spec_decode(100, 64, 8192, 3, None) is True  # no max_concurrency: always on
    assert should_use_spec_decode(0, 64, 8192, 3, 32) is False
    # The token cap binds: 100 tokens // (1 + 4) = 20 <= 32 even with 100 active requests.
    assert should_use_spec_decode(100, 64, 100, 4, 32) is True


def test_vllm_ranges_carry_last_k():
    table = vllm_schedule_table([[1, 64, 3], [65, 128, 1], [129, 512, 0]], 600, 3)
    assert (table[1], table[64], table[65], table[128], table[129], table[600]) == (3, 3, 1, 1, 0, 0)
    carried = vllm_schedule_table([[1, 4, 2], [5, 8, 1]], 64, 2)
    assert carried[64] == 1  # past the last range the last K carries on (TRT would give 0)
    gaps = vllm_schedule_table([[1, 2, 3], [5, 6, 1]], 8, 2)
    assert list(gaps[1:9]) == [2, 2, 2, 2, 1, 1, 1, 1]  # clamped to num_speculative_tokens; gaps inherit


def test_gate_trips_on_hand_computed_sequence():
    gate = SpeculationGate(window=3, threshold=0.5)
    # [0.9, 0.6, 0.1] averages 0.533 (no trip at the 3rd sample); adding 0.2 gives [0.6, 0.1, 0.2] = 0.3.
    assert [gate.record(r) for r in (0.9, 0.6, 0.1)] == [False, False, False]
    assert gate.record(0.2) is True and gate.disabled
    assert gate.record(1.0) is False and gate.disabled  # latched


def test_gate_needs_a_full_window_first():
    gate = SpeculationGate(window=4, threshold=0.5)
    assert [gate.record(0.0) for _ in range(4)] == [False, False, False, True]


def test_gate_rejects_rates_outside_unit_interval():
    with pytest.raises(ValueError):
        SpeculationGate(3, 0.5).record(1.5)
