"""The copy process measured from its output (repeated 4-grams), and the fitted length models."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specplan.errors import ConfigError
from specplan.workloads.formats import load_workload
from specplan.workloads.synthetic import CopyProcess, LengthModel, SyntheticSpec, fit_lengths, synthetic_requests


def covered_by_repeats(tokens: np.ndarray, n: int = 4) -> np.ndarray:
    """Per token: does it lie inside an n-gram that already occurred earlier in the sequence?"""
    t = tokens.astype(np.int64)
    grams = np.zeros(len(t) - n + 1, dtype=np.int64)
    for j in range(n):
        grams = grams * 32768 + t[j : len(t) - n + 1 + j]
    _, first, inverse = np.unique(grams, return_index=True, return_inverse=True)
    seen = first[inverse] < np.arange(len(grams))
    cover = np.zeros(len(t) + 1, dtype=np.int64)
    np.add.at(cover, np.flatnonzero(seen), 1)
    np.add.at(cover, np.flatnonzero(seen) + n, -1)
    return np.cumsum(cover)[:-1] > 0


def expected_covered(p: float, m: float, n: int = 4) -> float:
    """Share of tokens in copies of length >= n: per cycle (1-p)/p fresh tokens, then a copy of
    Geometric(1/m) length; only copies of n or more tokens reproduce whole n-grams. Exact while
    the text stays diverse; under heavy copying, n-grams across copy junctions also recur by
    chance, so it becomes a lower bound."""
    q = 1.0 / m
    short = sum(length * (1 - q) ** (length - 1) * q for length in range(1, n))
    return (m - short) / ((1 - p) / p + m)


def test_no_repetition_at_zero():
    tokens = CopyProcess(copy_prob=0.0, vocab_size=32000).generate(50_000, np.random.default_rng(0))
    assert covered_by_repeats(tokens).sum() == 0
    assert tokens.min() >= 0 and tokens.max() < 32000


@pytest.mark.parametrize("p, m", [(0.05, 8.0), (0.2, 4.0), (0.5, 8.0)])
def test_repetition_matches_the_process_formula(p, m):
    tokens = CopyProcess(copy_prob=p, span_len=m).generate(200_000, np.random.default_rng(1))
    measured = covered_by_repeats(tokens).mean()
    assert abs(measured - expected_covered(p, m)) < 0.02


def test_heavy_repetition_is_mostly_copies():
    tokens = CopyProcess(copy_prob=0.9, span_len=16).generate(100_000, np.random.default_rng(2))
    measured = covered_by_repeats(tokens).mean()
    assert measured > 0.95 and measured >= expected_covered(0.9, 16.0) - 0.01
    assert CopyProcess(copy_prob=0.9, span_len=16).expected_copy_fraction == pytest.approx(0.9 * 16 / (0.9 * 16 + 0.1))


def test_repetition_grows_with_copy_prob():
    rng = np.random.default_rng(3)
    shares = [covered_by_repeats(CopyProcess(copy_prob=p, span_len=8).generate(20_000, rng)).mean() for p in (0.0, 0.1, 0.3, 0.6, 0.9)]
    assert shares[0] == 0 and all(a < b for a, b in zip(shares, shares[1:]))


def test_bad_process_settings():
    with pytest.raises(ConfigError, match="copy_prob must lie in"):
        CopyProcess(copy_prob=1.5)
    with pytest.raises(ConfigError, match="span_len must be at least 1"):
        CopyProcess(span_len=0.5)


def test_length_fit_is_the_lognormal_mle():
    reqs = load_workload("specbench")
    prompt, output = fit_lengths(reqs)
    for model, lens in ((prompt, [r.prompt_len for r in reqs]), (output, [r.output_len for r in reqs])):
        logs = np.log(lens)
        assert model.mu == pytest.approx(logs.mean(), rel=1e-4)
        assert model.sigma == pytest.approx(logs.std(), rel=1e-4)
        assert model.max_len == max(lens)
    draws = output.sample(40_000, np.random.default_rng(4))
    assert draws.min() >= 1 and draws.max() <= output.max_len
    # median of a lognormal is exp(mu); rounding and clipping barely move it
    assert abs(np.median(draws) / math.exp(output.mu) - 1) < 0.03


def test_constant_lengths_and_requests():
    spec = SyntheticSpec.parse("synthetic:copy_prob=0.3,span_len=6,prompt_len=100,output_len=40")
    assert (spec.copy_prob, spec.span_len, spec.prompt_len, spec.output_len) == (0.3, 6.0, 100, 40)
    a = synthetic_requests(5, spec.process, LengthModel.constant(100), LengthModel.constant(40), seed=9)
    b = synthetic_requests(5, spec.process, LengthModel.constant(100), LengthModel.constant(40), seed=9)
    assert all(x.same_as(y) for x, y in zip(a, b))
    assert [(r.id, r.prompt_len, r.output_len, r.category) for r in a] == [(f"synthetic-{i}", 100, 40, "synthetic") for i in range(5)]


@pytest.mark.parametrize("vocab", [2, 50, 32000, 2**31 - 1])
def test_fresh_tokens_are_each_requests_own_draws(vocab):
    """Without copies all requests' tokens come from one draw; each request must still hold exactly
    what drawing it alone (``CopyProcess.generate``, one call per request in order) gives."""
    process = CopyProcess(0.0, 8.0, vocab)
    prompts, outputs = LengthModel(4.0, 0.8, 300), LengthModel(3.0, 1.0, 200)  # odd and even lengths
    got = synthetic_requests(50, process, prompts, outputs, seed=3)
    rng = np.random.default_rng(3)
    plens, olens = prompts.sample(50, rng), outputs.sample(50, rng)
    assert (plens % 2).any() and not (plens % 2).all()
    for req, p, o in zip(got, plens, olens):
        ref = process.generate(int(p + o), rng)
        assert np.array_equal(req.prompt_ids, ref[:p]) and np.array_equal(req.output_ids, ref[p:])
        assert req.prompt_ids.dtype == np.int32 and not req.prompt_ids.flags.writeable


def test_replaced_copies_fields_and_shares_tokens():
    from specplan.workloads.request import Request

    r = Request(id="a", prompt_ids=[1, 2], output_ids=[3], category="c", session="s", turn=1, meta={"x": 1})
    c = r.replaced(id="a#1", arrival_s=2.5, meta={"y": 2})
    assert (c.id, c.category, c.session, c.turn, c.arrival_s, c.meta) == ("a#1", "c", "s", 1, 2.5, {"y": 2})
    assert c.prompt_ids is r.prompt_ids and r.id == "a" and r.meta == {"x": 1}
    with pytest.raises(ValueError):
        r.replaced(prompt_ids=[5])


@pytest.mark.parametrize("copy_prob", [0.0, 0.5])
def test_the_order_requests_are_made_in_changes_nothing(copy_prob):
    process, lengths = CopyProcess(copy_prob, 4.0, 100), (LengthModel(3.0, 0.7, 80), LengthModel(2.5, 0.9, 60))
    ref = synthetic_requests(30, process, *lengths, seed=7)
    got = synthetic_requests(30, process, *lengths, seed=7, made=np.random.default_rng(1).permutation(30).tolist())
    assert all(a.same_as(b) for a, b in zip(ref, got))


def test_without_tokens_the_lengths_are_the_same_and_the_ids_zeros():
    process, lengths = CopyProcess(0.0), (LengthModel(4.0, 0.8, 300), LengthModel(3.0, 1.0, 200))
    ref = synthetic_requests(40, process, *lengths, seed=2)
    got = synthetic_requests(40, process, *lengths, seed=2, tokens=False)
    assert [(r.id, r.prompt_len, r.output_len) for r in got] == [(r.id, r.prompt_len, r.output_len) for r in ref]
    assert not any(r.prompt_ids.any() or r.output_ids.any() for r in got)
    assert all(r.prompt_ids.any() for r in ref)
