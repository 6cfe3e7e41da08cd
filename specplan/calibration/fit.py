"""Fit a measured profile to calibration measurements, and check it on held-out points (numpy/scipy).

The profile's form is in ``cost_models.profile``: ``T = g(N) + h(N_logits) + a_kv * KV + a_dec * W_dec
+ a_pre * W_pre``. Physics asks every term not to fall as tokens, rows or context grow, and the fit
holds it where noise inverts neighbours: ``h`` is the measured LM-head curve made non-decreasing by
isotonic regression (``scipy.optimize.isotonic_regression``, weighted by the repeats). The rest is one
non-negative least-squares problem on the forward points' values, relative error weighted (each row
divided by its measured time): unknowns are g at the first knot and its rise over each segment between
knots (the ``tokens`` sweep's token counts; ``monotone_basis``), all >= 0 so g never falls, and the
three attention coefficients, >= 0. Columns are scaled to unit maximum before solving.
"""

from __future__ import annotations

import math
import warnings
from typing import Optional

import numpy as np
import pandas as pd
from scipy.optimize import isotonic_regression, nnls

from specplan.cost_models.base import StepBatch
from specplan.cost_models.draft import DraftCost, DraftCostSection
from specplan.cost_models.measurements import summary_stat
from specplan.config import CostConfig
from specplan.cost_models.profile import (
    PROFILE_FORMAT, AttentionTerms, Curve, MeasuredRange, ModelShape, ProfileCostModel, ProfileFile, Provenance,
    Segments,
)
from specplan.errors import SpecplanError

# Forward-only prediction, as measured: no host overhead, no padding (each exact token count is captured),
# no TP communication (one GPU's shard).
RAW = CostConfig(host_overhead_s=0.0, host_overhead_per_seq_s=0.0, cuda_graph_padding=False)
NO_COMM = (0.0, math.inf)


def forward_model(profile: ProfileFile, source: str = "calibration") -> ProfileCostModel:
    """The profile's model of what calibration measured (``RAW`` options, no TP communication)."""
    return ProfileCostModel(profile, DraftCost.default(132), RAW, source=source, allreduce=NO_COMM)


def reject_outliers(df: pd.DataFrame, k: float = 3.0) -> pd.DataFrame:
    """The measurements without the repeats of a point (kind, point, mode) further than ``k`` scaled MADs
    (1.4826 MAD, the standard deviation of normal noise) from its median; points with fewer than three
    repeats, or no spread, keep every repeat."""
    g = df.groupby(["kind", "point", "mode"])["seconds"]
    med = g.transform("median")
    mad = (df["seconds"] - med).abs().groupby([df["kind"], df["point"], df["mode"]]).transform("median") * 1.4826
    keep = (g.transform("count") < 3) | (mad == 0) | ((df["seconds"] - med).abs() <= k * mad)
    return df[keep.to_numpy()]


def lm_head_curve(df: pd.DataFrame, mode: str) -> Curve:
    """LM-head seconds per logit count (``summary_stat`` of the repeats)."""
    lm = df[(df["kind"] == "lm_head") & (df["mode"] == mode)]
    grouped = lm.groupby("logit_tokens")["seconds"]
    med, count = grouped.agg(summary_stat(mode)).sort_index(), grouped.count().sort_index()
    if len(med) < 2:
        raise SpecplanError("calibration: fewer than two LM-head points measured; "
                            "raise --budget-s (budget_s) or give --passes (passes)")
    seconds = isotonic_regression(med.to_numpy(dtype=float), weights=count.to_numpy(dtype=float)).x
    return Curve(tokens=[int(n) for n in med.index], seconds=[float(s) for s in seconds])


def _features(pts: pd.DataFrame) -> np.ndarray:
    """Columns KV tokens, decode work, prefill work of uniform-row points (see ``terms``)."""
    b, q, c = (pts[k].to_numpy(dtype=float) for k in ("batch", "query_len", "context"))
    pre = pts["is_prefill"].to_numpy(dtype=bool)
    work = b * q * (c + (q + 1) / 2)
    return np.column_stack([b * (c + q), np.where(pre, 0.0, work), np.where(pre, work, 0.0)])


