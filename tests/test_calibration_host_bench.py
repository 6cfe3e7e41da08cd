"""The microbenchmark's host terms (``specplan.calibration.host_bench``) without vLLM: the line through
the per-batch host seconds, and ``--host-bench`` refused in one line where vLLM is not importable.
The measurement itself, against the host seconds a real engine recorded, is in the vLLM tier
(``tests/test_validate_vllm_timing.py``)."""

import pytest
from typer.testing import CliRunner

from specplan.calibration import host_bench
from specplan.cli import app
from specplan.errors import SpecplanError
from specplan.validation import vllm_env


def test_host_line_through_the_batches():
    # 0.2 ms a step and 15 us a row, exactly; then a row of noise that a non-negative line cannot follow
    rows = [{"batch": b, "host_s": 2e-4 + 1.5e-5 * b} for b in (1, 4, 8, 16, 24)]
    assert host_bench.fit_host(rows) == pytest.approx((2e-4, 1.5e-5), rel=1e-9)
    falling = [{"batch": 1, "host_s": 3e-4}, {"batch": 8, "host_s": 1e-4}]
    step_s, per_seq_s = host_bench.fit_host(falling)
    assert per_seq_s == 0.0 and step_s == pytest.approx(2e-4)  # the mean: the best flat line


@pytest.mark.skipif(vllm_env.importable(), reason="vLLM is importable here")
def test_host_bench_without_vllm_is_one_line_before_measuring(tmp_path):
    res = CliRunner().invoke(app, ["calibrate", "--model", "tiny", "--device", "cpu", "--host-bench",
                                   "--out", str(tmp_path / "cal")])
    assert isinstance(res.exception, SpecplanError) and str(res.exception).startswith("--host-bench needs vLLM")
    assert not (tmp_path / "cal" / "measurements.csv").exists()
