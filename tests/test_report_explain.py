"""Why a configuration loses: the decode-step split into cost terms, checked by hand on the
linear_gamma model, and the report naming every losing point."""

import pandas as pd
import pytest

from specplan.cost_models.simple import LinearGammaCostModel
from specplan.reports.explain import explain_row, largest_overhead
from specplan.simulator.cost_split import cost_terms


def _iterations(rows: list[dict]) -> pd.DataFrame:
    base = {"spec_on": True, "prefill_tokens": 0, "kv_blocks_used": 40, "k": 8}
    return pd.DataFrame([{**base, **r} for r in rows])


def test_terms_by_hand_on_linear_gamma():
    # T(B rows, n positions) = 0.01 (1 + 0.1 (n - B) / B) + 0.002 drafting on speculating steps.
    # B = 4, runtime K = 2 padded to a static width of 3: v = 16 verified positions, d = 8 drafted, a = 3 accepted.
    #   T(4) = 0.01, T(7) = 0.01075, T(12) = 0.012, T(16) = 0.013, step = 0.015
    model = LinearGammaCostModel(0.01, 0.1, draft_cost_s=0.002)
    its = _iterations([
        {"gen_rows": 4, "drafted": 8, "accepted": 3, "verified_tokens": 16, "step_s": 0.015, "k": 2},
        {"gen_rows": 4, "drafted": 8, "accepted": 3, "verified_tokens": 16, "step_s": 0.015, "prefill_tokens": 5},
        {"gen_rows": 4, "drafted": 0, "accepted": 0, "verified_tokens": 4, "step_s": 0.01, "spec_on": False},
    ])
    terms = cost_terms(its, model, kv_block_size=32)
    assert (terms["steps"], terms["mean_rows"], terms["mean_k"]) == (1, 4.0, 2.0)  # prefill and plain steps left out
    want = {"plain_s": 0.01, "accepted_s": 0.00075, "rejected_s": 0.00125, "padding_s": 0.001, "drafting_s": 0.002}
    for k, v in want.items():
        assert terms[k] == pytest.approx(v, abs=1e-12), k
    assert largest_overhead(terms) == ("drafting", pytest.approx(0.002 / 0.015))


def test_padding_is_named_when_it_dominates():
    # K = 8 static over 2 rows that drafted 1 token each, none accepted: v = 18, d = 2
    #   T(2) = 0.01, T(4) = 0.011, T(18) = 0.018; padding 0.007 of 0.018
    model = LinearGammaCostModel(0.01, 0.1)
    terms = cost_terms(_iterations([{"gen_rows": 2, "drafted": 2, "accepted": 0, "verified_tokens": 18,
                                     "step_s": 0.018}]), model, 32)
    assert terms["padding_s"] == pytest.approx(0.007) and terms["rejected_s"] == pytest.approx(0.001)
    assert (terms["mean_rows"], terms["mean_k"]) == (2.0, 8.0)
    text = explain_row(terms, model.gamma(2, 8))
    assert text.startswith("largest cost: padding") and "39% of the decode-step time" in text
    assert "gamma(B=2, K=8) = 0.100" in text


def test_report_lists_exactly_the_losing_points(tmp_path):
    from specplan.reports.summary import write_report
    from specplan.sweeps.runners import LocalRunner
    from specplan.sweeps.spec import parse_sweep
    from specplan.sweeps.sweep import run_sweep

    spec = parse_sweep({
        "base": {"seed": 0, "engine": {"max_batch_size": 8, "kv_num_blocks": 100000},
                 "speculation": {"decoding_type": "NGram", "max_draft_len": 2},
                 "acceptance": {"mode": "alpha", "alpha": 0.3},
                 "workload": {"trace": None, "arrival": "closed_loop", "concurrency": 8, "num_requests": 16,
                              "prompt_len": 8, "output_len": 16},
                 "cost": {"model": "linear_gamma", "t_base_s": 0.01, "gamma": 0.2, "draft_cost_s": 0.001}},
        "grid": {"speculation.max_draft_len": [1, 6]},
    }, "s")
    with LocalRunner(1) as runner:
        table = run_sweep(spec, tmp_path, runner)
    section = write_report(tmp_path).read_text().split("### Why configurations lose")[1].split("## ")[0]
    listed = [line for line in section.splitlines() if line.startswith("- #")]
    losers = table.index[table["speedup"] < 1].tolist()
    assert losers and len(listed) == len(losers)
    for i, line in zip(losers, listed):
        assert line.startswith(f"- #{i + 1} max_draft_len={table.loc[i, 'speculation.max_draft_len']}: ")
        assert "largest cost: " in line
