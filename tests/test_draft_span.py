"""Drafting iterations in compiled spans (``simulator/draft_span.py``) against every step through
SimPy one at a time (``Executor._spans`` forced off): the same tables, summary, gate samples and
tripped iteration, bit for bit, for each drafter and parametric oracle, path, K rule and gate the
spans take."""

from __future__ import annotations

from collections import deque
from importlib import resources

import numpy as np
import pandas as pd
import pytest
import yaml

from specplan.config import build_config
from specplan.simulator import draft_state, engine, span
from specplan.simulator.control import latch_push
from specplan.simulator.drafts import propose_draft_token_ids
from specplan.simulator.engine import Executor
from specplan.simulator.run import build_workload, resolve, simulate

BASE = {"seed": 3, "engine": {"max_batch_size": 8, "max_num_tokens": 2048},
        "speculation": {"decoding_type": "SA", "max_draft_len": 4, "max_matching_ngram_size": -1},
        "acceptance": {"mode": "drafter"},
        "workload": {"trace": "specbench", "num_requests": 60, "arrival": "closed_loop", "concurrency": 8},
        "cost": {"model": "roofline", "gpu": "h200", "model_name": "llama-3.1-8b"}}
GATE = {"acceptance_rate_window_size": 10}
VLLM_NGRAM = {"decoding_type": "vllm_ngram", "max_draft_len": 3, "max_matching_ngram_size": 3}
PLD = {"decoding_type": "pld", "max_draft_len": 4, "max_matching_ngram_size": 3}

CASES = {
    # TensorRT-LLM's one-model path (SA): K_static charged, update_draft_len, the static gate sample
    "sa": {},
    "sa-schedule-runtime-gate-trips": {"speculation": {"draft_len_schedule": {2: 4, 5: 2, 8: 1},
                                                       "gate_denominator": "runtime", **GATE,
                                                       "acceptance_rate_threshold": 0.3}},
    "sa-gate-overlap": {"speculation": {"acceptance_rate_window_size": 200, "acceptance_rate_threshold": 0.02},
                        "engine": {"overlap_scheduler": True}},
    "sa-schedule-on-active": {"speculation": {"draft_len_schedule": {2: 4, 5: 2, 8: 1}, "k_from": "active"}},
    "sa-gate-trips-overlap": {"speculation": {**GATE, "acceptance_rate_threshold": 0.6},
                              "engine": {"overlap_scheduler": True}},
    "sa-legacy-gate-trips": {"speculation": {"acceptance_window": 3, "acceptance_length_threshold": 0.9}},
    "sa-open-loop-preemption": {"workload": {"arrival": "poisson", "rate": 30.0},
                                "engine": {"capacity_scheduler_policy": "MAX_UTILIZATION", "kv_num_blocks": 300,
                                           "enable_chunked_prefill": True, "max_num_tokens": 256}},
    # the drafter path (prompt lookup): K before scheduling, stamps, should_use_spec_decode, drafts at prefill
    "pld": {"speculation": PLD},
    "pld-schedule-padded-gate-trips": {"speculation": {**PLD, "draft_len_schedule": {1: 4, 4: 2, 7: 0},
                                                       "gate_denominator": "padded", **GATE,
                                                       "acceptance_rate_threshold": 0.4}},
    "pld-hf-max-concurrency": {"speculation": {**PLD, "pld_variant": "hf", "max_concurrency": 5}},
    # vLLM: drafts proposed after a step, verified the next; K from the scheduled count
    "vllm-ngram": {"engine": {"engine": "vllm"}, "speculation": VLLM_NGRAM},
    "vllm-ngram-ranges": {"engine": {"engine": "vllm"},
                          "speculation": {**VLLM_NGRAM, "max_draft_len": 4,
                                          "num_speculative_tokens_per_batch_size": [[1, 3, 4], [4, 6, 2], [7, 8, 1]]}},
    "vllm-pld": {"engine": {"engine": "vllm"}, "speculation": {**PLD, "max_draft_len": 3}},
    "vllm-open-loop-max-sim-time": {"engine": {"engine": "vllm"}, "speculation": VLLM_NGRAM,
                                    "workload": {"arrival": "poisson", "rate": 40.0}, "max_sim_time_s": 2.0},
    # parametric oracles (SurvivalOracle): per-request uniforms and step counts, on each path
    "alpha-sa": {"acceptance": {"mode": "alpha", "alpha": 0.6}},
    "alpha-sa-schedule-gate-trips": {"acceptance": {"mode": "alpha", "alpha": 0.35},
                                     "speculation": {"draft_len_schedule": {2: 4, 5: 2, 8: 1}, **GATE,
                                                     "acceptance_rate_threshold": 0.3}},
    "per-position-pld-open-loop": {"acceptance": {"mode": "per_position", "per_position": [0.9, 0.6, 0.4]},
                                   "speculation": PLD, "workload": {"arrival": "poisson", "rate": 30.0}},
    "length-dist-vllm-ranges": {"acceptance": {"mode": "length_dist", "length_dist": [0.3, 0.2, 0.2, 0.3]},
                                "engine": {"engine": "vllm"},
                                "speculation": {**VLLM_NGRAM, "max_draft_len": 4,
                                                "num_speculative_tokens_per_batch_size": [[1, 3, 4], [4, 6, 2],
                                                                                          [7, 8, 1]]}},
}


