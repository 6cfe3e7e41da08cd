"""Control-plane decisions as pure functions and tiny classes, in the engines' own semantics.

Nothing here knows about SimPy or time: the executor loop calls these in the engine's order.
Sources: TensorRT-LLM ``_torch/speculative/{utils,drafter,speculation_gate}.py`` and
``llmapi/llm_args.py``; vLLM ``v1/spec_decode/dynamic/utils.py`` (see docs/semantics.md).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from typing import Callable, Optional, Sequence

import numpy as np
from numba import njit

from specplan.config_rules import CTX_INFINITY


def draft_len_for_batch_size(schedule: dict[int, int], batch_size: int, lookup: str = "upper_bound") -> int:
    """K for a batch size from a TensorRT-LLM ``draft_len_schedule``.

    ``upper_bound`` (current ``utils.get_draft_len_for_batch_size``): keys are the largest batch
    size allowed that K; ``bisect_left``; 0 above the largest key. ``lower_bound`` (the older
    ``Drafter.get_draft_len_for_batch_size``): keys are where a band starts; ``bisect_right``; 0
    below the smallest key.
    """
    keys = sorted(schedule)
    if lookup == "upper_bound":
        idx = bisect_left(keys, batch_size)
        return schedule[keys[idx]] if idx < len(keys) else 0
    if lookup == "lower_bound":
        idx = bisect_right(keys, batch_size)
        return schedule[keys[idx - 1]] if idx > 0 else 0
    raise ValueError(f"unknown schedule lookup {lookup!r}")


def update_draft_len(schedule: Optional[dict[int, int]], scheduled_batch_size: int, max_draft_len: int,
                     lookup: str = "upper_bound") -> int:
    """TensorRT-LLM's post-schedule ``update_draft_len``: the runtime K of the scheduled batch.

    ``speculative/utils.update_draft_len`` looks K up with ``utils.get_draft_len_for_batch_size`` on the
    scheduled batch size (context rows included); without a schedule K is ``max_draft_len``.
    """
    if schedule is None:
        return max_draft_len
    return draft_len_for_batch_size(schedule, max(scheduled_batch_size, 1), lookup)




def _entries5(ranges: Sequence[Sequence[int]]) -> list[tuple[int, int, int, int, int]]:
    """vLLM entries as ``(bs_lo, bs_hi, ctx_lo, ctx_hi, K)``; a 3-item entry covers every context."""
    return [(int(r[0]), int(r[1]), 1, CTX_INFINITY, int(r[2])) if len(r) == 3 else tuple(int(x) for x in r)
            for r in ranges]


def vllm_dynamic_sd_lookup(ranges: Sequence[Sequence[int]], max_num_seqs: int, num_speculative_tokens: int):
    """vLLM's dense ``(batch size, context bucket) -> K`` table and the context buckets' bounds.

    ``build_dynamic_sd_schedule_lookup``: entries are sorted by batch range, gaps inherit the
    previous K, sizes past the last range carry the last K, K is clamped to
    ``num_speculative_tokens``, and the last context bucket extends to infinity. Index the table
    with the number of scheduled requests and ``context_bucket``.
    """
    entries = _entries5(ranges)
    buckets = sorted({(lo, hi) for _, _, lo, hi, _ in entries})
    buckets[-1] = (buckets[-1][0], CTX_INFINITY)
    col = {lo: i for i, (lo, _) in enumerate(buckets)}
    table = np.zeros((max_num_seqs + 1, len(buckets)), dtype=np.int64)
    for c in range(len(buckets)):
        current = None
        bands = sorted((b0, b1, k) for b0, b1, lo, _, k in entries if col[lo] == c)
        for size in range(1, max_num_seqs + 1):
            for start, end, k in bands:
                if start <= size <= end:
                    current = k
            table[size, c] = min(current or 0, num_speculative_tokens)
    return table, tuple(hi for _, hi in buckets)


def context_bucket(bounds: Sequence[int], context_len: int) -> int:
    """``DynamicSDLookup.bucket_of``: the first bucket whose upper bound holds ``context_len``."""
    for i, hi in enumerate(bounds):
        if context_len <= hi:
            return i
    return len(bounds) - 1


def vllm_schedule_table(ranges: Sequence[Sequence[int]], max_num_seqs: int, num_speculative_tokens: int) -> np.ndarray:
    """vLLM's dense batch-size -> K table for context-independent (3-item) ranges."""
    return vllm_dynamic_sd_lookup(ranges, max_num_seqs, num_speculative_tokens)[0][:, 0]


def should_use_spec_decode(
    num_active: int, max_batch_size: int, max_num_tokens: int, k: int, max_concurrency: Optional[int]
) -> bool:
    """TensorRT-LLM ``Drafter.should_use_spec_decode`` (current version): the batch gate."""
    if max_concurrency is None:
        return True
    return bool(concurrency_allows.py_func(num_active, max_batch_size, max_num_tokens, k, max_concurrency))


