"""Control-plane decisions as pure functions and tiny classes, in the engines' own semantics.

Nothing here knows about SimPy or time: the executor loop calls these in the engine's order.
Sources: TensorRT-LLM ``_torch/speculative/{utils,drafter,speculation_gate}.py`` and
``llmapi/llm_args.py``; vLLM ``v1/spec_decode/dynamic/utils.py`` (see docs/semantics.md).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque
from typing import Callable, Optional, Sequence

import numpy as np


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


CTX_INFINITY = 2**31 - 1  # vLLM's _CTX_INFINITY: the last context bucket has no upper end


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


def prepare_draft_requests(rules, spec: bool, k: int, k_static: int, verify_width: str,
                           disabled: np.ndarray, pending: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each active request's token charge and KV growth as a generation row (``_prepare_draft_requests``).

    Drafter path: ``[0] * K`` placeholders unless the request is stamped
    ``py_disable_speculative_decoding``; KV grows to the verified width (NGram pads to K_static and
    ``_extend_kv_cache_for_padding`` covers it). One-model path: ``py_draft_pages_allocated = K_static``.
    vLLM: the draft proposed after the last step is known, so a row costs 1 + that draft.
    """
    n = len(disabled)
    if not spec:
        ones = np.ones(n, dtype=np.int64)
        return ones, ones
    if rules.budget == "draft":
        width = {"static": k_static, "runtime": k}.get(verify_width, pending)
        return 1 + pending, np.where(pending > 0, 1 + width, 1)
    if rules.budget == "static":
        return np.full(n, 1 + k_static), np.full(n, 1 + k_static)
    width = 1 + (k_static if verify_width == "static" else k)
    return np.where(disabled, 1, 1 + k), np.full(n, width)


class _LatchingWindow:
    """Rolling mean over the last ``window`` samples that latches off below ``threshold``.

    The decision is only taken once at least ``window`` samples were recorded (warm-up), and once
    tripped it stays tripped (the engines only clear it with ``reset()``).
    """

    def __init__(self, window: int, threshold: float) -> None:
        self.window = window
        self.threshold = threshold
        self._samples: deque[float] = deque()
        self._sum = 0.0
        self.num_recorded = 0
        self.disabled = False

    def _push(self, sample: float) -> bool:
        if self.disabled:
            return False
        self._samples.append(sample)
        self._sum += sample
        if len(self._samples) > self.window:
            self._sum -= self._samples.popleft()
        self.num_recorded += 1
        if self.num_recorded >= self.window and self._sum / len(self._samples) < self.threshold:
            self.disabled = True
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


def check_batch_size_ranges(ranges, max_k: Optional[int] = None) -> None:
    """vLLM's rules for ``num_speculative_tokens_per_batch_size``
    (``validate_and_normalize_dynamic_sd_schedule``): a non-empty list of all 3-item
    ``[bs_lo, bs_hi, K]`` or all 5-item ``[bs_lo, bs_hi, ctx_lo, ctx_hi, K]`` entries, bounds >= 1
    and lo <= hi, K >= 0 (and <= ``max_k`` when given). The list may come in any order: vLLM sorts
    it; sorted, the batch ranges must not overlap and start at 1, and 5-item entries must form a
    rectangular grid whose context ranges are contiguous from 1. Raises ValueError whose text starts
    with ``[i]: `` or ``: `` so callers can prefix the field name."""
    if not isinstance(ranges, (list, tuple)) or not ranges:
        raise ValueError(": expected a non-empty list of [start, end, K] or [start, end, ctx_lo, ctx_hi, K]")
    for i, r in enumerate(ranges):
        if not isinstance(r, (list, tuple)) or len(r) not in (3, 5) or not all(
                isinstance(x, int) and not isinstance(x, bool) for x in r):
            raise ValueError(f"[{i}]: expected three or five integers [start, end, (ctx_lo, ctx_hi,) K]")
        bounds, k = r[:-1], r[-1]
        if any(x < 1 for x in bounds) or bounds[0] > bounds[1] or (len(r) == 5 and bounds[2] > bounds[3]):
            raise ValueError(f"[{i}]: need 1 <= start <= end (and 1 <= ctx_lo <= ctx_hi), got {list(r)}")
        if k < 0 or (max_k is not None and k > max_k):
            raise ValueError(f"[{i}]: K must be in [0, {'num_speculative_tokens = ' + str(max_k) if max_k is not None else 'inf'}], got {k}")
    if len({len(r) for r in ranges}) > 1:
        raise ValueError(": entries must all be 3-item or all 5-item")
    bs = sorted({(r[0], r[1]) for r in ranges})
    if bs[0][0] != 1:
        raise ValueError(": the first range must start at 1")
    if any(lo <= prev_hi for (_, prev_hi), (lo, _) in zip(bs, bs[1:])):
        raise ValueError(": batch-size ranges must not overlap")
    ctx = sorted({(r[2], r[3]) for r in ranges}) if len(ranges[0]) == 5 else [(1, CTX_INFINITY)]
    cells = {(r[0], r[1], r[2]) for r in ranges} if len(ranges[0]) == 5 else set(bs)
    if len(cells) != len(ranges) or len(ranges) != len(bs) * len(ctx):
        raise ValueError(f": 5-item entries must form a rectangular grid ({len(bs)} batch x {len(ctx)} context ranges)")
    if ctx[0][0] != 1 or any(lo != prev_hi + 1 for (_, prev_hi), (lo, _) in zip(ctx, ctx[1:])):
        raise ValueError(": context ranges must start at 1 and be contiguous")


