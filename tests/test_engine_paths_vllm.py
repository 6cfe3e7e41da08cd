"""vLLM's path: chunked prefill always on, decode rows charged 1 + their proposed draft, K from this
step's scheduled count for the next step's drafts (3- and 5-item entries), the max_model_len rules,
piecewise CUDA graphs under dynamic SD. Expected numbers are worked by hand in each test."""

import numpy as np
import pytest

from specplan.cost_models.base import CostModel
from specplan.config_rules import check_batch_size_ranges
from specplan.simulator.control import vllm_dynamic_sd_lookup
from specplan.simulator.emissions import ITERATION_FIELDS
from specplan.simulator.engine import Executor
from specplan.simulator.inputs import EngineSettings, Workload
from specplan.acceptance.oracles import AcceptanceOracle
from specplan.simulator.paths import VLLM
from specplan.simulator.run import PIECEWISE_GRAPH_SLOWDOWN, simulate


class _FixedCost(CostModel):
    def step_time(self, batch):
        return 0.01


class _Fixed(AcceptanceOracle):
    """Drafts ``min(K, cap[rid])`` tokens; accepts all of them or none."""

    def __init__(self, plen, olen, cap, accept_all):
        super().__init__(plen, olen)
        self.cap, self.accept_all = np.asarray(cap), accept_all

    def draft(self, rids, committed, k):
        d = np.minimum(self.cap[rids], k).astype(np.int64)
        return d, (d if self.accept_all else np.zeros_like(d))


def _run(plen, olen, cap, accept_all=False, max_num_tokens=8192, k=4, ranges=None, max_model_len=None,
         drafter="vllm_ngram"):
    settings = EngineSettings(8, max_num_tokens, 8, 16, 10000, "GUARANTEED_NO_EVICT", True, False, True, k,
                              vllm_ranges=ranges, k_from="scheduled", verify_width="draft", drafter=drafter,
                              path=VLLM, max_model_len=max_model_len)
    plen, olen = np.asarray(plen), np.asarray(olen)
    wl = Workload(plen, olen, None, np.full(len(plen), -1), concurrency=len(plen))
    ex = Executor(settings, wl, _Fixed(plen, olen, cap, accept_all), _FixedCost())
    ex.run()
    return {n: ex.trace.iterations.column(n) for n in ITERATION_FIELDS}


def test_chunked_prefill_always_on(make_config):
    # enable_chunked_prefill false is ignored under vLLM V1: a 100-token prompt over a 32-token budget
    # is prefilled in chunks 32, 32, 32, 4 (TensorRT-LLM refuses the config instead).
    cfg = dict(engine={"engine": "vllm", "max_num_tokens": 32, "enable_chunked_prefill": False},
               speculation={"decoding_type": "vllm_ngram", "max_draft_len": 4},
               workload={"concurrency": 1, "num_requests": 1, "prompt_len": 100, "output_len": 5})
    res = simulate(make_config(**cfg))
    assert res.iterations["prefill_tokens"].tolist()[:4] == [32, 32, 32, 4]


def test_a_decode_row_cut_by_the_budget_verifies_only_the_drafts_it_holds():
    # K 4, budget 8, two 1-token prompts, every draft of 4 accepted. Step 1 prefills both (1 + 1);
    # both propose 4. Step 2: request 0 takes 1 + 4 = 5, request 1 the 3 left (Scheduler.schedule:
    # min(num_new_tokens, token_budget)), so its draft is cut to 2 and it commits 2 + 1: drafted
    # 4 + 2, accepted 6, committed 5 + 3, 8 tokens charged and verified.
    it = _run([1, 1], [40, 40], cap=[4, 4], accept_all=True, max_num_tokens=8)
    step2 = [int(it[c][1]) for c in ("batch_rows", "drafted", "accepted", "committed", "verified_tokens",
                                      "charged_tokens")]
    assert step2 == [2, 6, 6, 8, 8, 8]


def test_decode_rows_cost_one_plus_their_draft():
    # K 4, budget 6: request 0 proposes 4 tokens (costs 5), request 1 proposes none (costs 1):
    # both fit in 6 each step. Charged 1 + K = 5 each, only one would fit.
    it = _run([1, 1], [20, 20], cap=[4, 0], max_num_tokens=6)
    decode = it["gen_rows"] == 2
    assert decode.sum() == 19 and (it["batch_rows"][decode] == 2).all()
    assert (it["verified_tokens"][decode] == 6).all() and (it["drafted"][decode] == 4).all()


def test_k_from_this_steps_scheduled_count_applies_next_step():
    # [[5, 8, 1], [1, 4, 3]] (unsorted; vLLM sorts it): 1-4 scheduled -> 3, 5-8 -> 1. Six requests
    # of 1 + 10 tokens and two of 1 + 40: while more than four run, the next step drafts 1 token.
    ranges = ((5, 8, 1), (1, 4, 3))
    check_batch_size_ranges([list(r) for r in ranges])
    it = _run([1] * 8, [10] * 6 + [40] * 2, cap=[8] * 8, ranges=ranges)
    want = np.where(it["batch_rows"][:-1] <= 4, 3, 1)
    spec = it["spec_on"][1:]
    assert (it["k"][1:][spec] == want[spec]).all()
    assert set(it["k"][1:][spec]) == {1, 3}
    assert it["k"][0] == 0  # nothing was proposed before the first step


