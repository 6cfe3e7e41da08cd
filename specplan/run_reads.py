"""What a run reads of its requests, decided from the config alone: token ids, or lengths only.

The simulator builds synthetic requests' tokens only when the run reads them, and the memory check
of a config (``limits``) prices a request by the same rule, so both ask here; nothing here imports
the simulator.
"""

from __future__ import annotations

from specplan.workloads.synthetic import is_synthetic


def oracle_reads_tokens(cfg) -> bool:
    """Whether ``acceptance.build_oracle`` reads the requests' token ids: the exact drafters, the SA
    enhancer and recorded logs do; the parametric oracles, and the one of a run without speculation,
    read lengths."""
    sp, mode = cfg.speculation, cfg.acceptance.mode
    return sp.sa_config is not None or mode == "recorded" or (mode == "drafter" and sp.decoding_type != "none")


def prefix_caching(cfg) -> bool:
    """Whether the engine caches prefixes (``engine.enable_prefix_caching``). Unset, the engine's default:
    on in both (vLLM V1's automatic prefix caching; TensorRT-LLM's ``kv_cache_config.enable_block_reuse``)
    except for TensorRT-LLM under synthetic traffic, whose requests' prompts start with fresh uniform
    tokens and share no block (the chance is below 1e-60 a block), so the cache would find nothing and
    only cost the token draws (``reads_tokens``)."""
    caching = cfg.engine.enable_prefix_caching
    if caching is not None:
        return caching
    return cfg.engine.engine == "vllm" or not is_synthetic(cfg.workload.trace)


def reads_tokens(cfg) -> bool:
    """Whether a run reads its requests' token ids: its acceptance oracle does
    (:func:`oracle_reads_tokens`) or the prefix cache hashes them. A run that reads only lengths
    builds synthetic traffic without drawing tokens: for 100k requests of 700 tokens that is 280 MB
    never written."""
    return oracle_reads_tokens(cfg) or prefix_caching(cfg)


def lengths_only(cfg) -> bool:
    """Whether the run's requests are synthetic lengths and nothing reads tokens: a request is then
    a few numbers (``limits.LENGTHS_REQUEST_BYTES``), not its tokens and drafter tables."""
    return is_synthetic(cfg.workload.trace) and not reads_tokens(cfg)
