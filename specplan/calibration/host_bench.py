"""The engine's host time per step, measured on the engine's own scheduler beside the forward.

vLLM V1's ``Scheduler`` (``vllm/v1/core/sched/scheduler.py``, 0.32) runs here without an engine: a
minimal model config, no KV tensors (its block manager over a pool of block ids), prefix caching off
and n-gram drafting on. Each step calls ``schedule()``, runs the forward of that step's shape on the
calibration stack (not timed), then ``update_from_output()`` with the tokens a model runner returns
(half of each row's drafts accepted), and hands the next drafts over as the proposer does
(``update_draft_token_ids``). Timed: ``schedule()`` plus ``update_from_output()``, what ``validate
--engine vllm`` records as a step's host time on the running engine (``vllm_engine.StepRecorder``).

The forward between them is part of the measurement: on the CPU engine the forward's OpenMP threads
spin on after each parallel region and slow the scheduler's Python beside them (measured here with
libiomp5, two threads: 40 us per step at one row alone, 277 us beside a forward). So the CLI runs a
CPU calibration with host timing under the engine's own environment (``vllm_env.cpu_environment``).

A line through the per-batch medians gives the profile's ``host.step_s`` and ``host.per_seq_s``
(non-negative least squares). Drafting is priced by the profile's draft terms, sampling by its LM-head
curve (the stack's greedy argmax), each its own term.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
from scipy.optimize import nnls

BATCHES = (1, 4, 8, 16, 24)
DRAFT_LEN = 5
PROMPT_TOKENS = 256
STEPS, SKIP = 30, 6  # steps run per batch, and the first ones (prefill, warm-up) not kept


def _scheduler(max_num_seqs: int, k: int, block_size: int, folder: str, device: str):
    """vLLM's scheduler alone, for ``max_num_seqs`` rows drafting ``k`` tokens each."""
    import torch
    from vllm.config import (CacheConfig, DeviceConfig, ModelConfig, ParallelConfig, SchedulerConfig,
                             SpeculativeConfig, VllmConfig)
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    model = ModelConfig(model=folder, dtype="float32", max_model_len=8192, skip_tokenizer_init=True)
    blocks = max_num_seqs * (8192 // block_size + 1)
    cache = CacheConfig(block_size=block_size, enable_prefix_caching=False)
    cache.num_gpu_blocks = blocks
    spec = (SpeculativeConfig(method="ngram", num_speculative_tokens=k, prompt_lookup_min=1, prompt_lookup_max=3,
                              target_model_config=model, target_parallel_config=ParallelConfig()) if k else None)
    config = VllmConfig(model_config=model, cache_config=cache, device_config=DeviceConfig(device),
                        scheduler_config=SchedulerConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=8192,
                                                         max_model_len=8192, is_encoder_decoder=False),
                        speculative_config=spec)
    kv = KVCacheConfig(num_blocks=blocks, kv_cache_tensors=[], kv_cache_groups=[KVCacheGroupSpec(
        ["layer"], FullAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=64, dtype=torch.float32))])
    return Scheduler(config, kv, StructuredOutputManager(config), block_size=block_size, log_stats=True)


def _write_model_config(folder: str) -> None:
    """A model config the scheduler reads (its host work does not depend on the model's shapes)."""
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
              "num_attention_heads": 1, "num_key_value_heads": 1, "num_hidden_layers": 1, "vocab_size": 1000,
              "max_position_embeddings": 8192, "torch_dtype": "float32"}
    (Path(folder) / "config.json").write_text(json.dumps(config))


def time_batch(batch: int, forward: Callable[[], object], k: int, block_size: int, folder: str,
               device: str = "cpu") -> float:
    """Median host seconds per decode step of ``batch`` rows (see the module docstring)."""
    from vllm import SamplingParams
    from vllm.v1.outputs import DraftTokenIds, ModelRunnerOutput
    from vllm.v1.request import Request

    sched = _scheduler(batch, k, block_size, folder, device)
    for i in range(batch):
        prompt = [(7 * i + j) % 997 + 1 for j in range(PROMPT_TOKENS)]
        sched.add_request(Request(str(i), prompt, SamplingParams(max_tokens=10 * STEPS, ignore_eos=True), None))
    host = []
    for _ in range(STEPS):
        t0 = time.perf_counter()
        out = sched.schedule()
        t1 = time.perf_counter()
        forward()
        t2 = time.perf_counter()
        ids = [r.req_id for r in out.scheduled_new_reqs] + list(out.scheduled_cached_reqs.req_ids)
        sampled = [[11] * (1 + len(out.scheduled_spec_decode_tokens.get(r, ())) // 2) for r in ids]
        sched.update_from_output(out, ModelRunnerOutput(req_ids=ids, req_id_to_index={r: n for n, r in enumerate(ids)},
                                                        sampled_token_ids=sampled))
        host.append((t1 - t0) + (time.perf_counter() - t2))
        if k:
            sched.update_draft_token_ids(DraftTokenIds(ids, [[13] * k for _ in ids]))
    return float(np.median(host[SKIP:]))


def measure(forward_for: Callable[[int, int], Callable[[], object]], batches: Sequence[int] = BATCHES,
            k: int = DRAFT_LEN, block_size: int = 128, device: str = "cpu") -> list[dict]:
    """``{"batch", "draft_len", "host_s"}`` per batch; ``forward_for(batch, query_len)`` gives the forward
    closure of a decode step of that shape (the calibration stack's); ``device`` the engine's."""
    with tempfile.TemporaryDirectory(prefix="specplan-host-") as folder:
        _write_model_config(folder)
        return [{"batch": b, "draft_len": k, "host_s": time_batch(b, forward_for(b, 1 + k), k, block_size, folder, device)}
                for b in batches]


def fit_host(rows: Sequence[dict]) -> tuple[float, float]:
    """``(step_s, per_seq_s)``: the non-negative line through the per-batch host seconds."""
    b = np.array([r["batch"] for r in rows], dtype=float)
    t = np.array([r["host_s"] for r in rows], dtype=float)
    (step_s, per_seq_s), _ = nnls(np.column_stack([np.ones_like(b), b]), t)
    return float(step_s), float(per_seq_s)
