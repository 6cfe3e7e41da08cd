"""KV-cache capacity of one GPU: memory left after the weights, in blocks of the engine's size."""

from __future__ import annotations

from typing import Optional

from specplan.cost_models.hardware import get_gpu
from specplan.cost_models.models import ModelSpec, get_model
from specplan.errors import ConfigError


def weight_bytes(model: ModelSpec, tp: int, bytes_per_param: float = 2.0) -> float:
    """Weights held by one GPU: attention, gated MLP, norms and untied embedding + LM head."""
    attn = model.hidden * model.head_dim * (2 * model.num_heads + 2 * model.num_kv_heads)
    mlp = 3 * model.hidden * model.intermediate
    params = model.num_layers * (attn + mlp + 2 * model.hidden) + 2 * model.vocab * model.hidden
    return params * bytes_per_param / tp


def kv_bytes_per_token(model: ModelSpec, tp: int, bytes_per_elem: float = 2.0) -> float:
    """K and V of every layer for one token on one GPU (KV heads replicated when fewer than TP)."""
    return 2 * model.num_layers * model.shard(tp).kv_heads * model.head_dim * bytes_per_elem


def kv_cache_blocks(gpu: str, model_name: str, tp: int, block_size: int, kv_budget_gb: Optional[float] = None,
                    memory_fraction: float = 0.9, bytes_per_elem: float = 2.0) -> int:
    """Blocks of ``block_size`` tokens that fit: ``kv_budget_gb`` when given, else the GPU memory
    fraction the engine may use (TensorRT-LLM's and vLLM's default is 0.9) minus the weights; FP8
    weights and KV cache take 1 byte per element, BF16 2."""
    model = get_model(model_name)
    if kv_budget_gb is None:
        budget = memory_fraction * get_gpu(gpu).memory_bytes - weight_bytes(model, tp, bytes_per_elem)
        if budget <= 0:
            raise ConfigError(f"cost.model_name: {model_name} at tp {tp} does not fit in {gpu} memory")
    else:
        budget = kv_budget_gb * 1e9
    return int(budget // (kv_bytes_per_token(model, tp, bytes_per_elem) * block_size))
