"""TensorRT-LLM's two speculative paths, each with its own K lookup, token budget, gate and stamping.

Expected values are worked by hand from the engine rules in docs/semantics.md (drafter path:
``Drafter.get_draft_len_for_batch_size`` on the active requests; one-model path:
``update_draft_len`` on the scheduled batch), or recomputed from the iterations table.
"""

import numpy as np
import pytest

from specplan.cost_models.base import CostModel
from specplan.simulator.engine import Executor
from specplan.simulator.inputs import EngineSettings, Workload
from specplan.acceptance.oracles import AcceptanceOracle
from specplan.simulator.paths import TRT_DRAFTER
from specplan.simulator.run import simulate

SCHEDULE = {4: 4, 8: 2, 32: 1}


def _lower_bound_k(active: int) -> int:
    """{4: 4, 8: 2, 32: 1} with keys as band starts: 1-3 -> 0, 4-7 -> 4, 8-31 -> 2, 32 and up -> 1."""
    return 0 if active < 4 else 4 if active < 8 else 2 if active < 32 else 1


@pytest.mark.parametrize("clients,steady_k", [(2, 0), (6, 4), (40, 1)])
def test_ngram_schedule_keys_are_lower_bounds_on_active(make_config, clients, steady_k):
    res = simulate(make_config(engine={"engine": "trtllm", "max_batch_size": 64},
                               speculation={"decoding_type": "NGram", "max_draft_len": 4, "draft_len_schedule": SCHEDULE},
                               workload={"concurrency": clients, "num_requests": 2 * clients, "output_len": 40}))
    it = res.iterations
    want = it["num_active"].map(_lower_bound_k)
    assert (it["k"] == want).all()
    assert (it["spec_on"] == (want > 0)).all()
    full = it[it["num_active"] == clients]  # every client has a request in flight
    assert len(full) > len(it) // 2 and (full["k"] == steady_k).all()
    if steady_k == 0:
        assert res.summary["spec_iterations"] == 0


def test_one_model_k_from_the_scheduled_batch(make_config):
    # 6 clients, at most 8 active but 4 scheduled: update_draft_len(4) on {4: 4, 8: 2} (bisect_left,
    # keys are upper bounds) gives 4; keyed on the 6 active requests it would be 2.
    res = simulate(make_config(engine={"engine": "trtllm", "max_batch_size": 4, "max_num_active_requests": 8},
                               speculation={"decoding_type": "SA", "max_draft_len": 4, "draft_len_schedule": {4: 4, 8: 2}},
                               workload={"concurrency": 6, "num_requests": 12, "output_len": 60}))
    it = res.iterations
    steady = it[(it["num_active"] == 6) & (it["batch_rows"] == 4) & (it["gen_rows"] == 4)]
    assert len(steady) > 20
    assert (steady["k"] == 4).all()
    assert (it["batch_rows"] <= 4).all() and (it.loc[it["spec_on"], "k"] == 4).all()


def test_one_model_budgets_k_static_placeholders(make_config):
    # max_num_tokens 10, K_static 4: a generation row costs 1 + 4 = 5, so two fit; update_draft_len(2)
    # on {1: 4, 8: 1} gives K = 1 and each row verifies 1 + 1 = 2 tokens: 4 per step.
    # (Placeholders at the runtime K would have been 1 + 1 = 2 per row: all four clients in one step.)
    res = simulate(make_config(engine={"engine": "trtllm", "max_batch_size": 8, "max_num_tokens": 10},
                               speculation={"decoding_type": "SA", "max_draft_len": 4, "draft_len_schedule": {1: 4, 8: 1}},
                               workload={"concurrency": 4, "num_requests": 4, "output_len": 60}))
    it = res.iterations
    decode = it[(it["gen_rows"] == it["batch_rows"]) & (it["num_active"] == 4)]
    assert len(decode) > 20
    assert (decode["batch_rows"] == 2).all() and (decode["k"] == 1).all() and (decode["verified_tokens"] == 4).all()


