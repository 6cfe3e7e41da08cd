"""Physically sane step times: T never falls as the batch grows, in any shipped profile or a freshly
calibrated one, and the fit keeps it so where noise inverts neighbours."""

import numpy as np
import pandas as pd
import pytest

from specplan.calibration.fit import fit_forward, lm_head_curve, monotone_basis
from specplan.cost_models.base import StepBatch
from specplan.cost_models.registry import bundled_profile_names, cost_model_from_profile

BATCHES = np.arange(1, 257)


def _t_of_b(model, context: int) -> np.ndarray:
    return np.array([model.step_time(StepBatch(np.ones(b, dtype=np.int64), np.full(b, context, dtype=np.int64),
                                               np.zeros(b, dtype=bool))) for b in BATCHES])


@pytest.mark.parametrize("name", [n for n in bundled_profile_names()])
def test_no_shipped_profile_has_a_falling_t_of_b(name):
    model = cost_model_from_profile(name)
    for context in (0, 1024, 8192):
        t = _t_of_b(model, context)
        assert np.all(np.diff(t) >= -1e-15), (name, context, int(BATCHES[np.argmin(np.diff(t))]))


def test_freshly_calibrated_profile_has_no_falling_t_of_b(cpu_calibration):
    import warnings

    from specplan.calibration.fit import forward_model
    from specplan.cost_models.profile import read_profile

    profile = read_profile(cpu_calibration / "profile.yaml")
    assert np.all(np.diff(profile.token_time.seconds) >= 0) and np.all(np.diff(profile.lm_head_time.seconds) >= 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # B past the grid extrapolates; it must still not fall
        for context in (16, 64, 1024):
            assert np.all(np.diff(_t_of_b(forward_model(profile), context)) >= 0)


def test_lm_head_curve_pools_inverted_neighbours():
    # Medians 1, 3, 2, 4 ms (two repeats each, the same on both): isotonic regression pools the
    # inverted pair to its mean, 2.5 ms, and keeps the rest.
    rows = [{"kind": "lm_head", "mode": "graph", "logit_tokens": n, "seconds": s}
            for n, s in ((1, 1e-3), (2, 3e-3), (4, 2e-3), (8, 4e-3)) for _ in range(2)]
    curve = lm_head_curve(pd.DataFrame(rows), "graph")
    assert curve.seconds == pytest.approx([1e-3, 2.5e-3, 2.5e-3, 4e-3])


def test_monotone_basis_rebuilds_a_piecewise_linear_curve():
    knots = np.array([1.0, 2.0, 4.0, 8.0])
    g = np.array([1.0, 3.0, 3.0, 7.0])  # values at the knots: rises 2, 0, 4
    n = np.array([1.0, 1.5, 3.0, 6.0, 10.0])
    # by hand: 1; 2 (halfway up the first rise); 3; 5 (halfway from 3 to 7); 7 + 4 * 2/4 = 9 past the end
    assert monotone_basis(knots, n) @ np.r_[g[0], np.diff(g)] == pytest.approx([1.0, 2.0, 3.0, 5.0, 9.0])


def test_fit_forward_never_falls_on_inverted_points():
    # A tokens sweep whose measured times dip at N = 64 (noise): the fitted g must not dip with them.
    ns = [1, 2, 4, 8, 16, 32, 64, 128]
    secs = [1.0e-3, 1.1e-3, 1.2e-3, 1.4e-3, 1.8e-3, 2.6e-3, 1.9e-3, 6.0e-3]
    pts = pd.DataFrame({"sweep": "tokens", "batch": ns, "query_len": 1, "context": 16, "is_prefill": False,
                        "num_tokens": ns, "logit_tokens": ns, "seconds": secs})
    lm = lm_head_curve(pd.DataFrame([{"kind": "lm_head", "mode": "cpu", "logit_tokens": n, "seconds": 1e-5 * n}
                                     for n in ns]), "cpu")
    curve, attention = fit_forward(pts, lm)
    assert np.all(np.diff(curve.seconds) >= 0)
    assert min(attention.kv_s_per_token, attention.decode_work_s, attention.prefill_work_s) >= 0


def test_cover_extends_the_grid_to_the_scenarios_steps():
    from specplan.calibration.grid import CPU_GRID, build_points, cover

    g = cover(CPU_GRID, max_tokens=3000, max_context=1500)
    assert g.token_counts[-4:] == (512, 1024, 2048, 3000) and g.chunk_sizes[-4:] == (512, 1024, 2048, 3000)
    assert g.contexts[-1] == 1500 and g.chunk_contexts[-1] == 1500
    pts = build_points(g)
    assert max(p.num_tokens for p in pts if p.sweep == "tokens") == 3000
    assert max(p.context for p in pts) == 1500
    assert cover(CPU_GRID) == CPU_GRID  # nothing asked, nothing added


def test_a_profile_far_short_of_the_run_is_refused_in_one_line():
    from specplan.calibration.grid import require_coverage
    from specplan.cost_models.profile import MeasuredRange
    from specplan.errors import ConfigError

    measured = MeasuredRange(tokens=(1, 288), logit_tokens=(1, 288), max_context=1024, max_batch=64)
    require_coverage(measured, 4 * 288, 4 * 1024, "p.yaml")  # within 4x: extrapolated
    with pytest.raises(ConfigError) as exc:
        require_coverage(measured, 8192, 864, "p.yaml")
    msg = str(exc.value)
    assert "\n" not in msg and "p.yaml" in msg and "28x" in msg and "--max-tokens 8192" in msg
    with pytest.raises(ConfigError, match="--max-context 5000"):
        require_coverage(measured, 100, 5000, "p.yaml")


def test_outlying_repeats_are_rejected():
    # Point a: 1.0, 1.1, 0.9, 1.0, 9.0 ms. Median 1.0, MAD 0.1 (x 1.4826 = 0.148): 9.0 is 54 MADs out,
    # the rest within 1. Point b has two repeats only: both kept, however far apart.
    rows = [{"kind": "forward", "point": "a", "mode": "cpu", "seconds": s} for s in (1.0, 1.1, 0.9, 1.0, 9.0)]
    rows += [{"kind": "forward", "point": "b", "mode": "cpu", "seconds": s} for s in (1.0, 5.0)]
    from specplan.calibration.fit import reject_outliers

    kept = reject_outliers(pd.DataFrame(rows))
    assert sorted(kept.loc[kept["point"] == "a", "seconds"]) == [0.9, 1.0, 1.0, 1.1]
    assert sorted(kept.loc[kept["point"] == "b", "seconds"]) == [1.0, 5.0]
