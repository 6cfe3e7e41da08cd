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