def gate_sample(denominator: str, accepted: np.ndarray, drafted: np.ndarray, verified: np.ndarray,
                k: int, gen_rows: int) -> Optional[float]:
    """One SpeculationGate sample for an iteration that speculated; None records nothing.

    ``drafted`` (TRT drafter path, current ``_update_batch_acceptance_rate``): sum accepted over the
    verified pre-padding draft lengths of the rows that drafted; no sample when nothing was drafted.
    ``padded``: the older ``num_draft_tokens`` reading, the verified width with CUDA-graph zeros.
    ``runtime`` (one-model path): K per generation row, so an iteration where nothing matched
    still records a 0 sample.
    """
    if denominator == "runtime":
        total = k * gen_rows
        return int(accepted.sum()) / total if total > 0 else None
    sum_d = int(drafted.sum())
    denom = sum_d if denominator == "drafted" else int(verified.sum())
    return int(accepted.sum()) / denom if sum_d > 0 and denom > 0 else None


def validate_speculation(spec) -> None:
    """The engines' config rules; raises ValueError with the field named (pydantic reports it)."""
    sched = spec.draft_len_schedule
    if sched is not None:
        if spec.max_concurrency is not None:
            raise ValueError("draft_len_schedule and max_concurrency are mutually exclusive")
        if not sched:
            raise ValueError("draft_len_schedule must not be empty")
        if any(k < 1 for k in sched):
            raise ValueError("draft_len_schedule keys (batch sizes) must be >= 1")
        if any(v < 0 for v in sched.values()):
            raise ValueError("draft_len_schedule values (draft lengths) must be >= 0")
        if any(v > spec.max_draft_len for v in sched.values()):
            raise ValueError(f"draft_len_schedule values must be <= max_draft_len ({spec.max_draft_len})")
        if sched[min(sched)] != spec.max_draft_len:
            raise ValueError(
                f"draft_len_schedule: the smallest key ({min(sched)}) must map to max_draft_len ({spec.max_draft_len})"
            )
    ranges = spec.num_speculative_tokens_per_batch_size
    if ranges is not None:
        if sched is not None:
            raise ValueError("use draft_len_schedule or num_speculative_tokens_per_batch_size, not both")
        try:
            check_batch_size_ranges(ranges)
        except ValueError as exc:
            raise ValueError(f"num_speculative_tokens_per_batch_size{exc}") from None
    n = spec.max_matching_ngram_size
    if n is not None and spec.decoding_type == "SA" and not (n == -1 or 1 <= n <= 64):
        raise ValueError("max_matching_ngram_size for SA must be -1 (longest match) or in [1, 64]")
    if n is not None and spec.decoding_type in ("NGram", "pld") and n < 1:
        raise ValueError(f"max_matching_ngram_size for {spec.decoding_type} must be >= 1")
    if spec.global_pool_size is not None and not spec.enable_global_pool:
        raise ValueError("global_pool_size requires enable_global_pool")
    if (spec.acceptance_rate_window_size is None) != (spec.acceptance_rate_threshold is None):
        raise ValueError("acceptance_rate_window_size and acceptance_rate_threshold must be given together")
    if (spec.acceptance_window is None) != (spec.acceptance_length_threshold is None):
        raise ValueError("acceptance_window and acceptance_length_threshold (legacy gate) must be given together")
    if spec.acceptance_window is not None and spec.acceptance_rate_window_size:
        raise ValueError("choose one gate: acceptance_rate_* (current) or acceptance_window/_length_threshold (legacy)")
    lo, hi = spec.prompt_lookup_min, spec.prompt_lookup_max
    if lo is not None and hi is not None and lo > hi:
        raise ValueError("prompt_lookup_min must be <= prompt_lookup_max")
