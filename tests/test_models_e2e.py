"""The commands operators run, on mixture-of-experts models priced by the roofline: recommend (every printed
figure is its export simulated), capacity (against every replica count simulated directly), config import
of serve lines naming the Hugging Face ids (mapped to the catalogue), and report on a small sweep (each row
the point simulated directly). Small workloads: each test runs in seconds."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from specplan.cli import app
from specplan.config import build_config
from specplan.engine_config.importer import import_engine_config
from specplan.reports.summary import write_report
from specplan.simulator.run import simulate
from specplan.sweeps.capacity import BASELINE, SLO, fleet_config
from specplan.sweeps.runners import LocalRunner
from specplan.sweeps.spec import parse_sweep
from specplan.sweeps.sweep import run_sweep
from test_recommend_truth import _check_every_figure, _recommend

QWEN3_MOE = {"model": "roofline", "gpu": "h200", "model_name": "Qwen/Qwen3-30B-A3B", "tp": 1}
DEEPSEEK = {"model": "roofline", "gpu": "h200", "model_name": "deepseek-ai/DeepSeek-V3", "tp": 8}


def _scenario(cost: dict, rate: float, requests: int, batch: int) -> dict:
    return {"seed": 0, "engine": {"engine": "trtllm", "max_batch_size": batch},
            "speculation": {"decoding_type": "NGram", "max_draft_len": 3},
            "acceptance": {"mode": "alpha", "alpha": 0.7},
            "workload": {"trace": None, "arrival": "poisson", "rate": rate, "num_requests": requests,
                         "prompt_len": 64, "output_len": 16},
            "cost": cost}


def _finite(summary: dict) -> bool:
    return all(math.isfinite(summary[k]) and summary[k] > 0 for k in ("throughput_tok_s", "goodput_tok_s")) and \
        all(math.isfinite(v) for k in ("ttft_s", "tpot_s") for v in summary[k].values())


def test_recommend_on_qwen3_moe_prints_what_its_exports_simulate_to(tmp_path, monkeypatch, capsys):
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(_scenario(QWEN3_MOE, 20.0, 12, 4)))
    out, printed, summary = _recommend(tmp_path, monkeypatch, capsys, scenario, "--slo-tpot-ms", "20",
                                       "--max-draft-len", "2", "--probe-requests", "1")
    assert "qwen3-30b-a3b" in printed or summary["exports"]
    _check_every_figure(monkeypatch, capsys, scenario, out, printed, summary, 20, None)
    for exp in summary["exports"]:
        for run in exp["results"] + exp["baseline"]:
            assert math.isfinite(run["goodput_tok_s"]) and math.isfinite(run["tpot_p99_s"])


def test_capacity_on_deepseek_v3_agrees_with_every_replica_count_simulated(tmp_path):
    base = _scenario(DEEPSEEK, 40.0, 40, 4)
    scen, cands, out = tmp_path / "scenario.yaml", tmp_path / "cands.yaml", tmp_path / "out"
    scen.write_text(yaml.safe_dump(base))
    cands.write_text(yaml.safe_dump({"grid": {"speculation.max_draft_len": [3]}}))
    res = CliRunner().invoke(app, ["capacity", str(scen), "--rate", "120", "--slo-ttft-ms", "200", "--slo-tpot-ms",
                                   "50", "--percentile", "90", "--candidates", str(cands), "--max-replicas", "6",
                                   "--workers", "2", "--out", str(out)])
    assert res.exit_code == 0, res.output
    table = pd.read_csv(out / "capacity.csv").set_index("config")
    config, slo = build_config(base), SLO(0.2, 0.05, 90)
    for label, spec in ((BASELINE, config.speculation.model_copy(update={"decoding_type": "none"})),
                        ("max_draft_len=3", config.speculation)):
        met = [slo.met_by(simulate(fleet_config(config, spec, 120.0, n)).summary, 40) for n in range(1, 7)]
        first = met.index(True) + 1
        assert met == [n >= first for n in range(1, 7)], label
        assert table.loc[label, "replicas"] == first and table.loc[label, "gpus"] == 8 * first
    assert table.loc[BASELINE, "replicas"] > 1  # the rate needs more than one 8-GPU replica


@pytest.mark.parametrize("hf_id, key", [("Qwen/Qwen3-30B-A3B", "qwen3-30b-a3b"),
                                        ("deepseek-ai/DeepSeek-V3", "deepseek-v3")])
def test_serve_lines_naming_moe_models_map_to_the_catalogue_and_simulate(tmp_path, hf_id, key):
    serve = tmp_path / "serve.sh"
    serve.write_text(f"vllm serve {hf_id} --max-num-seqs 4 -tp 8 "
                     "--speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 2, "
                     "\"prompt_lookup_max\": 4}'\n")
    imported = import_engine_config(serve)
    assert imported.sections["cost"] == {"model_name": key, "tp": 8}
    scen = tmp_path / "scenario.yaml"
    scen.write_text(yaml.safe_dump(_scenario({"model": "roofline", "gpu": "h200"}, 20.0, 8, 4)))
    res = CliRunner().invoke(app, ["simulate", str(scen), "--engine-config", str(serve), "--format", "json"])
    assert res.exit_code == 0, res.output
    import json

    got = json.loads(res.output[res.output.index("{"):])
    # The same scenario with the mapped sections written in: the same run, figure for figure.
    inline = _scenario({"model": "roofline", "gpu": "h200", "model_name": key, "tp": 8}, 20.0, 8, 4)
    inline["engine"] = {"engine": "vllm", "max_batch_size": 4}
    inline["speculation"] = imported.sections["speculation"]
    direct = simulate(build_config(inline)).summary
    assert _finite(got) and got["throughput_tok_s"] == direct["throughput_tok_s"]
    assert got["tpot_s"] == direct["tpot_s"]


def test_report_on_a_small_moe_sweep(tmp_path):
    base = _scenario(QWEN3_MOE, 20.0, 10, 4)
    spec = parse_sweep({"base": base, "grid": {"speculation.max_draft_len": [1, 3], "workload.rate": [5.0, 40.0]}},
                       "sweep")
    with LocalRunner(2) as runner:
        table = run_sweep(spec, tmp_path, runner)
    assert len(table) == 4 and table["throughput_tok_s"].map(math.isfinite).all()
    for _, row in table.iterrows():  # each row is its point simulated directly
        point = {**base, "speculation": {**base["speculation"], "max_draft_len": int(row["speculation.max_draft_len"])},
                 "workload": {**base["workload"], "rate": float(row["workload.rate"])}}
        assert simulate(build_config(point)).summary["throughput_tok_s"] == row["throughput_tok_s"]
    md = write_report(tmp_path)
    text = md.read_text()
    for name in ("speedup_vs_rate.png", "throughput_vs_tpot.png", "gamma.png"):
        assert (md.parent / name).stat().st_size > 1000 and f"({name})" in text
