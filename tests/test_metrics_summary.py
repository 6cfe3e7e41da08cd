"""The summary is computed from numpy columns: inter-token latencies against a row-by-row reference,
a run's summary against its own tables, a fleet's percentiles against numpy's over the whole, and a
summary-only run that never imports pandas."""

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import example, given, strategies as st

from specplan.config import build_config
from specplan.simulator.metrics import PERCENTILES, UnionITL, _pcts, inter_token_latencies
from specplan.simulator.run import simulate

from cli_helpers import SMALL


def reference_gaps(rids, times) -> list[float]:
    """Row by row, in time order (ties keep row order): the gap to the request's previous chunk."""
    last: dict[int, float] = {}
    gaps = []
    for i in sorted(range(len(times)), key=lambda i: times[i]):
        r, t = int(rids[i]), float(times[i])
        if r in last:
            gaps.append(t - last[r])
        last[r] = t
    return gaps


def test_gaps_follow_each_request_in_row_order():
    # request 2 emits at 0.1, 0.4, 0.45; request 0 at 0.2, 0.5; request 70000 (beyond 16 bits) at 0.3, 0.9
    rids = np.array([2, 0, 70000, 2, 2, 0, 70000])
    times = np.array([0.1, 0.2, 0.3, 0.4, 0.45, 0.5, 0.9])
    got = inter_token_latencies({"request": rids, "time_s": times})
    assert got.tolist() == reference_gaps(rids, times) == [0.4 - 0.1, 0.45 - 0.4, 0.5 - 0.2, 0.9 - 0.3]
    small = rids % 3  # indices that fit 16 bits take the radix-sort path
    assert inter_token_latencies({"request": small, "time_s": times}).tolist() == reference_gaps(small, times)
    shuffled = np.random.default_rng(0).permutation(len(times))  # rows out of time order are put in order
    assert (inter_token_latencies({"request": rids[shuffled], "time_s": times[shuffled]}).tolist()
            == reference_gaps(rids, times))
    assert inter_token_latencies({"request": np.array([], dtype=int), "time_s": np.array([])}).size == 0


def test_summary_matches_the_runs_own_tables():
    cfg = build_config(SMALL | {"slo_ttft_s": 0.05, "slo_tpot_s": 0.02})
    res = simulate(cfg)
    s, req, its, em = res.summary, res.requests, res.iterations, res.emissions
    gaps = reference_gaps(em["request"].to_numpy(), em["time_s"].to_numpy())
    assert s["itl_s"]["mean"] == float(np.mean(gaps)) and s["itl_s"]["p90"] == float(np.percentile(gaps, 90))
    done = req["finish_s"].notna()
    assert s["output_tokens"] == int(req.loc[done, "output_len"].sum()) and s["completed_requests"] == int(done.sum())
    meets = done & (req["ttft_s"] <= 0.05) & (req["tpot_s"].fillna(0.0) <= 0.02)
    span = req["finish_s"].max() - req["arrival_s"].min()
    assert s["goodput_req_s"] == int(meets.sum()) / span
    assert (s["iterations"], s["drafted_tokens"], s["accepted_tokens"]) == (len(its), its["drafted"].sum(), its["accepted"].sum())
    assert s["mean_batch_rows"] == its["batch_rows"].mean()
    assert s["tpot_s"]["p50"] == float(np.percentile(req["tpot_s"].dropna(), 50))


def _union(logs, seen=True):
    """``UnionITL`` over emission logs, each log's gaps first reordered by its own summary's
    percentiles (or not seen at all), against numpy over all the logs' gaps in one array."""
    everything = np.concatenate([inter_token_latencies({"request": r, "time_s": t}) for r, t in logs])
    want = np.percentile(everything, PERCENTILES).tolist() if everything.size else [None] * len(PERCENTILES)
    union = UnionITL(logs)
    for i in range(len(logs)):
        gaps = union.gaps(i)
        _pcts(gaps, in_place=True)
        if seen:
            union.seen(gaps)
    got = union.figures()
    if everything.size:
        assert got["mean"] == pytest.approx(float(everything.mean()), rel=1e-12)
    else:  # pytest 9.2's approx refuses None as the expected value
        assert got["mean"] is None
    return [got[f"p{p}"] for p in PERCENTILES], want


