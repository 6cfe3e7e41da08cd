"""Arrival processes against their formulas, and build_requests: sampling, sessions, seeds."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest

from specplan.config import WorkloadConfig
from specplan.errors import ConfigError
from specplan.workloads.arrivals import gamma_arrivals, poisson_arrivals, think_times
from specplan.workloads.formats import load_workload
from specplan.workloads.tokentrace import write_token_trace
from specplan.workloads.traffic import build_requests, predecessor_indices

Z = 5.0  # tolerance in standard errors


def _cv_se(cv: float, n: int) -> float:
    """Standard error of a sample CV of Gamma draws: Var(s^2) ~ sigma^4 (2 + excess kurtosis) / n,
    excess kurtosis 6 / shape = 6 cv^2, and d(s)/s = d(s^2) / (2 s^2); the mean's error adds cv/sqrt(n)."""
    return cv * math.sqrt((2 + 6 * cv**2) / n) / 2 + cv * cv / math.sqrt(n)


@pytest.mark.parametrize("rate", [0.5, 3.0])
def test_poisson_rate_and_cv(rate):
    n = 50_000
    t = poisson_arrivals(n, rate, np.random.default_rng(1))
    gaps = np.diff(np.concatenate([[0.0], t]))
    assert np.all(gaps > 0)
    assert abs(gaps.mean() - 1 / rate) < Z * (1 / rate) / math.sqrt(n)
    assert abs(gaps.std() / gaps.mean() - 1.0) < Z * _cv_se(1.0, n)


@pytest.mark.parametrize("cv", [0.5, 2.0])
def test_gamma_rate_and_cv(cv):
    n, rate = 100_000, 4.0
    t = gamma_arrivals(n, rate, cv, np.random.default_rng(2))
    gaps = np.diff(np.concatenate([[0.0], t]))
    assert abs(n / t[-1] - rate) < Z * rate * cv / math.sqrt(n)
    assert abs(gaps.std() / gaps.mean() - cv) < Z * _cv_se(cv, n)


def test_think_times():
    rng = np.random.default_rng(3)
    assert np.all(think_times(5, 2.5, rng) == 2.5)
    assert np.all(think_times(5, 0.0, rng, "exponential") == 0.0)
    x = think_times(40_000, 2.0, rng, "exponential")
    assert abs(x.mean() - 2.0) < Z * 2.0 / math.sqrt(len(x))
    with pytest.raises(ConfigError, match="think time distribution"):
        think_times(1, 1.0, rng, "weibull")


def _cfg(**kw) -> WorkloadConfig:
    return WorkloadConfig(**{"trace": "specbench", "num_requests": 120, **kw})


def test_open_loop_sessions_and_links():
    reqs = build_requests(_cfg(num_requests=400, think_time_s=1.5), seed=7)
    assert len(reqs) == 400 and len({r.id for r in reqs}) == 400
    ids = {r.id: i for i, r in enumerate(reqs)}
    preds = predecessor_indices(reqs)
    for i, r in enumerate(reqs):
        if r.turn > 0 and f"{r.session}-{r.turn - 1}" in ids:
            # turn n+1 follows turn n: no arrival time of its own, a think time after its predecessor
            assert preds[i] == ids[f"{r.session}-{r.turn - 1}"] < i
            assert r.arrival_s is None and r.meta["think_time_s"] == 1.5
        else:
            assert preds[i] == -1 and r.arrival_s is not None and "think_time_s" not in r.meta
    heads = [r.arrival_s for r in reqs if r.arrival_s is not None]
    assert np.all(np.diff(heads) > 0)
    assert (preds >= 0).sum() > 0


def test_seeded_and_independent_streams():
    a, b = build_requests(_cfg(), seed=11), build_requests(_cfg(), seed=11)
    assert all(x.same_as(y) for x, y in zip(a, b))
    c = build_requests(_cfg(), seed=12)
    assert [r.id for r in a] != [r.id for r in c]
    faster = build_requests(_cfg(rate=9.0), seed=11)
    assert [r.id for r in faster] == [r.id for r in a]  # the rate changes arrival times only
    ta = np.array([r.arrival_s for r in a if r.arrival_s is not None])
    tf = np.array([r.arrival_s for r in faster if r.arrival_s is not None])
    assert np.allclose(tf * 9.0, ta * 2.0)  # same exponential draws, rescaled


def test_without_replacement_takes_each_request_once():
    reqs = build_requests(_cfg(num_requests=560), seed=0)
    assert sorted(r.id for r in reqs) == sorted(r.id for r in load_workload("specbench"))
    with pytest.raises(ConfigError, match=r"workload\.num_requests: 561 exceeds the 560 requests of trace 'specbench'"):
        build_requests(_cfg(num_requests=561), seed=0)


