"""Engine presets and AUTO: turn what the user wrote into what the engine would actually run.

``engine: trtllm`` and ``engine: vllm`` differ in the defaults an operator never sees (which
request count picks K, what happens past the last schedule band, which drafters and gates exist,
how verify rows are padded). ``resolve_speculation`` applies them, so a user simulates the engine
they run by naming it.
"""

from __future__ import annotations

from specplan.config import EngineConfig, SpeculationConfig
from specplan.errors import ConfigError

# Drafters each engine ships ("pld" is the reference / HF-transformers prompt lookup, in both).
ENGINE_DRAFTERS = {
    "trtllm": ("none", "NGram", "SA", "AUTO", "pld", "MTP", "Eagle3"),
    "vllm": ("none", "vllm_ngram", "suffix", "pld"),
}


def suggest_spec_config(max_batch_size: int) -> dict:
    """TensorRT-LLM ``auto_heuristic.suggest_spec_config``: NGram settings from the static batch size.

    Small batches (<= 4) afford longer drafts (K = 5) with 3-token keys; larger ones use K = 3
    with 5-token keys; ``max_concurrency`` 32 switches speculation off above 32 active requests.
    """
    small = max_batch_size <= 4
    return {
        "decoding_type": "NGram",
        "max_draft_len": 5 if small else 3,
        "max_matching_ngram_size": 3 if small else 5,
        "max_concurrency": 32,
        "is_keep_all": True,
        "is_use_oldest": True,
        "is_public_pool": True,
    }


def schedule_to_ranges(schedule: dict[int, int]) -> list[tuple[int, int, int]]:
    """A draft_len_schedule {upper bound: K} as vLLM inclusive ranges [(start, end, K)]."""
    ranges, start = [], 1
    for key in sorted(schedule):
        ranges.append((start, key, schedule[key]))
        start = key + 1
    return ranges


def resolve_speculation(engine: EngineConfig, spec: SpeculationConfig) -> SpeculationConfig:
    """The effective speculative config for this engine (AUTO expanded, preset defaults applied)."""
    name = engine.engine
    if spec.decoding_type not in ENGINE_DRAFTERS[name]:
        hint = {"NGram": "vllm_ngram", "SA": "vllm_ngram", "vllm_ngram": "NGram", "suffix": "SA"}.get(spec.decoding_type)
        raise ConfigError(
            f"speculation.decoding_type: {name} has no '{spec.decoding_type}' drafter"
            + (f" (the closest is '{hint}')" if hint else "")
        )
    update: dict = {}
    if spec.decoding_type == "AUTO":
        update.update(suggest_spec_config(engine.max_batch_size))
    if name == "vllm":
        for field in ("acceptance_rate_window_size", "acceptance_window", "max_concurrency"):
            if getattr(spec, field) is not None:
                raise ConfigError(f"speculation.{field}: vLLM has no such control (it is TensorRT-LLM's)")
        if spec.draft_len_schedule is not None:
            # The same bands in vLLM's inclusive ranges: past the last one vLLM carries the last K.
            update["num_speculative_tokens_per_batch_size"] = schedule_to_ranges(spec.draft_len_schedule)
            update["draft_len_schedule"] = None
    elif spec.num_speculative_tokens_per_batch_size is not None:
        raise ConfigError("speculation.num_speculative_tokens_per_batch_size: a vLLM field; TensorRT-LLM uses draft_len_schedule")
    if name == "trtllm" and engine.overlap_scheduler and update.get("decoding_type", spec.decoding_type) == "NGram":
        # SpeculativeDecodingMode.support_overlap_scheduler() excludes NGram: the host pool needs the
        # previous step's tokens before it can draft (TRT's blog 7 requires disable_overlap_scheduler).
        raise ConfigError("engine.overlap_scheduler: TensorRT-LLM's NGram drafter does not support the overlap "
                          "scheduler; turn it off or draft with SA")
    if spec.k_from is None:
        update["k_from"] = "scheduled" if name == "vllm" else "active"
    # Re-validate only what was set, so unset fields keep meaning "the engine's default".
    return SpeculationConfig.model_validate({**spec.model_dump(exclude_unset=True), **update})
