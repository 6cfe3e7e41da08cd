"""Step-time errors by class of step, shared by the engine-step fit (``step_fit``) and ``validate --engine
vllm``'s timing (``validation.vllm_timing``): where a profile's error sits, and request TPOT from step times.

A row table has one row per (``step``, ``request``) with ``committed`` tokens and, for the classes,
``is_prefill`` and ``drafted`` (a step log, ``engine_steps.csv``).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

BATCH_EDGES = (1, 2, 4, 8, 16, 32, 64, 128, 256)  # decode steps grouped by rows: 1, 2, 3-4, 5-8, ...
# The engine's first step carries its one-time start-up (the first forward: measured on vLLM's CPU run
# at about 1 s more than the same step later, 2x a 1,024-token prefill), not a cost of serving, which
# the simulator prices in steady state. Step fits skip it, and step, throughput and TPOT comparisons
# start after it (request TPOT already does: it runs from a request's first emission).
WARMUP_STEPS = 1


def step_classes(rows: pd.DataFrame) -> pd.DataFrame:
    """Per step (index ``step``): ``kind`` (``prefill`` when any row prefills, else ``decode B=a-b`` by its
    rows, ``BATCH_EDGES``) and ``drafts`` (``draft-on`` when any row verifies drafts, else ``draft-off``)."""
    g = rows.groupby("step", sort=True)
    n, prefill, drafted = g.size(), g["is_prefill"].any(), g["drafted"].sum()
    edges = np.asarray(BATCH_EDGES)
    hi = edges[np.minimum(np.searchsorted(edges, n.to_numpy()), len(edges) - 1)]
    lo = np.where(hi == 1, 1, hi // 2 + 1)
    label = [f"decode B={a}" if a == b else f"decode B={a}-{b}" for a, b in zip(lo, hi)]
    kind = np.where(prefill.to_numpy(), "prefill", label)
    return pd.DataFrame({"kind": kind, "drafts": np.where(drafted.to_numpy() > 0, "draft-on", "draft-off")},
                        index=n.index)


def residuals(classes: pd.DataFrame, measured: Sequence[float], predicted: Sequence[float]) -> list[dict]:
    """Where the step-time error sits: per class of ``step_classes`` (prefill, decode by batch, draft-on,
    draft-off), its steps, median absolute and mean signed relative error, and its share of the total
    absolute error in seconds (the shares of each grouping sum to 1)."""
    m, p = np.asarray(measured, dtype=float), np.asarray(predicted, dtype=float)
    rel, gap = (p - m) / m, np.abs(p - m)
    total = gap.sum() or 1.0
    out = []
    for column in ("kind", "drafts"):
        labels = classes[column].to_numpy()
        for label in sorted(set(labels), key=_class_order):
            sel = labels == label
            out.append({"term": str(label), "steps": int(sel.sum()), "median_ape": float(np.median(np.abs(rel[sel]))),
                        "bias": float(rel[sel].mean()), "share_of_error": float(gap[sel].sum() / total)})
    return out


def _class_order(label: str):
    """prefill first, then decode classes by batch, then draft-off / draft-on."""
    if label.startswith("decode B="):
        return (1, int(label[len("decode B="):].split("-")[0]))
    return (0 if label == "prefill" else 2, label)


def request_tpot(rows: pd.DataFrame, step_s: Sequence[float]) -> pd.Series:
    """Per request of a row table (``step`` 1-based, ``request``, ``committed``) with those step times."""
    ends = np.cumsum(np.asarray(step_s, dtype=float))
    emitted = rows[rows["committed"] > 0]
    t = pd.Series(ends[emitted["step"].to_numpy() - 1], index=emitted.index)
    g = pd.DataFrame({"request": emitted["request"], "t": t, "tokens": emitted["committed"]}).groupby("request")
    tokens = g["tokens"].sum()
    span = g["t"].max() - g["t"].min()
    return (span / (tokens - 1)).where(tokens > 1).dropna()