def test_one_model_k_zero_step_still_charges_placeholders(make_config):
    # {2: 3}, K_static 3, four clients, max_num_tokens 15: each generation row is charged 1 + 3 = 4,
    # so three fit (12 <= 15 < 16); update_draft_len(3) is 0 past the largest key, so the step drafts
    # nothing and each row computes 1 token: 3 verified tokens, while the fourth request waits.
    res = simulate(make_config(engine={"engine": "trtllm", "max_batch_size": 8, "max_num_tokens": 15},
                               speculation={"decoding_type": "SA", "max_draft_len": 3, "draft_len_schedule": {2: 3}},
                               workload={"concurrency": 4, "num_requests": 4, "output_len": 30}))
    it = res.iterations
    decode = it[(it["num_active"] == 4) & (it["gen_rows"] == it["batch_rows"])]
    assert len(decode) > 10
    assert (decode["batch_rows"] == 3).all() and (decode["k"] == 0).all() and (decode["verified_tokens"] == 3).all()


def _rolling_trip(it, window: int, threshold: float):
    """The first iteration whose last ``window`` samples average below ``threshold``: one sample per
    speculating iteration with generation rows, accepted / (K x generation rows), zeros included."""
    s = it[it["spec_on"] & (it["gen_rows"] > 0)]
    x = (s["accepted"] / (s["k"] * s["gen_rows"])).to_numpy()
    for i in range(window - 1, len(x)):
        if x[i - window + 1:i + 1].mean() < threshold:
            return int(s["iteration"].iloc[i])
    return None


def _sa_gate(threshold: float, denominator=None):
    from specplan.config import build_config

    spec = {"decoding_type": "SA", "max_draft_len": 4, "acceptance_rate_window_size": 200,
            "acceptance_rate_threshold": threshold}
    if denominator:
        spec["gate_denominator"] = denominator
    return simulate(build_config({
        "engine": {"engine": "trtllm", "max_batch_size": 8, "kv_num_blocks": 100000}, "speculation": spec,
        "acceptance": {"mode": "drafter"},
        "workload": {"trace": "specbench", "arrival": "closed_loop", "concurrency": 1, "num_requests": 60},
        "cost": {"model": "linear_gamma", "t_base_s": 0.01, "gamma": 0.0}}))


@pytest.mark.parametrize("threshold", [0.05, 0.1])
def test_sa_gate_counts_k_per_generation_row(threshold):
    res = _sa_gate(threshold)
    it = res.iterations
    trip = res.summary["gate_tripped_iteration"]
    assert trip is not None and trip == _rolling_trip(it, 200, threshold)
    assert not it.loc[it["iteration"] > trip, "spec_on"].any()
    zero_match = it[it["spec_on"] & (it["gen_rows"] > 0) & (it["drafted"] == 0)]
    assert len(zero_match) > 0  # iterations where nothing matched, each a 0 sample


def test_sa_gate_trips_earlier_than_the_drafted_reading():
    # The drafted-length denominator skips zero-match iterations, so the same threshold trips later.
    runtime, drafted = _sa_gate(0.1), _sa_gate(0.1, "drafted")
    late = drafted.summary["gate_tripped_iteration"]
    assert late is None or late > runtime.summary["gate_tripped_iteration"]


class _FixedCost(CostModel):
    def step_time(self, batch):
        return 0.01


class _AcceptNothing(AcceptanceOracle):
    """Drafts K for every row and accepts none: every verify step commits one token."""

    def draft(self, rids, committed, k):
        return np.full(len(rids), k, dtype=np.int64), np.zeros(len(rids), dtype=np.int64)


