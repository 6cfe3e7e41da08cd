"""Per-request, per-iteration and per-emission tables, and the run summary built from them.

Definitions (as vLLM's metrics and seed 002 use them):
- TTFT: first token time minus arrival; TPOT: (finish - first token) / (output tokens - 1) per
  request; ITL: the gap between consecutive emitted chunks of a request (a step can commit
  several tokens at once, so ITL is per chunk, not per token); E2E: finish minus arrival.
- acceptance rate = sum accepted / sum drafted; mean acceptance length = 1 + accepted / drafts,
  where a draft is one request-step that proposed at least one token; per-position acceptance
  = drafts that accepted at least i tokens / drafts.
- throughput = output tokens / makespan (first arrival to last finish).

The summary is computed from numpy columns (the trace's own arrays), so a run that never asks for
its tables never imports pandas; the tables are DataFrames of the same columns.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Optional

import numpy as np
from numba import njit

from specplan import memory
from specplan.simulator.emissions import ITERATION_FIELDS, Trace
from specplan.simulator.iteration_sums import iteration_figures
from specplan.simulator.k_bands import k_shares

if TYPE_CHECKING:
    import pandas as pd

PERCENTILES = (50, 90, 99)


def plain(value: Any) -> Any:
    """``value`` as strict JSON types: numpy scalars unwrapped, NaN and infinities as None."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return [plain(v) for v in value.tolist()]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    return value


def request_columns(trace: Trace) -> dict[str, np.ndarray]:
    """The numeric per-request columns (lengths, times, latency metrics; NaN where a request never
    completed), in table order."""
    out_len = trace.olen
    # (finish - first token) / (output tokens - 1), NaN for one-token outputs, in place: ten million
    # requests' temporaries are 80 MB each.
    tpot = trace.finish - trace.first_token
    steps = out_len - 1
    tpot /= np.maximum(steps, 1, out=steps)
    tpot[out_len <= 1] = np.nan
    del steps
    return {
        "prompt_len": trace.plen,
        "output_len": out_len,
        "arrival_s": trace.arrival,
        "first_token_s": trace.first_token,
        "finish_s": trace.finish,
        "ttft_s": trace.first_token - trace.arrival,
        "tpot_s": tpot,
        "e2e_s": trace.finish - trace.arrival,
        "generated": trace.generated,
    }


def request_table_columns(trace: Trace, requests=None, columns: Optional[dict] = None) -> dict[str, np.ndarray]:
    """The request table's columns: id, category and turn (``workloads.traffic.request_labels`` of
    ``requests``; ids by index without them), then :func:`request_columns` (``columns`` when already
    computed)."""
    from specplan.workloads.traffic import request_labels

    labels = request_labels(requests) if requests else {
        "request_id": np.arange(trace.n).astype(str), "category": np.full(trace.n, None, dtype=object),
        "turn": np.zeros(trace.n, dtype=np.int64)}
    return {**labels, **(columns if columns is not None else request_columns(trace))}


def request_table(trace: Trace, requests: Optional[list] = None, columns: Optional[dict] = None) -> "pd.DataFrame":
    """One row per request: :func:`request_table_columns`."""
    import pandas as pd

    return pd.DataFrame(request_table_columns(trace, requests, columns), copy=False)


def iteration_columns(trace: Trace) -> dict[str, np.ndarray]:
    """The iteration log's columns (``ITERATION_FIELDS``)."""
    return {name: trace.iterations.column(name) for name in ITERATION_FIELDS}


def iteration_table(trace: Trace) -> "pd.DataFrame":
    """One row per executor iteration."""
    import pandas as pd

    return pd.DataFrame(iteration_columns(trace), copy=False)


def batch_table(trace: Trace) -> "pd.DataFrame":
    """One row per scheduled sequence per iteration (recorded runs only)."""
    import pandas as pd

    b = trace.batches
    if not b:
        return pd.DataFrame({"iteration": [], "request": [], "query_tokens": [], "context_tokens": [], "is_prefill": []})
    return pd.DataFrame({
        "iteration": np.repeat(np.arange(1, len(b) + 1), [len(x[0]) for x in b]),
        "request": np.concatenate([x[0] for x in b]),
        "query_tokens": np.concatenate([x[1] for x in b]),
        "context_tokens": np.concatenate([x[2] for x in b]),
        "is_prefill": np.concatenate([x[3] for x in b]),
    })


