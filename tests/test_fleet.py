"""Fleets: replicas in one environment behind a router (``specplan.simulator.fleet``, ``router``)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy import stats

from specplan.config import AcceptanceConfig, build_config
from specplan.errors import ConfigError
from specplan.simulator.fleet import gpus, simulate_fleet
from specplan.simulator.router import Load, make_router
from specplan.simulator.run import simulate
from specplan.workloads.arrivals import gamma_arrivals
from specplan.workloads.request import Request

LINEAR = {"model": "linear", "linear_coefficients": {"c0_s": 0.008, "c_tok_s": 2e-5, "c_kv_s": 1e-7, "c_seq_s": 1e-4}}


def scenario(replicas=1, router="round_robin", **workload):
    return build_config({
        "seed": 3, "engine": {"max_batch_size": 16, "kv_num_blocks": 40000},
        "speculation": {"decoding_type": "NGram", "max_draft_len": 3},
        "acceptance": {"mode": "alpha", "alpha": 0.6},
        "workload": {"trace": None, "arrival": "poisson", "rate": 6.0, "num_requests": 200, "prompt_len": 256,
                     "output_len": 48, **workload},
        "cost": LINEAR,
        "cluster": {"replicas": replicas, "router": router},
    })


def load(outstanding, kv=None, assigned=(), predecessor=()):
    out = np.asarray(outstanding)
    return Load(out, np.zeros(len(out)) if kv is None else np.asarray(kv, dtype=float),
                np.asarray(assigned, dtype=np.int64), np.asarray(predecessor, dtype=np.int64))


# ----------------------------------------------------------------------------- routers alone
def test_round_robin_cycles_whatever_the_load():
    r = make_router("round_robin", 3)
    busy = load([9, 0, 0])
    assert [r.choose(i, busy) for i in range(7)] == [0, 1, 2, 0, 1, 2, 0]


def test_least_outstanding_picks_the_shortest_queue_lowest_index_on_ties():
    r = make_router("least_outstanding", 4)
    assert r.choose(0, load([3, 1, 2, 1])) == 1
    assert r.choose(0, load([0, 0, 0, 0])) == 0


def test_least_kv_ranks_kv_use_then_outstanding():
    r = make_router("least_kv", 3)
    assert r.choose(0, load([0, 5, 9], kv=[0.5, 0.1, 0.3])) == 1
    assert r.choose(0, load([4, 2, 3], kv=[0.2, 0.2, 0.2])) == 1


def test_session_affinity_keeps_turns_on_the_first_turns_replica():
    r = make_router("session_affinity", 3)
    # request 2 follows request 0 (on replica 2); request 1 is a first turn.
    snap = load([0, 5, 9], assigned=[2, -1, -1], predecessor=[-1, -1, 0])
    assert r.choose(2, snap) == 2
    assert r.choose(1, snap) == 0  # a first turn: the least outstanding replica


def test_unknown_router_and_tp_length_are_one_line_errors():
    with pytest.raises(ConfigError, match="cluster.router"):
        make_router("random", 2)
    with pytest.raises(ConfigError, match="cluster.tp"):
        build_config({"cluster": {"replicas": 2, "tp": [1, 2, 4]}})


@pytest.mark.parametrize("cost, ok", [
    (LINEAR, False), ({"model": "linear_gamma"}, False), ({"model": "table", "table_s": {1: {0: 0.01}}}, False),
    ({"model": "profile", "profile": "h200/llama-3.1-8b"}, False),  # one profile, one degree
    ({"model": "roofline"}, True), ({"model": "profile"}, True)])  # picked per degree
def test_mixed_tp_needs_a_cost_model_that_reads_tp(cost, ok):
    """A TP2 replica differs from a TP1 one only under a cost model that reads ``tp``; the others would
    price both alike and only count the GPUs, so mixing degrees under them is refused. One degree
    for every replica is always fine (the curve is that degree's)."""
    data = {"cost": cost, "cluster": {"replicas": 2, "tp": [1, 2]}}
    if ok:
        assert build_config(data).cluster.tp == [1, 2]
    else:
        with pytest.raises(ConfigError, match=r"^config: cluster\.tp: mixed degrees \[1, 2\]"):
            build_config(data)
    assert build_config({**data, "cluster": {"replicas": 2, "tp": [2, 2]}}).cluster.tp == [2, 2]


# ----------------------------------------------------------------------------- one replica
def _bytes(result):
    req = result.requests.drop(columns="replica", errors="ignore")
    its = result.iterations.drop(columns="replica", errors="ignore")
    return (req.to_csv(index=False), its.to_csv(index=False), result.emissions.to_csv(index=False),
            json.dumps(result.summary, sort_keys=True))


VLLM = {"engine": {"engine": "vllm", "max_batch_size": 16, "kv_num_blocks": 40000},
        "speculation": {"decoding_type": "vllm_ngram", "max_draft_len": 3}}  # prefix caching on by default


@pytest.mark.parametrize("router, engine", [("round_robin", None), ("least_kv", None), ("round_robin", VLLM)])
def test_one_replica_fleet_is_byte_identical_to_the_single_run(router, engine):
    """The fleet machinery (shared env, frontend routing into ``submit``) with one replica gives the
    single-replica run's tables and summary, byte for byte, for the same seed."""
    cfg = scenario(router=router)
    if engine is not None:
        cfg = build_config({**cfg.model_dump(mode="json"), **engine})
    single = simulate(cfg)
    assert single.requests.columns[0] != "replica"  # replicas: 1 runs the single-replica path itself
    assert _bytes(simulate_fleet(cfg)) == _bytes(single)
    assert _bytes(simulate(cfg.model_copy(update={"cluster": scenario(router="least_kv").cluster}))) == _bytes(single)


# ----------------------------------------------------------------------------- round robin splits
def test_round_robin_open_loop_fleet_is_its_replicas_run_alone():
    """Open-loop round robin sends replica i every N-th arrival and nothing couples the replicas, so
    each replica's requests run alone on one engine give exactly its rows of the fleet."""
    n = 3
    certain = {"acceptance": AcceptanceConfig(mode="alpha", alpha=1.0)}  # draws are keyed by request index
    fleet = simulate(scenario(n, rate=18.0, num_requests=150).model_copy(update=certain)).requests
    for i in range(n):
        mine = fleet[fleet.replica == i]
        reqs = [Request(f"r{j}", np.zeros(256, np.int32), np.zeros(48, np.int32), arrival_s=float(t))
                for j, t in enumerate(mine.arrival_s)]
        alone = simulate(scenario(arrival="trace", num_requests=len(reqs)).model_copy(update=certain),
                         requests=reqs)
        for col in ("ttft_s", "tpot_s", "finish_s"):
            np.testing.assert_allclose(alone.requests[col].to_numpy(), mine[col].to_numpy(), rtol=0, atol=1e-9)


def test_round_robin_replicas_match_one_replica_at_the_per_replica_rate():
    """Round robin over N replicas at Poisson rate N r gives each replica every N-th arrival: Erlang-N
    gaps, i.e. Gamma inter-arrivals of rate r and CV 1/sqrt(N). One replica fed that process on its
    own (another seed) must show the same TTFT and TPOT distributions: two-sample KS statistic below
    0.1 (the 1% critical value for 800 vs 600 independent samples is 0.088; requests sharing a queue
    are correlated, hence the slack) and p50/p90 within 5%. The test can tell: one replica fed a
    Poisson stream at rate r (the naive reference) is rejected on TTFT."""
    n, r = 4, 20.0
    fleet = simulate(scenario(n, rate=n * r, num_requests=2400, output_len=32)).requests
    other_seed = {"seed": 11}
    ref = simulate(scenario(1, arrival="gamma", cv=1 / np.sqrt(n), rate=r, num_requests=800, output_len=32)
                   .model_copy(update=other_seed)).requests
    naive = simulate(scenario(1, rate=r, num_requests=800, output_len=32).model_copy(update=other_seed)).requests
    for col in ("ttft_s", "tpot_s"):
        a = ref[col].dropna().to_numpy()
        for i in range(n):
            b = fleet.loc[fleet.replica == i, col].dropna().to_numpy()
            assert stats.ks_2samp(a, b).statistic < 0.1, (col, i)
            np.testing.assert_allclose(np.percentile(b, [50, 90]), np.percentile(a, [50, 90]), rtol=0.05)
            if col == "ttft_s":
                assert stats.ks_2samp(naive[col].dropna().to_numpy(), b).statistic > 0.15, i


def _bursty_requests(n: int, rate: float, seed: int) -> list[Request]:
    rng = np.random.default_rng(seed)
    t = gamma_arrivals(n, rate, 4.0, rng)
    out = np.maximum(1, rng.exponential(64, n).astype(int))  # variable service times
    return [Request(f"r{i}", np.zeros(256, np.int32), np.zeros(out[i], np.int32), arrival_s=float(t[i]))
            for i in range(n)]


@pytest.mark.parametrize("seed", [1, 2])
def test_least_outstanding_beats_round_robin_on_p99_ttft_under_bursts(seed):
    """Gamma CV = 4 arrivals and exponential output lengths: joining the shortest queue avoids the
    replica still busy with a long request, which round robin ignores."""
    reqs = _bursty_requests(600, 80.0, seed)
    p99 = {}
    for router in ("round_robin", "least_outstanding"):
        cfg = scenario(4, router, arrival="trace", num_requests=len(reqs)).model_copy(
            update={"engine": scenario().engine.model_copy(update={"max_batch_size": 8})})
        res = simulate(cfg, requests=reqs)
        assert res.summary["completed_requests"] == len(reqs)
        p99[router] = res.summary["ttft_s"]["p99"]
    assert p99["least_outstanding"] < p99["round_robin"]


# ----------------------------------------------------------------------------- fleet metrics
def test_fleet_metrics_add_up_over_replicas_and_sessions_stay_put():
    cfg = build_config({**json.loads(scenario(3, "session_affinity").model_dump_json()),
                        "workload": {"trace": "specbench", "arrival": "poisson", "rate": 6.0, "num_requests": 60},
                        "cost": {"model": "roofline"},  # prices each degree apart (mixed tp needs it)
                        "cluster": {"replicas": 3, "router": "session_affinity", "tp": [1, 2, 1]}})
    res = simulate(cfg)
    per = res.description["cluster"]["per_replica"]
    assert sum(p["requests"] for p in per) == 60 == res.summary["completed_requests"]
    assert sum(p["output_tokens"] for p in per) == res.summary["output_tokens"]
    assert sum(p["iterations"] for p in per) == res.summary["iterations"] == len(res.iterations)
    assert [p["tp"] for p in per] == [1, 2, 1] and gpus(cfg) == 4
    from specplan.workloads.traffic import build_requests, predecessor_indices

    pred = predecessor_indices(build_requests(cfg.workload, cfg.seed))
    later = pred >= 0
    assert later.any()
    replica = res.requests.replica.to_numpy()
    assert (replica[later] == replica[pred[later]]).all()


def test_fleet_inter_token_latencies_are_those_of_its_emission_table():
    """The fleet's ITL summary comes from its replicas' gaps, concatenated; recomputed from the
    fleet's emission table (every replica's rows, put in time order) the percentiles are the same
    order statistics and the mean the same sum up to rounding."""
    from specplan.simulator.metrics import inter_token_latencies

    res = simulate(scenario(3, "least_outstanding"))
    table = res.emissions
    assert (np.diff(table.time_s.to_numpy()) < 0).any()  # replica after replica, not in time order
    gaps = inter_token_latencies(table)
    itl = res.summary["itl_s"]
    assert [itl[f"p{p}"] for p in (50, 90, 99)] == np.percentile(gaps, [50, 90, 99]).tolist()
    assert itl["mean"] == pytest.approx(float(np.mean(gaps)), rel=1e-12)
