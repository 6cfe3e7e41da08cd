"""Rows with no proposal, chunked prefill and the order of a step's requests, each as the engine's code
does it (docs/semantics.md, "Engine paths"): iteration tables worked by hand.

Every scenario runs a few short requests with a fixed 10 ms step and an oracle whose drafts and
accepted counts are fixed per request, so each step's rows follow from the rules alone.
"""

import numpy as np
import pytest

from specplan.acceptance.oracles import AcceptanceOracle
from specplan.cost_models.base import CostModel
from specplan.simulator.engine import Executor
from specplan.simulator.inputs import EngineSettings, Workload
from specplan.simulator.paths import PATHS, TRT_DRAFTER, TRT_ONE_MODEL, VLLM
from specplan.simulator.run import simulate


class _FixedCost(CostModel):
    def step_time(self, batch):
        return 0.01


class _PerRequest(AcceptanceOracle):
    """Request 0 drafts min(2, K) and accepts 1; every other request proposes nothing."""

    def draft(self, rids, committed, k):
        drafted = np.where(np.asarray(rids) == 0, min(2, k), 0).astype(np.int64)
        return drafted, np.minimum(drafted, 1)


def _settings(path, max_num_tokens=64, **kw):
    rules = PATHS[path]
    drafter = {TRT_DRAFTER: "NGram", TRT_ONE_MODEL: "SA", VLLM: "vllm_ngram"}[path]
    base = dict(verify_width=rules.verify_width, drafter=drafter, path=path, k_from=rules.k_from,
                schedule_lookup="lower_bound" if path == TRT_DRAFTER else "upper_bound")
    base.update(kw)
    return EngineSettings(8, max_num_tokens, 8, 16, 1000, "GUARANTEED_NO_EVICT", base.pop("chunked", False), False,
                          True, 4, **base)


def _run(settings, plen, olen, oracle=_PerRequest, clients=None):
    plen, olen = np.asarray(plen, dtype=np.int64), np.asarray(olen, dtype=np.int64)
    n = len(plen)
    wl = Workload(plen, olen, None, np.full(n, -1), concurrency=clients or n, think_time=np.zeros(n))
    ex = Executor(settings, wl, oracle(plen, olen), _FixedCost())
    ex.run()
    return ex


def _table(ex, columns):
    it = ex.trace.iterations
    return [[int(it.column(c)[i]) for c in columns] for i in range(len(it))]


NO_PROPOSAL = ("gen_rows", "drafted", "verified_draft_tokens", "verified_tokens", "committed")


def test_a_row_with_no_proposal_is_padded_on_the_drafter_path():
    # NGram (drafter path), K 4, two 1-token prompts, 5 output tokens each. Request 0 drafts 2 and
    # accepts 1; request 1 proposes nothing. pad_draft_tokens_for_cuda_graph pads both drafts to
    # K_static = 4 (the path's default verify width, static): each generation row verifies 1 + 4.
    # it 1: the two prefills commit 1 each. it 2: drafted 2 (request 0 only), verified 4 + 4 draft
    # positions, 10 forward tokens; commits 2 + 1 (generated 3, 2). it 3: the same, request 0 reaches
    # 5 (commits 2), request 1 3. it 4, 5: request 1 alone, nothing drafted, still 1 + 4 verified.
    ex = _run(_settings(TRT_DRAFTER), [1, 1], [5, 5])
    assert _table(ex, NO_PROPOSAL) == [[0, 0, 0, 0, 2], [2, 2, 8, 10, 3], [2, 2, 8, 10, 3], [1, 0, 4, 5, 1],
                                       [1, 0, 4, 5, 1]]


def test_a_row_with_no_proposal_verifies_nothing_in_vllm():
    # The same requests on vLLM: drafts are proposed after a step (request 0: 2, request 1: none) and a
    # row verifies only its own draft. it 2: request 0 verifies 1 + 2, request 1 computes 1 token:
    # 2 draft positions, 4 forward tokens; commits 2 + 1. it 3: the same (request 0 done at 5).
    # it 4, 5: request 1 alone, 1 token each.
    ex = _run(_settings(VLLM), [1, 1], [5, 5])
    assert _table(ex, NO_PROPOSAL) == [[0, 0, 0, 0, 2], [2, 2, 2, 4, 3], [2, 2, 2, 4, 3], [1, 0, 0, 1, 1],
                                       [1, 0, 0, 1, 1]]


