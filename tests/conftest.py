import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# Passes, not a time budget: what the CPU calibration measures must not depend on the machine's speed.
CPU_CALIBRATION_PASSES = 2


@pytest.fixture
def make_config():
    """Build a validated SimConfig from nested overrides on a small synthetic scenario."""
    from specplan.config import build_config

    def _make(**sections):
        base = {
            "seed": 1,
            "engine": {"max_batch_size": 8, "max_num_tokens": 8192, "kv_num_blocks": 100000},
            "speculation": {"decoding_type": "NGram", "max_draft_len": 4},
            "acceptance": {"mode": "alpha", "alpha": 0.6},
            "workload": {"trace": None, "arrival": "closed_loop", "concurrency": 1, "num_requests": 4,
                         "prompt_len": 1, "output_len": 500},
            "cost": {"model": "linear_gamma", "t_base_s": 0.01, "gamma": 0.0},
        }
        for name, values in sections.items():
            if isinstance(values, dict) and isinstance(base.get(name), dict):
                base[name] = {**base[name], **values}
            else:
                base[name] = values
        return build_config(base)

    return _make


@pytest.fixture(scope="session")
def cpu_calibration(tmp_path_factory):
    """One `specplan calibrate --model tiny --device cpu` run, shared by the calibration and
    validation tests (a fixed count of passes over the CPU grid)."""
    pytest.importorskip("torch")
    import typer
    from typer.testing import CliRunner

    from specplan.cli import calibrate as calibrate_cli

    root = typer.Typer()
    root.callback()(lambda: None)  # a group, so "calibrate" is a subcommand as on the real CLI
    calibrate_cli.register(root)
    out = tmp_path_factory.mktemp("calibrate")
    result = CliRunner().invoke(root, ["calibrate", "--model", "tiny", "--device", "cpu", "--passes",
                                       str(CPU_CALIBRATION_PASSES), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture
def count_calls(monkeypatch):
    """``count_calls(owner, name)`` counts the calls of ``owner.name`` (which still runs) in the
    list it returns."""

    def wrap(owner, name):
        calls = []
        real = getattr(owner, name)

        def counted(*args, **kwargs):
            calls.append(1)
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, counted)
        return calls

    return wrap


@pytest.fixture(scope="session")
def vllm_check(tmp_path_factory):
    """``specplan validate --engine vllm`` runs of the CPU tier by name (the 24 check prompts, 96 new
    tokens, plus the given options), each run once per session and shared by the tests that read it;
    ``vllm_check.others[name]``: other processes' share of the CPU during that run."""
    import sys
    from pathlib import Path

    from machine_load import run_alone

    runs = {}

    def run(name: str, *args: str):
        if name not in runs:
            out = tmp_path_factory.mktemp("vllm") / name
            cmd = [sys.executable, "-m", "specplan", "validate", "--engine", "vllm", "--num-prompts", "24",
                   "--max-tokens", "96", "--out", str(out), *args]
            proc, run.others[name] = run_alone(cmd, cwd=Path(__file__).parents[1],
                                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
            assert proc.returncode == 0, proc.stderr[-3000:]
            runs[name] = out
        return runs[name]

    run.others = {}  # by run: the share of the CPU other processes took while it ran (``machine_load``)
    return run
