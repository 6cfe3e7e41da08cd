"""The calibrated model's step time as compiled code: one definition for ``ProfileCostModel`` and the
compiled spans (``specplan.simulator.span``), which price a measured profile's steps without Python.

A profile's numbers travel as one float array (``params``, built by ``params_of``): the settings at
the ``PARAMS`` positions, then the knots of ``g`` (total tokens) and ``h`` (logit tokens), x then y
each. The arithmetic is the model's own, term for term and in its order (``profile`` module docstring).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from specplan.cost_models.terms import padded_tokens, tp_comm_s

# ``params`` positions: CUDA-graph padding (1/0) and the largest captured size, the attention terms,
# the TP shapes and links, the host terms, the measured range, and the two curves' knot counts.
(PAD, MAX_CAPTURED, A_KV, A_DEC, A_PRE, LAYERS, HIDDEN, VOCAB, TP, ALPHA, BETA, HOST_STEP, HOST_PER_SEQ,
 TOKENS_LO, TOKENS_HI, LOGITS_LO, LOGITS_HI, MAX_CONTEXT, G_KNOTS, H_KNOTS) = range(20)
PARAMS = 20
#: The measured-range checks, in the order the model makes them (``outside`` rows).
OUTSIDE = ("total tokens", "logit tokens", "context")


def params_of(settings: list[float], g_x, g_y, h_x, h_y) -> np.ndarray:
    """``settings`` (``PARAMS`` values, in position order) and the two curves' knots as one array."""
    head = list(settings)
    head[G_KNOTS], head[H_KNOTS] = len(g_x), len(h_x)
    return np.array([*head, *g_x, *g_y, *h_x, *h_y], dtype=np.float64)


@njit(cache=True)
def segment(x, y, n):
    """``profile.Segments``: piecewise linear through the knots; past either end the end segment's
    slope, clamped at >= 0, and past the first knot the value floored at 0."""
    if n > x[-1]:
        return y[-1] + max(y[-1] - y[-2], 0.0) / (x[-1] - x[-2]) * (n - x[-1])
    if n < x[0]:
        return max(y[0] + max(y[1] - y[0], 0.0) / (x[1] - x[0]) * (n - x[0]), 0.0)
    i = min(np.searchsorted(x, n, side="right") - 1, len(x) - 2)
    return y[i] + (y[i + 1] - y[i]) * (n - x[i]) / (x[i + 1] - x[i])


@njit(cache=True)
def _curves(p):
    g, h = int(p[G_KNOTS]), int(p[H_KNOTS])
    s = PARAMS
    return p[s:s + g], p[s + g:s + 2 * g], p[s + 2 * g:s + 2 * g + h], p[s + 2 * g + h:s + 2 * g + 2 * h]


@njit(cache=True)
def priced_tokens(p, num_tokens):
    """The total token count ``g`` is read at: padded to a captured size where the profile pads."""
    return padded_tokens(num_tokens, int(p[MAX_CAPTURED])) if p[PAD] else num_tokens


@njit(cache=True)
def profile_step_time(p, num_seqs, num_tokens, logit_tokens, kv_decode, kv_prefill, work_decode, work_prefill):
    """``ProfileCostModel.step_time_terms`` without its range warnings: seconds of one forward, host
    overhead included (0 for an empty batch)."""
    if num_seqs == 0:
        return 0.0
    g_x, g_y, h_x, h_y = _curves(p)
    n = priced_tokens(p, num_tokens)
    comm = tp_comm_s(n, logit_tokens, int(p[LAYERS]), int(p[HIDDEN]), int(p[VOCAB]), int(p[TP]), p[ALPHA], p[BETA])
    attention = p[A_KV] * (kv_decode + kv_prefill) + p[A_DEC] * work_decode + p[A_PRE] * work_prefill
    host = p[HOST_STEP] + p[HOST_PER_SEQ] * num_seqs
    return segment(g_x, g_y, n) + segment(h_x, h_y, logit_tokens) + attention + comm + host


@njit(cache=True)
def note_outside(p, outside, num_tokens, logit_tokens, max_context):
    """Note, per ``OUTSIDE`` check, the first value outside the measured range (``outside[0]``, NaN
    until one is) and how many checks had noted one before it (``outside[1]``), for the model to warn
    of in that order when Python next has the floor (``ProfileCostModel.warn_outside``)."""
    values = (float(priced_tokens(p, num_tokens)), float(logit_tokens), float(max_context))
    los, his = (p[TOKENS_LO], p[LOGITS_LO], 0.0), (p[TOKENS_HI], p[LOGITS_HI], p[MAX_CONTEXT])
    for j in range(3):
        if np.isnan(outside[0, j]) and not los[j] <= values[j] <= his[j]:
            outside[1, j] = 3 - np.isnan(outside[0]).sum()
            outside[0, j] = values[j]
