import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile("ci", max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

CPU_CALIBRATION_BUDGET_S = 20


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
    validation tests (it takes about 20 s)."""
    pytest.importorskip("torch")
    import typer
    from typer.testing import CliRunner

    from specplan.cli import calibrate as calibrate_cli

    root = typer.Typer()
    root.callback()(lambda: None)  # a group, so "calibrate" is a subcommand as on the real CLI
    calibrate_cli.register(root)
    out = tmp_path_factory.mktemp("calibrate")
    result = CliRunner().invoke(root, ["calibrate", "--model", "tiny", "--device", "cpu", "--budget-s",
                                       str(CPU_CALIBRATION_BUDGET_S), "--out", str(out)])
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
