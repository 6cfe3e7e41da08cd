"""The whole calibration path on the CPU: measure (tiny model) -> write -> fit -> load -> predict -> simulate,
through the ``specplan calibrate`` and ``specplan profile`` commands.

Real CPU timings vary with the machine's load, so these tests check shape and completion only; the
fit's accuracy is tested on synthetic measurements with known coefficients (test_calibration_synthetic).
"""

import json

import numpy as np
import pandas as pd
import pytest
import typer
import yaml
from typer.testing import CliRunner

from specplan.calibration.fit import build_profile, forward_model, lm_head_curve, predict_points
from specplan.calibration.grid import CPU_GRID, build_points
from specplan.cli import calibrate as calibrate_cli
from specplan.cli import profile as profile_cli
from specplan.config import CostConfig, SimConfig
from specplan.cost_models.base import StepBatch
from specplan.cost_models.measurements import COLUMNS, forward_points, read_measurements
from specplan.cost_models.profile import Provenance, read_profile
from specplan.cost_models.registry import make_cost_model

pytest.importorskip("torch")

from conftest import CPU_CALIBRATION_PASSES as PASSES  # noqa: E402


def app():
    root = typer.Typer()
    calibrate_cli.register(root)
    profile_cli.register(root)
    return root


@pytest.fixture
def run_dir(cpu_calibration):
    return cpu_calibration


def test_writes_long_csv_meta_and_profile(run_dir):
    df = read_measurements(run_dir / "measurements.csv")
    assert list(df.columns) == list(COLUMNS)
    assert set(df["kind"]) == {"forward", "lm_head", "ngram_host"}
    fwd = df[df["kind"] == "forward"]
    # A fixed count of passes: every grid point measured exactly PASSES times, whatever the machine's speed.
    grid = [p for p in build_points(CPU_GRID) if p.kind == "forward"]
    assert set(fwd["point"]) == {p.key for p in grid} and set(fwd["sweep"]) == {p.sweep for p in grid}
    assert (fwd.groupby("point")["pass"].nunique() == PASSES).all()
    assert fwd.loc[fwd["sweep"] == "tokens", "num_tokens"].nunique() >= 2
    assert set(fwd.loc[fwd["sweep"] == "draft_len", "query_len"]) <= set(range(2, 10))  # K 1..8
    meta = yaml.safe_load((run_dir / "meta.yaml").read_text())
    for key in ("device_name", "torch", "dtype", "attention_backend", "grid", "date", "points", "heldout"):
        assert meta[key] is not None, key
    assert meta["elapsed_s"] > 0 and meta["passes"] == PASSES and meta["budget_s"] is None
    profile = read_profile(run_dir / "profile.yaml")
    assert profile.name == "cpu/tiny" and profile.provenance.kind == "measured"
    assert profile.draft is not None and profile.draft.ngram_host.pool_entries[0] == 100


def test_heldout_check_is_recorded_and_a_split_fit_predicts(run_dir):
    profile = read_profile(run_dir / "profile.yaml")
    err = profile.provenance.heldout_median_abs_error
    assert np.isfinite(err) and err >= 0 and profile.provenance.heldout_points >= 8
    # An independent split: fit on two thirds of the points, predict the other third (finite, positive).
    df = read_measurements(run_dir / "measurements.csv")
    pts = forward_points(df)
    rng = np.random.default_rng(7)
    tokens = pts["sweep"] == "tokens"
    ends = tokens & pts["num_tokens"].isin([pts.loc[tokens, "num_tokens"].min(), pts.loc[tokens, "num_tokens"].max()])
    test = ~ends & (rng.random(len(pts)) < 1 / 3)
    fitted = build_profile(pts[~test], lm_head_curve(df, "cpu"), name="split",
                           provenance=Provenance(kind="measured", source="test split"),
                           model_shape=profile.model_shape, gpu=None, tp=1, dtype="fp32")
    predicted = predict_points(fitted, pts[test])
    assert test.sum() >= 8 and np.all(np.isfinite(predicted)) and np.all(predicted > 0)


def test_fitted_model_is_continuous_over_the_grid(run_dir):
    """Adding one generation row never jumps by more than the steepest measured slopes allow."""
    profile = read_profile(run_dir / "profile.yaml")
    model = forward_model(profile)

    def steepest(curve):
        return np.max(np.abs(np.diff(curve.seconds)) / np.diff(curve.tokens))

    att = profile.attention
    per_row = steepest(profile.token_time) + steepest(profile.lm_head_time) + 65 * (att.kv_s_per_token
                                                                                     + att.decode_work_s)
    top = profile.measured_range.tokens[1]
    times = np.array([model.step_time(StepBatch.decode(b, 1, 64)) for b in range(1, top + 1)])
    assert np.abs(np.diff(times)).max() <= per_row * (1 + 1e-9)


def test_linear_model_fits_the_same_measurements(run_dir):
    csv = run_dir / "measurements.csv"
    model = make_cost_model(CostConfig(model="linear", linear_fit_csv=str(csv)))
    pts = forward_points(read_measurements(csv))
    pred = np.array([model.step_time(StepBatch(np.full(b, q), np.full(b, c), np.full(b, bool(p))))
                     for b, q, c, p in pts[["batch", "query_len", "context", "is_prefill"]].itertuples(index=False)])
    assert len(pred) == len(pts) and np.all(np.isfinite(pred))


def test_profile_show_json_and_plot(run_dir, tmp_path):
    runner = CliRunner()
    with pytest.warns(UserWarning, match=r"outside the measured range \[1, \d+\]; extrapolating"):
        result = runner.invoke(app(), ["profile", "show", str(run_dir / "profile.yaml"), "--context", "64",
                                       "--format", "json"])
    assert result.exit_code == 0, result.output
    view = json.loads(result.stdout)
    assert list(view) == ["profile", "context", "B", "t_base_s", "gamma"]
    assert view["B"] == list(range(1, 257)) and list(view["gamma"]) == [str(k) for k in range(1, 9)]
    assert all(len(v) == 256 for v in view["gamma"].values()) and view["context"] == 64
    png = tmp_path / "gamma.png"
    result = runner.invoke(app(), ["profile", "plot", "h200/llama-3.1-8b", "--out", str(png)])
    assert result.exit_code == 0, result.output
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_simulation_runs_on_the_calibrated_profile(run_dir):
    from specplan.simulator.run import simulate

    cfg = SimConfig.model_validate({
        "seed": 1,
        "engine": {"max_batch_size": 8, "kv_num_blocks": 512},
        "speculation": {"decoding_type": "NGram", "max_draft_len": 3},
        "acceptance": {"mode": "alpha", "alpha": 0.6},
        "workload": {"trace": None, "num_requests": 6, "prompt_len": 48, "output_len": 16, "rate": 50.0},
        "cost": {"model": "profile", "profile": str(run_dir / "profile.yaml")},
    })
    result = simulate(cfg)
    assert result.summary["completed_requests"] == 6
    assert "profile cpu/tiny" in result.description["cost"]


def test_calibrate_cuda_without_a_gpu_is_a_clear_error(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    result = CliRunner().invoke(app(), ["calibrate", "--model", "tiny", "--out", str(tmp_path)])
    assert result.exit_code != 0
    assert "--device cuda: no CUDA device" in str(result.exception)


def test_measurement_errors_name_the_file_and_column(tmp_path):
    path = tmp_path / "m.csv"
    pd.DataFrame({"kind": ["forward"]}).to_csv(path, index=False)
    with pytest.raises(Exception, match=r"m.csv: column sweep: missing"):
        read_measurements(path)