def _config(over: dict):
    data = {key: dict(value) if isinstance(value, dict) else value for key, value in BASE.items()}
    for key, value in over.items():
        data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
    return build_config(data)


def _run(cfg, monkeypatch, step_at_a_time: bool):
    seen = []
    with monkeypatch.context() as m:
        if step_at_a_time:
            m.setattr(Executor, "_spans", lambda self: False)
        res = simulate(cfg, observe=seen.append)
    return res, seen[0]


def _assert_spans_match(cfg, monkeypatch, count_calls):
    calls = count_calls(span, "run_span")
    fast, ex = _run(cfg, monkeypatch, False)
    assert ex._drafter, "the drafting steps should have run in spans"
    assert 0 < len(calls) < fast.summary["iterations"]
    calls.clear()
    slow, slow_ex = _run(cfg, monkeypatch, True)
    assert not calls
    for name in ("requests", "iterations", "emissions"):
        pd.testing.assert_frame_equal(getattr(fast, name), getattr(slow, name), check_exact=True)
    assert fast.summary == slow.summary
    assert ex.trace.gate_samples == slow_ex.trace.gate_samples and slow_ex.trace.gate_samples
    assert (ex.trace.gate_tripped_iteration, ex.trace.gate_tripped_time) == (
        slow_ex.trace.gate_tripped_iteration, slow_ex.trace.gate_tripped_time)
    return fast


@pytest.mark.parametrize("name", CASES)
def test_drafter_spans_match_one_step_at_a_time(name, monkeypatch, count_calls):
    if name == "sa":  # a sample log of 16 fills in every span: the spans stop and go on
        monkeypatch.setattr(draft_state, "_SAMPLE_LOG", 16)
    fast = _assert_spans_match(_config(CASES[name]), monkeypatch, count_calls)
    tripped = fast.summary["gate_tripped_iteration"]
    assert (tripped is not None) == ("trips" in name)
    if tripped is not None:  # then speculation stays off, the spans going on without drafts
        assert 1 < tripped < fast.summary["iterations"] - 10


