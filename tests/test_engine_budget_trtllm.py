"""What TensorRT-LLM charges against ``max_num_tokens`` while speculation is off, the KV it grows,
and the SA gate's denominator: iteration tables worked by hand from the engine's code
(docs/semantics.md, "Token budget and KV while speculation is off").

Every scenario runs three 1-token prompts, 20 output tokens each, with a fixed 10 ms step and an
oracle that drafts K and accepts a fixed count, so each step's rows follow from the rules alone.
"""

import numpy as np
import pytest

from specplan.acceptance.oracles import AcceptanceOracle
from specplan.cost_models.base import CostModel
from specplan.simulator.engine import Executor
from specplan.simulator.inputs import EngineSettings, Workload
from specplan.simulator.paths import TRT_DRAFTER, TRT_ONE_MODEL


class _FixedCost(CostModel):
    def step_time(self, batch):
        return 0.01


class _Accept(AcceptanceOracle):
    """Drafts K for every row and accepts ``ACCEPT`` of them."""

    ACCEPT = 0

    def draft(self, rids, committed, k):
        return np.full(len(rids), k, dtype=np.int64), np.full(len(rids), min(self.ACCEPT, k), dtype=np.int64)


class _AcceptOne(_Accept):
    ACCEPT = 1


COLUMNS = ("batch_rows", "gen_rows", "prefill_tokens", "k", "spec_on", "drafted", "verified_tokens",
           "charged_tokens", "kv_reserved_tokens")


def _run(path, *, max_num_tokens=12, oracle=_Accept, olen=20, **kw):
    drafter = "NGram" if path == TRT_DRAFTER else "SA"
    width = "static" if path == TRT_DRAFTER else "runtime"
    settings = EngineSettings(8, max_num_tokens, 8, 16, 1000, "GUARANTEED_NO_EVICT", False, False, True, 4,
                              verify_width=width, drafter=drafter, path=path,
                              schedule_lookup="lower_bound" if path == TRT_DRAFTER else "upper_bound",
                              k_from="active" if path == TRT_DRAFTER else "scheduled", **kw)
    plen, out = np.ones(3, dtype=np.int64), np.full(3, olen, dtype=np.int64)
    wl = Workload(plen, out, None, np.full(3, -1), concurrency=3, think_time=np.zeros(3))
    ex = Executor(settings, wl, oracle(plen, out), _FixedCost())
    ex.run()
    it = ex.trace.iterations
    return ex, np.array([[it.column(c)[i] for c in COLUMNS] for i in range(len(it))], dtype=np.int64)


def _rows(*row, times=1):
    return [list(row)] * times


def test_max_concurrency_holds_speculation_off_but_the_budget_still_pays_1_plus_k():
    # NGram, K 4, max_concurrency 1, max_num_tokens 12. Three active requests: token_cap 12 // 5 = 2,
    # min(3, 8, 2) = 2 > 1, so should_use_spec_decode is False. The C++ draft_tokens stamp is still
    # [0] * 4: each generation row is charged 5 and two fit (10 <= 12 < 15); each computes 1 token and
    # the V1 KV manager grows it by 1 + K_static = 5. Request 2 waits until 0 and 1 complete (iteration
    # 20), then runs alone: min(1, 8, 2) = 1 <= 1, speculation on, drafted and padded to 1 + 4 although
    # stamped py_disable_speculative_decoding in iteration 1.
    ex, t = _run(TRT_DRAFTER, max_concurrency=1)
    want = (_rows(3, 0, 3, 0, 0, 0, 0, 3, 3)  # the three 1-token prefills
            + _rows(2, 2, 0, 0, 0, 0, 2, 10, 10, times=19)
            + _rows(1, 1, 0, 4, 1, 4, 5, 5, 5, times=19))
    assert t.tolist() == want


def test_kv_cache_v2_scheduler_charges_only_the_drafts_a_request_has():
    # The same run under KVCacheV2Scheduler: 1 + len(py_draft_tokens) = 1 while speculation is off,
    # so all three decode together; once request 2 is alone and speculating it is stamped (no
    # placeholders: 1 token) while the drafter still drafts it, padded to 1 + 4 (its KV too).
    ex, t = _run(TRT_DRAFTER, max_concurrency=1, kv_cache_scheduler="v2")
    want = _rows(3, 0, 3, 0, 0, 0, 0, 3, 3) + _rows(3, 3, 0, 0, 0, 0, 3, 3, 3, times=19)
    assert t.tolist() == want


