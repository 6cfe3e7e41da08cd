"""The seeds' benefit model reproduced by simulation, in a steady state.

Oracles: E[L] = (1 - a^(K+1)) / (1 - a) (seed 002 §2.1); speedup = E[L] / (1 + gamma K + d)
(seed 000, seed 002 §2.2); seed 000's gate case (a = 0.25, K = 4: 0.61 at gamma 0.3, 1.11 at
gamma 0.05); seed 002's cheap/costly table.
"""

import pytest

from specplan.simulator.run import baseline_config, simulate


def expected_length(a: float, k: int) -> float:
    return (1 - a ** (k + 1)) / (1 - a)


def steady_throughput(result, batch: int) -> float:
    """Tokens per second over the iterations where the batch is full and decoding only."""
    it = result.iterations
    full = (it["gen_rows"] == batch) & (it["prefill_tokens"] == 0)
    return it.loc[full, "committed"].sum() / it.loc[full, "step_s"].sum()


@pytest.mark.parametrize("alpha,k", [(0.25, 4), (0.6, 3), (0.8, 4), (0.9, 6)])
def test_mean_acceptance_length_matches_closed_form(make_config, alpha, k):
    cfg = make_config(speculation={"max_draft_len": k}, acceptance={"alpha": alpha},
                      workload={"concurrency": 8, "num_requests": 16, "output_len": 3000})
    measured = simulate(cfg).summary["mean_acceptance_length"]
    assert measured == pytest.approx(expected_length(alpha, k), rel=0.01)


@pytest.mark.parametrize("gamma,d,seed_value", [(0.3, 0.0, 0.61), (0.05, 0.0, 1.11), (0.1, 0.1, None)])
def test_speedup_single_stream_matches_closed_form(make_config, gamma, d, seed_value):
    cfg = make_config(speculation={"max_draft_len": 4}, acceptance={"alpha": 0.25},
                      workload={"concurrency": 1, "num_requests": 3, "output_len": 6000},
                      cost={"model": "linear_gamma", "t_base_s": 0.01, "gamma": gamma, "draft_cost_s": 0.01 * d})
    spec = simulate(cfg).summary["throughput_tok_s"]
    base = simulate(baseline_config(cfg)).summary["throughput_tok_s"]
    closed = expected_length(0.25, 4) / (1 + gamma * 4 + d)
    assert spec / base == pytest.approx(closed, rel=0.02)
    if seed_value is not None:
        assert round(spec / base, 2) == pytest.approx(seed_value, abs=0.015)


def test_speedup_at_batch_32_steady_state(make_config):
    # gamma given as a table over B: 0.02 at B <= 8 rising to 0.2 at B = 32 (interpolated linearly).
    cfg = make_config(engine={"max_batch_size": 32}, speculation={"max_draft_len": 3}, acceptance={"alpha": 0.7},
                      workload={"concurrency": 32, "num_requests": 96, "output_len": 2000},
                      cost={"model": "linear_gamma", "t_base_s": {1: 0.008, 32: 0.012}, "gamma": {8: 0.02, 32: 0.2}})
    spec = steady_throughput(simulate(cfg), 32)
    base = steady_throughput(simulate(baseline_config(cfg)), 32)
    assert spec / base == pytest.approx(expected_length(0.7, 3) / (1 + 0.2 * 3), rel=0.02)


# Seed 002 §8.1: a = 0.8; round cost 10 + 0.7g + 0.1g^2 ms (cheap) and 10 + 5g + 0.8g^2 ms (costly)
# against 10 ms per plain token. The table prices a round by K alone (as the seed's single stream does),
# so eight concurrent streams in steady state give the same ratio with less sampling noise.
SEED002 = {1: (1.667, 1.139), 2: (2.068, 1.052), 4: (2.334, 0.785), 8: (1.968, 0.428)}


@pytest.mark.parametrize("g", sorted(SEED002))
def test_seed002_cheap_and_costly_table(make_config, g):
    for which, (lin, quad) in enumerate([(0.7, 0.1), (5.0, 0.8)]):
        table = {1: {k: (10 + lin * k + quad * k * k) / 1000 for k in range(0, 9)}}
        cfg = make_config(engine={"max_batch_size": 8}, speculation={"max_draft_len": g}, acceptance={"alpha": 0.8},
                          workload={"concurrency": 8, "num_requests": 8, "output_len": 12000},
                          cost={"model": "table", "table_s": table})
        spec = steady_throughput(simulate(cfg), 8)
        base = steady_throughput(simulate(baseline_config(cfg)), 8)
        assert spec / base == pytest.approx(SEED002[g][which], rel=0.02)


@pytest.mark.parametrize("acceptance,k,expected", [
    # Seed 002 §2.1 without independence: E[L] = 1 + sum_i prod_{j<=i} a_j = 1 + .9 + .45 + .09.
    ({"mode": "per_position", "per_position": [0.9, 0.5, 0.2]}, 3, 2.44),
    # Positions past the vector are never accepted: K = 5 with three rates gives the same.
    ({"mode": "per_position", "per_position": [0.9, 0.5, 0.2]}, 5, 2.44),
    # E[L] = 1 + E[accepted] = 1 + 0.3 * 1 + 0.2 * 2.
    ({"mode": "length_dist", "length_dist": [0.5, 0.3, 0.2]}, 2, 1.7),
])
def test_conditional_and_empirical_oracles_match_expected_length(make_config, acceptance, k, expected):
    cfg = make_config(speculation={"max_draft_len": k}, acceptance=acceptance,
                      workload={"concurrency": 8, "num_requests": 16, "output_len": 3000})
    assert simulate(cfg).summary["mean_acceptance_length"] == pytest.approx(expected, rel=0.01)
