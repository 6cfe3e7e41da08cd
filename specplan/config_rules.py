"""The engines' own rules for a speculative config, as plain functions the config models call.

Kept apart from ``config.py`` so the schema stays readable; nothing here imports the simulator.
Sources: TensorRT-LLM ``llmapi/llm_args.py`` (``DecodingBaseConfig`` and its subclasses,
``SADecodingConfig``), vLLM ``config/speculative.py`` and ``v1/spec_decode/dynamic/utils.py``
(see docs/semantics.md).
"""

from __future__ import annotations

from typing import Optional

# TensorRT-LLM SADecodingConfig: the global pool has at most 1024 slots and matches at most 64 tokens.
SA_MAX_GLOBAL_SLOTS = 1024
SA_GLOBAL_MATCH_CAP = 64

# vLLM's _CTX_INFINITY: the last context bucket of a dynamic-SD schedule has no upper end.
CTX_INFINITY = 2**31 - 1

# vLLM config/speculative.py: both prompt_lookup bounds default to 5 when neither is given.
VLLM_DEFAULT_LOOKUP = 5

# One spelling per drafter (``speculation.decoding_type``); these aliases, compared case-insensitively with
# "-" read as "_", are accepted in YAML, ``--set`` and on the command line.
NEURAL_DRAFTERS = ("MTP", "Eagle3")  # model-based drafters: acceptance is given, not replayed
DECODING_TYPES = ("none", "NGram", "SA", "vllm_ngram", "suffix", "pld", "AUTO", "MTP", "Eagle3")
DRAFTER_ALIASES = {**{t.lower(): t for t in DECODING_TYPES}, "off": "none", "prompt_lookup": "pld",
                   "suffix_decoding": "suffix", "eagle": "Eagle3"}


def canonical_decoding_type(value):
    """The canonical ``decoding_type`` spelling of ``value`` (``sa`` -> ``SA``, ``vllm-ngram`` -> ``vllm_ngram``);
    anything else is returned unchanged for the schema to refuse with the list of choices."""
    if isinstance(value, str):
        return DRAFTER_ALIASES.get(value.strip().lower().replace("-", "_"), value)
    return value


def effective_lookup_range(lo: Optional[int], hi: Optional[int]) -> tuple[int, int]:
    """vLLM's effective ``(prompt_lookup_min, prompt_lookup_max)``: 5/5 by default, one mirrors the other."""
    if lo is None and hi is None:
        return VLLM_DEFAULT_LOOKUP, VLLM_DEFAULT_LOOKUP
    return (hi if lo is None else lo), (lo if hi is None else hi)


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
    if n is not None and spec.decoding_type == "SA":
        # SA matches the longest suffix (-1) or a fixed size; the global pool searches at most 64 tokens.
        hi = SA_GLOBAL_MATCH_CAP if spec.enable_global_pool else None
        if not (n == -1 or (n >= 1 and (hi is None or n <= hi))):
            raise ValueError(f"max_matching_ngram_size for SA must be -1 (longest match) or "
                             f"{'in [1, ' + str(hi) + '] with the global pool' if hi else '>= 1'}, got {n}")
    if n is not None and spec.decoding_type in ("NGram", "AUTO", "pld") and n < 1:
        raise ValueError(f"max_matching_ngram_size for {spec.decoding_type} must be >= 1, got {n}")
    if spec.global_pool_size is not None:
        if not (spec.decoding_type == "SA" and spec.enable_global_pool):
            raise ValueError("global_pool_size requires decoding_type SA with enable_global_pool")
        if not 1 <= spec.global_pool_size <= SA_MAX_GLOBAL_SLOTS:
            raise ValueError(f"global_pool_size must be in [1, {SA_MAX_GLOBAL_SLOTS}], got {spec.global_pool_size}")
    if (spec.acceptance_rate_window_size is None) != (spec.acceptance_rate_threshold is None):
        raise ValueError("acceptance_rate_window_size and acceptance_rate_threshold must be given together")
    if (spec.acceptance_window is None) != (spec.acceptance_length_threshold is None):
        raise ValueError("acceptance_window and acceptance_length_threshold (legacy gate) must be given together")
    if spec.acceptance_window is not None and spec.acceptance_rate_window_size:
        raise ValueError("choose one gate: acceptance_rate_* (current) or acceptance_window/_length_threshold (legacy)")
    lo, hi = effective_lookup_range(spec.prompt_lookup_min, spec.prompt_lookup_max)
    if lo > hi:
        raise ValueError(f"prompt_lookup_min must be <= prompt_lookup_max ({lo} > {hi})")


# --- Numbers: every float of a config section is finite (``allow_inf_nan=False``); these bounds say why. ---

# TensorRT-LLM counts batch slots, tokens and KV blocks in ``SizeType32`` and vLLM's block tables hold int32
# block ids: an engine count above 2^31 - 1 cannot be configured on either engine.
INT32_MAX = 2**31 - 1
INT32_REASON = "the engines hold this count in 32 bits (TensorRT-LLM SizeType32, vLLM's int32 block tables)"

# One step (or one of its terms) priced above an hour is no GPU's: it is a unit slip (ms or us given as s).
MAX_STEP_S = 3600.0
STEP_REASON = "no GPU step takes an hour; costs are in seconds (was this in ms or us?)"

# gamma prices each verified draft token relative to a whole one-token step T(B, 1); one draft token costing
# more than ten whole steps is no engine's (a one-token step already reads every weight once).
MAX_GAMMA = 10.0
GAMMA_REASON = "a draft token would cost more than ten whole decode steps (gamma is relative to T(B, 1))"

# Gamma inter-arrivals of coefficient of variation cv have shape 1/cv^2: at cv 1000 (shape 1e-6) all but a
# handful of requests arrive in one instant, and past about 1e150 cv^2 overflows.
MAX_CV = 1000.0
CV_REASON = "gamma inter-arrivals that bursty put nearly every request at one instant; replay such a burst as a trace"

# Hand-written probabilities rounded to two decimals (0.33, 0.33, 0.34) sum within this of 1.
LENGTH_DIST_TOL = 0.01


def _number(x) -> str:
    return f"{x:,}" if isinstance(x, int) else f"{x:g}"


def at_most(limit: float, reason: str):
    """A pydantic after-validator refusing a number, or any number inside a (nested) table, above ``limit``."""

    def check(value):
        tables = [value]
        while tables:
            v = tables.pop()
            if isinstance(v, dict):
                tables.extend(v.values())
            elif v is not None and v > limit:
                raise ValueError(f"{_number(v)} is above {_number(limit)}: {reason}")
        return value

    return check


def check_length_dist(dist: list) -> list:
    """``acceptance.length_dist``: non-negative probabilities of accepting 0, 1, 2, ... tokens summing to 1
    (within ``LENGTH_DIST_TOL``)."""
    if not dist or any(x < 0 for x in dist):
        raise ValueError("length_dist needs non-negative probabilities of accepting 0, 1, 2, ... tokens")
    total = sum(dist)
    if abs(total - 1.0) > LENGTH_DIST_TOL:
        raise ValueError(f"probabilities sum to {total:g}, not 1 (within {LENGTH_DIST_TOL:g}): one outcome per "
                         "entry, so they must add up to 1")
    return dist