def test_vllm_drafts_cut_at_max_model_len(monkeypatch, count_calls):
    """``max_model_len`` at the longest request: its drafts are cut there and, when the batch's
    longest sequence reaches it, the n-gram drafter is skipped for the batch."""
    over = CASES["vllm-ngram"]
    workload, _ = build_workload(resolve(_config(over)))
    longest = int((workload.prompt_lens + workload.output_lens).max())
    skipped = []  # the steps after which the step-at-a-time run skipped the drafter

    def propose(oracle, st, rows, gid, k, max_model_len, ngram, max_seq_len, num_spec_tokens):
        skipped.append(k > 0 and max_seq_len + num_spec_tokens > max_model_len)
        return propose_draft_token_ids(oracle, st, rows, gid, k, max_model_len, ngram, max_seq_len, num_spec_tokens)

    monkeypatch.setattr(engine, "propose_draft_token_ids", propose)
    _assert_spans_match(_config({**over, "engine": {**over["engine"], "max_model_len": longest + 1}}),
                        monkeypatch, count_calls)
    assert any(skipped)


def test_measured_sa_kernel_cost(tmp_path, monkeypatch, count_calls):
    """The SA kernel priced from a measured table (interpolated over the batch), not the wave formula."""
    costs = yaml.safe_load(resources.files("specplan").joinpath("data", "profiles", "draft_costs.yaml").read_text())
    costs["sa_kernel"].update(measured=True, batch=[1, 8, 64], seconds=[8e-6, 1.1e-5, 3.0e-5])
    path = tmp_path / "draft_costs.yaml"
    path.write_text(yaml.safe_dump(costs))
    _assert_spans_match(_config({"cost": {"draft_costs": str(path)}}), monkeypatch, count_calls)


@pytest.mark.parametrize("window", [7, 300])
def test_parametric_spans_draw_the_window_again_where_it_misses(window, monkeypatch, count_calls):
    """A uniforms window 7 or 300 past the active requests' blocks (of 100 uniforms): a closed-loop
    client's next request, sent and admitted inside a span, soon falls outside it; the span returns
    there (``span.WINDOW``), Python draws it again, and nothing changes. With an open loop, whose
    arrivals come through SimPy, Python draws it before each span."""
    from specplan.acceptance import oracles

    monkeypatch.setattr(oracles, "_WINDOW", window)
    statuses = []
    result = span.result

    def counted(ex):
        out = result(ex)
        statuses.append(out[0])
        return out

    monkeypatch.setattr(span, "result", counted)
    synthetic = {"trace": None, "num_requests": 120, "prompt_len": 64, "output_len": 100}
    for arrival in ({"arrival": "closed_loop", "concurrency": 8}, {"arrival": "poisson", "rate": 30.0}):
        statuses.clear()
        _assert_spans_match(_config({"acceptance": {"mode": "alpha", "alpha": 0.7},
                                     "workload": {**synthetic, **arrival}}), monkeypatch, count_calls)
        assert (statuses.count(span.WINDOW) > 10) == (arrival["arrival"] == "closed_loop")


def test_other_drafters_keep_the_step_path(count_calls):
    calls = count_calls(span, "run_span")
    seen = []
    simulate(_config({"speculation": {"enable_global_pool": True}}), observe=seen.append)  # a pool shared across requests
    assert not seen[0]._drafter and not calls


def test_latch_push_is_the_engines_rolling_window():
    """The gate's ring buffer against the deque the engine keeps: same trip, same sample."""
    rng = np.random.default_rng(0)
    for window in (1, 3, 8):
        for threshold in (0.2, 0.45):
            samples = rng.random(60)
            ring, total, counts = np.zeros(window), np.zeros(1), np.zeros(2, dtype=np.int64)
            kept, running, expected = deque(), 0.0, None
            for i, x in enumerate(samples):
                kept.append(x)
                running += x
                if len(kept) > window:
                    running -= kept.popleft()
                if expected is None and i + 1 >= window and running / len(kept) < threshold:
                    expected = i
                tripped = latch_push(ring, total, counts, threshold, x)
                assert tripped == (i == expected)
                if expected is None:
                    assert total[0] == running
            assert counts[1] == (expected is not None)
