"""A run builds its synthetic requests' token ids only when it reads them: the exact drafters, the
SA enhancer, recorded acceptance logs and prefix caching do; the parametric oracles and speculation
off read lengths only, and run the same without the tokens."""

import numpy as np
import pytest

from specplan.config import build_config
from specplan.run_reads import reads_tokens
from specplan.simulator.run import build_workload, resolve, simulate
from specplan.workloads.traffic import build_requests

BASE = {
    "seed": 4, "engine": {"max_batch_size": 16, "kv_num_blocks": 20000},
    "speculation": {"decoding_type": "none"}, "acceptance": {"mode": "alpha", "alpha": 0.6},
    "workload": {"trace": None, "arrival": "poisson", "rate": 20.0, "num_requests": 80, "prompt_len": 128,
                 "output_len": 24},
}
SA = {"decoding_type": "SA", "max_draft_len": 3}


def config(**sections):
    return resolve(build_config(BASE | sections))


RULE = [
    ({}, False),
    ({"speculation": SA}, False),  # alpha acceptance: lengths only
    ({"speculation": SA, "acceptance": {"mode": "per_position", "per_position": [0.8, 0.6, 0.4]}}, False),
    ({"acceptance": {"mode": "drafter"}}, False),  # speculation off: the oracle is never asked
    ({"speculation": SA, "acceptance": {"mode": "drafter"}}, True),
    ({"speculation": {"decoding_type": "MTP", "max_draft_len": 3, "sa_config": {"threshold": 2}}}, True),
    ({"acceptance": {"mode": "recorded", "recorded_path": "specbench-eagle"}}, True),
    ({"engine": {"engine": "vllm", "max_batch_size": 16, "kv_num_blocks": 20000}}, True),  # prefix caching on
    ({"engine": {"max_batch_size": 16, "kv_num_blocks": 20000, "enable_prefix_caching": True}}, True),
]


@pytest.mark.parametrize("sections, reads", RULE)
def test_what_reads_tokens(sections, reads):
    cfg = config(**sections)
    assert reads_tokens(cfg) is reads
    _, requests = build_workload(cfg)
    assert any(r.prompt_ids.any() for r in requests) is reads


@pytest.mark.parametrize("sections", [s for s, reads in RULE if not reads]
                         + [{"speculation": SA, "cluster": {"replicas": 3, "router": "least_kv"}}])
def test_a_run_without_tokens_is_the_run_with_them(sections):
    # Every config the rule lets go without tokens runs as it does with real ones.
    cfg = config(**sections)
    with_tokens = build_requests(cfg.workload, cfg.seed)
    assert all(r.prompt_ids.any() for r in with_tokens)
    a, b = simulate(cfg), simulate(cfg, requests=with_tokens)
    assert a.summary == b.summary
    for table in ("requests", "iterations", "emissions"):
        assert getattr(a, table).equals(getattr(b, table))
    assert np.array_equal(a.requests.request_id, [r.id for r in with_tokens])