def test_ngram_gate_latched_keeps_the_placeholder_charge():
    # Gate window 2, threshold 0.5; nothing is accepted. Iteration 1 prefills; iterations 2-3
    # speculate with rows 0 and 1 (5 + 5 <= 12), two samples of 0: the gate latches at iteration 3.
    # K stays 4 (no schedule): every later step still charges 5 a row, so request 2 still waits,
    # each row computes 1 token and grows its KV by 5.
    ex, t = _run(TRT_DRAFTER, gate_window=2, gate_threshold=0.5)
    assert ex.trace.gate_tripped_iteration == 3
    want = (_rows(3, 0, 3, 4, 1, 0, 0, 3, 3)
            + _rows(2, 2, 0, 4, 1, 8, 10, 10, 10, times=2)
            + _rows(2, 2, 0, 0, 0, 0, 2, 10, 10, times=17)
            + _rows(1, 1, 0, 0, 0, 0, 1, 5, 5, times=19))
    assert t.tolist() == want


def test_sa_gate_latched_keeps_the_k_static_charge():
    # SA (one model), K_static 4, the same gate: iterations 2-3 verify 1 + 4 on rows 0 and 1 and
    # record 0 / (4 x 2): latched at 3. After it every generation row is still charged 1 + K_static.
    ex, t = _run(TRT_ONE_MODEL, gate_window=2, gate_threshold=0.5)
    assert ex.trace.gate_tripped_iteration == 3
    want = (_rows(3, 0, 3, 4, 1, 0, 0, 3, 3)
            + _rows(2, 2, 0, 4, 1, 8, 10, 10, 10, times=2)
            + _rows(2, 2, 0, 0, 0, 0, 2, 10, 10, times=17)
            + _rows(1, 1, 0, 0, 0, 0, 1, 5, 5, times=19))
    assert t.tolist() == want


@pytest.mark.parametrize("denominator,trip", [("static", 4), ("runtime", 13)])
def test_sa_gate_divides_by_the_k_static_stamp_not_the_schedule_k(denominator, trip):
    # SA, K_static 4, draft_len_schedule {1: 4, 8: 2} (keys are upper bounds): 2 scheduled rows -> K 2,
    # each verifies 1 + 2 and accepts 1 (commits 2). The stamp is [0] * 4, so the sample is
    # 2 / (4 x 2) = 0.25 < 0.4: window 3 latches at iteration 4 (samples at 2, 3, 4; the prefill step
    # samples nothing). Dividing by the runtime K gives 2 / (2 x 2) = 0.5 while rows 0 and 1 decode
    # (iterations 2-11: 1 + 9 x 2 + 1 = 20 tokens), then 1 / 4 with request 2 alone (K 4):
    # [0.5, 0.25, 0.25] first averages below 0.4 at iteration 13.
    ex, t = _run(TRT_ONE_MODEL, oracle=_AcceptOne, draft_len_schedule={1: 4, 8: 2}, gate_window=3,
                 gate_threshold=0.4, gate_denominator=denominator)
    assert ex.trace.gate_tripped_iteration == trip
    assert t[1].tolist() == [2, 2, 0, 2, 1, 4, 6, 10, 10]


def test_the_one_model_path_defaults_to_the_static_stamp():
    from specplan.config import build_config
    from specplan.simulator.run import resolve_engine

    cfg = build_config({"engine": {"engine": "trtllm"},
                        "speculation": {"decoding_type": "SA", "max_draft_len": 4, "draft_len_schedule": {1: 4, 8: 2}}})
    assert resolve_engine(cfg, 1000).gate_denominator == "static"
    cfg = build_config({"engine": {"engine": "trtllm"}, "speculation": {"decoding_type": "NGram", "max_draft_len": 4}})
    assert resolve_engine(cfg, 1000).gate_denominator == "drafted"


def test_the_summary_counts_the_budget_speculation_costs_while_off():
    # The max_concurrency run above: iterations 2-20 charge 10 (two rows of 1 + 4) and compute 2, with
    # request 2 active and left out: 8 x 19 = 152 tokens of budget paid for nothing, all while
    # speculation was off and a request waited. Iterations 21-39 speculate and compute what they pay.
    # Under KVCacheV2Scheduler nothing is over-charged.
    from specplan.simulator.iteration_sums import overcharge

    ex, _ = _run(TRT_DRAFTER, max_concurrency=1)
    assert overcharge(ex.trace.iterations) == {"charged_tokens": 3 + 19 * 10 + 19 * 5, "overcharged_tokens": 152,
                                               "overcharged_tokens_spec_off": 152, "overcharged_tokens_queued": 152}
    ex, _ = _run(TRT_DRAFTER, max_concurrency=1, kv_cache_scheduler="v2")
    assert overcharge(ex.trace.iterations)["overcharged_tokens"] == 0
