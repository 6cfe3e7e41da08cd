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

from __future__ import annotations

import importlib

# Each public name and the module defining it, imported on first use: the drafters compile with
# numba and the replay builds pandas tables, and a caller that needs only ``settings`` (config export
# and import, sweep keys) should pay for neither.
_EXPORTS = {"DrafterSettings": "settings", "PrecomputeCache": "cache", "build_drafter": "oracle",
            "make_drafter_oracle": "oracle", "replay_trace": "replay", "summarize_replay": "replay"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value
