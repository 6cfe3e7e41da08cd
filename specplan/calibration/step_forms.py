"""Which terms a step-time fit keeps: candidate forms of the profile's model, chosen by cross-validation.

Within one engine run some terms move together. With draft length K every decode row verifies about
1 + K tokens, so the resident KV (``kv``) and the decode work (query tokens x context, ``work_decode``)
are nearly proportional, a per-drafting-row term follows the rows, and a curve with a knot at every
measured token count bends wherever noise asks it to. A least-squares fit trades such terms freely
against each other, and the trade does not carry to a run with another K or batch (measured: a fit
keeping every term predicted a second vLLM run, K = 3 and 8 sequences, from a K = 5 run's steps
with 11-18% median step error; the form chosen here, 5%).

So the fit keeps a form, not every term: each candidate below is scored by k-fold cross-validation on
the fitting steps (interleaved folds; the mean absolute relative error of the steps each fold leaves
out) and the form with the fewest unknowns whose score is within one standard error of the best is
kept: the one-standard-error rule (Hastie, Tibshirani and Friedman, *The Elements of Statistical
Learning*, 2nd ed., section 7.10).

Candidates: the token curve ``g`` over knots ``affine`` (1 and the largest count: one slope),
``decode-prefill`` (a knot at the largest decode step's count too) or ``doubling`` (``knots_for``);
attention by resident KV, decode work or both; prefill work always; with or without a per-row
(``rows``) and an LM-head (``logit_tokens``) term; drafting by none, a per-step, a per-drafting-row
term or both. Every unknown is >= 0 (non-negative least squares in relative error).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from specplan.calibration.fit import monotone_basis

KNOTS = ("affine", "doubling")
ATTENTION = (("kv",), ("work_decode",), ("kv", "work_decode"))
DRAFTING = ((), ("draft_step",), ("drafting_rows",), ("draft_step", "drafting_rows"))
FOLDS = 5


def knots_for(n: np.ndarray) -> np.ndarray:
    """Knots where the steps are: 1, then the largest token count in each doubling bin (1, 2], (2, 4], ...
    that holds a step, so g is linear between measured counts, never bent where no step was seen."""
    n = np.asarray(n, dtype=np.int64)
    bins = np.ceil(np.log2(np.maximum(n, 1))).astype(int)
    tops = [int(n[bins == b].max()) for b in np.unique(bins)]
    knots = sorted({1, *tops})
    return np.array(knots if len(knots) > 1 else [1, 2], dtype=float)


@dataclass(frozen=True)
class StepForm:
    """One candidate: how ``g`` is knotted, and which other terms (columns of the step terms) it keeps."""

    knots: str
    terms: tuple[str, ...]

    @property
    def label(self) -> str:
        return "+".join((f"g[{self.knots}]", *self.terms))

    def knot_points(self, steps: pd.DataFrame) -> np.ndarray:
        """The knots of ``g`` for these (fitting) steps."""
        n = steps["num_tokens"].to_numpy(dtype=np.int64)
        if self.knots == "doubling":
            return knots_for(n)
        top = float(max(n.max(), 2))
        decode = n[~steps["prefill"].to_numpy(dtype=bool)]
        inner = {float(decode.max())} if self.knots == "decode-prefill" and len(decode) else set()
        return np.array(sorted({1.0, top} | {k for k in inner if 1 < k < top}))

    def columns(self, steps: pd.DataFrame, knots: np.ndarray) -> np.ndarray:
        """The design matrix: ``monotone_basis`` of g, then one column per term."""
        extra = [(steps["drafting_rows"] > 0).to_numpy(dtype=float) if t == "draft_step"
                 else steps[t].to_numpy(dtype=float) for t in self.terms]
        return np.column_stack([monotone_basis(knots, steps["num_tokens"].to_numpy(dtype=float)), *extra])

    def solve(self, steps: pd.DataFrame, host_s: float) -> tuple[np.ndarray, np.ndarray]:
        """``(g increments then one weight per term, knots)``: non-negative least squares in relative error
        of ``step_s - host_s``, columns scaled to unit maximum."""
        t = steps["step_s"].to_numpy(dtype=float)
        knots = self.knot_points(steps)
        a = self.columns(steps, knots) / t[:, None]
        scale = np.abs(a).max(axis=0)
        scale[scale == 0] = 1.0
        theta, _ = nnls(a / scale, (t - host_s) / t)
        return theta / scale, knots

    def predict(self, theta: np.ndarray, knots: np.ndarray, steps: pd.DataFrame, host_s: float) -> np.ndarray:
        return self.columns(steps, knots) @ theta + host_s


def candidate_forms() -> list[StepForm]:
    """Every form the module docstring lists (144)."""
    out = []
    for knots, attention, rows, logits, drafting in itertools.product(
            KNOTS, ATTENTION, ((), ("rows",)), ((), ("logit_tokens",)), DRAFTING):
        out.append(StepForm(knots, (*logits, *attention, "work_prefill", *rows, *drafting)))
    return out


def cross_validate(form: StepForm, steps: pd.DataFrame, host_s: float, folds: int = FOLDS) -> tuple[float, float]:
    """Mean absolute relative error of each step predicted by the form fitted without its fold (every
    ``folds``-th step), and that mean's standard error."""
    fold = np.arange(len(steps)) % min(folds, len(steps))
    errors = []
    for f in np.unique(fold):
        fit, held = steps[fold != f], steps[fold == f]
        theta, knots = form.solve(fit, host_s)
        measured = held["step_s"].to_numpy(dtype=float)
        errors.append(np.abs(form.predict(theta, knots, held, host_s) / measured - 1))
    e = np.concatenate(errors)
    return float(e.mean()), float(e.std() / np.sqrt(len(e)))


def select_form(steps: pd.DataFrame, host_s: float) -> tuple[StepForm, list[dict]]:
    """The form kept by the one-standard-error rule, and the scores of the best five and of it."""
    scored = []
    for form in candidate_forms():
        cv, se = cross_validate(form, steps, host_s)
        unknowns = len(form.knot_points(steps)) + len(form.terms)
        scored.append({"form": form.label, "cv_error": cv, "cv_se": se, "unknowns": unknowns, "_form": form})
    best = min(scored, key=lambda s: s["cv_error"])
    # The floor: forms that fit exactly differ in rounding only (1e-6 is far below any step's noise).
    kept = min((s for s in scored if s["cv_error"] <= best["cv_error"] + max(best["cv_se"], 1e-6)),
               key=lambda s: (s["unknowns"], s["cv_error"]))
    table = sorted(scored, key=lambda s: s["cv_error"])[:5]
    if not any(s is kept for s in table):
        table.append(kept)
    return kept["_form"], [{k: v for k, v in s.items() if k != "_form"} | {"kept": s is kept} for s in table]