@njit(cache=True)
def concurrency_allows(num_active, max_batch_size, max_num_tokens, k, max_concurrency):
    """``should_use_spec_decode`` with a ``max_concurrency`` (compiled for the spans; Python calls
    its ``py_func``, as it does ``verified_width``'s)."""
    if num_active <= 0 or max_batch_size <= 0 or max_num_tokens <= 0:
        return False
    token_cap = max_num_tokens // (1 + k)
    if token_cap <= 0:
        return False
    return min(num_active, max_batch_size, token_cap) <= max_concurrency


def setup_drafter(rules, lookup: Callable[[int], int], *, k_static: int, k_next: int, k_from: str,
                  num_active: int, last_scheduled: int, max_batch_size: int, max_num_tokens: int,
                  max_concurrency: Optional[int]) -> tuple[int, bool]:
    """K before scheduling and whether the step speculates, on the path of ``rules``
    (``_setup_drafter``; the caller has already ruled out no drafter and a latched gate).

    Drafter path: K from the schedule on the active requests (or the last scheduled count with
    ``k_from: scheduled``), off at K = 0 or when ``should_use_spec_decode`` says so. One-model path:
    no drafter object, so placeholders at K_static and K after scheduling (``update_draft_len``).
    vLLM: the K the verified drafts were proposed with after the last step.
    """
    if rules.k_timing == "next_step":
        return k_next, k_next > 0
    if rules.k_timing == "same_step" and k_from == "scheduled":
        return k_static, True
    k = lookup(last_scheduled if k_from == "scheduled" else num_active)
    if k == 0:
        return 0, False
    if rules.batch_gate and not should_use_spec_decode(num_active, max_batch_size, max_num_tokens, k, max_concurrency):
        return k, False
    return k, True


# Token charge rules of ``prepare_draft_requests`` and verify widths, as the compiled step takes them:
# TensorRT-LLM's default ``MicroBatchScheduler`` with the V1 KV cache manager, ``KVCacheV2Scheduler``,
# and vLLM's scheduler (a decode row costs its own proposed draft).
V1_BUDGET, V2_BUDGET, DRAFT_BUDGET = 0, 1, 2
BUDGETS = {"v1": V1_BUDGET, "v2": V2_BUDGET, "draft": DRAFT_BUDGET}
STATIC_WIDTH, RUNTIME_WIDTH, DRAFT_WIDTH = 0, 1, 2
VERIFY_WIDTHS = {"static": STATIC_WIDTH, "runtime": RUNTIME_WIDTH, "draft": DRAFT_WIDTH}


# A scalar kernel, not a ufunc: an eagerly typed ``@vectorize`` initialises numba's CPU target at
# import. Python callers pass an array of drafts to ``verified_width.py_func`` (numpy broadcasts).
@njit(cache=True)
def verified_width(verify_width, k, k_static, drafted):
    """Draft positions a drafting row verifies: ``static`` K_static (CUDA-graph padding), ``runtime``
    K, or ``draft`` what it drafted (``VERIFY_WIDTHS`` codes)."""
    return k_static if verify_width == STATIC_WIDTH else (k if verify_width == RUNTIME_WIDTH else drafted)


@njit(cache=True)
def prepare_draft_requests(spec, budget, verify_width, k, k_static, k_charge, disabled, pending):
    """One generation request's token charge and KV growth, as ``(charge, kv_width)``; ``budget``
    and ``verify_width`` are the ``BUDGETS`` / ``VERIFY_WIDTHS`` codes of the run.

    ``v1`` (TensorRT-LLM's default): the executor stamps every generation request's C++
    ``draft_tokens = [0] * max_total_draft_tokens`` before scheduling, whether speculation is on,
    the request is stamped ``py_disable_speculative_decoding`` or the gate latched, and
    ``MicroBatchScheduler`` charges ``beam_width + getNumDraftTokens()``: ``1 + k_charge`` (the
    resolved ``max_total_draft_tokens``: the drafter's K, or K_static on the one-model path). The V1
    ``KVCacheManager.prepare_resources`` grows the row by ``1 + max(len(py_draft_tokens),
    _kv_reserve_draft_tokens)``: ``1 + K_static`` whatever the runtime draft (rewound after the step).
    ``v2`` (``KVCacheV2Scheduler``): ``1 + len(py_draft_tokens)``: the K placeholders only while
    speculation is on and the request is not stamped; KV grows to the verified width. ``draft``
    (vLLM): the draft proposed after the last step (``pending``) is known, so a row costs 1 + it.
    """
    if budget == V1_BUDGET:
        return 1 + k_charge, 1 + k_static
    if not spec:
        return 1, 1
    if budget == DRAFT_BUDGET:
        return 1 + pending, (1 + verified_width(verify_width, k, k_static, pending) if pending > 0 else 1)
    return (1 if disabled else 1 + k_charge), 1 + verified_width(verify_width, k, k_static, k)


