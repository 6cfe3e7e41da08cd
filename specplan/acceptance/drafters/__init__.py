"""Exact model-free drafters: acceptance replayed from real token histories, faithful to each engine.

- ``ngram_pool``: TensorRT-LLM's NGram pool (private or public, lazy scan, start_index rescans).
- ``suffix_automaton``: TensorRT-LLM's SA (longest or n-gram match, optional global pool).
- ``vllm_ngram``: vLLM's n-gram proposer (prompt_lookup_min/max).
- ``suffix_tree``: vLLM / Arctic Inference suffix decoding (local and global trees).
- ``pld``: prompt lookup decoding, reference or HF transformers.
- ``limits``: the generation limit each request ran with, where the drafters' "one token left" rules apply.

``make_drafter_oracle`` is the simulator's entry point; ``replay_trace`` and ``summarize_replay``
replay a trace one request at a time at fixed K (``specplan acceptance``).
"""

from specplan.acceptance.drafters.cache import PrecomputeCache
from specplan.acceptance.drafters.oracle import build_drafter, make_drafter_oracle
from specplan.acceptance.drafters.replay import replay_trace, summarize_replay
from specplan.acceptance.drafters.settings import DrafterSettings

__all__ = ["DrafterSettings", "PrecomputeCache", "build_drafter", "make_drafter_oracle", "replay_trace",
           "summarize_replay"]