def test_five_item_entries_bucket_by_context():
    # [[1, 8, 1, 100, 3], [1, 8, 101, 4096, 1]]: K 3 while the sequence holds <= 100 tokens, then 1.
    table, bounds = vllm_dynamic_sd_lookup([[1, 8, 101, 4096, 1], [1, 8, 1, 100, 3]], 8, 4)
    assert table[1].tolist() == [3, 1] and bounds == (100, 2**31 - 1)
    # 1 request, 50-token prompt, nothing accepted: after step n the sequence holds 50 + n tokens, so
    # step n + 1 verifies K = 3 for n <= 50 and K = 1 after.
    it = _run([50], [100], cap=[8], ranges=((1, 8, 1, 100, 3), (1, 8, 101, 4096, 1)))
    n = np.arange(1, len(it["k"]))
    assert (it["k"][1:] == np.where(50 + n <= 100, 3, 1)).all()
    assert (it["drafted"][1:] == it["k"][1:]).all()


def test_drafts_bounded_by_max_model_len():
    # Prompt 10, output 20, K 4, max_model_len 32, nothing accepted: after step n the sequence holds
    # t = 10 + n tokens. From t = 29 the longest sequence + K passes 32 and the n-gram drafter is skipped
    # (K = 4 dummy tokens, never accepted); either way the scheduler verifies at most 32 - 1 - t of a
    # row's drafts (Scheduler.schedule: new tokens stop at max_model_len - num_computed_tokens - 1), so
    # the draft for step n + 1 is min(4, 31 - t): 4 up to t = 27, then 3 and 2.
    it = _run([10], [20], cap=[8], max_model_len=32)
    t = 10 + np.arange(1, len(it["k"]))
    want = np.minimum(4, 32 - 1 - t)
    assert (it["drafted"][1:] == want).all() and want.tolist()[-3:] == [4, 3, 2]
    assert (it["verified_tokens"][1:] == 1 + want).all()


def test_dummy_drafts_are_never_accepted():
    # Prompt 10, output 23, K 4, max_model_len 33, every real draft accepted. A step's longest sequence is
    # its context plus its scheduled tokens: steps 2-5 hold 15, 20, 25, 30 (5 a step), and after each the
    # request holds 16, 21, 26, 31 tokens. After step 5, 30 + 4 > 33: the drafter is skipped and the row
    # gets dummies, of which the scheduler verifies 33 - 1 - 31 = 1 (never accepted: commit 1); after
    # step 6 (32 tokens) 0; step 7 commits the last token.
    it = _run([10], [23], cap=[8], accept_all=True, max_model_len=33)
    assert it["drafted"].tolist() == [0, 4, 4, 4, 4, 1, 0]
    assert it["accepted"].tolist() == [0, 4, 4, 4, 4, 0, 0]
    assert it["committed"].tolist() == [1, 5, 5, 5, 5, 1, 1]
    # Without max_model_len the step after 31 tokens drafts 4 and commits the last 2 tokens.
    free = _run([10], [23], cap=[8], accept_all=True)
    assert free["committed"].tolist() == [1, 5, 5, 5, 5, 2]


def test_max_model_len_refuses_a_request_that_does_not_fit():
    from specplan.errors import ConfigError

    with pytest.raises(ConfigError, match="engine.max_model_len"):
        _run([10], [24], cap=[8], max_model_len=33)


def test_dynamic_sd_pays_piecewise_cuda_graphs(make_config):
    # The same K = 4 at every batch size, as dynamic SD and as a fixed K: identical schedules, every
    # step slower by 1 / (1 - 0.14) (vLLM #49548).
    common = dict(engine={"engine": "vllm"}, workload={"concurrency": 2, "num_requests": 4, "output_len": 30})
    fixed = simulate(make_config(speculation={"decoding_type": "vllm_ngram", "max_draft_len": 4}, **common))
    dyn = simulate(make_config(speculation={"decoding_type": "vllm_ngram", "max_draft_len": 4,
                                            "num_speculative_tokens_per_batch_size": [[1, 8, 4]]}, **common))
    a, b = fixed.iterations, dyn.iterations
    assert (a["committed"].to_numpy() == b["committed"].to_numpy()).all()
    np.testing.assert_allclose(b["step_s"] * (1 - PIECEWISE_GRAPH_SLOWDOWN), a["step_s"], rtol=1e-12)
    off = simulate(make_config(speculation={"decoding_type": "vllm_ngram", "max_draft_len": 4,
                                            "num_speculative_tokens_per_batch_size": [[1, 8, 4]]},
                               cost={"model": "linear_gamma", "t_base_s": 0.01, "gamma": 0.0,
                                     "piecewise_cuda_graph_slowdown": 0.0}, **common))
    np.testing.assert_allclose(off.iterations["step_s"], a["step_s"], rtol=1e-12)