def test_sampling_with_replacement():
    n = 3000
    reqs = build_requests(_cfg(num_requests=n, sample_with_replacement=True), seed=5)
    assert len(reqs) == n and len({r.id for r in reqs}) == n
    base = {r.id: r for r in load_workload("specbench")}
    for r in reqs:
        src = base[r.meta["source_id"]]
        assert np.array_equal(r.prompt_ids, src.prompt_ids) and np.array_equal(r.output_ids, src.output_ids)
        assert r.id == src.id or r.id.startswith(src.id + "#")
    # whole sessions are drawn uniformly: Pearson's chi-square over the 480 sessions (479 degrees of
    # freedom: mean 479, standard deviation sqrt(2 * 479))
    heads = Counter(r.meta["source_id"] for r in reqs if r.turn == 0)
    expected = sum(heads.values()) / 480
    chi2 = sum((heads.get(f"{q}-0", 0) - expected) ** 2 / expected for q in {r.session for r in base.values()})
    assert abs(chi2 - 479) < Z * math.sqrt(2 * 479)
    index = {r.id for r in reqs}
    assert all(r.meta["predecessor"] in index for r in reqs if r.turn == 1)
    # copies of a two-turn session keep their own links
    copy = next(r for r in reqs if r.turn == 1 and "#" in r.id)
    assert copy.meta["predecessor"] == copy.id.replace("-1#", "-0#")


def test_categories_filter():
    reqs = build_requests(_cfg(categories=["translation", "summarization"], num_requests=160), seed=1)
    assert Counter(r.category for r in reqs) == {"translation": 80, "summarization": 80}
    with pytest.raises(ConfigError, match=r"workload\.categories: poetry not in trace 'specbench'"):
        build_requests(_cfg(categories=["poetry"]), seed=1)


def test_closed_loop():
    reqs = build_requests(_cfg(arrival="closed_loop", think_time_s=0.25), seed=3)
    assert all(r.arrival_s is None and r.meta["think_time_s"] == 0.25 for r in reqs)


def test_trace_timestamps(tmp_path):
    from dataclasses import replace

    base = load_workload("mtbench")[:6]
    stamped = [replace(r, arrival_s=float(10 - i)) for i, r in enumerate(base)]
    path = write_token_trace(stamped, tmp_path / "t.jsonl")
    reqs = build_requests(_cfg(trace=str(path), arrival="trace", num_requests=4), seed=0)
    assert [r.arrival_s for r in reqs] == [5.0, 6.0, 7.0, 8.0]
    assert [r.id for r in reqs] == [base[5].id, base[4].id, base[3].id, base[2].id]
    unstamped = write_token_trace(base, tmp_path / "u.jsonl")
    with pytest.raises(ConfigError, match="needs arrival_s on every request"):
        build_requests(_cfg(trace=str(unstamped), arrival="trace", num_requests=2), seed=0)


def test_synthetic_traffic_from_config():
    reqs = build_requests(WorkloadConfig(trace=None, num_requests=30, prompt_len=64, output_len=32), seed=0)
    assert len(reqs) == 30 and all(r.prompt_len == 64 and r.output_len == 32 for r in reqs)
    fitted = build_requests(WorkloadConfig(trace="synthetic:copy_prob=0.5,lengths=mtbench", num_requests=200, arrival="gamma", cv=2.0), seed=0)
    assert len({r.output_len for r in fitted}) > 50
    with pytest.raises(ConfigError, match=r"workload\.trace: bad synthetic setting 'foo=1'"):
        build_requests(WorkloadConfig(trace="synthetic:foo=1"), seed=0)


@pytest.mark.parametrize("settings", [
    {"trace": None, "arrival": "poisson", "rate": 4.0},
    {"trace": None, "arrival": "closed_loop", "think_time_s": 0.3, "sample_with_replacement": True},
    {"trace": "synthetic:copy_prob=0.5,lengths=mtbench", "arrival": "gamma", "cv": 3.0},
    {"trace": "synthetic:lengths=specbench", "arrival": "closed_loop", "sample_with_replacement": True},
])
@pytest.mark.parametrize("think_time_dist", ["constant", "exponential"])
def test_synthetic_traffic_columns_are_its_requests_columns(settings, think_time_dist):
    """What the simulator reads of synthetic traffic, taken from the draws alone, is what it would
    read of the request objects the same draws make (and those are build_requests')."""
    from specplan.workloads.traffic import SyntheticTraffic, traffic, workload_columns

    cfg = WorkloadConfig(num_requests=120, think_time_s=settings.pop("think_time_s", 0.0), **settings)
    lazy = traffic(cfg, seed=3, think_time_dist=think_time_dist, tokens=False)
    assert isinstance(lazy, SyntheticTraffic)
    got = lazy.columns()
    made = build_requests(cfg, seed=3, think_time_dist=think_time_dist)
    want = workload_columns(made, cfg.arrival == "closed_loop")
    assert got.keys() == want.keys()
    for key in want:
        if want[key] is None:
            assert got[key] is None, key
        else:
            np.testing.assert_array_equal(got[key], want[key], err_msg=key)
    assert [(r.id, r.prompt_len, r.output_len, r.arrival_s, r.meta) for r in lazy] == [
        (r.id, r.prompt_len, r.output_len, r.arrival_s, r.meta) for r in made]


def test_a_run_that_reads_no_tokens_makes_no_request_objects(monkeypatch):
    from specplan.config import build_config
    from specplan.simulator.run import simulate
    from specplan.workloads import traffic

    cfg = build_config({"workload": {"trace": None, "num_requests": 40, "arrival": "poisson", "rate": 20.0},
                        "speculation": {"decoding_type": "none"}, "acceptance": {"mode": "alpha"}})
    expected = simulate(cfg)
    monkeypatch.setattr(traffic, "synthetic_requests", lambda *a, **k: pytest.fail("request objects were made"))
    res = simulate(cfg)
    assert res.summary == expected.summary
