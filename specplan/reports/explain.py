"""Why a speculative configuration loses: the largest of its cost terms
(``specplan.simulator.cost_split``), with gamma at its batch size."""

from __future__ import annotations

import pandas as pd

from specplan.simulator.cost_split import TERMS

OVERHEADS = {"padding": "padding (verified positions nobody drafted)",
             "rejected": "rejected drafts (verify cost of drafts thrown away)",
             "drafting": "drafting (the drafter on the critical path)"}


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
