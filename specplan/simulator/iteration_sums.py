"""The run summary's figures of the iteration log: sums and counts over every iteration.

They are integers, exact in any order, so a log whose chunks went to disk is read back a chunk at a
time and never held as whole columns (ten million requests take some ten million iterations).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from specplan.simulator.emissions import IterationLog

#: The iteration fields the summary reads. It sums and counts them (integers: exact in any order),
#: so a log with chunks on disk is read a chunk at a time, never as whole columns.
SUMMED = ("batch_rows", "drafted", "accepted", "verified_draft_tokens", "spec_on", "k", "charged_tokens",
          "prefill_tokens", "verified_tokens", "num_queued", "num_active")


def iteration_figures(iterations) -> dict:
    """The summary's figures of the iteration log: step count (``iterations``), sums of ``batch_rows``,
    ``drafted``, ``accepted`` and ``verified`` draft tokens, the speculating steps
    (``spec_iterations``), steps by K (``k_counts``; a step that did not speculate counts as K 0)
    and :func:`overcharge`'s (``overcharge``). ``iterations`` is an ``IterationLog`` (read chunk by
    chunk), a list of them (a fleet's replicas') or columns by name (a table, a dict of arrays)."""
    if isinstance(iterations, IterationLog):
        parts = iterations.chunks(SUMMED)
    elif isinstance(iterations, list):
        parts = (chunk for log in iterations for chunk in log.chunks(SUMMED))
    else:
        parts = [tuple(np.asarray(iterations[name]) for name in SUMMED)]
    sums, k_counts, over = Counter(), Counter(), Counter()
    for batch_rows, drafted, accepted, verified, spec_on, k, *charges in parts:
        spec_on = np.asarray(spec_on, dtype=bool)
        sums.update({"iterations": len(batch_rows), "batch_rows": int(np.asarray(batch_rows, dtype=np.int64).sum()),
                     "drafted": int(np.asarray(drafted).sum()), "accepted": int(np.asarray(accepted).sum()),
                     "verified": int(np.asarray(verified).sum()), "spec_iterations": int(spec_on.sum())})
        values, counts = np.unique(np.where(spec_on, np.asarray(k, dtype=np.int64), 0), return_counts=True)
        k_counts.update(dict(zip(values.tolist(), counts.tolist())))
        over.update(_overcharged(spec_on, batch_rows, *charges))
    return {**sums, "k_counts": dict(k_counts), "overcharge": dict(over)}


def overcharge(iterations) -> dict:
    """Token budget the scheduler charged beyond what the forward computed (placeholder draft tokens:
    ``charged_tokens - prefill_tokens - verified_tokens`` per iteration, where positive), in all, in
    iterations that did not speculate (after the gate latched, or while ``max_concurrency`` held it
    off: TensorRT-LLM still charges ``1 + K`` a row), and in iterations where requests waited (queued,
    or active and left out of the step: budget their prefill could have used under load).
    ``iterations`` as :func:`iteration_figures` takes it."""
    return iteration_figures(iterations)["overcharge"]


def _overcharged(spec_on, batch_rows, charged, prefill, verified, num_queued, num_active) -> dict:
    # ``overcharge``'s figures over some iterations' fields.
    col = lambda values: np.asarray(values, dtype=np.int64)  # noqa: E731
    over = np.maximum(col(charged) - col(prefill) - col(verified), 0)
    return {"charged_tokens": int(col(charged).sum()), "overcharged_tokens": int(over.sum()),
            "overcharged_tokens_spec_off": int(over[~spec_on].sum()),
            "overcharged_tokens_queued": int(over[(col(num_queued) > 0) | (col(num_active) > col(batch_rows))].sum())}