@pytest.mark.parametrize("prompt_len,second_prefill", [(70, 70 - 64), (64, 64 - 48)])
def test_prefix_caching_skips_cached_prompt_blocks(prompt_len, second_prefill):
    # Block size 16, two requests with the same prompt, one client. The first prefills everything and
    # caches its 4 full blocks (64 tokens); the second starts with them computed: 70 - 64 = 6 tokens
    # left. A hit is whole blocks within num_tokens - 1 (get_computed_blocks: the last prompt token is
    # always recomputed): for a 64-token prompt 63 tokens hold 3 whole blocks, 48: 16 left.
    from specplan.simulator.prefix_cache import PrefixCache
    from specplan.workloads.request import Request

    prompt = np.arange(prompt_len)
    reqs = [Request(id=str(i), prompt_ids=prompt, output_ids=np.arange(5) + 1000) for i in range(2)]
    plen, olen = np.array([prompt_len] * 2), np.array([5, 5])
    settings = EngineSettings(8, 8192, 8, 16, 10000, "GUARANTEED_NO_EVICT", True, False, False, 0, path=VLLM)
    wl = Workload(plen, olen, None, np.array([-1, -1]), concurrency=1)
    cache = PrefixCache(reqs, 16)
    ex = Executor(settings, wl, _Fixed(plen, olen, [0, 0], False), _FixedCost(), prefix_cache=cache)
    ex.run()
    prefill = ex.trace.iterations.column("prefill_tokens").tolist()
    assert [p for p in prefill if p] == [prompt_len, second_prefill]
    assert cache.hit_tokens == prompt_len - second_prefill


def _burst(mode, arrivals, max_num_tokens=8192):
    from specplan.simulator.prefix_cache import PrefixCache
    from specplan.workloads.request import Request

    n = len(arrivals)
    reqs = [Request(id=str(i), prompt_ids=np.arange(40), output_ids=np.arange(5) + 1000 * (i + 1)) for i in range(n)]
    plen, olen = np.full(n, 40), np.full(n, 5)
    settings = EngineSettings(8, max_num_tokens, 8, 16, 10000, "GUARANTEED_NO_EVICT", True, False, False, 0, path=VLLM)
    wl = Workload(plen, olen, np.asarray(arrivals, dtype=float), np.full(n, -1))
    cache = PrefixCache(reqs, 16, mode)
    ex = Executor(settings, wl, _Fixed(plen, olen, [0] * n, False), _FixedCost(), prefix_cache=cache)
    ex.run()
    return ex.trace.iterations.column("prefill_tokens").tolist(), cache.hit_tokens


def test_vllm_prefix_cache_hits_within_the_step_that_computes_the_blocks():
    # Three 40-token prompts, the same tokens, arriving together; block 16. Scheduler.schedule's
    # waiting loop: request 0 finds nothing and its 2 full blocks are cached as they are allocated
    # (allocate_slots -> cache_blocks); requests 1 and 2, later in the same step, hit (40 - 1) // 16 = 2
    # blocks: 32 tokens each, 8 left to prefill. Step 1 prefills 40 + 8 + 8.
    from specplan.simulator.prefix_cache import AFTER_STEP, SAME_STEP

    prefill, hits = _burst(SAME_STEP, [0, 0, 0])
    assert prefill[0] == 56 and hits == 64
    # TensorRT-LLM's block reuse stores blocks once computed: nothing to reuse within step 1.
    prefill, hits = _burst(AFTER_STEP, [0, 0, 0])
    assert prefill[0] == 120 and hits == 0
    # Budget 45: request 0 takes 40, request 1 (hit 32) gets the 5 left; request 2 is not reached,
    # so it looks up only in step 2 (hit 32): step 2 prefills 1's last 3 and 2's 8.
    prefill, hits = _burst(SAME_STEP, [0, 0, 0], max_num_tokens=45)
    assert prefill[:2] == [45, 11] and hits == 64


def test_trt_block_reuse_serves_blocks_computed_by_an_earlier_step():
    # Request 1 arrives during step 1 (10 ms steps): at step 2 request 0's 2 blocks were computed by
    # step 1, so block reuse serves 32 of request 1's 40 tokens (request 0 has not completed).
    from specplan.simulator.prefix_cache import AFTER_STEP

    prefill, hits = _burst(AFTER_STEP, [0, 0.005])
    assert [p for p in prefill if p] == [40, 8] and hits == 32


def test_prefix_caching_is_vllm_default(make_config):
    # Spec-Bench's prompts share their chat-template prefix: later requests hit it.
    common = dict(workload={"trace": "specbench", "concurrency": 1, "num_requests": 10},
                  speculation={"decoding_type": "none"})
    on = simulate(make_config(engine={"engine": "vllm"}, **common))
    off = simulate(make_config(engine={"engine": "vllm", "enable_prefix_caching": False}, **common))
    assert on.summary["prefix_cache_hit_tokens"] > 0 and "prefix_cache_hit_tokens" not in off.summary
    saved = int(off.iterations["prefill_tokens"].sum()) - int(on.iterations["prefill_tokens"].sum())
    assert saved == on.summary["prefix_cache_hit_tokens"]
