"""Multi-head latent attention (DeepSeek-V2/V3) with random weights of a config's shapes (torch).

The cache holds one latent per token and layer, ``kv_lora_rank + qk_rope_head_dim`` wide (the
normed compressed KV and the shared rotary key), as vLLM's and TensorRT-LLM's MLA do. Every step runs
the absorbed form the engines use to decode: queries projected through ``q_a``/``q_b`` (or directly
when ``q_lora_rank`` is 0), their no-rope part multiplied into the latent space by ``W_UK``, attention
of all heads over the latent as one shared KV head (scores over the whole latent, values over its
``kv_lora_rank`` part), the result taken back through ``W_UV``, then the output GEMM. Prefill is timed
in the same absorbed form (the engines expand K and V per head for long prefills; the roofline prices
that form): a stated approximation of prefill chunks. Weights are one GPU's TP shard (heads divided by
TP; ``q_a`` and ``kv_a`` whole on every GPU).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

from specplan.cost_models.models import MLASpec

EPS = 1e-6


def latent_width(mla: MLASpec) -> int:
    """Cache elements per token and layer."""
    return mla.kv_lora_rank + mla.qk_rope_head_dim


def mla_weights(mla: MLASpec, hidden: int, heads: int, kv_elems: int, device: str, dtype: torch.dtype,
                rand) -> dict:
    """One layer's MLA projections for ``heads`` query heads and its latent cache of ``kv_elems`` elements."""
    qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    lay = {"kv_a": rand((latent_width(mla), hidden)), "kv_norm": torch.ones(mla.kv_lora_rank, device=device, dtype=dtype),
           "w_uk": rand((heads, mla.qk_nope_head_dim, mla.kv_lora_rank)),
           "w_uv": rand((heads, mla.kv_lora_rank, mla.v_head_dim)),
           "wo": rand((hidden, heads * mla.v_head_dim)), "latent": rand((kv_elems,)) * 50}
    if mla.q_lora_rank:
        lay.update(q_a=rand((mla.q_lora_rank, hidden)), q_b=rand((heads * qk, mla.q_lora_rank)),
                   q_norm=torch.ones(mla.q_lora_rank, device=device, dtype=dtype))
    else:
        lay["q"] = rand((heads * qk, hidden))
    return lay


def mla_attention(lay: dict, mla: MLASpec, y: torch.Tensor, batch: int, query: int, context: int, rope,
                  sdpa, linear=F.linear) -> torch.Tensor:
    """Attention output ``[tokens, hidden]`` (before the residual) of normed ``y`` ``[batch * query, hidden]``
    over ``context`` cached tokens per row; writes the new latents. ``rope(x)`` rotates ``x``
    ``[batch, query, heads, qk_rope_head_dim]``; ``sdpa(q, k, v, mask)`` is the stack's attention call, ``linear`` its GEMM."""
    heads = lay["w_uk"].shape[0]
    nope, rope_dim, rank = mla.qk_nope_head_dim, mla.qk_rope_head_dim, mla.kv_lora_rank
    if mla.q_lora_rank:
        q = linear(F.rms_norm(linear(y, lay["q_a"]), (mla.q_lora_rank,), lay["q_norm"], EPS), lay["q_b"])
    else:
        q = linear(y, lay["q"])
    q_nope, q_rope = q.view(batch * query, heads, nope + rope_dim).split([nope, rope_dim], -1)
    c_kv, k_rope = linear(y, lay["kv_a"]).split([rank, rope_dim], -1)
    width, total = rank + rope_dim, context + query
    cache = lay["latent"][: batch * total * width].view(batch, 1, total, width)
    cache[:, 0, context:, :rank] = F.rms_norm(c_kv, (rank,), lay["kv_norm"], EPS).view(batch, query, rank)
    cache[:, 0, context:, rank:] = rope(k_rope.view(batch, query, 1, rope_dim))[:, :, 0]
    q_latent = torch.bmm(q_nope.transpose(0, 1), lay["w_uk"]).transpose(0, 1)  # [tokens, heads, rank]: W_UK absorbed
    qs = torch.cat([q_latent.reshape(batch, query, heads, rank), rope(q_rope.reshape(batch, query, heads, rope_dim))], -1)
    mask = causal_lower_right(query, total) if query > 1 else None
    out = sdpa(qs.transpose(1, 2), cache, cache[..., :rank], mask)  # [batch, heads, query, rank]
    out = torch.bmm(out.permute(1, 0, 2, 3).reshape(heads, batch * query, rank), lay["w_uv"])  # W_UV absorbed
    return linear(out.transpose(0, 1).reshape(batch * query, heads * mla.v_head_dim), lay["wo"])
