"""The linear step-time model of SmartSpec, BLIS and similar published fits.

``T = c0 + c_tok * N + c_kv * KV + c_seq * B`` with ``N`` the tokens computed in the step, ``KV`` the
KV tokens resident (sum of the rows' contexts before the step) and ``B`` the sequences. Coefficients
are given, or fitted by ordinary least squares to measurements (``fit_linear``; a calibrate
``measurements.csv`` through ``fit_linear_csv``).

Drafting: with ``draft_fraction`` f, a step that verifies drafts (some generation row has more than
one query token) costs ``(1 + f) * T``, the published "draft cost as a fraction of verify time"
form, and ``draft_time`` is 0; without it, drafting is priced by ``DraftCost`` like the other models.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Mapping, Optional

import numpy as np
from numba import njit

from specplan.cost_models.draft import DraftCost
from specplan.cost_models.terms import BatchTerms, TermsCostModel
from specplan.errors import ConfigError


@dataclass(frozen=True)
class LinearCoefficients:
    """Seconds per step, per token computed, per resident KV token, per sequence."""

    c0_s: float
    c_tok_s: float
    c_kv_s: float
    c_seq_s: float

    @classmethod
    def from_mapping(cls, values: Mapping[str, float]) -> "LinearCoefficients":
        """From ``{c0_s, c_tok_s, c_kv_s, c_seq_s}``; one-line error naming a missing or unknown key."""
        names = list(cls.__dataclass_fields__)
        for key in values:
            if key not in names:
                raise ConfigError(f"cost.linear_coefficients.{key}: unknown (expected {', '.join(names)})")
        missing = [n for n in names if n not in values]
        if missing:
            raise ConfigError(f"cost.linear_coefficients.{missing[0]}: missing")
        return cls(**{n: float(values[n]) for n in names})


def fit_linear(tokens, kv_tokens, seqs, seconds) -> LinearCoefficients:
    """Least-squares coefficients for measured steps (arrays of equal length, at least 4 points)."""
    y = np.asarray(seconds, dtype=float)
    x = np.column_stack([np.ones_like(y), tokens, kv_tokens, seqs]).astype(float)
    if len(y) < 4:
        raise ConfigError(f"linear fit: needs at least 4 measurements, got {len(y)}")
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    return LinearCoefficients(*(float(c) for c in coef))


def fit_linear_csv(path: str | Path) -> LinearCoefficients:
    """Fit to the forward points of a calibrate ``measurements.csv`` (median of each point's repeats)."""
    from specplan.cost_models.measurements import forward_points, read_measurements

    pts = forward_points(read_measurements(path))
    return fit_linear(pts["num_tokens"], pts["batch"] * pts["context"], pts["batch"], pts["seconds"])


@njit(cache=True)
def linear_step_time(p, num_seqs, num_tokens, context_tokens, verify_rows):
    """``LinearCostModel``'s step seconds from its ``params`` (0 for an empty batch); compiled, for the
    compiled spans price with it too."""
    if num_seqs == 0:
        return 0.0
    t = p[0] + p[1] * num_tokens + p[2] * float(context_tokens) + p[3] * num_seqs
    if p[4] and verify_rows:
        t *= 1.0 + p[4]
    return t


class LinearCostModel(TermsCostModel):
    """``c0 + c_tok N + c_kv KV + c_seq B``, optionally times ``1 + draft_fraction`` when verifying."""

    name = "linear"

    def __init__(self, coefficients: LinearCoefficients, draft: DraftCost,
                 draft_fraction: Optional[float] = None) -> None:
        self.c = coefficients
        self.draft = draft
        self.draft_fraction = draft_fraction
        # What ``linear_step_time`` reads (and the compiled spans): the four coefficients, then the
        # verify step's drafting fraction (0: none).
        c = coefficients
        self.params = np.array([c.c0_s, c.c_tok_s, c.c_kv_s, c.c_seq_s, draft_fraction or 0.0])

    def step_time_terms(self, b: BatchTerms) -> float:
        return linear_step_time(self.params, b.num_seqs, b.num_tokens, b.context_tokens, b.verify_rows)

    def draft_time(self, drafter: str, num_requests: int, k: int, pool_entries: int = 0) -> float:
        """0 when drafting is a fraction of the step; else ``DraftCost``."""
        if self.draft_fraction is not None:
            return 0.0
        return self.draft.time(drafter, num_requests, k, pool_entries)

    def describe(self) -> str:
        terms = ", ".join(f"{k} {v:.3g}" for k, v in asdict(self.c).items())
        extra = f", drafting {self.draft_fraction:g} x verify" if self.draft_fraction is not None else ""
        return f"linear: T = c0 + c_tok N + c_kv KV + c_seq B ({terms}){extra}"
