"""Why a speculative configuration loses: its decode-step time split into cost terms, from the run's
own iteration records priced by the run's own cost model.

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

import numpy as np
import pandas as pd

from specplan.cost_models.base import CostModel, StepBatch

TERMS = ("plain", "accepted", "rejected", "padding", "drafting")
OVERHEADS = {"padding": "padding (verified positions nobody drafted)",
             "rejected": "rejected drafts (verify cost of drafts thrown away)",
             "drafting": "drafting (the drafter on the critical path)"}


def _forward(cost: CostModel, rows: int, positions: int, context: int) -> float:
    """``T(n)``: ``rows`` generation rows computing ``positions`` in all, spread as evenly as they go."""
    q = np.full(rows, positions // rows, dtype=np.int64)
    q[: positions % rows] += 1
    return cost.step_time(StepBatch(q, np.full(rows, context, dtype=np.int64), np.zeros(rows, dtype=bool)))


def cost_terms(iterations: pd.DataFrame, cost: CostModel, kv_block_size: int) -> dict:
    """Seconds per term (``TERMS``) summed over the speculating decode steps, how many there were,
    and their mean rows and K (where gamma is read: a schedule's K is not ``max_draft_len``)."""
    steady = iterations[iterations["spec_on"].astype(bool) & (iterations["prefill_tokens"] == 0)
                        & (iterations["gen_rows"] > 0)]
    total = dict.fromkeys(TERMS, 0.0)
    priced: dict[tuple[int, int, int], float] = {}  # steady steps repeat shapes (context moves by blocks)
    for it in steady.itertuples(index=False):
        b = int(it.gen_rows)
        ctx = int(it.kv_blocks_used * kv_block_size // b)
        t = []
        for n in (b, b + int(it.accepted), b + int(it.drafted), int(it.verified_tokens)):
            if (b, n, ctx) not in priced:
                priced[b, n, ctx] = _forward(cost, b, n, ctx)
            t.append(priced[b, n, ctx])
        parts = (t[0], t[1] - t[0], t[2] - t[1], t[3] - t[2], it.step_s - t[3])
        for name, value in zip(TERMS, parts):
            total[name] += float(value)
    n = len(steady)
    return {**{f"{k}_s": v for k, v in total.items()}, "steps": int(n),
            "mean_rows": float(steady["gen_rows"].mean()) if n else 0.0, "mean_k": float(steady["k"].mean()) if n else 0.0}


def largest_overhead(terms: dict) -> tuple[str, float]:
    """The biggest of padding, rejected drafts and drafting, and its share of the decode-step time."""
    step = sum(terms[f"{k}_s"] for k in TERMS)
    name = max(OVERHEADS, key=lambda k: terms[f"{k}_s"])
    return name, (terms[f"{name}_s"] / step if step > 0 else 0.0)


def explain_row(terms: dict, gamma_at_b: float) -> str:
    """One sentence: the largest overhead, the others' shares, and gamma at this run's mean batch
    rows and K (``gamma_at_b``, from its cost model)."""
    step = sum(terms[f"{t}_s"] for t in TERMS)
    if terms["steps"] == 0 or step <= 0:
        return "no speculating decode step (speculation never ran, or only alongside prefill)"
    name, share = largest_overhead(terms)
    others = ", ".join(f"{t} {terms[f'{t}_s'] / step:.0%}" for t in OVERHEADS if t != name)
    return (f"largest cost: {OVERHEADS[name]}, {share:.0%} of the decode-step time ({others}; accepted drafts "
            f"{terms['accepted_s'] / step:.0%}); gamma(B={_b(terms)}, K={_k(terms)}) = {gamma_at_b:.3f}")


def _b(terms: dict) -> int:
    return max(int(round(terms["mean_rows"])), 1)


def _k(terms: dict) -> int:
    return max(int(round(terms["mean_k"])), 1)


def losing_section(means: pd.DataFrame, axes: list[str], config_of: dict) -> list[str]:
    """Markdown lines explaining every point slower than its baseline (``speedup < 1``).

    ``means`` are seed means with the ``cost_terms.*`` columns of the sweep's records; ``config_of``
    maps a point's axis values (a tuple in ``axes`` order) to its config (for its cost model).
    """
    from specplan.cost_models.registry import make_cost_model
    from specplan.reports.analysis import label_rows

    losers = means[means["speedup"] < 1.0]
    if losers.empty:
        return ["Every point is at least as fast as its baseline."]
    needed = [f"cost_terms.{t}" for t in (*[f"{x}_s" for x in TERMS], "steps", "mean_rows", "mean_k")]
    if not set(needed) <= set(means.columns):
        return [f"{len(losers)} point(s) lose to their baseline, but this sweep's records hold no cost terms "
                "(recorded by an older specplan); run the sweep into a new folder to have them explained."]
    models: dict = {}
    lines = ["Each point slower than its baseline, by the largest cost term of its speculating decode steps "
             "(shares of their time, from the run's own iteration records):", ""]
    labels = label_rows(losers, axes)
    for (_, row), label in zip(losers.iterrows(), labels):
        cfg = config_of[tuple(row[a] for a in axes)]
        key = cfg.cost.model_dump_json()
        if key not in models:
            models[key] = make_cost_model(cfg.cost)
        model = models[key]
        terms = {c.removeprefix("cost_terms."): row[c] for c in needed}
        lines.append(f"- #{int(row['#'])} {label}: {row['speedup']:.2f}x; "
                     f"{explain_row(terms, model.gamma(_b(terms), _k(terms)))}")
    return lines