def test_drafted_and_verified_counts_differ_by_the_padding(make_config):
    # The summary's drafted_tokens are the proposals (the same whatever the width); the verified draft
    # positions include the padding: under static every generation row of a speculating step verifies
    # K_static = 4, under draft its own proposal. Same run, only the verify width differs.

    common = dict(acceptance={"mode": "per_position", "per_position": [0.5, 0.5]},
                  workload={"concurrency": 2, "num_requests": 4, "output_len": 30})
    static = simulate(make_config(speculation={"verify_width": "static"}, **common))
    own = simulate(make_config(speculation={"verify_width": "draft"}, **common))
    for res in (static, own):
        it = res.iterations
        assert res.summary["verified_draft_tokens"] == int(it["verified_draft_tokens"].sum())
        assert res.summary["draft_padding_tokens"] == res.summary["verified_draft_tokens"] - res.summary["drafted_tokens"]
    it = static.iterations
    spec = it[it["spec_on"]]
    assert (spec["verified_draft_tokens"] == 4 * spec["gen_rows"]).all()
    it = own.iterations
    assert (it["verified_draft_tokens"] == it["drafted"]).all() and own.summary["draft_padding_tokens"] == 0
    assert static.summary["draft_padding_tokens"] > 0


@pytest.mark.parametrize("engine,drafter,width", [("trtllm", "NGram", "static"), ("trtllm", "pld", "static"),
                                                  ("trtllm", "SA", "runtime"), ("trtllm", "MTP", "runtime"),
                                                  ("vllm", "vllm_ngram", "draft"), ("vllm", "pld", "draft")])
def test_the_default_verify_width_is_the_paths(make_config, engine, drafter, width):
    # The engine decides the width by path, not by drafter: TensorRT-LLM's host drafters (NGram, prompt
    # lookup) go through Drafter.pad_draft_tokens_for_cuda_graph; one-model drafters write K slots;
    # vLLM verifies each row's own proposal.
    from specplan.simulator.run import resolve, resolve_engine

    cfg = resolve(make_config(engine={"engine": engine}, speculation={"decoding_type": drafter}))
    assert resolve_engine(cfg, 100).verify_width == width


CHUNKED = ("batch_rows", "gen_rows", "prefill_tokens", "charged_tokens", "verified_tokens", "committed")


def test_a_chunked_context_does_not_stop_the_generation_rows_behind_it():
    # PyMicroBatchScheduler.schedule with chunked prefill (FIRST_COME_FIRST_SERVED, chunk unit = the
    # 16-token KV block), NGram K 4, max_num_tokens 20. Request 0 has a 40-token prompt and 2 output
    # tokens; requests 1 and 2, behind it in the active order, 1-token prompts and 4 outputs; nothing
    # is ever proposed (padded to 1 + 4 all the same).
    # it 1: three contexts, 42 tokens > 20: request 0 gets min(40, 20) = 20, truncated, so 16; 1 and
    #   2 get 1 each (4 then 3 left). 18 prefill tokens; 1 and 2 commit their first token.
    # it 2-4: 1 and 2 decode first (5 + 5 = 10); the 10 left would truncate request 0's 24, rounded
    #   down to 0: it is not scheduled. 1 and 2 commit 1 each and finish at it 4.
    # it 5: request 0 alone: 24 > max_context_length 20, so chunked: 20 rounded down to 16.
    # it 6: the last 8 fit whole: the first token. it 7: one generation row, 1 + 4, its last token.
    ex = _run(_settings(TRT_DRAFTER, max_num_tokens=20, chunked=True), [40, 1, 1], [2, 4, 4])
    assert _table(ex, CHUNKED) == [[3, 0, 18, 18, 0, 2]] + [[2, 2, 0, 10, 10, 2]] * 3 + [
        [1, 0, 16, 16, 0, 0], [1, 0, 8, 8, 0, 1], [1, 1, 0, 5, 5, 1]]


def test_the_old_rule_stopped_the_pass_at_the_chunked_context():
    # vLLM's own rule (a context that does not fit takes the rest and the pass ends, no rounding) is
    # kept on its path: the same requests with budget 20. it 1: request 0 takes 20 and the pass ends.
    # it 2: 20 more (40 reached: its first token; it then proposes 2). it 3: request 0 verifies 1 + 2
    # (accepts 1, but only 1 output token is left), then 1 and 2 prefill 1 token each: 5 charged.
    ex = _run(_settings(VLLM, max_num_tokens=20, chunked=True), [40, 1, 1], [2, 4, 4])
    assert _table(ex, CHUNKED)[:3] == [[1, 0, 20, 20, 0, 0], [1, 0, 20, 20, 0, 1], [3, 1, 2, 5, 3, 3]]


@pytest.mark.parametrize("equal_progress,sizes", [(False, [40, 0, 0]), (True, [16, 16, 0])])
def test_chunking_policies(equal_progress, sizes):
    # Three 40-token contexts, 40 tokens of capacity, unit 16. FIRST_COME_FIRST_SERVED: the first
    # fits whole (40, no rounding), nothing is left. EQUAL_PROGRESS: a unit each in turn: 16, 16, then
    # the third's 16 would pass 40; the next round's increments do not fit either.
    from specplan.simulator.scheduler import chunk_contexts

    out = np.zeros(3, dtype=np.int64)
    chunk_contexts(np.full(3, 40, dtype=np.int64), 3, 40, 64, 16, equal_progress, out)
    assert out.tolist() == sizes


