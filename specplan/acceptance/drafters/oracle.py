"""The simulator adapter: an acceptance oracle for a speculation config and a list of requests."""

from __future__ import annotations

from typing import Optional, Sequence

from specplan.acceptance.drafters.base import DrafterOracle
from specplan.acceptance.drafters.cache import PrecomputeCache
from specplan.acceptance.drafters.ngram_pool import NGramPoolOracle
from specplan.acceptance.drafters.pld import PLDOracle
from specplan.acceptance.drafters.settings import DrafterSettings
from specplan.acceptance.drafters.suffix_automaton import SAGlobalPoolOracle, SAOracle
from specplan.acceptance.drafters.suffix_tree import SuffixDecodingOracle
from specplan.acceptance.drafters.vllm_ngram import VllmNgramOracle


def build_drafter(settings: DrafterSettings, requests: Sequence, max_batch_size: int = 64,
                  cache: Optional[PrecomputeCache] = None) -> DrafterOracle:
    """The oracle for one drafter's settings (what ``make_drafter_oracle`` and the replay use)."""
    kind = settings.kind
    if kind == "NGram":
        return NGramPoolOracle(settings, requests, cache)
    if kind == "SA":
        if settings.enable_global_pool:
            return SAGlobalPoolOracle(settings, requests, max_batch_size, cache)
        return SAOracle(settings, requests, cache)
    if kind == "vllm_ngram":
        return VllmNgramOracle(settings, requests, cache)
    if kind == "pld":
        return PLDOracle(settings, requests, cache)
    return SuffixDecodingOracle(settings, requests)


def make_drafter_oracle(spec, requests: Sequence, max_batch_size: int,
                        cache: Optional[PrecomputeCache] = None, max_model_len: Optional[int] = None) -> DrafterOracle:
    """Acceptance oracle replaying the configured model-free drafter over the requests' real tokens.

    ``spec`` is a resolved ``SpeculationConfig`` (``decoding_type`` NGram, SA, vllm_ngram, suffix or
    pld) or a ``DrafterSettings``. Row ``rid`` of every call indexes ``requests``. Per-request
    drafters answer from precomputed tables (cached by content hash in ``cache``, the process-wide
    in-memory cache by default); the public NGram pool, the SA global pool and suffix trees evolve
    online in the order of ``draft`` rows and ``on_commit`` / ``on_finish`` calls. ``max_model_len`` is the
    engine's (vLLM's suffix drafts are bounded by it inside the proposer).
    """
    settings = spec if isinstance(spec, DrafterSettings) else DrafterSettings.from_spec(spec, max_model_len)
    return build_drafter(settings, requests, max_batch_size, cache)
