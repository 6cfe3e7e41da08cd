"""The simulated iterations as steps to replay: one ``Step`` per iteration of a recorded run."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from specplan.cost_models.base import StepBatch


@dataclass(frozen=True)
class Step:
    """One iteration as the simulator scheduled it.

    Per row: the request index, the positions computed (``query``: a prefill chunk, or 1 + verified
    draft positions), the KV resident before the step (``context``), whether it is a prefill row, and
    whether it verifies a draft (``drafting``). ``committed`` is a drafting row's committed output
    length before the step (its drafter sees ``prompt + output[:committed]``); 0 elsewhere.
    """

    iteration: int
    requests: np.ndarray
    query: np.ndarray
    context: np.ndarray
    prefill: np.ndarray
    drafting: np.ndarray
    committed: np.ndarray
    k: int

    @property
    def num_tokens(self) -> int:
        return int(self.query.sum())

    @property
    def batch(self) -> StepBatch:
        """The cost model's view of the step."""
        return StepBatch(self.query, self.context, self.prefill)


def steps_from_run(batches: pd.DataFrame, iterations: pd.DataFrame, prompt_lens: np.ndarray,
                   drafts_at_prefill: bool = False) -> list[Step]:
    """Steps from a recorded run's ``batches`` and ``iterations`` tables.

    Drafting rows are the engine's (``Executor._draft``): every generation row of an iteration with
    speculation on, and, for a drafter that drafts at prefill, the chunk that completes a prompt. A
    generation row holds ``prompt + committed - 1`` tokens (the newest committed token is written by
    this step), so ``committed = context - prompt_len + 1``.
    """
    b = batches.sort_values(["iteration"], kind="stable")
    its = iterations.set_index("iteration")
    cuts = np.flatnonzero(np.diff(b["iteration"].to_numpy())) + 1
    cols = {c: np.split(b[c].to_numpy(), cuts) for c in ("iteration", "request", "query_tokens", "context_tokens",
                                                         "is_prefill")}
    steps = []
    for it, rid, q, ctx, pre in zip(*(cols[c] for c in ("iteration", "request", "query_tokens", "context_tokens",
                                                         "is_prefill"))):
        row = its.loc[int(it[0])]
        pre = pre.astype(bool)
        rid, q, ctx = rid.astype(np.int64), q.astype(np.int64), ctx.astype(np.int64)
        spec = bool(row["spec_on"]) and int(row["k"]) > 0
        drafting = ~pre if spec else np.zeros(len(rid), dtype=bool)
        if spec and drafts_at_prefill:
            drafting = drafting | (pre & (ctx + q >= prompt_lens[rid]))
        committed = np.where(drafting & ~pre, ctx - prompt_lens[rid] + 1, 0)
        steps.append(Step(int(it[0]), rid, q, ctx, pre, drafting, committed, int(row["k"]) if spec else 0))
    return steps
