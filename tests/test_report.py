"""Report: Pareto fronts, acceptance-length distributions, and the figures and summary of a real sweep."""

import numpy as np
import pandas as pd
import pytest

from specplan.reports.analysis import acceptance_length_distribution, md_table, pareto_front, seed_means
from specplan.reports.summary import write_report
from specplan.sweeps.runners import LocalRunner
from specplan.sweeps.spec import parse_sweep
from specplan.sweeps.sweep import run_sweep


def test_pareto_front_of_a_known_set():
    # (p99 TPOT, throughput): lower TPOT and higher throughput are better
    pts = [(1.0, 10.0), (2.0, 30.0), (2.0, 20.0), (3.0, 25.0), (4.0, 40.0), (5.0, 40.0), (np.nan, 99.0), (0.5, 5.0)]
    cost, value = np.array(pts).T
    on = pareto_front(cost, value)
    assert [pts[i] for i in np.flatnonzero(on)] == [(1.0, 10.0), (2.0, 30.0), (4.0, 40.0), (0.5, 5.0)]


def test_pareto_front_matches_brute_force():
    rng = np.random.default_rng(0)
    cost, value = rng.integers(0, 6, 40).astype(float), rng.integers(0, 6, 40).astype(float)
    on = pareto_front(cost, value)
    for i in range(40):
        dominated = any(cost[j] <= cost[i] and value[j] >= value[i] and (cost[j], value[j]) != (cost[i], value[i])
                        for j in range(40))
        duplicate_before = any((cost[j], value[j]) == (cost[i], value[i]) for j in range(i))
        assert on[i] == (not dominated and not duplicate_before)


def test_acceptance_length_distribution_sums_histograms():
    # drafts accepting 0, 1, 2 tokens -> acceptance lengths 1, 2, 3
    p = acceptance_length_distribution([[2, 1], [1, 1, 3], []])
    np.testing.assert_allclose(p, [3 / 8, 2 / 8, 3 / 8])
    assert acceptance_length_distribution([[], [0, 0]]).size == 0


def test_seed_means_and_md_table():
    df = pd.DataFrame({"seed": [0, 1, 0, 1], "speculation.max_draft_len": [2, 2, 4, 4], "x": [1.0, 3.0, 5.0, np.nan]})
    means = seed_means(df, ["speculation.max_draft_len"])
    assert means["x"].tolist() == [2.0, 5.0]
    assert md_table(pd.DataFrame({"a": [1.23456, None], "b": ["x|y", "z"]})).splitlines() == [
        "| a | b |", "|---|---|", "| 1.235 | x\\|y |", "| - | z |"]


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    spec = parse_sweep({
        "base": {
            "seed": 0,
            "engine": {"max_batch_size": 8, "kv_num_blocks": 100000},
            "speculation": {"decoding_type": "NGram", "max_draft_len": 2,
                            "acceptance_rate_window_size": 16, "acceptance_rate_threshold": 0.3},
            "acceptance": {"mode": "alpha", "alpha": 0.7},
            "workload": {"trace": None, "arrival": "poisson", "rate": 20.0, "num_requests": 30, "prompt_len": 8,
                         "output_len": 32},
            "cost": {"model": "linear_gamma", "t_base_s": 0.01, "gamma": {1: 0.05, 8: 0.3}},
        },
        "grid": {"speculation.max_draft_len": [1, 3], "workload.rate": [10.0, 80.0], "acceptance.alpha": [0.05, 0.9]},
    }, "sweep")
    with LocalRunner(2) as runner:
        table = run_sweep(spec, out, runner)
    return out, table


def test_report_writes_every_figure_and_the_summary(swept):
    out, table = swept
    md_path = write_report(out)
    report = md_path.parent
    for name in ("speedup_vs_rate.png", "speedup_vs_batch.png", "throughput_vs_tpot.png", "acceptance_length.png",
                 "gamma.png", "gate.png"):
        assert (report / name).stat().st_size > 1000, name
        assert f"({name})" in md_path.read_text()
    text = md_path.read_text()
    # the gate (threshold 0.3 over 16 iterations) trips in every run at acceptance 0.05, not in all runs
    tripped = table["gate_tripped_iteration"].notna()
    assert tripped[table["acceptance.alpha"] == 0.05].all() and not tripped.all()
    assert f"The gate tripped in {int(tripped.sum())} of {len(table)} gated runs" in text


def test_report_pareto_table_lists_exactly_the_undominated_points(swept):
    out, table = swept
    text = write_report(out, out / "again").read_text()
    section = text.split("Pareto front")[1].split("## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| #")]
    listed = {int(r.split("|")[1]) for r in rows}
    pts = table[["tpot_s.p99", "throughput_tok_s"]].to_numpy()  # one seed: points are rows
    want = {i + 1 for i, (c, v) in enumerate(pts)
            if not any(c2 <= c and v2 >= v and (c2, v2) != (c, v) for c2, v2 in pts)}
    assert listed == want and len(rows) == len(want) >= 2
