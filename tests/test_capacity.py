"""Capacity search (``specplan.sweeps.capacity``, ``specplan capacity``)."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from specplan.cli import app
from specplan.config import build_config
from specplan.errors import ConfigError
from specplan.simulator.run import simulate
from specplan.sweeps.capacity import BASELINE, SLO, Search, fleet_config, search_capacity
from specplan.sweeps.runners import LocalRunner

SCENARIO = {
    "seed": 0, "engine": {"max_batch_size": 2, "kv_num_blocks": 40000},
    "speculation": {"decoding_type": "NGram", "max_draft_len": 3},
    "acceptance": {"mode": "alpha", "alpha": 0.7},
    "workload": {"trace": None, "arrival": "poisson", "rate": 40.0, "num_requests": 150, "prompt_len": 128,
                 "output_len": 16},
    "cost": {"model": "linear", "linear_coefficients": {"c0_s": 0.008, "c_tok_s": 2e-5, "c_kv_s": 1e-7,
                                                        "c_seq_s": 1e-4}},
}
SLO_90 = SLO(ttft_s=0.05, tpot_s=0.01, percentile=90)
RATE = 100.0


def _drive(search: Search, meets) -> Search:
    while (n := search.next_point()) is not None:
        search.record(n, meets(n))
    return search


@pytest.mark.parametrize("threshold", [1, 2, 7, 9, 15, 16, None])
def test_bisection_finds_the_threshold_of_any_monotone_predicate(threshold):
    s = _drive(Search(1.0, "x", 16), lambda n: threshold is not None and n >= threshold)
    assert s.answer == threshold and s.monotone
    assert len(s.met) <= 7  # max, four halvings, one check above the answer


def test_a_non_monotone_predicate_is_flagged():
    # Meets at 4, 8 and 16 only: bisection (16+, 8+, 4+, 2-, 3-) lands on 4; the check at 5 fails.
    s = _drive(Search(1.0, "x", 16), lambda n: n in (4, 8, 16))
    assert s.answer == 4 and sorted(s.met) == [2, 3, 4, 5, 8, 16]
    assert not s.monotone


def test_slo_reads_the_percentile_and_requires_every_request():
    summary = {"completed_requests": 10, "ttft_s": {"p90": 0.04, "p99": 0.2}, "tpot_s": {"p90": 0.009, "p99": 0.02}}
    assert SLO_90.met_by(summary, 10)
    assert not SLO_90.met_by(summary, 11)
    assert not SLO(0.05, 0.01, 99).met_by(summary, 10)
    with pytest.raises(ConfigError, match="--percentile"):
        SLO(0.05, 0.01, 95)


def test_search_agrees_with_brute_force_over_1_to_16(tmp_path):
    """Spec off and on: every N in 1..16 simulated directly; the answer is the fewest N that meets, and
    meeting is monotone on this case (checked here independently of the search's own check)."""
    base = build_config(SCENARIO)
    cand = {"NGram K=3": base.speculation}
    with LocalRunner(2) as runner:
        table = search_capacity(base, [RATE], SLO_90, cand, runner, tmp_path, max_replicas=16)
    speculations = {BASELINE: base.speculation.model_copy(update={"decoding_type": "none"}), **cand}
    brute = {}
    for label, sp in speculations.items():
        met = [SLO_90.met_by(simulate(fleet_config(base, sp, RATE, n)).summary, 150) for n in range(1, 17)]
        first = met.index(True) + 1
        assert met == [n >= first for n in range(1, 17)], label  # monotone
        brute[label] = first
    got = dict(zip(table.config, table.replicas))
    assert got == brute
    assert brute[BASELINE] > brute["NGram K=3"]  # speculation saves replicas on this case
    row = table[table.config == "NGram K=3"].iloc[0]
    assert row.replicas_saved == brute[BASELINE] - brute["NGram K=3"] and row.monotone
    assert row.gpu_hours_saved_per_day == 24 * row.replicas_saved


def test_cli_writes_table_and_figure_and_rejects_bad_input(tmp_path):
    scen = tmp_path / "scenario.yaml"
    scen.write_text(yaml.safe_dump(SCENARIO))
    cands = tmp_path / "cands.yaml"
    cands.write_text(yaml.safe_dump({"grid": {"speculation.max_draft_len": [3]}}))
    out = tmp_path / "out"
    args = ["capacity", str(scen), "--rate", "50", "--slo-ttft-ms", "50", "--slo-tpot-ms", "10", "--percentile", "90",
            "--candidates", str(cands), "--max-replicas", "8", "--workers", "2", "--out", str(out)]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert (out / "gpus_needed.png").stat().st_size > 0 and (out / "gpus_needed.csv").is_file()
    written = pd.read_csv(out / "capacity.csv")
    # The whole table: the figure's data beside it must not overwrite it.
    assert list(written.config) == [BASELINE, "max_draft_len=3"]
    assert {"replicas_saved", "gpu_hours_saved_per_day", "monotone", "evaluated"} <= set(written.columns)
    saved = written.set_index("config").replicas
    assert written.replicas_saved.iloc[1] == saved[BASELINE] - saved["max_draft_len=3"]
    cands.write_text(yaml.safe_dump({"grid": {"workload.rate": [1.0]}}))
    with pytest.raises(ConfigError, match="speculation"):
        CliRunner().invoke(app, args, catch_exceptions=False)
    cands.write_text(yaml.safe_dump({"grid": {"speculation.max_draft_len": [3]}}))
    closed = tmp_path / "closed.yaml"
    closed.write_text(yaml.safe_dump({**SCENARIO, "workload": {**SCENARIO["workload"], "arrival": "closed_loop"}}))
    with pytest.raises(ConfigError, match="workload.arrival"):
        CliRunner().invoke(app, [*args[:1], str(closed), *args[2:]], catch_exceptions=False)
