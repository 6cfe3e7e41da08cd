"""Engine presets and AUTO: turn what the user wrote into what the engine would actually run.

``engine: trtllm`` and ``engine: vllm`` differ in the defaults an operator never sees (which
request count picks K, what happens past the last schedule band, which drafters and gates exist,
how verify rows are padded), and within TensorRT-LLM the drafter and one-model paths differ too
(``specplan.simulator.paths``). ``resolve_speculation`` applies them, so a user simulates the engine
they run by naming it.
"""

from __future__ import annotations

from specplan.config import EngineConfig, SpeculationConfig
from specplan.errors import ConfigError
from specplan.simulator.paths import TRT_ONE_MODEL, dynamic_draft_len, path_for

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


def schedule_to_ranges(schedule: dict[int, int], keys: str = "upper_bound") -> list[tuple[int, int, int]]:
    """A ``draft_len_schedule`` as vLLM inclusive ranges ``[(start, end, K)]`` starting at 1.

    ``upper_bound`` keys end a band (one-model ``update_draft_len``); ``lower_bound`` keys start one
    (``Drafter.get_draft_len_for_batch_size``: 0 below the smallest key, the last K carries, as the
    last vLLM range does).
    """
    ranges, start = [], 1
    if keys == "upper_bound":
        for key in sorted(schedule):
            ranges.append((start, key, schedule[key]))
            start = key + 1
        return ranges
    starts = sorted(schedule)
    if starts[0] > 1:
        ranges.append((1, starts[0] - 1, 0))
    for lo, nxt in zip(starts, starts[1:] + [starts[-1] + 1]):
        ranges.append((lo, nxt - 1, schedule[lo]))
    return ranges


def convert_schedule(schedule: dict[int, int], src: str, dst: str, max_batch_size: int) -> dict[int, int]:
    """The same K per batch size 1..``max_batch_size`` written with ``dst`` keys instead of ``src`` keys."""
    if src == dst:
        return dict(schedule)
    bands = [(lo, min(hi, max_batch_size), k) for lo, hi, k in schedule_to_ranges(schedule, src) if lo <= max_batch_size]
    if src == "lower_bound":  # the last K carries: extend it to max_batch_size
        bands[-1] = (bands[-1][0], max_batch_size, bands[-1][2])
    elif bands[-1][1] < max_batch_size:  # implicit 0 above the largest upper bound
        bands.append((bands[-1][1] + 1, max_batch_size, 0))
    return {(lo if dst == "lower_bound" else hi): k for lo, hi, k in bands}


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
    elif engine.max_model_len is not None:
        raise ConfigError("engine.max_model_len: a vLLM setting; TensorRT-LLM's max_seq_len is each request's own length here")
    path = path_for(name, update.get("decoding_type", spec.decoding_type))
    dynamic = dynamic_draft_len(name, engine.version, update.get("decoding_type", spec.decoding_type))
    if path.name == TRT_ONE_MODEL and not dynamic:
        # Outside support_dynamic_draft_len at this release: no schedule re-sizes the drafts (K stays
        # max_draft_len) and max_concurrency, with no drafter object to read it, changes nothing.
        update["draft_len_schedule"] = update["max_concurrency"] = None
    elif path.name == TRT_ONE_MODEL and spec.max_concurrency is not None:
        # No drafter object, so no should_use_spec_decode: DecodingBaseConfig translates max_concurrency
        # into the schedule {max_concurrency: max_draft_len} (K = 0 above it, on the scheduled batch).
        update["draft_len_schedule"] = {spec.max_concurrency: spec.max_draft_len}
        update["max_concurrency"] = None
    if name == "trtllm" and engine.overlap_scheduler and update.get("decoding_type", spec.decoding_type) == "NGram":
        # SpeculativeDecodingMode.support_overlap_scheduler() excludes NGram: the host pool needs the
        # previous step's tokens before it can draft (TRT's blog 7 requires disable_overlap_scheduler).
        raise ConfigError("engine.overlap_scheduler: TensorRT-LLM's NGram drafter does not support the overlap "
                          "scheduler; turn it off or draft with SA")
    if spec.k_from is None:
        update["k_from"] = path.k_from
    # Re-validate only what was set, so unset fields keep meaning "the engine's default".
    return SpeculationConfig.model_validate({**spec.model_dump(exclude_unset=True), **update})
