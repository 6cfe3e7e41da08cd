"""KV-cache capacity of one GPU: memory left after the weights, in blocks of the engine's size.

Weights are counted per part in its format (``layer_costs.weight_formats``): attention (MLA's latent
projections), dense MLPs, experts (routed, shared, and the BF16 router), norms, and the embedding and
LM head (one matrix when tied); every part is split over the ``tp`` GPUs (experts ``ep`` ways and
each ``tp / ep`` ways: the same share). The KV of a token is K and V per KV head and layer, or MLA's
latent (``kv_lora_rank + qk_rope_head_dim`` per layer, held whole by every GPU of the TP group).

Windowed layers (sliding or chunked) hold at most the window per request: the engines free what
falls out of it (vLLM's sliding-window KV manager, TensorRT-LLM's cyclic ``max_attention_window``).
Given the engine's ``max_seqs`` concurrent requests, that memory is set aside up front (``max_seqs``
requests x the window rounded up to blocks, plus one block) and the scheduler's blocks are counted
over the full-attention layers alone; without ``max_seqs``, or with no full-attention layer, windowed
layers are counted like full ones (the bound the engine cannot exceed).
"""

from __future__ import annotations

import math
from typing import Optional

from specplan.config import CostConfig
from specplan.cost_models.hardware import GPUSpec, get_gpu
from specplan.cost_models.layer_costs import kv_bytes_per_elem, weight_formats
from specplan.cost_models.models import ModelSpec, get_model
from specplan.cost_models.quantization import FORMATS, Format
from specplan.errors import ConfigError


def _attention_params(model: ModelSpec) -> int:
    h = model.hidden
    if model.mla is None:
        return h * model.head_dim * (2 * model.num_heads + 2 * model.num_kv_heads)
    m = model.mla
    qk = m.qk_nope_head_dim + m.qk_rope_head_dim
    q = h * m.q_lora_rank + m.q_lora_rank * model.num_heads * qk if m.q_lora_rank else h * model.num_heads * qk
    kv = h * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank * model.num_heads * (m.qk_nope_head_dim + m.v_head_dim)
    return q + kv + model.num_heads * m.v_head_dim * h


def weight_bytes(model: ModelSpec, tp: int, bytes_per_param: float = 2.0,
                 formats: Optional[dict[str, Format]] = None) -> float:
    """Weights held by one GPU; every part at ``bytes_per_param`` unless ``formats`` names each part's."""
    def size(part: str) -> float:
        return formats[part].bytes_per_param if formats else bytes_per_param

    h = model.hidden
    attn = _attention_params(model) * size("attention")
    mlp = 3 * h * model.intermediate * size("mlp")
    total = model.num_layers * (attn + 2 * h * bytes_per_param) + model.dense_layers * mlp
    if model.moe is not None:
        e = model.moe
        experts = (e.num_experts * 3 * h * e.expert_intermediate + 3 * h * e.shared_intermediate) * size("experts")
        total += e.num_moe_layers * (experts + h * e.num_experts * FORMATS["bf16"].bytes_per_param)
    total += (1 if model.tied_embeddings else 2) * model.vocab * h * size("head")
    return total / tp


def kv_layer_bytes(model: ModelSpec, tp: int, bytes_per_elem: float = 2.0) -> float:
    """KV of one token in one layer on one GPU: K and V (KV heads replicated when fewer than TP), or MLA's latent."""
    if model.mla is not None:
        return (model.mla.kv_lora_rank + model.mla.qk_rope_head_dim) * bytes_per_elem
    return 2 * model.shard(tp).kv_heads * model.head_dim * bytes_per_elem


def kv_bytes_per_token(model: ModelSpec, tp: int, bytes_per_elem: float = 2.0) -> float:
    """KV of every layer for one token on one GPU."""
    if model.mla is None:
        return 2 * model.num_layers * model.shard(tp).kv_heads * model.head_dim * bytes_per_elem
    return model.num_layers * kv_layer_bytes(model, tp, bytes_per_elem)


def kv_cache_blocks(gpu: str, model_name: str, tp: int, block_size: int, kv_budget_gb: Optional[float] = None,
                    memory_fraction: float = 0.9, bytes_per_elem: float = 2.0) -> int:
    """Blocks of ``block_size`` tokens that fit: ``kv_budget_gb`` when given, else the GPU memory
    fraction the engine may use (TensorRT-LLM's and vLLM's default is 0.9) minus the weights; FP8
    weights and KV cache take 1 byte per element, BF16 2. Dense catalogue models at one format; see
    ``kv_cache_blocks_for`` for formats, experts and windows."""
    model = get_model(model_name)
    if kv_budget_gb is None:
        budget = memory_fraction * get_gpu(gpu).memory_bytes - weight_bytes(model, tp, bytes_per_elem)
        if budget <= 0:
            raise ConfigError(f"cost.model_name: {model_name} at tp {tp} does not fit in {gpu} memory")
    else:
        budget = checked_kv_budget(kv_budget_gb, get_gpu(gpu))
    return int(budget // (kv_bytes_per_token(model, tp, bytes_per_elem) * block_size))


def checked_kv_budget(kv_budget_gb: float, gpu: GPUSpec) -> float:
    """``engine.kv_budget_gb`` in bytes; more than one GPU holds is refused (the KV cache lives in one
    GPU's memory)."""
    if kv_budget_gb * 1e9 > gpu.memory_bytes:
        raise ConfigError(f"engine.kv_budget_gb: {kv_budget_gb:g} GB is more than one {gpu.name}'s "
                          f"{gpu.memory_bytes / 1e9:.0f} GB (cost.gpu), and the KV cache lives in one GPU's "
                          "memory; lower it, or omit it for what is left after the weights")
    return kv_budget_gb * 1e9


def kv_cache_blocks_for(cost: CostConfig, block_size: int, kv_budget_gb: Optional[float] = None,
                        max_seqs: Optional[int] = None, memory_fraction: float = 0.9) -> int:
    """The scheduler's KV blocks for ``cost``'s GPU, model and TP, with each part's weight format, the
    KV cache format and windowed layers capped for ``max_seqs`` requests (module docstring)."""
    model, gpu = get_model(cost.model_name), get_gpu(cost.gpu)
    return _blocks(model, gpu, cost, block_size, kv_budget_gb, max_seqs, memory_fraction)


def _blocks(model: ModelSpec, gpu: GPUSpec, cost: CostConfig, block_size: int, kv_budget_gb: Optional[float],
            max_seqs: Optional[int], memory_fraction: float) -> int:
    tp, elem = cost.tp, kv_bytes_per_elem(cost)
    base = FORMATS[cost.dtype].bytes_per_param
    if kv_budget_gb is None:
        budget = memory_fraction * gpu.memory_bytes - weight_bytes(model, tp, base, weight_formats(model, cost, gpu))
    else:
        budget = checked_kv_budget(kv_budget_gb, gpu)
    layer = kv_layer_bytes(model, tp, elem)
    windowed = model.window.num_layers if model.window else 0
    full = model.num_layers - windowed
    if windowed and full and max_seqs is not None:
        held = (math.ceil(model.window.size / block_size) + 1) * block_size  # a window spans one more block
        budget -= max_seqs * held * windowed * layer
    else:
        full = model.num_layers
    if budget <= 0:
        raise ConfigError(f"cost.model_name: {model.name} at tp {tp} does not fit in {gpu.name} memory")
    return int(budget // (full * layer * block_size))
