"""Reporting-view cost models: ``linear_gamma`` and ``table``.

Both see a step as ``B`` sequences verifying ``K_eff`` extra positions each, with ``B`` the number of
sequences in the batch and ``K_eff = (total query tokens - B) / B``. A generation row of 1+K query
tokens adds K; a prefill chunk of C tokens adds C - 1, so chunks count as extra positions (these
models know no attention or context; use ``roofline`` or ``profile`` when that matters).

- ``linear_gamma``: ``T = t_base(B) * (1 + gamma(B) * K_eff)``, plus ``draft_cost_s`` per step
  through ``draft_time`` (the simulator charges it only on steps that speculate, so the baseline
  does not pay it: seed 000's ``1 + gamma K + d``).
- ``table``: ``T`` given per (B, K), interpolated bilinearly: linearly in K within each tabulated B,
  then linearly in B between the two tabulated B around it. Rows may list different K.

``t_base``, ``gamma`` and the table are constants or tables over B, interpolated linearly and clamped
at the ends (B below the first entry takes the first, above the last takes the last; likewise K).
The ``table`` model's round cost already includes drafting, so its ``draft_time`` is 0.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
from numba import njit

from specplan.cost_models.terms import BatchTerms, TermsCostModel
from specplan.errors import ConfigError


def _table_over_b(value: float | Mapping[int, float], field: str, positive: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(B values, values)`` sorted by B, from a constant or a ``{B: value}`` mapping."""
    items = sorted(value.items()) if isinstance(value, Mapping) else [(1, value)]
    if not items:
        raise ConfigError(f"cost.{field}: empty table")
    for b, v in items:
        if int(b) < 1:
            raise ConfigError(f"cost.{field}: batch size {b} must be >= 1")
        if v < 0 or (positive and v == 0):
            raise ConfigError(f"cost.{field}: value {v} at B={b} must be {'> 0' if positive else '>= 0'}")
    return np.array([float(b) for b, _ in items]), np.array([float(v) for _, v in items])


@njit(cache=True)
def linear_gamma_step_time(p, num_seqs, num_tokens):
    """``LinearGammaCostModel``'s step seconds from its ``params`` (0 for an empty batch); compiled, for
    the compiled spans price with it too."""
    if num_seqs == 0:
        return 0.0
    n, m = int(p[0]), int(p[1])
    tb_x, tb_y, g_x, g_y = p[2:2 + n], p[2 + n:2 + 2 * n], p[2 + 2 * n:2 + 2 * n + m], p[2 + 2 * n + m:2 + 2 * n + 2 * m]
    b = float(num_seqs)
    k_eff = (num_tokens - num_seqs) / num_seqs
    return np.interp(b, tb_x, tb_y) * (1.0 + np.interp(b, g_x, g_y) * k_eff)


@njit(cache=True)
def table_step_time(p, num_seqs, num_tokens):
    """``TableCostModel``'s step seconds from its ``params`` (0 for an empty batch): linear in K within
    the rows of the B at or below and above, then linear in B; clamped at the ends. Compiled, for the
    compiled spans price with it too."""
    if num_seqs == 0:
        return 0.0
    nb = int(p[0])
    bs, starts = p[1:1 + nb], p[1 + nb:2 + 2 * nb]
    total = int(starts[nb])
    ks, ts = p[2 + 2 * nb:2 + 2 * nb + total], p[2 + 2 * nb + total:2 + 2 * nb + 2 * total]
    b, k_eff = float(num_seqs), (num_tokens - num_seqs) / num_seqs
    i = np.searchsorted(bs, b, side="right") - 1
    if i < 0 or i == nb - 1:
        j = max(i, 0)
        return np.interp(k_eff, ks[int(starts[j]):int(starts[j + 1])], ts[int(starts[j]):int(starts[j + 1])])
    t_lo = np.interp(k_eff, ks[int(starts[i]):int(starts[i + 1])], ts[int(starts[i]):int(starts[i + 1])])
    t_hi = np.interp(k_eff, ks[int(starts[i + 1]):int(starts[i + 2])], ts[int(starts[i + 1]):int(starts[i + 2])])
    return t_lo + (t_hi - t_lo) * (b - bs[i]) / (bs[i + 1] - bs[i])


class LinearGammaCostModel(TermsCostModel):
    """``T = t_base(B) * (1 + gamma(B) * K_eff)``, drafting ``draft_cost_s``; see the module docstring."""

    name = "linear_gamma"

    def __init__(self, t_base_s: float | Mapping[int, float], gamma: float | Mapping[int, float],
                 draft_cost_s: float = 0.0) -> None:
        self._tb = _table_over_b(t_base_s, "t_base_s", positive=True)
        self._g = _table_over_b(gamma, "gamma", positive=False)
        self.draft_cost_s = draft_cost_s
        # What ``linear_gamma_step_time`` reads (and the compiled spans): the two tables' sizes, then
        # each's Bs and values.
        self.params = np.array([len(self._tb[0]), len(self._g[0]), *self._tb[0], *self._tb[1], *self._g[0], *self._g[1]])

    def step_time_terms(self, t: BatchTerms) -> float:
        return linear_gamma_step_time(self.params, t.num_seqs, t.num_tokens)

    def draft_time(self, drafter: str, num_requests: int, k: int, pool_entries: int = 0) -> float:
        return self.draft_cost_s

    def describe(self) -> str:
        return (f"linear_gamma: T = t_base(B) (1 + gamma(B) K_eff) + {self.draft_cost_s * 1e3:g} ms drafting; "
                f"t_base over B {self._tb[0].astype(int).tolist()}, gamma over B {self._g[0].astype(int).tolist()}")


class TableCostModel(TermsCostModel):
    """Step seconds tabulated per (B, K), interpolated bilinearly; see the module docstring."""

    name = "table"

    def __init__(self, table_s: Mapping[int, Mapping[int, float]]) -> None:
        if not table_s:
            raise ConfigError("cost.table_s: required for the table model (step seconds by B, then K)")
        self._b: list[float] = []
        self._rows: list[tuple[np.ndarray, np.ndarray]] = []
        for b, row in sorted(table_s.items()):
            if int(b) < 1 or not row:
                raise ConfigError(f"cost.table_s: row B={b} needs B >= 1 and at least one K")
            ks = sorted(row)
            if ks[0] < 0 or any(row[k] <= 0 for k in ks):
                raise ConfigError(f"cost.table_s: row B={b} needs K >= 0 and step seconds > 0")
            self._b.append(float(b))
            self._rows.append((np.array(ks, dtype=float), np.array([row[k] for k in ks], dtype=float)))

        # What ``table_step_time`` reads (and the compiled spans): the B count, the Bs, where each row
        # starts among the Ks (and one past the last), then every row's Ks and its seconds.
        starts = np.cumsum([0] + [len(ks) for ks, _ in self._rows])
        self.params = np.array([len(self._b), *self._b, *starts, *np.concatenate([ks for ks, _ in self._rows]),
                                *np.concatenate([ts for _, ts in self._rows])], dtype=np.float64)

    def step_time_terms(self, t: BatchTerms) -> float:
        return table_step_time(self.params, t.num_seqs, t.num_tokens)

    def describe(self) -> str:
        return f"table: step seconds by (B, K) at B {[int(b) for b in self._b]}, bilinear, clamped; drafting folded in"