def emission_columns(trace: Trace) -> dict[str, np.ndarray]:
    """The emission log's columns: request index, time, tokens."""
    rids, times, toks = trace.emissions.columns()
    return {"request": rids, "time_s": times, "tokens": toks}


def emission_table(trace: Trace) -> "pd.DataFrame":
    """One row per emitted chunk: request index, time, tokens."""
    import pandas as pd

    return pd.DataFrame(emission_columns(trace), copy=False)


def inter_token_latencies(emissions: Mapping, out: Optional[np.ndarray] = None) -> np.ndarray:
    """Gaps between consecutive chunks of the same request (the first chunk is TTFT, not ITL), in
    the row order of the later chunk; ``emissions`` has ``request`` and ``time_s`` columns (a
    DataFrame or a dict of arrays). The executor's rows are already in time order; rows that are
    not are put in time order first. With ``out`` (room for a gap a row) the gaps are written at
    its start and the view of them is returned."""
    return _gaps(*_in_time_order(emissions["request"], emissions["time_s"]), out)


def _gaps(rids: np.ndarray, times: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
    # inter_token_latencies of columns already in time order.
    if times.size == 0:
        return np.array([])
    gaps = memory.empty(len(times)) if out is None else out
    return gaps[:_row_order_gaps(rids, times, np.full(int(rids.max()) + 1, np.nan), gaps)]


def _in_time_order(rids, times) -> tuple[np.ndarray, np.ndarray]:
    # An emission log's request and time columns as contiguous arrays, rows put in time order when not.
    times, rids = np.ascontiguousarray(times, dtype=float), np.ascontiguousarray(rids)
    if times.size and not _in_order(times):
        by_time = np.argsort(times, kind="stable")
        times, rids = times[by_time], rids[by_time]
    return rids, times


@njit(cache=True)
def _in_order(times):
    for i in range(1, len(times)):
        if times[i] < times[i - 1]:
            return False
    return True


@njit(cache=True)
def _row_order_gaps(rids, times, last, gaps):
    # One pass, each request's previous chunk time remembered in ``last`` (NaN before its first; a
    # log read in chunks carries it from one to the next): linear, where grouping needs a sort.
    # Writes the gaps into ``gaps`` and returns how many.
    k = 0
    for i in range(len(times)):
        r = rids[i]
        if not np.isnan(last[r]):
            gaps[k] = times[i] - last[r]
            k += 1
        last[r] = times[i]
    return k


class UnionITL:
    """The ITL figures of several emission logs together (a fleet's replicas'), as ``_pcts`` gives
    them for all their gaps in one array, without making that array.

    Each log's gaps are taken in turn into one buffer (``gaps``), where its own summary reorders
    them; ``seen`` then notes the order statistics np.percentile interpolates for that log, which
    the reordering holds in place. Each of the union's lies between the least and the greatest of
    the logs' own, so ``figures`` takes the gaps again in one compiled pass over the logs, counts
    those below that range, gathers the few inside it and partitions only those. The pass checks
    that the ranks fell inside; where they do not (tiny logs), all the gaps are partitioned, so the
    percentiles are np.percentile's in every case. The mean is the logs' sums over their count."""

    def __init__(self, logs: list[tuple[np.ndarray, np.ndarray]]) -> None:
        self.logs = [_in_time_order(rids, times) for rids, times in logs]  # (request, time_s) columns
        self.buffer = memory.empty(max((len(t) for _, t in self.logs), default=0))
        self.lo, self.hi = np.full(len(PERCENTILES), np.inf), np.full(len(PERCENTILES), -np.inf)
        self.n, self.total = 0, 0.0

    def gaps(self, i: int) -> np.ndarray:
        """Log ``i``'s gaps (``inter_token_latencies``), in the buffer the next call reuses."""
        gaps = _gaps(*self.logs[i], self.buffer)  # the logs were put in time order once, in __init__
        self.n, self.total = self.n + len(gaps), self.total + float(gaps.sum())
        return gaps

    def seen(self, gaps: np.ndarray) -> None:
        """A log's gaps after ``_pcts(gaps, in_place=True)`` reordered them (any order is correct,
        that one keeps ``figures`` to one pass)."""
        if len(gaps):
            own = _neighbours(len(gaps))
            self.lo, self.hi = np.minimum(self.lo, gaps[own[:, 0]]), np.maximum(self.hi, gaps[own[:, 1]])

    def figures(self) -> dict:
        """``p50``, ``p90``, ``p99`` and ``mean`` of all the logs' gaps."""
        if self.n == 0:
            return {f"p{p}": None for p in PERCENTILES} | {"mean": None}
        cand = memory.empty((len(PERCENTILES), max(4096, self.n // 8)))  # pages touched only as filled
        fits, below = np.zeros(len(PERCENTILES), dtype=np.int64), np.zeros(len(PERCENTILES), dtype=np.int64)
        for rids, times in self.logs:
            if len(times):
                _count_and_gather(rids, times, int(rids.max()) + 1, self.lo, self.hi, cand, fits, below)
        stats, everything = np.empty((len(PERCENTILES), 2)), None
        for j, (k, m) in enumerate(zip(_neighbours(self.n).tolist(), fits.tolist())):
            want = [r - below[j] for r in k]
            if m < 0 or want[0] < 0 or want[1] >= m:  # the ranks fell outside the range: select from all
                if everything is None:
                    everything = self._all_gaps()
                everything.partition(k)  # in place: any order the earlier partitions left is as good
                stats[j] = everything[k]
            else:
                stats[j] = np.partition(cand[j, :m], want)[want]
        return ({f"p{p}": _lerp(self.n, p / 100, a, b) for p, (a, b) in zip(PERCENTILES, stats.tolist())}
                | {"mean": self.total / self.n})

    def _all_gaps(self) -> np.ndarray:
        # Every log's gaps in one array of fresh ordinary pages, reordered by the partitions (gaps
        # of equal steps tie, so a speculating fleet's middle ranks can overflow ``cand``: there
        # np.partition's copy and a concatenation cost 130 MB of huge pages, 0.2 CPU-s).
        out, k = memory.empty(self.n), 0
        for rids, times in self.logs:
            k += len(_gaps(rids, times, out[k:]))
        return out


def _neighbours(n: int) -> np.ndarray:
    # The two order statistics np.percentile's linear method interpolates between, per percentile
    # (its own arithmetic: numpy.lib._function_base_impl, the linear method's virtual index and
    # _get_indexes).
    virtual = (n - 1) * np.true_divide(PERCENTILES, 100)
    prev = np.floor(virtual).astype(np.int64)
    return np.where((virtual >= n - 1)[:, None], n - 1, np.stack([prev, prev + 1], axis=1))


def _lerp(n: int, q: float, a: float, b: float) -> float:
    # numpy's linear interpolation between the neighbours at fraction gamma (``_lerp``), in the same
    # floating-point operations; at or past the last value both neighbours are the maximum.
    virtual = (n - 1) * q
    if virtual >= n - 1:
        return float(a)
    t = virtual - math.floor(virtual)
    diff = b - a
    return float(b - diff * (1 - t)) if t >= 0.5 else float(a + diff * t)


@njit(cache=True)
def _count_and_gather(rids, times, num_requests, lo, hi, cand, fits, below):
    # The gaps again, as _row_order_gaps takes them, fused with the count: per percentile j, those
    # below lo[j] counted into below[j] and those within [lo[j], hi[j]] gathered into cand[j]
    # (fits[j]; -1 once they overflow). Taking them through the buffer first costs a 100k-request
    # fleet 0.09 CPU-s more, and a compiled generator shared with _row_order_gaps ten times that.
    last = np.full(num_requests, np.nan)
    room = cand.shape[1]
    for i in range(len(times)):
        r = rids[i]
        if not np.isnan(last[r]):
            x = times[i] - last[r]
            for j in range(len(lo)):
                if x < lo[j]:
                    below[j] += 1
                elif x <= hi[j] and fits[j] >= 0:
                    if fits[j] == room:
                        fits[j] = -1
                    else:
                        cand[j, fits[j]] = x
                        fits[j] += 1
        last[r] = times[i]


def _pcts(values: np.ndarray, in_place: bool = False) -> dict:
    """Percentiles and mean; with ``in_place`` the values may be reordered (no copy of them)."""
    v = np.asarray(values, dtype=float)
    mean = float(v.mean()) if v.size else math.nan  # before the partition: the sum's rounding follows the order
    if math.isnan(mean):  # NaN values (requests that never finished) make it NaN: only then filter them
        v = v[~np.isnan(v)]
        mean = float(v.mean()) if v.size else math.nan
    if v.size == 0:
        return {f"p{p}": None for p in PERCENTILES} | {"mean": None}
    # one partition for all three order statistics; each value is the one a call per percentile gives
    out = {f"p{p}": float(x) for p, x in zip(PERCENTILES, np.percentile(v, PERCENTILES, overwrite_input=in_place))}
    out["mean"] = mean
    return out


def summarize(trace: Trace, requests: Mapping, iterations: Mapping, itl,
              slo_ttft_s: Optional[float] = None, slo_tpot_s: Optional[float] = None) -> dict:
    """The run's headline figures as a flat JSON-able dict.

    ``requests`` holds the :func:`request_columns` and ``iterations`` the iteration log as
    :func:`iteration_figures` takes it; ``itl`` is the run's inter-token gaps
    (:func:`inter_token_latencies`), which this reorders: a 100k-request run has tens of millions,
    and a copy to take their percentiles would be as large; or their figures already taken (a
    fleet's, from its replicas' gaps: :class:`UnionITL`).
    """
    output_len = np.asarray(requests["output_len"])
    arrival, finish = np.asarray(requests["arrival_s"]), np.asarray(requests["finish_s"])
    ttft, tpot = np.asarray(requests["ttft_s"]), np.asarray(requests["tpot_s"])
    done = ~np.isnan(finish)
    out_tokens = int(output_len.sum(where=done))
    start = float(np.nanmin(arrival)) if (~np.isnan(arrival)).any() else 0.0
    end = float(np.nanmax(finish)) if done.any() else start
    span = max(end - start, 1e-12)
    hist = trace.accepted_hist
    drafts = int(hist.sum())
    it = iteration_figures(iterations)
    ran, drafted, accepted, verified = it["iterations"], it["drafted"], it["accepted"], it["verified"]
    meets = done.copy()
    if slo_ttft_s is not None:
        meets &= ttft <= slo_ttft_s
    if slo_tpot_s is not None:
        meets &= np.where(np.isnan(tpot), 0.0, tpot) <= slo_tpot_s
    survival = hist[::-1].cumsum()[::-1][1:]  # drafts that accepted >= i, i = 1..K
    return {
        "completed_requests": int(done.sum()),
        "output_tokens": out_tokens,
        "makespan_s": span,
        "throughput_tok_s": out_tokens / span,
        "request_throughput_req_s": int(done.sum()) / span,
        "goodput_tok_s": float(output_len.sum(where=meets)) / span,
        "goodput_req_s": int(meets.sum()) / span,
        "mean_acceptance_length": (1.0 + accepted / drafts) if drafts else None,
        "acceptance_rate": (accepted / drafted) if drafted else None,
        "per_position_acceptance": (survival / drafts).tolist() if drafts else [],
        "accepted_histogram": np.trim_zeros(hist, "b").tolist(),  # [i] = drafts that accepted i tokens
        "drafted_tokens": drafted,  # the drafters' proposals, before any padding
        "verified_draft_tokens": verified,  # draft positions the forwards verified, CUDA-graph padding included
        "draft_padding_tokens": verified - drafted,
        "accepted_tokens": accepted,
        "iterations": ran,
        "spec_iterations": it["spec_iterations"],
        "k_shares": k_shares(it["k_counts"]),
        "gate_tripped_iteration": trace.gate_tripped_iteration,
        "gate_tripped_s": trace.gate_tripped_time,
        "preemptions": trace.preemptions,
        "mean_batch_rows": it["batch_rows"] / ran if ran else 0.0,  # np.mean's: the integer sum is exact
        "ttft_s": _pcts(ttft),
        "tpot_s": _pcts(tpot),
        "itl_s": itl if isinstance(itl, dict) else _pcts(itl, in_place=True),
        "e2e_s": _pcts(np.asarray(requests["e2e_s"])),
        **(it["overcharge"] if ran else {}),
    }