times = st.one_of(st.floats(0, 1e3, allow_nan=False), st.sampled_from([0.0, 0.5, 1.0, 2.0]))  # ties too
log = st.lists(st.tuples(st.integers(0, 6), times), max_size=60).map(
    lambda rows: (np.array([r for r, _ in sorted(rows, key=lambda x: x[1])], dtype=np.int32),
                  np.array(sorted(t for _, t in rows))))


@given(logs=st.lists(log, min_size=1, max_size=8), seen=st.booleans())
@example(logs=[(np.array([0, 0]), np.array([0.0, 0.73])), (np.array([0, 0]), np.array([0.0, 0.176]))], seen=True)
def test_union_itl_is_numpys_over_all_the_gaps(logs, seen):
    # The example puts the median halfway between two gaps, where numpy interpolates from the upper.
    got, want = _union(logs, seen)
    assert got == want


@pytest.fixture
def partition_sizes(monkeypatch):
    """The sizes of the arrays np.partition is asked to partition."""
    sizes, partition = [], np.partition
    monkeypatch.setattr(np, "partition", lambda a, k, *args, **kw: sizes.append(len(a)) or partition(a, k, *args, **kw))
    return sizes


def fleet_logs(replicas=8, rows=128_000):
    """Replicas' logs of 64 requests in lockstep, steps of about 4 ms (rows of one step share a gap)."""
    rng = np.random.default_rng(1)
    logs = []
    for i in range(replicas):
        steps = np.cumsum(np.round(rng.gamma(50.0, 8e-5, size=rows // 64 + i), 6))
        logs.append((np.tile(np.arange(64, dtype=np.int32), len(steps)), np.repeat(steps, 64)))
    return logs


def test_union_itl_selects_among_few_gaps(partition_sizes):
    got, want = _union(fleet_logs())
    assert got == want
    union_partitions = partition_sizes[-len(PERCENTILES):]  # after the logs' own summaries
    assert max(union_partitions) < 8 * 128_000 // 10


@pytest.fixture
def all_gaps(monkeypatch):
    """The sizes of the arrays of every gap ``UnionITL`` falls back to."""
    sizes, original = [], UnionITL._all_gaps
    monkeypatch.setattr(UnionITL, "_all_gaps", lambda self: sizes.append(self.n) or original(self))
    return sizes


def test_union_itl_without_the_logs_order_statistics_partitions_all_gaps(all_gaps):
    logs = fleet_logs(3, 640)
    got, want = _union(logs, seen=False)
    assert got == want
    assert all_gaps == [sum(len(inter_token_latencies({"request": r, "time_s": t})) for r, t in logs)]


def test_union_itl_with_more_tied_gaps_than_it_gathers_partitions_all_gaps(all_gaps):
    # Steps of 4 or 5 ms, as a speculating fleet's: each log's middle gaps tie in their thousands,
    # more than the eighth of all gaps gathered between the logs' order statistics.
    rng = np.random.default_rng(2)
    logs = []
    for i in range(4):
        steps = np.cumsum(rng.choice([0.004, 0.005], size=2000 + i, p=[0.7, 0.3]))
        logs.append((np.tile(np.arange(16, dtype=np.int32), len(steps)), np.repeat(steps, 16)))
    got, want = _union(logs)
    assert got == want
    assert len(all_gaps) == 1


def test_a_summary_only_run_imports_no_table_or_plotting_library():
    # scipy is not in the list: numba imports it itself (its BLAS check) when the compiled step loads.
    code = ("import sys; from specplan.cli import main\n"
            "try:\n    main(['simulate', '--format', 'json', '--set', 'workload.num_requests=5', '--set', 'workload.trace=null',"
            " '--set', 'speculation.decoding_type=none', '--set', 'acceptance.mode=alpha'])\n"
            "finally:\n    print(sorted(m for m in ('pandas', 'pyarrow', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_a_result_pickles_with_its_tables():
    import pickle

    res = simulate(build_config(SMALL), record_batches=True)
    back = pickle.loads(pickle.dumps(res))
    assert back.summary == res.summary and back.config == res.config
    for name in ("requests", "iterations", "emissions", "batches"):
        assert getattr(back, name).equals(getattr(res, name))
