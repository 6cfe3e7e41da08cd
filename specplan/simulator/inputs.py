"""What the executor loop is given: the engine's resolved settings and the workload's lengths and order."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from specplan.simulator.paths import TRT_DRAFTER


@dataclass(frozen=True)
class EngineSettings:
    """Everything the loop needs, resolved from the config (see ``specplan.simulator.run``)."""

    max_batch_size: int
    max_num_tokens: int
    max_num_active_requests: int
    kv_block_size: int
    kv_num_blocks: int
    policy: str  # GUARANTEED_NO_EVICT | MAX_UTILIZATION
    chunked_prefill: bool
    overlap_scheduler: bool
    speculate: bool  # a drafter is configured at all
    max_draft_len: int
    draft_len_schedule: Optional[dict[int, int]] = None
    vllm_ranges: Optional[tuple] = None
    schedule_lookup: str = "upper_bound"
    k_from: str = "active"
    max_concurrency: Optional[int] = None
    verify_width: str = "static"  # static | runtime | draft
    gate_window: Optional[int] = None
    gate_threshold: Optional[float] = None
    gate_denominator: str = "drafted"  # drafted | padded | runtime
    legacy_gate_window: Optional[int] = None
    legacy_gate_threshold: Optional[float] = None
    drafter: str = "none"
    sa_enhancer: bool = False  # SA side stream overlapping a neural draft loop
    path: str = TRT_DRAFTER  # the engine path whose rules apply (specplan.simulator.paths)
    max_model_len: Optional[int] = None  # vLLM: bounds drafts; the n-gram drafter's batch skip
    piecewise_graph_slowdown: float = 0.0  # vLLM dynamic SD: piecewise CUDA graphs slow each step
    context_chunking_policy: str = "FIRST_COME_FIRST_SERVED"  # TensorRT-LLM: | EQUAL_PROGRESS
    kv_cache_scheduler: str = "v1"  # TensorRT-LLM: v1 (MicroBatchScheduler + V1 KV manager) | v2 (KVCacheV2Scheduler)


@dataclass
class Workload:
    """Request lengths, arrivals and session order, as the loop sees them."""

    prompt_lens: np.ndarray
    output_lens: np.ndarray
    arrivals: Optional[np.ndarray]  # open loop; None for closed loop
    # Index of the previous turn of the same session, -1 if none; None when no request has one (ten
    # million requests' -1s are 80 MB).
    predecessor: Optional[np.ndarray]
    concurrency: int = 0  # closed-loop clients
    think_time: Optional[np.ndarray] = None  # per request: think time before it is sent (closed loop, sessions)
