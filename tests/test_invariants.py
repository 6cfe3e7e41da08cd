"""The simulator's invariants (docs/invariants.md), one test each, over random scenarios (hypothesis).

Each scenario is a real config through the public ``simulate`` path: Spec-Bench requests (real lengths),
random engine limits, KV size, policy, chunking, overlap, K, schedule, verify width and acceptance.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from specplan.config import build_config
from specplan.simulator.run import baseline_config, simulate

# Longest request of the bundled Spec-Bench trace (prompt + output) and its longest prompt, so every
# drawn KV size and token budget can hold any request alone (the executor refuses one that cannot).
LONGEST, LONGEST_PROMPT = 2018, 1772


SCENARIOS = 24  # each invariant is checked on every one of these runs (and K = 0 on their baselines)


def draw_config(rng: np.random.Generator):
    """One random scenario, drawn from ``rng`` (the same list on every machine)."""
    k = int(rng.integers(0, 6))
    chunked = bool(rng.integers(2))
    block = int(rng.choice([8, 16, 32]))
    need = -(-(LONGEST + 8) // block)
    spec = {"decoding_type": "SA", "max_draft_len": k, "verify_width": str(rng.choice(["static", "runtime", "draft"]))}
    if k >= 2 and rng.integers(2):
        spec["draft_len_schedule"] = {2: k, 5: k // 2}
    overlap = bool(rng.integers(2))
    data = {
        "seed": int(rng.integers(1000)),
        "engine": {"max_batch_size": int(rng.integers(1, 7)),
                   "max_num_active_requests": int(rng.integers(1, 9)),
                   "max_num_tokens": int(rng.integers(16 + k, 513)) if chunked else LONGEST_PROMPT + 64,
                   "kv_block_size": block, "kv_num_blocks": int(rng.integers(need, need * 3)),
                   "capacity_scheduler_policy": str(rng.choice(["GUARANTEED_NO_EVICT", "MAX_UTILIZATION"])),
                   "enable_chunked_prefill": chunked, "overlap_scheduler": overlap},
        "speculation": spec,
        "acceptance": {"mode": "alpha", "alpha": float(rng.uniform())},
        "workload": {"trace": "specbench", "num_requests": int(rng.integers(1, 9)), "sample_with_replacement": True,
                     "arrival": "closed_loop" if rng.integers(2) else "poisson", "rate": float(rng.uniform(1, 200)),
                     "concurrency": int(rng.integers(1, 5))},
        "cost": {"model": "linear_gamma", "t_base_s": 0.001, "gamma": float(rng.uniform()), "draft_cost_s": 1e-4},
    }
    return build_config(data)


@pytest.fixture(scope="module")
def runs():
    rng = np.random.default_rng(20261201)
    return [(cfg, simulate(cfg)) for cfg in (draw_config(rng) for _ in range(SCENARIOS))]


def test_every_request_finishes_with_its_output_length(runs):
    for cfg, res in runs:
        req = res.requests
        assert req["finish_s"].notna().all() and (req["generated"] == req["output_len"]).all()
        assert res.emissions["tokens"].sum() == req["output_len"].sum()


def test_monotone_clock(runs):
    for cfg, res in runs:
        it = res.iterations
        starts, ends = it["start_s"].to_numpy(), (it["start_s"] + it["step_s"]).to_numpy()
        assert (it["step_s"] > 0).all() and (starts[1:] >= ends[:-1] - 1e-12).all()


def test_work_conserving(runs):
    for cfg, res in runs:
        it, req = res.iterations, res.requests
        starts, ends = it["start_s"].to_numpy(), (it["start_s"] + it["step_s"]).to_numpy()
        arrival, finish = req["arrival_s"].to_numpy(), req["finish_s"].to_numpy()
        for end, nxt in zip(ends[:-1], starts[1:]):
            if nxt > end + 1e-12:  # the loop idled: nobody may have been in the system
                assert not ((arrival <= end + 1e-12) & (finish > end + 1e-12)).any()
        assert starts[0] == pytest.approx(np.nanmin(arrival))


def test_committed_at_most_drafted_plus_one_per_row(runs):
    for cfg, res in runs:
        it = res.iterations
        assert (it["accepted"] <= it["drafted"]).all()
        assert (it["committed"] <= it["drafted"] + it["batch_rows"]).all()
        # accepted + one per verify row + one per completed prefill, less what the output end cut.
        assert (it["committed"] <= it["accepted"] + it["gen_rows"] + it["prefill_done"]).all()


def test_kv_never_over_capacity(runs):
    for cfg, res in runs:
        used = res.iterations["kv_blocks_used"]
        assert (used >= 0).all() and (used <= cfg.engine.kv_num_blocks).all()


def test_k_zero_identical_to_no_speculation(runs):
    for cfg, _ in runs:
        k0 = cfg.model_copy(update={"speculation": cfg.speculation.model_copy(
            update={"max_draft_len": 0, "draft_len_schedule": None})})
        a, b = simulate(k0), simulate(baseline_config(cfg))
        pd.testing.assert_frame_equal(a.requests, b.requests)
        pd.testing.assert_frame_equal(a.iterations.drop(columns=["k"]), b.iterations.drop(columns=["k"]))


def test_same_config_and_seed_same_results(runs):
    for cfg, res in runs[:6]:
        again = simulate(cfg)
        pd.testing.assert_frame_equal(res.iterations, again.iterations)
        pd.testing.assert_frame_equal(res.requests, again.requests)
        assert res.summary == again.summary


def test_scenarios_cover_the_settings(runs):
    """The drawn scenarios exercise what the invariants are about (guards the generator)."""
    cfgs = [c for c, _ in runs]
    assert {c.engine.capacity_scheduler_policy for c in cfgs} == {"GUARANTEED_NO_EVICT", "MAX_UTILIZATION"}
    assert {c.engine.enable_chunked_prefill for c in cfgs} == {True, False}
    assert any(c.speculation.max_draft_len == 0 for c in cfgs) and any(c.speculation.draft_len_schedule for c in cfgs)
    assert sum(r.summary["drafted_tokens"] > 0 for _, r in runs) >= SCENARIOS // 2


def test_the_token_budget_holds_and_pays_for_the_forward(runs):
    # The scheduler never charges more than max_num_tokens; under the default scheduler (V1) every row
    # is charged at least what it computes (placeholders may charge more than the forward, never less),
    # and KV grows by at least the forward's tokens.
    for cfg, res in runs:
        it = res.iterations
        forward = it["prefill_tokens"] + it["verified_tokens"]
        assert (it["charged_tokens"] <= cfg.engine.max_num_tokens).all()
        assert (it["charged_tokens"] >= forward).all() and (it["kv_reserved_tokens"] >= forward).all()
