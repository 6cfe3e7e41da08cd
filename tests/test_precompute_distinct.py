"""Drafter tables are computed once per distinct request: copies drawn by sampling with replacement
share their original's tables, within one oracle and across oracles built on one cache (a sweep's
worker builds one per config)."""

import pytest

from specplan.acceptance.drafters import PrecomputeCache, make_drafter_oracle
from specplan.config import build_config
from specplan.workloads.traffic import build_requests, source_id

# every drafter kind answered from per-request tables (the public NGram pool and suffix trees are
# online structures: nothing per request is precomputed)
TABLE_DRAFTERS = [
    {"decoding_type": "SA", "max_draft_len": 4, "max_matching_ngram_size": -1},
    {"decoding_type": "SA", "max_draft_len": 4, "enable_global_pool": True},
    {"decoding_type": "NGram", "max_draft_len": 3, "is_public_pool": False},
    {"decoding_type": "vllm_ngram", "max_draft_len": 4},
    {"decoding_type": "pld", "max_draft_len": 4},
]


@pytest.fixture(scope="module")
def sampled():
    cfg = build_config({"seed": 5, "workload": {"trace": "mtbench", "arrival": "closed_loop", "num_requests": 160,
                                                "sample_with_replacement": True}})
    return build_requests(cfg.workload, cfg.seed)


@pytest.mark.parametrize("speculation", TABLE_DRAFTERS, ids=lambda s: "-".join(map(str, s.values())))
def test_one_computation_per_distinct_request(sampled, speculation):
    distinct = len({source_id(r) for r in sampled})  # counted by trace id, not by shared arrays
    assert distinct < len(sampled)
    spec = build_config({"speculation": speculation}).speculation
    cache = PrecomputeCache()
    make_drafter_oracle(spec, sampled, 16, cache)
    assert cache.misses == distinct
    make_drafter_oracle(spec, sampled, 16, cache)  # the next config point of a sweep
    assert cache.misses == distinct and cache.hits == distinct
