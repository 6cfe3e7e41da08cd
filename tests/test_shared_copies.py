"""Copies of one trace request (sampling with replacement) share its tokens and drafter tables; the
run must be exactly the one where every copy holds its own arrays."""

from dataclasses import replace

import pytest

from specplan.config import build_config
from specplan.acceptance.drafters.base import distinct_requests
from specplan.simulator.run import simulate
from specplan.workloads.traffic import build_requests


def scenario(speculation):
    return build_config({
        "seed": 3,
        "engine": {"engine": "vllm" if speculation["decoding_type"] == "vllm_ngram" else "trtllm",
                   "max_batch_size": 16, "kv_num_blocks": 100000},
        "speculation": speculation,
        "acceptance": {"mode": "drafter"},
        "workload": {"trace": "mtbench", "arrival": "closed_loop", "concurrency": 16, "num_requests": 300,
                     "sample_with_replacement": True},
        "cost": {"model": "roofline"},
    })


@pytest.mark.parametrize("speculation", [
    {"decoding_type": "SA", "max_draft_len": 4, "max_matching_ngram_size": -1},
    {"decoding_type": "NGram", "max_draft_len": 3, "is_public_pool": True},
    {"decoding_type": "NGram", "max_draft_len": 3, "is_public_pool": False},
    {"decoding_type": "vllm_ngram", "max_draft_len": 4},
])
def test_shared_tables_give_the_run_of_private_copies(speculation):
    cfg = scenario(speculation)
    shared = build_requests(cfg.workload, cfg.seed)
    distinct, copy_of = distinct_requests(shared)
    assert len(distinct) < len(shared)  # 300 draws from mtbench's 80 sessions: copies exist
    assert all(shared[i].prompt_ids is distinct[j].prompt_ids for i, j in enumerate(copy_of))
    private = [replace(r, prompt_ids=r.prompt_ids.copy(), output_ids=r.output_ids.copy()) for r in shared]
    assert len(distinct_requests(private)[0]) == len(private)
    a, b = simulate(cfg, requests=shared), simulate(cfg, requests=private)
    assert a.summary == b.summary
    assert a.emissions.equals(b.emissions)
