"""``recommend`` tells the truth about what it exports: every figure it prints for a written file is
that file simulated through ``simulate --engine-config`` (gate, schedule and engine path included),
next to the same engine without speculation; when no speculation wins it says so, exits 0 and writes
the engine's plain config; an export to an engine without the drafter names the substitute."""

import json
from pathlib import Path

import pytest
import yaml

from specplan.config import read_yaml
from cli_helpers import run_main

ROOT = Path(__file__).resolve().parents[1]
KNOWN = ROOT / "examples" / "recommend_known_case.yaml"
DEFAULT = ROOT / "specplan" / "data" / "default.yaml"




def _scenario(tmp_path, source: Path, **sections) -> Path:
    data = read_yaml(source)
    for name, values in sections.items():
        data[name] = {**data.get(name, {}), **values}
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _recommend(tmp_path, monkeypatch, capsys, scenario: Path, *args):
    out = tmp_path / "rec"
    code, printed, err = run_main(monkeypatch, capsys, "recommend", scenario, "--out", out, "--workers", "2",
                               "--no-progress", *args)
    assert code == 0, err
    return out, printed, json.loads((out / "recommendation.json").read_text())


def _check_every_figure(monkeypatch, capsys, scenario: Path, out: Path, printed: str, summary: dict,
                        slo_tpot_ms: float, rates) -> None:
    """Each written file, simulated by ``simulate SCENARIO --engine-config FILE --baseline`` at each
    confirmation traffic, gives exactly the figures recommend printed and stored for it."""
    checked = 0
    for exp in summary["exports"]:
        assert exp["error"] is None, exp
        spec_good = base_good = 0.0
        for j, label in enumerate(exp["scenarios"]):
            traffic = ["--set", "workload.arrival=poisson", "--set", f"workload.rate={rates[j]}"] if rates else []
            code, text, err = run_main(monkeypatch, capsys, "simulate", scenario, "--engine-config", out / exp["file"],
                                    *traffic, "--set", f"slo_tpot_s={slo_tpot_ms / 1e3}", "--baseline",
                                    "--format", "json")
            assert code == 0, err
            sim = json.loads(text)
            for mine, theirs in ((exp["results"][j], sim), (exp["baseline"][j], sim["baseline"])):
                assert mine["goodput_tok_s"] == theirs["goodput_tok_s"]
                assert mine["throughput_tok_s"] == theirs["throughput_tok_s"]
                assert mine["tpot_p99_s"] == theirs["tpot_s"]["p99"]
                assert mine["ttft_p99_s"] == theirs["ttft_s"]["p99"]
                assert mine["gate_tripped_iteration"] == theirs["gate_tripped_iteration"]
            assert exp["k_bands"] == sim["k_bands"]
            for prefix, run in ((f"  {label}: ", sim), (f"  {label} without speculation: ", sim["baseline"])):
                line = (f"{prefix}goodput {run['goodput_tok_s']:.1f} tok/s, throughput {run['throughput_tok_s']:.1f} "
                        f"tok/s, p99 TPOT {run['tpot_s']['p99'] * 1e3:.2f} ms")
                assert line in printed, line
            spec_good += sim["goodput_tok_s"]
            base_good += sim["baseline"]["goodput_tok_s"]
            checked += 1
        gain = spec_good / base_good - 1.0
        assert f"goodput gain over no speculation: {gain * 100:+.1f}%" in printed
        assert exp["gain_vs_no_speculation"] == pytest.approx(gain, rel=1e-12)
    assert checked


def test_known_case_every_printed_figure_is_the_exports(tmp_path, monkeypatch, capsys):
    scenario = _scenario(tmp_path, KNOWN)
    out, printed, summary = _recommend(tmp_path, monkeypatch, capsys, scenario, "--slo-tpot-ms", "50",
                                       "--rates", "20,400", "--max-draft-len", "2", "--probe-requests", "1")
    assert [e["file"] for e in summary["exports"]] == ["trtllm_speculative_config.yaml", "vllm_speculative_config.json"]
    # vLLM has no NGram pool: the JSON says which drafter it substitutes, and is simulated as vLLM's ngram
    assert "vLLM has no NGram drafter: exported as method ngram" in printed
    _check_every_figure(monkeypatch, capsys, scenario, out, printed, summary, 50, [20, 400])


def test_bundled_default_every_printed_figure_is_the_exports(tmp_path, monkeypatch, capsys):
    # the bundled scenario (SA on TensorRT-LLM, exact replay of Spec-Bench), made small
    scenario = _scenario(tmp_path, DEFAULT, engine={"max_batch_size": 4},
                         workload={"concurrency": 4, "num_requests": 12})
    out, printed, summary = _recommend(tmp_path, monkeypatch, capsys, scenario, "--slo-tpot-ms", "10",
                                       "--max-draft-len", "2", "--probe-requests", "1", "--gate-window", "16")
    assert "vLLM has no SA drafter: exported as method ngram" in printed
    _check_every_figure(monkeypatch, capsys, scenario, out, printed, summary, 10, None)
    # The break-even gate (window 16) trips on this workload's own acceptance while speculation still pays:
    # it is dropped, said so with where it tripped, and the file simulated has no gate to trip.
    assert "trips on this workload (at 4 clients, iteration " in summary["gate_note"]
    assert summary["gate_note"].endswith("so no gate is exported")
    trt = yaml.safe_load((out / "trtllm_speculative_config.yaml").read_text())["speculative_config"]
    assert "acceptance_rate_window_size" not in trt
    assert all(r["gate_tripped_iteration"] is None for r in summary["exports"][0]["results"])


def test_no_speculation_exits_0_with_the_engines_plain_config(tmp_path, monkeypatch, capsys):
    # the case: vLLM's n-gram drafter on the known case loses at 400 req/s, so no speculation wins
    scenario = _scenario(tmp_path, KNOWN, engine={"engine": "vllm"}, speculation={"decoding_type": "vllm_ngram"})
    out, printed, summary = _recommend(tmp_path, monkeypatch, capsys, scenario, "--slo-tpot-ms", "50",
                                       "--rates", "20,400")
    assert summary["recommended"] is None
    assert "Recommended: no speculation" in printed
    assert [e["file"] for e in summary["exports"]] == ["vllm_serve.sh"]
    assert not (out / "vllm_speculative_config.json").exists() and not (out / "trtllm_speculative_config.yaml").exists()
    command = [line for line in (out / "vllm_serve.sh").read_text().splitlines() if not line.startswith("#")]
    assert command == ["vllm serve --max-num-seqs 16 --max-num-batched-tokens 8192"]
    exp = summary["exports"][0]
    assert exp["results"] == exp["baseline"]  # the plain config is the baseline, figure for figure
    _check_every_figure(monkeypatch, capsys, scenario, out, printed, summary, 50, [20, 400])