def monotone_basis(knots: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Columns of a piecewise-linear ``g`` over ``knots`` whose weights are g at the first knot and its rise
    over each segment (the last one extended past the last knot; held flat below the first): with the
    weights >= 0, g never falls. ``np.cumsum`` of the weights gives g at the knots."""
    n = np.asarray(n, dtype=float)
    cols = [np.ones_like(n)]
    for j in range(1, len(knots)):
        r = (n - knots[j - 1]) / (knots[j] - knots[j - 1])
        cols.append(np.clip(r, 0.0, None if j == len(knots) - 1 else 1.0))
    return np.column_stack(cols)


def fit_forward(pts: pd.DataFrame, lm: Curve) -> tuple[Curve, AttentionTerms]:
    """The token-level curve and attention terms fitted to forward points (``forward_points``)."""
    knots = np.array(sorted(set(pts.loc[pts["sweep"] == "tokens", "num_tokens"].astype(int))), dtype=float)
    if len(knots) < 2:
        raise SpecplanError("calibration: fewer than two points of the tokens sweep measured; "
                            "raise --budget-s (budget_s) or give --passes (passes)")
    t = pts["seconds"].to_numpy(dtype=float)
    h = Segments(lm)
    y = t - np.array([h(n) for n in pts["logit_tokens"]])
    a = np.hstack([monotone_basis(knots, pts["num_tokens"].to_numpy(dtype=float)), _features(pts)])
    a = a / t[:, None]
    scale = np.abs(a).max(axis=0)
    scale[scale == 0] = 1.0
    theta, _ = nnls(a / scale, y / t)
    theta = theta / scale
    m = len(knots)
    curve = Curve(tokens=[int(k) for k in knots], seconds=[float(v) for v in np.cumsum(theta[:m])])
    return curve, AttentionTerms(kv_s_per_token=float(theta[m]), decode_work_s=float(theta[m + 1]),
                                 prefill_work_s=float(theta[m + 2]))


def build_profile(pts: pd.DataFrame, lm: Curve, *, name: str, provenance: Provenance, model_shape: ModelShape,
                  gpu: Optional[str], tp: int, dtype: str, draft: Optional[DraftCostSection] = None,
                  eager_overhead_s: Optional[float] = None, cuda_graph_padding: Optional[bool] = None) -> ProfileFile:
    """A measured ``ProfileFile`` fitted to ``pts`` (``forward_points``) and the LM-head curve ``lm``;
    ``cuda_graph_padding=False`` for a device measured eagerly (the CPU)."""
    curve, attention = fit_forward(pts, lm)
    return ProfileFile(
        format=PROFILE_FORMAT, name=name, provenance=provenance, gpu=gpu, tp=tp, dtype=dtype,
        model_shape=model_shape, token_time=curve, lm_head_time=lm, attention=attention,
        measured_range=MeasuredRange(
            tokens=(curve.tokens[0], curve.tokens[-1]), logit_tokens=(lm.tokens[0], lm.tokens[-1]),
            max_context=int(pts["context"].max()), max_batch=int(pts["batch"].max()),
        ),
        eager_overhead_s=eager_overhead_s, draft=draft, cuda_graph_padding=cuda_graph_padding,
    )


def predict_points(profile: ProfileFile, pts: pd.DataFrame) -> np.ndarray:
    """Forward seconds the profile predicts for uniform-row points (no host overhead, no padding)."""
    model = forward_model(profile, "held-out check")
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for b, q, c, pre in pts[["batch", "query_len", "context", "is_prefill"]].itertuples(index=False):
            batch = StepBatch(np.full(b, q, dtype=np.int64), np.full(b, c, dtype=np.int64), np.full(b, bool(pre)))
            out.append(model.step_time(batch))
    return np.array(out)


def heldout_split(pts: pd.DataFrame, fraction: float, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(train, test)``: a random ``fraction`` of the points held out, never the ends of the tokens sweep
    (so held-out points are interpolated, not extrapolated)."""
    tok = pts.loc[pts["sweep"] == "tokens", "num_tokens"]
    ends = (pts["sweep"] == "tokens") & pts["num_tokens"].isin([tok.min(), tok.max()])
    candidates = np.flatnonzero(~ends.to_numpy())
    rng = np.random.default_rng(seed)
    n_test = int(round(fraction * len(pts)))
    test = rng.choice(candidates, size=min(n_test, len(candidates)), replace=False)
    mask = np.zeros(len(pts), dtype=bool)
    mask[test] = True
    return pts[~mask], pts[mask]


def heldout_error(pts: pd.DataFrame, lm: Curve, fraction: float, seed: int, **profile_kwargs) -> tuple[float, int]:
    """Median absolute relative error on held-out forward points of a profile fitted to the rest."""
    train, test = heldout_split(pts, fraction, seed)
    profile = build_profile(train, lm, **profile_kwargs)
    measured = test["seconds"].to_numpy(dtype=float)
    err = np.abs(predict_points(profile, test) - measured) / measured
    return float(np.median(err)), len(test)


def eager_overhead(df: pd.DataFrame) -> Optional[float]:
    """Median over forward points of eager minus graph seconds (None without both modes)."""
    fwd = df[df["kind"] == "forward"]
    if not {"graph", "eager"} <= set(fwd["mode"]):
        return None
    med = fwd.groupby(["point", "mode"])["seconds"].median().unstack()
    return float((med["eager"] - med["graph"]).median())

