"""Executor timeline: identity with the baseline, the gate in the loop, and invariants under
random configurations (hypothesis)."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from specplan.cost_models.base import CostModel
from specplan.simulator import metrics
from specplan.simulator.engine import Executor
from specplan.simulator.inputs import EngineSettings, Workload
from specplan.acceptance.oracles import alpha_oracle
from specplan.simulator.paths import PATHS, VLLM
from specplan.simulator.run import baseline_config, simulate


def _same(a, b, differ=()):
    pd.testing.assert_frame_equal(a.requests, b.requests)
    drop = ["k", *differ]
    pd.testing.assert_frame_equal(a.iterations.drop(columns=drop), b.iterations.drop(columns=drop))
    # a column that differs carries its summary figures with it (charged_tokens: the over-charge)
    over = ("charged_tokens", "overcharged_tokens", "overcharged_tokens_spec_off", "overcharged_tokens_queued")
    keep = lambda s: {k: v for k, v in s.items() if "charged_tokens" not in differ or k not in over}  # noqa: E731
    assert keep(a.summary) == keep(b.summary)


@pytest.mark.parametrize("policy", ["GUARANTEED_NO_EVICT", "MAX_UTILIZATION"])
def test_k_zero_and_spec_off_identical_to_baseline(make_config, policy):
    common = dict(engine={"capacity_scheduler_policy": policy, "max_batch_size": 4},
                  workload={"arrival": "poisson", "rate": 50.0, "num_requests": 20, "output_len": 40,
                            "prompt_len": 30},
                  cost={"model": "linear_gamma", "t_base_s": 0.01, "gamma": 0.3, "draft_cost_s": 0.002})
    base = simulate(baseline_config(make_config(**common)))
    k0 = simulate(make_config(speculation={"max_draft_len": 0}, **common))
    _same(k0, base)


def test_spec_gated_off_everywhere_equals_baseline(make_config):
    # max_concurrency 1 with two clients always active: should_use_spec_decode is false at every step.
    common = dict(engine={"max_batch_size": 2, "max_num_active_requests": 2},
                  workload={"concurrency": 2, "num_requests": 6, "output_len": 50, "prompt_len": 5},
                  cost={"model": "linear_gamma", "t_base_s": 0.01, "gamma": 0.3, "draft_cost_s": 0.002})
    off = simulate(make_config(speculation={"max_draft_len": 4, "max_concurrency": 1}, **common))
    base = simulate(baseline_config(make_config(**common)))
    assert off.summary["spec_iterations"] == 0
    # The schedule is the baseline's (8192 tokens never bind two rows), but the default scheduler
    # still charges each generation row the C++ stamp 1 + 4 and the V1 KV manager grows it by
    # 1 + K_static before the step: the over-charge, visible in two columns only.
    _same(off, base, differ=("charged_tokens", "kv_reserved_tokens"))
    it, b_it = off.iterations, base.iterations
    assert (it["charged_tokens"] == it["prefill_tokens"] + 5 * it["gen_rows"]).all()
    assert (b_it["charged_tokens"] == b_it["prefill_tokens"] + b_it["gen_rows"]).all()
    assert (it["kv_reserved_tokens"] == it["prefill_tokens"] + 5 * it["gen_rows"]).all()


def _gate_cfg(make_config, alpha, overlap, output_len=600):
    # SA: TensorRT-LLM's NGram pool does not support the overlap scheduler.
    return make_config(engine={"overlap_scheduler": overlap},
                       speculation={"decoding_type": "SA", "max_draft_len": 4, "acceptance_rate_window_size": 200,
                                    "acceptance_rate_threshold": 0.3},
                       acceptance={"alpha": alpha},
                       workload={"concurrency": 4, "num_requests": 4, "output_len": output_len, "prompt_len": 3})


@pytest.mark.parametrize("overlap", [False, True])
def test_gate_trips_at_200th_sample(make_config, overlap):
    res = simulate(_gate_cfg(make_config, 0.25, overlap))
    it = res.iterations
    sampled = it[it["drafted"] > 0]
    rates = (sampled["accepted"] / sampled["drafted"]).to_numpy()  # one sample per speculating iteration
    assert rates[:200].mean() < 0.3  # so the window average first falls below 0.3 at the 200th sample
    iter_of_200th = int(sampled["iteration"].iloc[199])
    assert res.summary["gate_tripped_iteration"] == iter_of_200th + (1 if overlap else 0)
    spec_on = it.set_index("iteration")["spec_on"]
    last_spec = int(it.loc[it["spec_on"], "iteration"].max())
    assert last_spec == res.summary["gate_tripped_iteration"]  # overlap: one extra iteration with spec on
    assert not spec_on.loc[last_spec + 1:].any()


def test_gate_never_trips_above_threshold(make_config):
    res = simulate(_gate_cfg(make_config, 0.9, False, output_len=3000))
    assert res.summary["gate_tripped_iteration"] is None
    assert res.summary["spec_iterations"] > 200


class _Affine(CostModel):
    def step_time(self, batch):
        return 0.001 + 1e-5 * batch.num_tokens + 1e-7 * float(batch.context_tokens.sum())


@st.composite
def scenarios(draw):
    n = draw(st.integers(1, 12))
    k = draw(st.integers(0, 4))
    chunked = draw(st.booleans())
    plen = np.array(draw(st.lists(st.integers(1, 40), min_size=n, max_size=n)))
    olen = np.array(draw(st.lists(st.integers(1, 30), min_size=n, max_size=n)))
    block = draw(st.sampled_from([1, 4, 16]))
    # Each engine path with its own rules (TRT drafter, TRT one-model, vLLM).
    path = draw(st.sampled_from(list(PATHS)))
    # Without chunking a whole (re)prefill of prompt + generated tokens must fit the token budget;
    # TensorRT-LLM rounds a truncated chunk down to the KV block, so its budget holds one block.
    min_tokens = max(1 + k, block if path != VLLM else 1) if chunked else max(int((plen + olen).max()), 1 + k)
    need = int(np.max(-(-(plen + olen + k) // block)))
    rules = {"k_from": PATHS[path].k_from, "path": path, "gate_denominator": PATHS[path].gate_denominator}
    if path != VLLM:
        rules["schedule_lookup"] = PATHS[path].schedule_lookup
    settings = EngineSettings(
        **rules,
        max_batch_size=draw(st.integers(1, 6)),
        max_num_tokens=draw(st.integers(min_tokens, min_tokens + 64)),
        max_num_active_requests=draw(st.integers(1, 8)),
        kv_block_size=block,
        kv_num_blocks=draw(st.integers(need, need * 4)),
        policy=draw(st.sampled_from(["GUARANTEED_NO_EVICT", "MAX_UTILIZATION"])),
        chunked_prefill=chunked,
        overlap_scheduler=draw(st.booleans()),
        speculate=k > 0,
        max_draft_len=k,
        draft_len_schedule=draw(st.sampled_from([None, {2: k, 5: k // 2}])) if k and path != VLLM else None,
        verify_width=draw(st.sampled_from(["static", "runtime", "draft"])),
    )
    closed = draw(st.booleans())
    arrivals = None if closed else np.sort(np.array(draw(st.lists(st.floats(0, 0.2), min_size=n, max_size=n))))
    wl = Workload(plen, olen, arrivals, np.full(n, -1), concurrency=draw(st.integers(1, 4)))
    return settings, wl, draw(st.floats(0.0, 1.0)), draw(st.integers(0, 1000))


@given(scenarios())
def test_invariants_under_random_configs(scenario):
    settings, wl, alpha, seed = scenario
    ex = Executor(settings, wl, alpha_oracle(alpha, wl.prompt_lens, wl.output_lens, seed, max_k=8), _Affine())
    ex.run()  # KVBlockPool raises if blocks ever exceed capacity or go negative
    req = metrics.request_table(ex.trace)
    it = metrics.iteration_table(ex.trace)
    # Every request completes with exactly its output length.
    assert (ex.trace.generated == wl.output_lens).all() and req["finish_s"].notna().all()
    # Committed tokens = accepted + one per verify row + one per completed prefill (oracles respect
    # TensorRT-LLM's truncation, so the output end never cuts a step here).
    em = metrics.emission_table(ex.trace)
    assert em["tokens"].sum() == wl.output_lens.sum()
    assert (it["committed"] == it["accepted"] + it["gen_rows"] + it["prefill_done"]).all()
    assert it["prefill_done"].sum() >= wl.output_lens.size
    assert (it["kv_blocks_used"] <= settings.kv_num_blocks).all() and (it["kv_blocks_used"] >= 0).all()
    assert (it["accepted"] <= it["drafted"]).all() and (it["drafted"] <= it["gen_rows"] * it["k"]).all()
    # Monotone clock: each iteration starts no earlier than the previous one ended.
    ends = (it["start_s"] + it["step_s"]).to_numpy()
    starts = it["start_s"].to_numpy()
    assert (starts[1:] >= ends[:-1] - 1e-12).all()
    # Work-conserving: the loop only idles when no request is in the system.
    arrival, finish = req["arrival_s"].to_numpy(), req["finish_s"].to_numpy()
    for end, nxt in zip(ends[:-1], starts[1:]):
        if nxt > end + 1e-12:
            in_system = (arrival <= end + 1e-12) & (finish > end + 1e-12)
            assert not in_system.any()
    assert starts[0] == pytest.approx(np.nanmin(arrival))


def test_vllm_unchunked_context_that_does_not_fit_waits():
    # vLLM with chunked prefill off (Scheduler.schedule's waiting loop: break): budget 36, three rows.
    # Step 1 prefills the three 1-token prompts; step 2 the next two (2 tokens), and the 35-token prompt,
    # over the 34 left, waits (it once ran as a 34-token decode row, past the KV it held); step 3 prefills it.
    settings = EngineSettings(3, 36, 3, 16, 5, "GUARANTEED_NO_EVICT", False, False, False, 0, path=VLLM,
                              k_from="scheduled")
    wl = Workload(np.array([1, 1, 1, 1, 1, 35]), np.ones(6, dtype=np.int64), None, np.full(6, -1), concurrency=3)
    ex = Executor(settings, wl, alpha_oracle(0.0, wl.prompt_lens, wl.output_lens, 0, max_k=8), _Affine())
    ex.run()
    it = metrics.iteration_table(ex.trace)
    assert it["prefill_tokens"].tolist() == [3, 2, 35] and it["gen_rows"].tolist() == [0, 0, 0]
    assert it["prefill_done"].tolist() == [3, 2, 1] and it["kv_blocks_used"].tolist() == [3, 2, 3]


def test_prefill_draft_of_hf_prompt_lookup(make_config):
    # HF prompt lookup verifies a draft in the prefill forward: a request whose answer repeats its
    # prompt gets more than one token from its prefill step. Prompt "1 2 3 4 5 6 1 2", answer
    # "3 4 5 6 9": the 2-gram "1 2" matches at the start and drafts "3 4 5 6 1 2" (not clipped to the
    # budget); the truth continues "3 4 5 6", so 4 are accepted and the prefill commits 4 + 1 = 5.
    from specplan.acceptance.drafters import make_drafter_oracle
    from specplan.workloads.request import Request

    req = Request(id="r", prompt_ids=[1, 2, 3, 4, 5, 6, 1, 2], output_ids=[3, 4, 5, 6, 9, 7])
    cfg = make_config(speculation={"decoding_type": "pld", "pld_variant": "hf", "max_draft_len": 6})
    from specplan.simulator.run import resolve

    oracle = make_drafter_oracle(resolve(cfg).speculation, [req], 8)
    settings = EngineSettings(8, 8192, 8, 16, 100, "GUARANTEED_NO_EVICT", False, False, True, 6, verify_width="draft")
    wl = Workload(np.array([8]), np.array([6]), None, np.array([-1]), concurrency=1)
    ex = Executor(settings, wl, oracle, _Affine())
    ex.run()
    it = metrics.iteration_table(ex.trace)
    assert it.loc[0, "prefill_tokens"] == 8 and it.loc[0, "committed"] == 5 and it.loc[0, "accepted"] == 4
    # the 6 drafted tokens are the draft positions verified (the 8 prompt tokens are not)
    assert it.loc[0, "drafted"] == 6 and it.loc[0, "verified_draft_tokens"] == 6
    assert ex.trace.generated[0] == 6
