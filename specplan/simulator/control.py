"""Control-plane decisions as pure functions and tiny classes, in the engines' own semantics.

Nothing here knows about SimPy or time: the executor loop calls these in the engine's order.
Sources: TensorRT-LLM ``_torch/speculative/{utils,drafter,speculation_gate}.py`` and
``llmapi/llm_args.py``; vLLM ``v1/spec_decode/dynamic/utils.py`` (see docs/semantics.md).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import deque
from typing import Optional, Sequence

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


def vllm_schedule_table(ranges: Sequence[Sequence[int]], max_num_seqs: int, num_speculative_tokens: int) -> np.ndarray:
    """vLLM's dense batch-size -> K table from inclusive ``(start, end, K)`` ranges.

    Gaps inherit the previous K, sizes past the last range carry the last K, and K is clamped to
    ``num_speculative_tokens``. Index the table with the number of scheduled requests.
    """
    table = np.zeros(max_num_seqs + 1, dtype=np.int64)
    current = 0
    bounds = sorted((int(s), int(e), int(k)) for s, e, k in ranges)
    for size in range(1, max_num_seqs + 1):
        for start, end, k in bounds:
            if start <= size <= end:
                current = k
        table[size] = min(current, num_speculative_tokens)
    return table


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
    """vLLM's rules for ``num_speculative_tokens_per_batch_size``: a non-empty list of inclusive
    ``[start, end, K]`` with 1 <= start <= end, K >= 0 (and <= ``max_k`` when given), the first
    starting at 1, sorted and not overlapping. Raises ValueError whose text starts with ``[i]: `` or
    ``: `` so callers can prefix the field name."""
    if not isinstance(ranges, (list, tuple)) or not ranges:
        raise ValueError(": expected a non-empty list of [start, end, K]")
    prev_end = 0
    for i, r in enumerate(ranges):
        if not isinstance(r, (list, tuple)) or len(r) != 3 or not all(isinstance(x, int) and not isinstance(x, bool)
                                                                      for x in r):
            raise ValueError(f"[{i}]: expected three integers [start, end, K]")
        start, end, k = r
        if start < 1 or start > end:
            raise ValueError(f"[{i}]: need 1 <= start <= end, got [{start}, {end}]")
        if k < 0 or (max_k is not None and k > max_k):
            raise ValueError(f"[{i}]: K must be in [0, {'num_speculative_tokens = ' + str(max_k) if max_k is not None else 'inf'}], got {k}")
        if i == 0 and start != 1:
            raise ValueError(": the first range must start at 1")
        if start <= prev_end:
            raise ValueError(f"[{i}]: ranges must be sorted and not overlap")
        prev_end = end


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
