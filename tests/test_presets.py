"""AUTO, engine presets and the legacy gate (issue 7)."""

import numpy as np
import pytest

from specplan.config import EngineConfig, SpeculationConfig
from specplan.errors import ConfigError
from specplan.simulator.control import LegacySpeculationGate
from specplan.simulator.presets import resolve_speculation
from specplan.simulator.run import simulate


@pytest.mark.parametrize("mbs,k,n", [(4, 5, 3), (5, 3, 5), (1, 5, 3), (64, 3, 5)])
def test_auto_resolves_to_engine_values(mbs, k, n):
    # auto_heuristic.suggest_spec_config: K = 5, ngram 3 when max_batch_size <= 4, else K = 3, ngram 5.
    spec = resolve_speculation(EngineConfig(max_batch_size=mbs), SpeculationConfig(decoding_type="AUTO"))
    assert (spec.decoding_type, spec.max_draft_len, spec.max_matching_ngram_size) == ("NGram", k, n)
    assert spec.max_concurrency == 32 and spec.is_keep_all and spec.is_use_oldest and spec.is_public_pool


def test_auto_turns_speculation_off_above_max_concurrency(make_config):
    # 40 clients always active (> max_concurrency 32): should_use_spec_decode is false at every step.
    busy = simulate(make_config(engine={"max_batch_size": 64}, speculation={"decoding_type": "AUTO"},
                                workload={"concurrency": 40, "num_requests": 40, "output_len": 30}))
    assert busy.summary["spec_iterations"] == 0
    assert busy.description["speculation"]["max_draft_len"] == 3
    light = simulate(make_config(engine={"max_batch_size": 64}, speculation={"decoding_type": "AUTO"},
                                 workload={"concurrency": 8, "num_requests": 8, "output_len": 30}))
    assert light.summary["spec_iterations"] > 0


def test_legacy_gate_hand_computed():
    gate = LegacySpeculationGate(window=2, threshold=0.5)
    # Request 1: 30 tokens in 20 iterations -> 1.5 - 1 = 0.5. Request 2: 10 in 10 -> 0.0.
    # Window [0.5, 0.0] averages 0.25 < 0.5: trips on the 2nd completed request.
    assert gate.record(30, 20) is False
    assert gate.record(10, 10) is True and gate.disabled


def test_legacy_gate_in_the_loop(make_config):
    # alpha 0 accepts nothing: every request decodes 1 token per iteration, sample max(0, 1 - 1) = 0.
    res = simulate(make_config(speculation={"max_draft_len": 3, "acceptance_window": 3,
                                            "acceptance_length_threshold": 0.2},
                               acceptance={"alpha": 0.0},
                               workload={"concurrency": 1, "num_requests": 6, "output_len": 20}))
    req = res.requests.sort_values("finish_s")
    third_finish = req["finish_s"].iloc[2]
    it = res.iterations
    trip_iter = int(it.loc[np.isclose(it["start_s"] + it["step_s"], third_finish), "iteration"].iloc[0])
    assert res.summary["gate_tripped_iteration"] == trip_iter
    assert not it.loc[it["iteration"] > trip_iter, "spec_on"].any()


def test_presets_differ_past_the_last_band(make_config):
    # The same bands {2: 3} with 4 requests running: TRT's one-model path (update_draft_len,
    # bisect_left) gives K = 0 past the largest key; its drafter path (Drafter.get_draft_len_for_batch_size,
    # bisect_right: keys are lower bounds) and vLLM (the last range carries) give K = 3.
    common = dict(workload={"concurrency": 4, "num_requests": 4, "output_len": 40})
    sched = {"max_draft_len": 3, "draft_len_schedule": {2: 3}}
    one_model = simulate(make_config(engine={"engine": "trtllm"}, speculation={"decoding_type": "SA", **sched}, **common))
    drafter = simulate(make_config(engine={"engine": "trtllm"}, speculation={"decoding_type": "pld", **sched}, **common))
    vllm = simulate(make_config(engine={"engine": "vllm"}, speculation={"decoding_type": "pld", **sched}, **common))
    full = lambda r: r.iterations[r.iterations["gen_rows"] == 4]  # noqa: E731
    assert len(full(one_model)) and (full(one_model)["k"] == 0).all()
    assert len(full(drafter)) and (full(drafter)["k"] == 3).all()
    assert len(full(vllm)) and (full(vllm)["k"] == 3).all()


def test_presets_reject_the_other_engines_fields():
    with pytest.raises(ConfigError, match="speculation.acceptance_rate_window_size"):
        resolve_speculation(EngineConfig(engine="vllm"), SpeculationConfig(
            decoding_type="vllm_ngram", acceptance_rate_window_size=10, acceptance_rate_threshold=0.3))
    with pytest.raises(ConfigError, match="no 'NGram' drafter"):
        resolve_speculation(EngineConfig(engine="vllm"), SpeculationConfig(decoding_type="NGram"))


def test_ngram_refuses_the_overlap_scheduler_on_trtllm():
    with pytest.raises(ConfigError, match="engine.overlap_scheduler"):
        resolve_speculation(EngineConfig(overlap_scheduler=True), SpeculationConfig(decoding_type="NGram"))
    with pytest.raises(ConfigError, match="engine.overlap_scheduler"):
        resolve_speculation(EngineConfig(overlap_scheduler=True), SpeculationConfig(decoding_type="AUTO"))
    ok = resolve_speculation(EngineConfig(overlap_scheduler=True), SpeculationConfig(decoding_type="SA"))
    assert ok.decoding_type == "SA"
