"""The run summary's figures of the iteration log: sums and counts over every iteration.

They are integers, exact in any order, so a log whose chunks went to disk is read back a chunk at a
time and never held as whole columns (ten million requests take some ten million iterations).
"""

from __future__ import annotations

import numpy as np

from specplan.simulator.emissions import IterationLog

#: The iteration fields the summary reads. It sums and counts them (integers: exact in any order),
#: so a log with chunks on disk is read a chunk at a time, never as whole columns.
SUMMED = ("batch_rows", "drafted", "accepted", "verified_draft_tokens", "spec_on", "k", "charged_tokens",
          "prefill_tokens", "verified_tokens", "num_queued", "num_active")


def iteration_figures(iterations) -> dict:
    """The summary's figures of the iteration log: step count, sums of batch rows, drafted, accepted
    and verified draft tokens, the speculating steps, steps by K (a step that did not speculate
    counts as K 0) and :func:`overcharge`'s. ``iterations`` is an ``IterationLog`` (read chunk by
    chunk), a list of them (a fleet's replicas') or columns by name (a table, a dict of arrays)."""
    if isinstance(iterations, IterationLog):
        parts = iterations.chunks(SUMMED)
    elif isinstance(iterations, list):
        parts = (chunk for log in iterations for chunk in log.chunks(SUMMED))
    else:
        parts = [tuple(np.asarray(iterations[name]) for name in SUMMED)]
    out = {"iterations": 0, "batch_rows": 0, "drafted": 0, "accepted": 0, "verified": 0, "spec_iterations": 0,
           "k_counts": {}, "overcharge": dict.fromkeys(_OVERCHARGE_KEYS, 0)}
    for batch_rows, drafted, accepted, verified, spec_on, k, *charges in parts:
        spec_on = np.asarray(spec_on, dtype=bool)
        out["iterations"] += len(batch_rows)
        out["batch_rows"] += int(np.asarray(batch_rows, dtype=np.int64).sum())
        out["drafted"] += int(np.asarray(drafted).sum())
        out["accepted"] += int(np.asarray(accepted).sum())
        out["verified"] += int(np.asarray(verified).sum())
        out["spec_iterations"] += int(spec_on.sum())
        values, counts = np.unique(np.where(spec_on, np.asarray(k, dtype=np.int64), 0), return_counts=True)
        for v, c in zip(values.tolist(), counts.tolist()):
            out["k_counts"][v] = out["k_counts"].get(v, 0) + c
        for key, value in _overcharged(spec_on, batch_rows, *charges).items():
            out["overcharge"][key] += value
    return out


_OVERCHARGE_KEYS = ("charged_tokens", "overcharged_tokens", "overcharged_tokens_spec_off", "overcharged_tokens_queued")


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
