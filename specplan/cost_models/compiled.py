"""The built-in cost models as the compiled spans price them (``specplan.simulator.span``).

``span_pricing`` gives, once per executor, a model's kind and the one float array its compiled step
time reads (each model prices its own steps through the same function, so the two paths share one
definition); ``step_seconds`` is the span's call. ``fixed_draft_seconds`` is the drafting cost of a
model that charges a constant per drafting step. Any other model, a subclass of these included (it
may price otherwise), leaves its steps to Python.
"""

from __future__ import annotations

import sys
from typing import Optional

import numpy as np
from numba import njit

from specplan.cost_models.linear import LinearCostModel, linear_step_time
from specplan.cost_models.profile_step import note_outside, profile_step_time
from specplan.cost_models.roofline import RooflineCostModel, roofline_step_time
from specplan.cost_models.simple import LinearGammaCostModel, TableCostModel, linear_gamma_step_time, table_step_time

ROOFLINE, PROFILE, LINEAR_GAMMA, TABLE, LINEAR = range(5)  # ``span_pricing``'s kinds
_KINDS = {RooflineCostModel: (ROOFLINE, "coefficients"), LinearGammaCostModel: (LINEAR_GAMMA, "params"),
          TableCostModel: (TABLE, "params"), LinearCostModel: (LINEAR, "params")}


def span_pricing(cost) -> Optional[tuple[int, np.ndarray, np.ndarray]]:
    """``(kind, parameters, outside)`` of a cost model the compiled spans price, else None.
    ``outside`` is a measured profile's notes of steps outside its measured range
    (``ProfileCostModel.outside``, shared by every replica it prices); unused by the other kinds."""
    if type(cost) in _KINDS:
        kind, name = _KINDS[type(cost)]
        return kind, getattr(cost, name), np.full((2, 3), np.nan)
    # (a ProfileCostModel exists only once its module is loaded: looked up, not imported, for the
    # profile schemas load only when a profile is asked for)
    profile = sys.modules.get("specplan.cost_models.profile")
    if profile is not None and type(cost) is profile.ProfileCostModel:
        return PROFILE, cost.params, cost.outside
    return None


def fixed_draft_seconds(cost) -> Optional[float]:
    """The seconds a drafting step costs whatever drafts, for a model that charges that
    (``linear_gamma``'s ``draft_cost_s``; ``table`` and a ``linear`` with a drafting fraction fold
    drafting into the step: 0), else None (``DraftCost`` or a profile's host terms price it)."""
    if type(cost) is LinearGammaCostModel:
        return float(cost.draft_cost_s)
    if type(cost) is TableCostModel or (type(cost) is LinearCostModel and cost.draft_fraction is not None):
        return 0.0
    return None


@njit(cache=True)
def step_seconds(kind, p, outside, terms):
    """The step's seconds by its model's ``kind`` from the compiled step's ``terms``
    (``step.price_step``'s, the fields of ``BatchTerms`` in order); a profile notes its range."""
    num_seqs, num_tokens, logit_tokens = int(terms[0]), int(terms[1]), int(terms[2])
    if kind == PROFILE:
        note_outside(p, outside, num_tokens, logit_tokens, int(terms[7]))
        return profile_step_time(p, num_seqs, num_tokens, logit_tokens, terms[3], terms[4], terms[5], terms[6])
    if kind == LINEAR_GAMMA:
        return linear_gamma_step_time(p, num_seqs, num_tokens)
    if kind == TABLE:
        return table_step_time(p, num_seqs, num_tokens)
    if kind == LINEAR:
        return linear_step_time(p, num_seqs, num_tokens, int(terms[8]), int(terms[9]))
    return roofline_step_time(p, num_seqs, num_tokens, logit_tokens, terms[3], terms[4], terms[5], terms[6])