def placeholder_charge(budget: str, speculate: bool, k_static: int, k: int, spec: bool,
                       resolve: Callable[[], int]) -> int:
    """``max_total_draft_tokens``: the placeholders every generation row is charged, on or off, by the
    path's ``PathRules.budget``. Drafter path (``placeholder``): the K the drafter resolves before
    scheduling (``resolve()`` when this step does not speculate), also when ``should_use_spec_decode``
    refused the batch or the gate latched: only the schedule's K = 0 makes it 0. One-model path
    (``static``): K_static. vLLM (``draft``): none (a row pays its own draft). ``prepare_draft_requests``
    applies it as the scheduler does (V1: always; V2: a speculating, unstamped request only)."""
    if not speculate or budget == "draft":
        return 0
    if budget == "static":
        return k_static
    return k if spec else resolve()


class _LatchingWindow:
    """Rolling mean over the last ``window`` samples that latches off below ``threshold``.

    The decision is only taken once at least ``window`` samples were recorded (warm-up), and once
    tripped it stays tripped (the engines only clear it with ``reset()``). The window is a ring
    buffer in arrays, pushed by ``latch_push``, so a compiled span feeds the same gate.
    """

    def __init__(self, window: int, threshold: float) -> None:
        self.window = window
        self.threshold = threshold
        self.ring = np.zeros(window)  # the last ``window`` samples, the next one at num_recorded % window
        self.total = np.zeros(1)  # their running sum, updated as the engine's deque sum is
        self.counts = np.zeros(2, dtype=np.int64)  # samples recorded, latched

    @property
    def num_recorded(self) -> int:
        return int(self.counts[0])

    @property
    def disabled(self) -> bool:
        return bool(self.counts[1])

    def _push(self, sample: float) -> bool:
        return bool(latch_push.py_func(self.ring, self.total, self.counts, self.threshold, sample))


@njit(cache=True)
def latch_push(ring, total, counts, threshold, sample):
    """Record one sample in a ``_LatchingWindow``'s arrays; True when it latches the window
    (compiled for the spans; Python calls its ``py_func``)."""
    if counts[1]:
        return False
    window = ring.shape[0]
    recorded = counts[0]
    oldest = ring[recorded % window]
    ring[recorded % window] = sample
    total[0] += sample
    if recorded >= window:  # the deque held a full window: its oldest sample leaves
        total[0] -= oldest
    counts[0] = recorded + 1
    if counts[0] >= window and total[0] / min(counts[0], window) < threshold:
        counts[1] = 1
        return True
    return False


class SpeculationGate(_LatchingWindow):
    """TensorRT-LLM's SpeculationGate: permanent off switch on a rolling acceptance rate.

    One sample per speculating iteration (sum accepted / sum drafted over requests that drafted),
    against ``acceptance_rate_window_size`` / ``acceptance_rate_threshold``.
    """

    def record(self, rate: float) -> bool:
        """Record one sample; return True when this sample trips the gate."""
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"acceptance rate {rate} outside [0, 1]")
        return self._push(rate)


class LegacySpeculationGate(_LatchingWindow):
    """The older SpeculationGate: one sample per completed request.

    The sample is ``max(0, avg_decoded_tokens_per_iter - 1)`` (tokens, not a rate), where the
    average is the request's generated tokens over its decoding iterations (LlmRequest's
    ``getAvgDecodedTokensPerIter``); against ``acceptance_window`` / ``acceptance_length_threshold``.
    """

    def record(self, generated_tokens: int, decoding_iterations: int) -> bool:
        """Record one completed request; return True when it trips the gate."""
        if decoding_iterations <= 0:
            return False
        return self._push(max(0.0, generated_tokens / decoding_iterations - 1.0))


#: ``gate_sample``'s denominators as the compiled ``sample_rate`` takes them.
GATE_DENOMINATORS = {"drafted": 0, "padded": 1, "static": 2, "runtime": 3}


def gate_sample(denominator: str, accepted: int, drafted: int, verified: int, k: int, k_static: int,
                gen_rows: int) -> Optional[float]:
    """One SpeculationGate sample for an iteration that speculated, from the step's sums over its
    drafting rows (accepted, drafted, verified width); None records nothing.

    ``_update_batch_acceptance_rate`` divides by the C++ ``num_draft_tokens`` of the generation rows.
    ``drafted`` (TRT drafter path): the verified pre-padding draft lengths of the rows that drafted;
    no sample when nothing was drafted. ``padded``: the older reading, the verified width with
    CUDA-graph zeros. ``static`` (one-model path): the stamp ``[0] * max_total_draft_tokens``, K_static
    per generation row whatever the schedule's runtime K (``SAWorker`` records no effective length),
    so an iteration where nothing matched records a 0 sample. ``runtime``: the schedule's K per row.
    """
    rate = sample_rate.py_func(GATE_DENOMINATORS[denominator], accepted, drafted, verified, k, k_static, gen_rows)
    return None if rate < 0 else rate


@njit(cache=True)
def sample_rate(denominator, accepted, drafted, verified, k, k_static, gen_rows):
    """``gate_sample`` with its ``GATE_DENOMINATORS`` code, -1.0 for none (compiled for the spans;
    Python calls its ``py_func``)."""
    if denominator >= 2:
        total = (k_static if denominator == 2 else k) * gen_rows
        return accepted / total if total > 0 else -1.0
    denom = drafted if denominator == 0 else verified
    return accepted / denom if drafted > 0 and denom > 0 else -1.0