def _stamped_run(scheduler: str):
    # NGram path, K 4 padded, schedule {2: 4} (lower bounds: 1 active -> 0), max_num_tokens 6, two
    # clients: A (10 tokens) then C (10 tokens, 0.05 s think time) on one, B (40 tokens) on the other.
    settings = EngineSettings(8, 6, 8, 16, 1000, "GUARANTEED_NO_EVICT", False, False, True, 4,
                              draft_len_schedule={2: 4}, schedule_lookup="lower_bound", verify_width="static",
                              drafter="NGram", path=TRT_DRAFTER, kv_cache_scheduler=scheduler)
    plen, olen = np.array([1, 1, 1]), np.array([10, 40, 10])
    wl = Workload(plen, olen, None, np.array([-1, -1, -1]), concurrency=2, think_time=np.array([0.0, 0.0, 0.05]))
    ex = Executor(settings, wl, _AcceptNothing(plen, olen), _FixedCost())
    ex.run()
    names = ("iteration", "start_s", "step_s", "num_active", "num_queued", "batch_rows", "gen_rows",
             "prefill_tokens", "k", "spec_on", "drafted", "accepted", "verified_tokens", "charged_tokens",
             "kv_reserved_tokens")
    it = {n: ex.trace.iterations.column(n) for n in names}
    first_a = ex.trace.finish[0]
    # 1. A and B active, speculation on: a generation row costs 1 + 4 = 5, so only A fits (B waits).
    phase1 = (it["start_s"] < first_a - 1e-9) & (it["prefill_tokens"] == 0)
    assert phase1.sum() == 9 and (it["batch_rows"][phase1] == 1).all() and it["spec_on"][phase1].all()
    # 2. A done, B alone: K = 0, speculation off, B is scheduled and stamped py_disable_speculative_decoding;
    #    the schedule resolved K = 0, so both schedulers charge 1.
    alone = it["num_active"] == 1
    assert alone.sum() >= 4 and not it["spec_on"][alone].any() and (it["charged_tokens"][alone] == 1).all()
    return ex, it


def test_stamped_requests_keep_a_one_token_budget_under_kv_cache_v2_scheduler():
    # 3. (KVCacheV2Scheduler: 1 + len(py_draft_tokens)) C arrives, speculation on again: stamped B has
    #    no placeholders (1 token), C costs 5: both fit in 6, and the NGram drafter still drafts B,
    #    padded to 1 + 4: 10 verified tokens per step.
    ex, it = _stamped_run("v2")
    both = (it["num_active"] == 2) & (it["gen_rows"] == 2)
    assert both.sum() == 9  # C's 9 decode steps after its prefill
    assert (it["batch_rows"][both] == 2).all() and (it["verified_tokens"][both] == 10).all()
    assert (it["drafted"][both] == 8).all() and (it["charged_tokens"][both] == 6).all()


def test_stamped_requests_are_charged_the_placeholders_under_the_default_scheduler():
    # 3. (MicroBatchScheduler, V1: the C++ draft_tokens stamp [0] * 4 ignores py_disable_speculative_decoding)
    #    C arrives: B (stamped) is charged 1 + 4 = 5 and C's 1-token prefill fits beside it (6); from
    #    then on B 5 + C 5 > 6, so only B runs, verified 1 + 4 (drafted and padded although stamped),
    #    KV grown by 1 + K_static = 5, until B completes; C decodes alone after it (K = 0: 1 token).
    ex, it = _stamped_run("v1")
    assert not ((it["num_active"] == 2) & (it["gen_rows"] == 2)).any()
    both = (it["num_active"] == 2) & (it["prefill_tokens"] == 0)
    assert both.sum() > 10 and (it["batch_rows"][both] == 1).all() and (it["charged_tokens"][both] == 5).all()
    assert (it["verified_tokens"][both] == 5).all() and (it["drafted"][both] == 4).all()
    assert (it["kv_reserved_tokens"][both] == 5).all()
    c_prefill = (it["num_active"] == 2) & (it["prefill_tokens"] == 1)
    assert c_prefill.sum() == 1 and (it["charged_tokens"][c_prefill] == 6).all()
    assert ex.trace.first_token[2] < ex.trace.finish[1] < ex.trace.finish[2]
    c_alone = it["start_s"] >= ex.trace.finish[1] - 1e-9
    assert c_alone.sum() == 9 and (it["charged_tokens"][c_alone] == 1).all()


