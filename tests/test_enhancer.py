"""The SA enhancer on a model-based drafter (issue 7), checked against a brute-force SA replay."""

from pathlib import Path

import numpy as np
import pytest

from drafter_reference import earlier_match, lcp
from specplan.cost_models.base import CostModel
from specplan.simulator.run import simulate
from specplan.workloads.tokentrace import read_token_trace

FIXTURE = Path(__file__).parent / "data" / "drafters" / "specbench_vanilla.jsonl"
K = 4


def _cfg(make_config, threshold, alpha):
    return make_config(
        engine={"max_batch_size": 1},
        speculation={"decoding_type": "MTP", "max_draft_len": K, "sa_config": {"threshold": threshold}},
        acceptance={"mode": "alpha", "alpha": alpha},
        workload={"trace": str(FIXTURE), "arrival": "closed_loop", "concurrency": 1, "num_requests": 6},
    )


def _reference_steps(req, threshold):
    """Accepted per generation step: SA's draft where its match reaches the threshold, else nothing."""
    tokens = list(req.prompt_ids) + list(req.output_ids)
    p, out, steps = req.prompt_len, req.output_len, []
    committed = 1  # the prefill commits the first token
    while committed < out:
        history = tokens[:p + committed]
        n, src = earlier_match(history, None)
        accepted = 0
        if n >= threshold:
            draft = history[src:src + K]
            accepted = lcp(draft, tokens[p + committed:])
        steps.append(accepted)
        committed += min(accepted + 1, out - committed)
    return steps


def _sim_steps(res):
    it = res.iterations
    return it.loc[it["gen_rows"] == 1, "accepted"].tolist()


def test_zero_acceptance_neural_equals_sa_above_threshold(make_config):
    res = simulate(_cfg(make_config, threshold=3, alpha=0.0))
    order = res.requests.sort_values("arrival_s")["request_id"].tolist()
    by_id = {r.id: r for r in read_token_trace(FIXTURE)}
    expected = [a for rid in order for a in _reference_steps(by_id[rid], 3)]
    assert _sim_steps(res) == expected
    assert 0 < res.summary["drafter_sa_override_rate"] < 1


def test_threshold_above_any_match_equals_neural_alone(make_config):
    enhanced = simulate(_cfg(make_config, threshold=100000, alpha=0.6))
    plain = make_config(
        engine={"max_batch_size": 1}, speculation={"decoding_type": "MTP", "max_draft_len": K},
        acceptance={"mode": "alpha", "alpha": 0.6},
        workload={"trace": str(FIXTURE), "arrival": "closed_loop", "concurrency": 1, "num_requests": 6})
    neural = simulate(plain)
    assert enhanced.summary["drafter_sa_override_rate"] == 0
    assert _sim_steps(enhanced) == _sim_steps(neural)
    np.testing.assert_allclose(enhanced.requests["finish_s"], neural.requests["finish_s"])


class _Costs(CostModel):
    """10 ms forwards; the neural loop costs 1 ms per position, the SA kernel a fixed ``sa_s``."""

    def __init__(self, sa_s):
        self.sa_s = sa_s

    def step_time(self, batch):
        return 0.010

    def draft_time(self, drafter, num_requests, k, pool_entries=0):
        return self.sa_s if drafter == "SA" else 0.001 * k


@pytest.mark.parametrize("sa_s,expected", [(0.003, 0.014), (0.006, 0.016)])
def test_sa_side_stream_charged_only_past_the_neural_loop(make_config, sa_s, expected):
    # Drafting on the critical path is max(neural loop = 4 ms at K = 4, SA kernel).
    res = simulate(_cfg(make_config, threshold=3, alpha=0.5), cost=_Costs(sa_s))
    it = res.iterations
    np.testing.assert_allclose(it.loc[it["spec_on"] & (it["gen_rows"] == 1), "step_s"], expected)


def test_default_neural_draft_cost_is_per_position():
    from specplan.config import CostConfig
    from specplan.cost_models.registry import make_cost_model

    cost = make_cost_model(CostConfig(model="roofline"))
    assert cost.draft_time("MTP", 8, K) == pytest.approx(K * 2e-4)
    assert cost.draft_time("SA", 8, K) < cost.draft_time("MTP", 8, K)
