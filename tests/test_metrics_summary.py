"""The summary is computed from numpy columns: inter-token latencies against a row-by-row reference,
a run's summary against its own tables, a fleet's percentiles against numpy's over the whole, and a
summary-only run that never imports pandas."""

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import example, given, strategies as st

from specplan.config import build_config
from specplan.simulator.metrics import PERCENTILES, _pcts, inter_token_latencies, union_percentiles
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


def _union(parts, partitioned=True):
    """``union_percentiles`` over parts laid end to end, each first reordered as a replica's summary
    reorders its gaps (or not), and numpy's percentiles over the whole, taken before."""
    arrays = [np.array(p, dtype=float) for p in parts]
    whole = np.concatenate(arrays)
    want = np.percentile(whole, PERCENTILES).tolist() if whole.size else [None] * len(PERCENTILES)
    for a in arrays:
        if partitioned and a.size:
            _pcts(a, in_place=True)
    got = union_percentiles(np.concatenate(arrays), np.cumsum([0] + [len(a) for a in arrays]))
    return [got[f"p{p}"] for p in PERCENTILES], want


values = st.one_of(st.floats(-1e3, 1e3, allow_nan=False), st.sampled_from([0.0, 0.5, 1.0, 2.0]))  # ties too


@given(parts=st.lists(st.lists(values, max_size=50), min_size=1, max_size=8), partitioned=st.booleans())
@example(parts=[[0.73], [0.176]], partitioned=True)  # halfway, numpy interpolates from the upper value
def test_union_percentiles_are_numpys_over_the_whole(parts, partitioned):
    got, want = _union(parts, partitioned)
    assert got == want


@pytest.fixture
def partition_sizes(monkeypatch):
    """The sizes of the arrays np.partition is asked to partition."""
    sizes, partition = [], np.partition
    monkeypatch.setattr(np, "partition", lambda a, k, *args, **kw: sizes.append(len(a)) or partition(a, k, *args, **kw))
    return sizes


def test_union_percentiles_select_among_few_values(partition_sizes):
    # Eight replicas' step gaps, around 4 ms with ties (rows of one step share a gap): the fleet's
    # order statistics lie among the replicas' own, so only values between those are partitioned.
    rng = np.random.default_rng(1)
    parts = [np.round(rng.gamma(50.0, 8e-5, size=20_000 + 37 * i), 6) for i in range(8)]
    got, want = _union(parts)
    assert got == want
    assert partition_sizes and max(partition_sizes) < 20_000 // 10


def test_union_percentiles_fall_back_to_the_whole_when_parts_are_not_partitioned(partition_sizes):
    # Unordered, the part's values at its median's positions (2 then 1) bound no value: the median's
    # neighbours are selected from all five.
    got, want = _union([[4.0, 3.0, 2.0, 1.0, 0.0]], partitioned=False)
    assert got == want == [2.0, 3.6, 3.96]
    assert 5 in partition_sizes


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