def _ngram_specbench():
    from specplan.config import build_config

    return simulate(build_config({
        "engine": {"engine": "trtllm", "max_batch_size": 8, "kv_num_blocks": 100000},
        "speculation": {"decoding_type": "NGram", "max_draft_len": 4, "max_matching_ngram_size": 2},
        "acceptance": {"mode": "drafter"},
        "workload": {"trace": "specbench", "arrival": "closed_loop", "concurrency": 2, "num_requests": 12},
        "cost": {"model": "linear_gamma", "t_base_s": 0.01, "gamma": 0.0}}))


def test_gate_sample_mean_is_counted_as_the_path_counts():
    # recommend sets the gate threshold from this mean; recompute it from the iterations table.
    it = (sa := _sa_gate(0.0)).iterations  # threshold 0: never trips
    s = it[it["spec_on"] & (it["gen_rows"] > 0)]
    assert sa.summary["gate_sample_mean"] == pytest.approx((s["accepted"] / (s["k"] * s["gen_rows"])).mean(), rel=1e-12)
    it = (ngram := _ngram_specbench()).iterations
    s = it[it["spec_on"] & (it["drafted"] > 0)]
    assert ngram.summary["gate_sample_mean"] == pytest.approx((s["accepted"] / s["drafted"]).mean(), rel=1e-12)


@pytest.mark.parametrize("denominator", ["drafted", "padded"])
def test_ngram_gate_denominators(denominator):
    # drafted (current engine): accepted / pre-padding draft lengths; padded (the older
    # num_draft_tokens reading): accepted / (K_static x drafting rows). Both only sample iterations
    # that drafted something. Window 50, threshold 0.3, recomputed from the iterations table.
    from specplan.config import build_config

    res = simulate(build_config({
        "engine": {"engine": "trtllm", "max_batch_size": 8, "kv_num_blocks": 100000},
        "speculation": {"decoding_type": "NGram", "max_draft_len": 4, "max_matching_ngram_size": 2,
                        "acceptance_rate_window_size": 50, "acceptance_rate_threshold": 0.3,
                        "gate_denominator": denominator},
        "acceptance": {"mode": "drafter"},
        "workload": {"trace": "specbench", "arrival": "closed_loop", "concurrency": 1, "num_requests": 12},
        "cost": {"model": "linear_gamma", "t_base_s": 0.01, "gamma": 0.0}}))
    it = res.iterations
    s = it[it["spec_on"] & (it["drafted"] > 0)]
    x = (s["accepted"] / (s["drafted"] if denominator == "drafted" else 4 * s["gen_rows"])).to_numpy()
    trip = next((int(s["iteration"].iloc[i]) for i in range(49, len(x)) if x[i - 49:i + 1].mean() < 0.3), None)
    assert trip is not None and res.summary["gate_tripped_iteration"] == trip


def test_one_model_max_concurrency_is_a_schedule_on_the_scheduled_batch(make_config):
    # SA has no drafter object: max_concurrency 2 becomes draft_len_schedule {2: 4}, looked up with
    # update_draft_len on the scheduled batch: K = 4 with at most 2 rows scheduled, 0 with 3 or more.
    res = simulate(make_config(engine={"engine": "trtllm", "max_batch_size": 8},
                               speculation={"decoding_type": "SA", "max_draft_len": 4, "max_concurrency": 2},
                               workload={"concurrency": 3, "num_requests": 5, "output_len": 40}))
    assert res.config.speculation.draft_len_schedule == {2: 4} and res.config.speculation.max_concurrency is None
    it = res.iterations
    assert (it["k"] == np.where(it["batch_rows"] <= 2, 4, 0)).all()
    assert set(it["batch_rows"]) >= {2, 3} and set(it["k"]) == {0, 4}  # three requests, then two
