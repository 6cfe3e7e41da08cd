"""A run's decode-step time split into cost terms, from its own iteration records priced by its own
cost model (what ``specplan report`` uses to say why a configuration loses).

Over the iterations that speculate and prefill nothing (the steady decode steps, which dominate a
run), with ``B`` rows, ``d`` drafted and ``a`` accepted tokens and ``v`` verified positions in all
(the step's query tokens: one per row plus the verified draft width), and ``T(n)`` the forward
time of ``B`` rows computing ``n`` positions in all:

- ``plain``: ``T(B)``, the step a non-speculative engine would take for the same rows;
- ``accepted``: ``T(B + a) - T(B)``, verifying the tokens that are kept (what speculation buys);
- ``rejected``: ``T(B + d) - T(B + a)``, verifying drafts that are thrown away (gamma at this B);
- ``padding``: ``T(v) - T(B + d)``, verified positions nobody drafted (TensorRT-LLM's NGram path
  pads every row to ``1 + max_draft_len``; a one-model path to the runtime K);
- ``drafting``: ``step_s - T(v)``, the rest of the recorded step: the drafter on the critical path.

Context per row is taken as the KV in use over the rows (``kv_blocks_used * kv_block_size / B``);
for the context-free ``linear_gamma`` and ``table`` models the split is exact.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from specplan.cost_models.base import CostModel, StepBatch

TERMS = ("plain", "accepted", "rejected", "padding", "drafting")


def _forward(cost: CostModel, rows: int, positions: int, context: int) -> float:
    """``T(n)``: ``rows`` generation rows computing ``positions`` in all, spread as evenly as they go."""
    q = np.full(rows, positions // rows, dtype=np.int64)
    q[: positions % rows] += 1
    return cost.step_time(StepBatch(q, np.full(rows, context, dtype=np.int64), np.zeros(rows, dtype=bool)))


def cost_terms(iterations: Mapping, cost: CostModel, kv_block_size: int) -> dict:
    """Seconds per term (``TERMS``) summed over the speculating decode steps, how many there were,
    and their mean rows and K (where gamma is read: a schedule's K is not ``max_draft_len``).
    ``iterations`` is the iteration table or its columns (``SimResult.table_columns``)."""
    col = lambda name: np.asarray(iterations[name])  # noqa: E731
    steady = np.flatnonzero(col("spec_on").astype(bool) & (col("prefill_tokens") == 0) & (col("gen_rows") > 0))
    rows = zip(*(col(name)[steady].tolist() for name in ("gen_rows", "kv_blocks_used", "accepted", "drafted",
                                                          "verified_tokens", "step_s")))
    total = dict.fromkeys(TERMS, 0.0)
    priced: dict[tuple[int, int, int], float] = {}  # steady steps repeat shapes (context moves by blocks)
    for b, blocks, accepted, drafted, verified, step_s in rows:
        ctx = blocks * kv_block_size // b
        t = []
        for n in (b, b + accepted, b + drafted, verified):
            if (b, n, ctx) not in priced:
                priced[b, n, ctx] = _forward(cost, b, n, ctx)
            t.append(priced[b, n, ctx])
        parts = (t[0], t[1] - t[0], t[2] - t[1], t[3] - t[2], step_s - t[3])
        for name, value in zip(TERMS, parts):
            total[name] += float(value)
    n = len(steady)
    return {**{f"{k}_s": v for k, v in total.items()}, "steps": int(n),
            "mean_rows": float(col("gen_rows")[steady].mean()) if n else 0.0,
            "mean_k": float(col("k")[steady].mean()) if n else 0.0}
