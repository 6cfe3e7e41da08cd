"""Costs priced in the compiled spans besides the roofline, against every step through SimPy and
Python one at a time (``Executor._spans`` forced off): the same tables, summary and (a measured
profile's) range warnings in the same order, bit for bit.

- A measured profile (``cost_models/profile_step.py``): draft-free (open loop in the spans, a fleet),
  drafting (SA's kernel from the draft table, vLLM n-gram on the profile's host terms) and parametric
  acceptance; its step time by hand and against the formula in plain Python floats.
- ``linear_gamma``, ``table`` and ``linear`` (``cost_models.compiled``): drafting with each one's
  drafting cost, draft-free in a fleet; their step times against the formulas in numpy.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import yaml

from specplan.config import CostConfig, build_config
from specplan.cost_models.draft import DraftCost
from specplan.cost_models.profile import ProfileCostModel, parse_profile
from specplan.cost_models.terms import BatchTerms
from specplan.simulator.engine import Executor
from specplan.simulator.run import simulate

# Llama-3.1-8B-like on one GPU; measured up to 1,024 tokens and 1,500 context, so Spec-Bench's longer
# prompts and contexts price outside the range and warn.
PROFILE = {
    "format": "specplan-profile/1", "name": "test/measured", "gpu": "h200", "tp": 1,
    "provenance": {"kind": "measured", "source": "hand-written for the tests"},
    "model_shape": {"name": "llama-3.1-8b", "num_layers": 32, "hidden": 4096, "vocab": 128256},
    "token_time": {"tokens": [1, 16, 64, 256, 1024], "seconds": [4.1e-3, 4.3e-3, 4.9e-3, 8.5e-3, 27e-3]},
    "lm_head_time": {"tokens": [1, 64, 512], "seconds": [6e-5, 1.5e-4, 9e-4]},
    "attention": {"kv_s_per_token": 2.5e-8, "decode_work_s": 1e-12, "prefill_work_s": 3e-12},
    "measured_range": {"tokens": [1, 1024], "logit_tokens": [1, 256], "max_context": 1500, "max_batch": 64},
}
HOST = {"step_s": 9e-5, "per_seq_s": 3e-6, "draft_step_s": 4e-5, "draft_per_seq_s": 7e-6}

BASE = {"seed": 5, "engine": {"max_batch_size": 8, "max_num_tokens": 2048},
        "speculation": {"decoding_type": "SA", "max_draft_len": 4, "max_matching_ngram_size": -1},
        "acceptance": {"mode": "drafter"},
        "workload": {"trace": "specbench", "num_requests": 60, "arrival": "closed_loop", "concurrency": 8}}
NONE = {"decoding_type": "none"}
VLLM_NGRAM = {"decoding_type": "vllm_ngram", "max_draft_len": 3, "max_matching_ngram_size": 3}

CASES = {
    "sa": ({}, {}),
    "sa-alpha-host-terms": ({"acceptance": {"mode": "alpha", "alpha": 0.7}}, {"host": HOST}),
    "vllm-ngram-host-drafting": ({"engine": {"engine": "vllm"}, "speculation": VLLM_NGRAM}, {"host": HOST}),
    "no-speculation-open-loop": ({"speculation": NONE, "workload": {"arrival": "poisson", "rate": 30.0}},
                                 {"cuda_graph_padding": False}),
    "no-speculation-fleet": ({"speculation": NONE, "workload": {"arrival": "poisson", "rate": 30.0},
                              "cluster": {"replicas": 3, "router": "least_outstanding"}}, {}),
}


def _config(tmp_path, over: dict, profile: dict):
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump({**PROFILE, **profile}))
    data = {key: dict(value) for key, value in BASE.items() if isinstance(value, dict)} | {"seed": BASE["seed"]}
    for key, value in over.items():
        data[key] = {**data.get(key, {}), **value}
    data["cost"] = {"model": "profile", "profile": str(path)}
    return build_config(data)


def _run(cfg, monkeypatch, step_at_a_time: bool):
    with monkeypatch.context() as m, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if step_at_a_time:
            m.setattr(Executor, "_spans", lambda self: False)
        result = simulate(cfg)
    return result, [str(w.message) for w in caught if "measured range" in str(w.message)]


def _assert_spans_match(cfg, monkeypatch, count_calls):
    # Every step of the fast run in a span, none of the slow one; the same tables, summary and warnings.
    commits = count_calls(Executor, "_commit")  # a step through Python
    fast, fast_warned = _run(cfg, monkeypatch, False)
    assert not commits, "every step should have run in a span"
    slow, slow_warned = _run(cfg, monkeypatch, True)
    assert len(commits) == slow.summary["iterations"]
    for table in ("requests", "iterations", "emissions"):
        pd.testing.assert_frame_equal(getattr(fast, table), getattr(slow, table), check_exact=True)
    assert fast.summary == slow.summary
    assert fast_warned == slow_warned
    return fast, fast_warned


@pytest.mark.parametrize("name", CASES)
def test_profile_spans_match_one_step_at_a_time(name, tmp_path, monkeypatch, count_calls):
    _, warned = _assert_spans_match(_config(tmp_path, *CASES[name]), monkeypatch, count_calls)
    assert len(warned) >= 2  # the prompts and contexts outside the range


def test_step_time_by_hand():
    """Two decode rows verifying 3 positions over 100 context and one 40-token prefill chunk over 10,
    TP 1, padded: tokens 6 + 40 = 46 pad to 48; g(48) between 16 and 64; logits 6 + 1 = 7; KV
    2 * 103 + 50; work 2 * 3 * (100 + 2) and 40 * (10 + 20.5); host 9e-5 + 3 * 3e-6."""
    model = ProfileCostModel(parse_profile(yaml.safe_dump({**PROFILE, "host": HOST}), "test"), DraftCost.default(132),
                             CostConfig())
    terms = BatchTerms(num_seqs=3, num_tokens=46, logit_tokens=7, kv_decode=206.0, kv_prefill=50.0,
                       work_decode=612.0, work_prefill=1220.0, max_context=103, context_tokens=210, verify_rows=2)
    g = 4.3e-3 + (4.9e-3 - 4.3e-3) * (48 - 16) / (64 - 16)
    h = 6e-5 + (1.5e-4 - 6e-5) * (7 - 1) / (64 - 1)
    by_hand = g + h + (2.5e-8 * 256 + 1e-12 * 612 + 3e-12 * 1220) + 0.0 + (9e-5 + 3e-6 * 3)
    assert model.step_time_terms(terms) == pytest.approx(by_hand, rel=1e-12)
    assert model.draft_time("vllm_ngram", 5, 3) == pytest.approx(4e-5 + 5 * 7e-6, rel=1e-12)
    assert model.draft_time("SA", 5, 3) == DraftCost.default(132).time("SA", 5, 3)  # SA: the kernel's table


def test_range_warnings_come_in_the_order_the_steps_met_them():
    """Noted out of order (context before tokens): warned in the noted order, once each, then cleared."""
    model = ProfileCostModel(parse_profile(yaml.safe_dump(PROFILE), "test"), DraftCost.default(132), CostConfig())
    model.outside[:] = np.array([[2000.0, np.nan, 1600.0], [1.0, np.nan, 0.0]])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.warn_outside()
        model.warn_outside()
    assert [str(w.message).split(": ")[1].split(" is")[0] for w in caught] == ["context 1600", "total tokens 2000"]
    assert np.isnan(model.outside).all()


def _reference_segment(x, y, n):
    # The model's curve in plain Python floats (the rule ``profile.Segments`` documents).
    if n > x[-1]:
        return y[-1] + max(y[-1] - y[-2], 0.0) / (x[-1] - x[-2]) * (n - x[-1])
    if n < x[0]:
        return max(y[0] + max(y[1] - y[0], 0.0) / (x[1] - x[0]) * (n - x[0]), 0.0)
    i = min(max(j for j in range(len(x)) if x[j] <= n), len(x) - 2)
    return y[i] + (y[i + 1] - y[i]) * (n - x[i]) / (x[i + 1] - x[i])


def _reference_step(profile: dict, options: CostConfig, t: BatchTerms) -> float:
    # The module docstring's step time in plain Python floats, term by term in its order (TP 1).
    n = t.num_tokens
    if options.cuda_graph_padding and 2 < n <= options.cuda_graph_max_tokens:
        n = 4 if n <= 4 else -(-n // 8) * 8
    g, h, a, host = profile["token_time"], profile["lm_head_time"], profile["attention"], profile["host"]
    attention = (a["kv_s_per_token"] * (t.kv_decode + t.kv_prefill) + a["decode_work_s"] * t.work_decode
                 + a["prefill_work_s"] * t.work_prefill)
    return (_reference_segment([float(v) for v in g["tokens"]], g["seconds"], n)
            + _reference_segment([float(v) for v in h["tokens"]], h["seconds"], t.logit_tokens)
            + attention + 0.0 + (host["step_s"] + host["per_seq_s"] * t.num_seqs))


def test_compiled_step_time_is_the_formula_to_the_bit():
    """2,000 random batches, inside the measured range and past both ends (the end segments, the
    floor at 0, a falling end segment held flat): the compiled step time equals the formula in plain
    Python floats exactly."""
    profile = {**PROFILE, "host": HOST, "token_time": {"tokens": [8, 16, 64, 256, 1024],
                                                       "seconds": [1e-4, 4.3e-3, 4.9e-3, 8.5e-3, 8.4e-3]}}
    options = CostConfig()
    model = ProfileCostModel(parse_profile(yaml.safe_dump(profile), "test"), DraftCost.default(132), options)
    rng = np.random.default_rng(7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(2000):
            seqs = int(rng.integers(1, 65))
            tokens = int(rng.integers(seqs, 4000))
            terms = BatchTerms(seqs, tokens, int(rng.integers(1, min(tokens, 700) + 1)), float(rng.integers(0, 10 ** 6)),
                               float(rng.integers(0, 10 ** 6)), float(rng.integers(0, 10 ** 8)) + 0.5,
                               float(rng.integers(0, 10 ** 9)), int(rng.integers(0, 3000)), 0, 0)
            assert model.step_time_terms(terms) == _reference_step(profile, options, terms)


LINEAR_GAMMA = {"model": "linear_gamma", "t_base_s": {1: 0.008, 16: 0.010, 64: 0.014}, "gamma": {1: 0.02, 64: 0.5},
                "draft_cost_s": 0.0007}
TABLE = {"model": "table", "table_s": {2: {0: 0.008, 4: 0.011}, 4: {1: 0.0095}, 8: {0: 0.009, 2: 0.0105, 8: 0.02}}}
LINEAR = {"model": "linear", "linear_coefficients": {"c0_s": 0.006, "c_tok_s": 2e-6, "c_kv_s": 3e-9, "c_seq_s": 4e-5}}
SIMPLE_COSTS = {"linear_gamma": LINEAR_GAMMA, "table": TABLE, "linear-draft-fraction": {**LINEAR, "draft_fraction": 0.15},
                "linear-draft-table": LINEAR}
SIMPLE_CASES = {
    "sa-alpha": {"acceptance": {"mode": "alpha", "alpha": 0.7}},
    "sa-drafter-gate-trips": {"speculation": {"acceptance_rate_window_size": 10, "acceptance_rate_threshold": 0.5}},
    "vllm-ngram": {"engine": {"engine": "vllm"}, "speculation": VLLM_NGRAM},
    "no-speculation-fleet": {"speculation": NONE, "workload": {"arrival": "poisson", "rate": 30.0},
                             "cluster": {"replicas": 3, "router": "least_outstanding"}},
}


@pytest.mark.parametrize("cost", SIMPLE_COSTS)
@pytest.mark.parametrize("name", SIMPLE_CASES)
def test_simple_costs_span_as_one_step_at_a_time(cost, name, monkeypatch, count_calls):
    """``linear_gamma`` (its drafting ``draft_cost_s`` a step), ``table`` (drafting folded in) and
    ``linear`` (drafting a fraction of the verify step, or priced by the draft table)."""
    data = {key: dict(value) for key, value in BASE.items() if isinstance(value, dict)} | {"seed": BASE["seed"]}
    for key, value in SIMPLE_CASES[name].items():
        data[key] = {**data.get(key, {}), **value}
    fast, _ = _assert_spans_match(build_config({**data, "cost": SIMPLE_COSTS[cost]}), monkeypatch, count_calls)
    assert (fast.summary["gate_tripped_iteration"] is not None) == ("trips" in name)


def test_linear_gamma_step_time_is_the_formula_to_the_bit():
    """T = t_base(B) (1 + gamma(B) K_eff), K_eff = (tokens - B) / B, with numpy's interp clamped at the
    tables' ends, on 2,000 random batches inside and past both ends: equal exactly."""
    from specplan.cost_models.simple import LinearGammaCostModel

    model = LinearGammaCostModel(LINEAR_GAMMA["t_base_s"], LINEAR_GAMMA["gamma"])
    bs, tbs, gbs = [1.0, 16.0, 64.0], [0.008, 0.010, 0.014], [1.0, 64.0]
    rng = np.random.default_rng(3)
    for _ in range(2000):
        seqs = int(rng.integers(1, 200))
        tokens = seqs + int(rng.integers(0, 5000))
        want = float(np.interp(seqs, bs, tbs)) * (1.0 + float(np.interp(seqs, gbs, [0.02, 0.5])) * ((tokens - seqs) / seqs))
        assert model.step_time_terms(BatchTerms(seqs, tokens, seqs, 0.0, 0.0, 0.0, 0.0, 0, 0, 0)) == want