def test_equal_progress_runs_through_the_executor():
    # Two 40-token prompts under max_num_tokens 40. EQUAL_PROGRESS: it 1, 16 + 16, then 16 more would
    # pass 40; it 2 (24 left each), 16 + 16, then request 0's increment is capped at the 8 it needs (40
    # in all: its first token) and request 1's does not fit; it 3, request 1's last 8. FCFS: 40 to
    # request 0 (whole), then 40 to request 1: first tokens at it 1 and 2.
    fcfs = _run(_settings(TRT_DRAFTER, max_num_tokens=40, chunked=True), [40, 40], [1, 1])
    equal = _run(_settings(TRT_DRAFTER, max_num_tokens=40, chunked=True, context_chunking_policy="EQUAL_PROGRESS"),
                 [40, 40], [1, 1])
    assert _table(fcfs, ("batch_rows", "prefill_tokens", "committed")) == [[1, 40, 1], [1, 40, 1]]
    assert _table(equal, ("batch_rows", "prefill_tokens", "committed")) == [[2, 32, 0], [2, 40, 1], [1, 8, 1]]


class _Order(AcceptanceOracle):
    """Proposes nothing and records the order in which each step's requests draft."""

    def __init__(self, plen, olen):
        super().__init__(plen, olen)
        self.calls = []

    def draft(self, rids, committed, k):
        self.calls.append(np.asarray(rids).tolist())
        return np.zeros(len(rids), dtype=np.int64), np.zeros(len(rids), dtype=np.int64)


def test_the_drafter_path_drafts_in_sequence_slot_order():
    # NGramDrafter.prepare_draft_tokens sorts by (py_batch_idx is None, py_batch_idx or request_id);
    # py_batch_idx is the sequence slot. Three clients (closed loop: client c sends requests c, c + 3,
    # ...), 1-token prompts, outputs 6, 2, 6, 1, 3; max_batch_size 8, so request r has id 8 + r.
    # it 1: the three prefills take slots 0, 1, 2 (SlotManager: set(range(8)).pop() in turn).
    # it 2: keys: request 0 in slot 0 sorts by its id 8; 1 -> 1, 2 -> 2: order [1, 2, 0]. Request 1
    #   finishes (2 tokens) and gives slot 1 back; client 1 sends request 4.
    # it 3: rows 0 and 2 draft [2, 0] (request 4 reaches the queue once it 3 is scheduled).
    # it 4: the same; request 4 prefills and takes the set's next pop, slot 3 (pop resumes after the
    #   last slot taken, not at the freed 1).
    # it 5, 6: [2, 4, 0] (with slot 1 it would be [4, 2, 0]); 0, 2 and 4 all finish at it 6.
    # it 7: request 3 prefills its only token, no drafts.
    ex = _run(_settings(TRT_DRAFTER), [1] * 5, [6, 2, 6, 1, 3], oracle=_Order, clients=3)
    assert ex.oracle.calls == [[1, 2, 0], [2, 0], [2, 0], [2, 4, 0], [2, 4, 0]]


def test_vllm_drafts_in_running_order():
    # vLLM proposes after each step for the rows that ran, in the running queue's order (admission),
    # not slot order: request 0 first; after it 2 request 1 has finished and proposes nothing.
    ex = _run(_settings(VLLM), [1] * 5, [6, 2, 6, 1, 3], oracle=_Order, clients=3)
    assert ex.oracle.calls[:2] == [[0, 1, 2], [0, 2]]


# ----------------------------------------------------------------------------- block reuse by default
def _reuse_run(make_config, trace, caching):
    return simulate(make_config(engine={"max_batch_size": 8, "enable_prefix_caching": caching},
                                speculation={"decoding_type": "none"}, acceptance={"mode": "alpha", "alpha": 0.5},
                                workload={"trace": trace, "num_requests": 40, "arrival": "closed_loop",
                                          "concurrency": 8, "prompt_len": 64, "output_len": 16}))


def test_block_reuse_is_trtllms_default_on_a_trace(make_config):
    # TensorRT-LLM's KvCacheConfig.enable_block_reuse defaults to true: unset is on. MT-Bench's second
    # turns repeat their first turns, so reuse finds blocks and prefills less than with reuse off.
    default, on, off = (_reuse_run(make_config, "mtbench", c) for c in (None, True, False))
    assert default.summary == on.summary and default.summary["prefix_cache_hit_tokens"] > 0
    assert "prefix_cache_hit_tokens" not in off.summary
    assert default.iterations["prefill_tokens"].sum() + default.summary["prefix_cache_hit_tokens"] == \
        off.iterations["prefill_tokens"].sum()


def test_synthetic_traffic_leaves_reuse_off_and_that_changes_nothing(make_config):
    # Synthetic prompts start with fresh uniform tokens: the cache, forced on, finds no block, and the
    # run equals the default (off, no token ids drawn) in every table.
    default, on = _reuse_run(make_config, None, None), _reuse_run(make_config, None, True)
    assert on.summary.pop("prefix_cache_hit_tokens") == 0 and default.summary == on.summary
    for name in ("requests", "iterations", "emissions"):
        assert getattr(default, name).equals(getattr(on, name)), name
