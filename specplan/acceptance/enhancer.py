"""TensorRT-LLM's SA draft enhancer: a suffix-automaton override on a model-based drafter.

``SADraftEnhancer`` runs the SA extend (or global search) on a side stream while the neural draft
loop (MTP, Eagle3) runs; afterwards ``draft[i, :] = sa_draft[i, :K] if match_len[i] >= threshold
else neural_draft[i, :]``: the whole row is replaced. The neural drafter's acceptance comes from a
parametric or recorded oracle; the SA side is the exact drafter over the real tokens.
"""

from __future__ import annotations

import numpy as np

from specplan.acceptance.oracles import AcceptanceOracle


class SAEnhancedOracle(AcceptanceOracle):
    """Per row: the SA draft when its match length reaches ``threshold``, else the neural draft."""

    def __init__(self, neural: AcceptanceOracle, sa, threshold: int) -> None:
        super().__init__(neural.prompt_lens, neural.output_lens)
        self.neural, self.sa, self.threshold = neural, sa, threshold
        self.rows = 0
        self.overrides = 0
        self.neural_accepted = 0  # what the neural drafter alone would have accepted on the same rows
        self.accepted = 0

    def draft(self, rids, committed, k):
        n_drafted, n_accepted = self.neural.draft(rids, committed, k)
        s_drafted, s_accepted, match = self.sa.draft_with_match(rids, committed, k)
        use_sa = match >= self.threshold
        drafted = np.where(use_sa, s_drafted, n_drafted)
        accepted = np.where(use_sa, s_accepted, n_accepted)
        self.rows += len(rids)
        self.overrides += int(use_sa.sum())
        self.neural_accepted += int(n_accepted.sum())
        self.accepted += int(accepted.sum())
        return drafted, accepted

    def on_commit(self, rids, committed) -> None:
        self.neural.on_commit(rids, committed)
        self.sa.on_commit(rids, committed)

    def on_finish(self, rids) -> None:
        self.neural.on_finish(rids)
        self.sa.on_finish(rids)

    def metrics(self) -> dict:
        """How often the override fired, and the acceptance it gained over the neural drafter alone."""
        return {
            "sa_override_rate": self.overrides / self.rows if self.rows else 0.0,
            "sa_accepted_gain": (self.accepted / self.neural_accepted - 1.0) if self.neural_accepted else None,
            **self.sa.metrics(),
        }
