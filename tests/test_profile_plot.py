"""`profile plot` of a measured profile marks where the calibration grid ends."""

import subprocess
import sys

import yaml

from specplan.cost_models.gamma import measured_mask
from specplan.cost_models.profile import MeasuredRange

PROFILE = {
    "format": "specplan-profile/1",
    "name": "test/small-grid",
    "provenance": {"kind": "measured", "source": "hand-written"},
    "gpu": "h200",
    "tp": 1,
    "model_shape": {"name": "hand", "num_layers": 2, "hidden": 64, "vocab": 100},
    "token_time": {"tokens": [1, 16, 64], "seconds": [1e-3, 1.5e-3, 3e-3]},
    "lm_head_time": {"tokens": [1, 64], "seconds": [1e-4, 4e-4]},
    "attention": {"kv_s_per_token": 1e-7, "decode_work_s": 1e-9, "prefill_work_s": 2e-9},
    "measured_range": {"tokens": [1, 64], "logit_tokens": [1, 64], "max_context": 64, "max_batch": 32},
}


def test_measured_mask_by_hand():
    r = MeasuredRange(tokens=(1, 64), logit_tokens=(1, 64), max_context=64, max_batch=32)
    b = [1, 16, 32, 33]
    assert measured_mask(b, 1, 64, r) == [True, True, True, False]  # B = 33 is past the measured batch
    assert measured_mask(b, 3, 64, r) == [True, True, False, False]  # 32 x 3 = 96 tokens > 64
    assert measured_mask(b, 1, 1024, r) == [False] * 4  # the context was measured to 64 only
    assert measured_mask(b, 3, 1024, None) == [True] * 4  # analytic: nothing to mark


def test_cli_marks_the_measured_edge(tmp_path):
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(PROFILE))
    out = tmp_path / "p.png"
    proc = subprocess.run([sys.executable, "-c", "from specplan.cli import main; main()", "profile", "plot",
                           str(path), "--out", str(out), "--context", "32"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "measured up to B = 32, context 64, 1-64 tokens per step" in proc.stderr
    assert "outside the measured range" not in proc.stderr  # marked in the figure instead of warned
    assert out.stat().st_size > 1000
