"""Logs that go to disk in chunks (``simulator.spill``) give the run the in-memory log gives, bit for
bit; the pieces that keep a large run's memory bounded each match what they replace."""

from __future__ import annotations

import numpy as np
import pytest
import simpy

from specplan.acceptance import oracles
from specplan.config import build_config
from specplan.simulator import itl_stream, metrics, spill
from specplan.simulator.emissions import EmissionLog
from specplan.simulator.frontend import Frontend
from specplan.simulator.inputs import Workload
from specplan.simulator.run import simulate
from specplan.workloads import traffic


def _config(speculation: bool, arrival: str = "closed_loop", n: int = 200):
    return build_config({
        "seed": 3, "engine": {"max_batch_size": 16, "max_num_tokens": 2048, "kv_num_blocks": 20000},
        "speculation": {"decoding_type": "SA", "max_draft_len": 4} if speculation else {"decoding_type": "none"},
        "acceptance": {"mode": "alpha", "alpha": 0.7},
        "workload": {"trace": "specbench", "arrival": arrival, "rate": 40.0, "concurrency": 16, "num_requests": n,
                     "sample_with_replacement": True},
        "cost": {"model": "roofline", "gpu": "h200", "model_name": "llama-3.1-8b"},
    })


@pytest.mark.parametrize("speculation, arrival", [(True, "closed_loop"), (False, "closed_loop"), (True, "poisson")])
def test_streamed_run_equals_the_in_memory_run(monkeypatch, speculation, arrival):
    cfg = _config(speculation, arrival)
    held = simulate(cfg)
    written = []
    monkeypatch.setattr(spill, "CHUNK_ROWS", 13)  # a chunk every few steps; iteration chunks of one row
    monkeypatch.setattr(itl_stream, "_GATHER_AT_MOST", 3)  # buckets counted again down to single values
    monkeypatch.setattr(spill.Spill, "write", lambda self, columns, write=spill.Spill.write: (
        written.append(len(next(iter(columns.values())))), write(self, columns)))
    streamed = simulate(cfg)
    assert len(written) > 100
    assert streamed.summary == held.summary
    for name in ("requests", "iterations", "emissions"):
        assert getattr(streamed, name).equals(getattr(held, name)), name


def _log_of(rids: np.ndarray, times: np.ndarray, chunk_rows: int) -> EmissionLog:
    # The rows appended a few at a time, as the executor makes room and writes them.
    log = EmissionLog(4, chunk_rows=chunk_rows)
    for start in range(0, len(rids), 5):
        end = min(start + 5, len(rids))
        log.reserve(end - start)
        log.request[log.n:log.n + end - start] = rids[start:end]
        log.time[log.n:log.n + end - start] = times[start:end]
        log.tokens[log.n:log.n + end - start] = 1
        log.n += end - start
    return log


def _diff_gaps(rids: np.ndarray, times: np.ndarray) -> np.ndarray:
    # Each request's np.diff over the whole log, put in the row order of the later emission.
    order = np.argsort(rids, kind="stable")
    later = order[1:][rids[order][1:] == rids[order][:-1]]
    diffs = np.diff(times[order])[rids[order][1:] == rids[order][:-1]]
    return diffs[np.argsort(later, kind="stable")]


@pytest.mark.parametrize("chunk_rows", [6, 17, 1000])
def test_gaps_across_chunk_boundaries_are_numpys_diff(chunk_rows):
    rng = np.random.default_rng(5)
    rids = rng.integers(0, 40, size=3000).astype(np.int32)
    times = np.cumsum(rng.exponential(1e-3, size=3000))
    times[rng.random(3000) < 0.3] = 0  # ties between steps, as equal steps make them
    times = np.maximum.accumulate(np.cumsum(times))
    log = _log_of(rids, times, chunk_rows)
    assert (log.spill is not None) == (chunk_rows < 3000)
    gaps = np.concatenate([g.copy() for g in itl_stream._chunk_gaps(log)])
    want = _diff_gaps(rids, times)
    assert np.array_equal(gaps, want)
    assert itl_stream.itl_figures(log) == metrics._pcts(want.copy())


def test_the_pairwise_sum_across_pieces_is_numpys():
    rng = np.random.default_rng(2)
    values = rng.random(50_000) * 10.0 ** rng.integers(-6, 3, size=50_000)
    cuts = np.sort(rng.choice(len(values), size=40, replace=False))
    out: list = []
    for _ in itl_stream._summed(iter(np.split(values, cuts)), len(values), out):
        pass
    assert out == [np.add.reduce(values)]


def test_the_uniforms_window_is_the_whole_streams_slice(monkeypatch):
    monkeypatch.setattr(oracles, "_WINDOW", 37)
    lens = np.random.default_rng(0).integers(1, 60, size=300)
    uniforms = oracles._PerRequestUniforms(11, lens)
    whole = np.random.default_rng(11).random(int(lens.sum()), dtype=np.float32)
    for lo, hi in [(0, 5), (1, 2), (999, 1100), (4000, 4001), (len(whole) - 3, len(whole))]:
        uniforms._window(lo, hi)
        assert uniforms._base == lo and len(uniforms._u) >= hi - lo
        assert np.array_equal(uniforms._u, whole[lo:lo + len(uniforms._u)])


def test_a_small_uniforms_window_changes_nothing(monkeypatch):
    cfg = _config(True)
    monkeypatch.setattr(oracles, "_WINDOW", 1 << 40)  # the whole stream at once
    whole = simulate(cfg)
    monkeypatch.setattr(oracles, "_WINDOW", 50)
    windowed = simulate(cfg)
    assert windowed.summary == whole.summary
    assert windowed.requests.equals(whole.requests)


def test_synthetic_draws_as_arrays_are_the_draws_one_by_one():
    for replace_ in (True, False):
        want = traffic._draws([1] * 500, 500, replace_, np.random.default_rng(4), "synthetic")
        rng = np.random.default_rng(4)
        units = rng.integers(0, 500, size=500) if replace_ else rng.permutation(500)
        assert list(zip(units.tolist(), traffic._copy_numbers(units).tolist())) == want


def test_a_closed_loop_starts_no_client_without_a_request():
    env = simpy.Environment()
    w = Workload(np.full(3, 10), np.full(3, 5), None, np.full(3, -1), concurrency=64)
    Frontend(env, w, lambda rid: None).start()
    assert len(env._queue) == 3  # one process start each
