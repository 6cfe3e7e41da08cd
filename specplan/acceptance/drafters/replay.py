"""Standalone replay: every request of a trace, one at a time, at a fixed K, with vLLM's metrics.

A step at history length h = prompt_len + committed drafts, accepts ``a`` (the common prefix of
the draft and the true continuation) and commits ``a + 1`` tokens, never past the end of the
output. TensorRT-LLM and vLLM draft from the first generation step on (the prefill commits the
first token); prompt lookup (both variants) also drafts in the prefill (``committed = 0``).
Cross-request drafter state (public pool, global pools, global tree) carries over from one
request to the next in trace order.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import pandas as pd

from specplan.acceptance.drafters.base import lcp
from specplan.acceptance.drafters.cache import PrecomputeCache
from specplan.acceptance.drafters.oracle import build_drafter
from specplan.acceptance.drafters.settings import DrafterSettings
from specplan.acceptance.drafters.table import TableOracle

STEP_COLUMNS = ["rid", "id", "category", "turn", "position", "committed", "drafted", "accepted", "commit"]


def replay_trace(requests: Sequence, settings: DrafterSettings, k: Optional[int] = None, *,
                 keep_drafts: bool = False, cache: Optional[PrecomputeCache] = None,
                 max_batch_size: int = 64) -> pd.DataFrame:
    """Replay ``requests`` with one drafter at fixed K; one row per step.

    Columns: ``rid`` (index in ``requests``), ``id``, ``category``, ``turn``, ``position`` (history
    length when the draft was made), ``committed`` (output tokens before the step), ``drafted``,
    ``accepted``, ``commit`` (tokens the step committed), and with ``keep_drafts`` a ``draft``
    column of token lists. ``k`` defaults to ``settings.max_draft_len``.
    """
    k = settings.max_draft_len if k is None else int(k)
    if k > settings.max_draft_len:
        settings = settings.with_(max_draft_len=k)
    oracle = build_drafter(settings, requests, max_batch_size, cache)
    c0 = 0 if oracle.drafts_at_prefill else 1
    if oracle.precomputed:
        rows = _replay_tables(oracle, requests, k, c0, keep_drafts)
    else:
        rows = _replay_online(oracle, requests, k, c0, keep_drafts)
    df = pd.DataFrame(rows, columns=STEP_COLUMNS + (["draft"] if keep_drafts else []))
    for col in ("rid", "turn", "position", "committed", "drafted", "accepted", "commit"):
        df[col] = df[col].astype(np.int64)
    return df


def _meta(rid, req):
    return rid, req.id, req.category, req.turn


def _replay_online(oracle, requests, k, c0, keep_drafts):
    """Step by step through the oracle, calling ``on_commit`` / ``on_finish`` as the simulator does."""
    rows = []
    for rid, req in enumerate(requests):
        P, O = req.prompt_len, req.output_len
        out = req.output_ids
        c = min(c0, O)
        if c:
            oracle.on_commit(np.array([rid]), np.array([c]))
        while c < O:
            toks = oracle.propose(rid, c, k)
            a = lcp(toks, out[c:])
            step = min(a + 1, O - c)
            rows.append((*_meta(rid, req), P + c, c, len(toks), a, step) + ((toks.tolist(),) if keep_drafts else ()))
            c += step
            oracle.on_commit(np.array([rid]), np.array([c]))
        oracle.on_finish(np.array([rid]))
    return rows


def _replay_tables(oracle: TableOracle, requests, k, c0, keep_drafts):
    """Per-request drafters: every position answered in one gather, then each request's step chain."""
    olen = oracle.output_lens
    rids = np.repeat(np.arange(len(requests)), olen)
    committed = np.concatenate([np.arange(o) for o in olen]) if len(olen) else np.zeros(0, np.int64)
    drafted, accepted = oracle.draft(rids, committed, k)
    rows = []
    for rid, req in enumerate(requests):
        P, O = req.prompt_len, req.output_len
        base = oracle._off[rid]
        c = min(c0, O)
        while c < O:
            d, a = int(drafted[base + c]), int(accepted[base + c])
            extra = ()
            if keep_drafts:
                s = int(oracle._src[base + c])
                extra = (oracle._tokens[rid][s:s + d].tolist() if d else [],)
            step = min(a + 1, O - c)
            rows.append((*_meta(rid, req), P + c, c, d, a, step) + extra)
            c += step
    return rows


def summarize_replay(steps: pd.DataFrame, k: int, by_category: bool = True) -> pd.DataFrame:
    """vLLM's spec-decode metrics (``v1/spec_decode/metrics.py``) per category and overall.

    A draft is a step that proposed at least one token. Mean acceptance length = 1 + accepted /
    drafts; acceptance rate = accepted / drafted tokens; ``per_position[i]`` = drafts that accepted
    more than i tokens / drafts; ``histogram[j]`` = drafts with acceptance length j + 1 (j = 0..K).
    ``tokens_per_step`` counts every step, drafting or not (output tokens the steps committed).
    """
    groups = []
    if by_category and steps["category"].notna().any():
        for cat, g in steps.groupby(steps["category"].fillna("(none)"), sort=True):
            groups.append((str(cat), g))
    groups.append(("overall", steps))
    out = []
    for name, g in groups:
        d = g["drafted"].to_numpy()
        a = g["accepted"].to_numpy()
        drafting = d > 0
        n_drafts = int(drafting.sum())
        acc = int(a[drafting].sum())
        draft_tokens = int(d.sum())
        hist = np.bincount(a[drafting], minlength=k + 1)[:k + 1]
        per_pos = [(int((a[drafting] > i).sum()) / n_drafts) if n_drafts else 0.0 for i in range(k)]
        out.append({
            "group": name,
            "requests": int(g["rid"].nunique()),
            "steps": int(len(g)),
            "drafts": n_drafts,
            "draft_tokens": draft_tokens,
            "accepted_tokens": acc,
            "mean_acceptance_length": 1.0 + acc / n_drafts if n_drafts else 1.0,
            "acceptance_rate": acc / draft_tokens if draft_tokens else 0.0,
            "tokens_per_step": float(g["commit"].sum() / len(g)) if len(g) else 0.0,
            "histogram": hist.astype(int).tolist(),
            "per_position": per_pos,
        })
    return pd.DataFrame(out)