def test_table_and_linear_step_times_are_the_formulas_to_the_bit():
    """``table``: linear in K within the rows at or below and above B (a one-K row constant), then in B,
    clamped at every end; ``linear``: c0 + c_tok N + c_kv KV + c_seq B, times 1.15 when rows verify.
    2,000 random batches each, against numpy and plain Python floats: equal exactly."""
    from specplan.cost_models.draft import DraftCost
    from specplan.cost_models.linear import LinearCoefficients, LinearCostModel
    from specplan.cost_models.simple import TableCostModel

    table = TableCostModel(TABLE["table_s"])
    rows = {b: ([float(k) for k in sorted(r)], [r[k] for k in sorted(r)]) for b, r in TABLE["table_s"].items()}
    bs = sorted(rows)

    def by_table(b, k_eff):
        at = [x for x in bs if x <= b]
        if not at or at[-1] == bs[-1]:
            return float(np.interp(k_eff, *rows[at[-1] if at else bs[0]]))
        lo, hi = at[-1], bs[bs.index(at[-1]) + 1]
        t_lo, t_hi = float(np.interp(k_eff, *rows[lo])), float(np.interp(k_eff, *rows[hi]))
        return t_lo + (t_hi - t_lo) * (b - lo) / (hi - lo)

    c = LINEAR["linear_coefficients"]
    linear = LinearCostModel(LinearCoefficients.from_mapping(c), DraftCost.default(132), draft_fraction=0.15)
    rng = np.random.default_rng(11)
    for _ in range(2000):
        seqs = int(rng.integers(1, 12))
        tokens = seqs + int(rng.integers(0, 80))
        kv, verify = int(rng.integers(0, 10 ** 6)), int(rng.integers(0, 2)) * int(rng.integers(1, seqs + 1))
        terms = BatchTerms(seqs, tokens, seqs, 0.0, 0.0, 0.0, 0.0, 0, kv, verify)
        assert table.step_time_terms(terms) == by_table(seqs, (tokens - seqs) / seqs)
        want = c["c0_s"] + c["c_tok_s"] * tokens + c["c_kv_s"] * float(kv) + c["c_seq_s"] * seqs
        assert linear.step_time_terms(terms) == (want * (1.0 + 0.15) if verify else want)
