"""The roofline's constants for one model on one GPU: every per-layer term the compiled price reads.

``coefficients(gpu, model, tp, options)`` returns one float array (positions below) so that the
compiled ``roofline_parts`` prices a step without returning to Python, whatever the architecture:

- a dense layer's four GEMMs (qkv, o, gate_up, down) as ``(t_mem fixed, t_mem per token, t_comp per
  token)``; under MLA the "qkv" GEMM is the latent path (q_a, q_b, kv_a, and kv_b absorbed into the
  query and output as in vLLM's and TensorRT-LLM's decode), with q_a and kv_a replicated on every GPU;
- the LM head; the attention KV seconds per token and FLOP seconds per score position (decode and
  prefill apart: MLA decodes in the absorbed form over the 576-wide latent, prefills per head);
- layer counts: dense-MLP layers, MoE layers, windowed attention layers and the window;
- the MoE layer: router GEMM, shared experts (gate_up, down), routed experts' grouped GEMMs as
  ``(t_mem per distinct expert, t_mem per routed assignment, t_comp per assignment)``, top-k, the EP
  degree and its all-to-all seconds per assignment; then ``D(n)`` tabulated (``moe.distinct_table``)
  and the per-expert routing probabilities.

Under EP (``cost.ep``) experts are split ``ep`` ways and each one ``tp / ep`` ways, so a GPU reads
``D / ep`` experts of ``1 / (tp / ep)`` each: ``D / tp`` expert-weights, as under TP alone, in
expectation (the hottest GPU's excess under a skewed router is not priced). Weight bytes follow each
part's format (``quantization``); attention math runs at the BF16 peak.
"""

from __future__ import annotations

import numpy as np

from specplan.config import CostConfig
from specplan.cost_models.hardware import GPUSpec
from specplan.cost_models.models import ModelSpec
from specplan.cost_models.moe import distinct_table, inclusion_probabilities
from specplan.cost_models.quantization import FORMATS, KV_FORMATS, Format
from specplan.cost_models.terms import ACT_BYTES
from specplan.errors import ConfigError

# Positions: the four dense-layer GEMMs from 0, the LM head from 12, scalars from 15, MoE terms from 32.
LM_HEAD = 12
(KV_S_PER_TOKEN, ATTN_S_PER_WORK, SMALL_FIXED_S, SMALL_S_PER_TOKEN, ALPHA, BETA, FLOOR2, ATTN_FLOOR2,
 LAYERS, HIDDEN, VOCAB, TP, PADDING, MAX_CAPTURED, HOST_S, HOST_PER_SEQ_S, TWO) = range(15, 32)
(DENSE_LAYERS, MOE_LAYERS, WIN_LAYERS, WINDOW, ATTN_S_PER_WORK_PREFILL) = range(32, 37)
ROUTER, SHARED_GU, SHARED_DOWN, ROUTED_GU, ROUTED_DOWN = 37, 40, 43, 46, 49
TOP_K, EP, A2A_S_PER_ASSIGNMENT, TABLE_LEN, NUM_EXPERTS, TABLE = range(52, 58)


def weight_formats(model: ModelSpec, options: CostConfig, gpu: GPUSpec) -> dict[str, Format]:
    """The format of each part (``attention``, ``mlp``, ``experts``, ``head``): ``cost.weight_format`` for
    all, else the checkpoint's for the decoder's linear layers (gpt-oss keeps attention in BF16) with
    the embedding and LM head in ``cost.dtype``, else ``cost.dtype`` throughout."""
    base = FORMATS[options.dtype]
    if options.weight_format is not None:
        parts = dict.fromkeys(("attention", "mlp", "experts", "head"), FORMATS[options.weight_format])
    elif model.weight_format is not None:
        q = FORMATS[model.weight_format]
        parts = {"attention": base if model.attention_unquantized else q, "mlp": q, "experts": q, "head": base}
    else:
        parts = dict.fromkeys(("attention", "mlp", "experts", "head"), base)
    for fmt in parts.values():
        if fmt.name == "nvfp4" and gpu.fp4_flops is None:
            raise ConfigError(f"cost.weight_format: nvfp4 needs FP4 tensor cores (Blackwell); {gpu.name} has none")
    return parts


def kv_bytes_per_elem(options: CostConfig) -> float:
    """Bytes per KV-cache element: ``cost.kv_cache_dtype``, else ``cost.dtype``."""
    return KV_FORMATS[options.kv_cache_dtype or options.dtype]


def _gemm(params: float, io: float, fmt: Format, mem_rate: float, comp_rate: float) -> tuple[float, float, float]:
    return params * fmt.bytes_per_param / mem_rate, io * ACT_BYTES / mem_rate, 2.0 * params / comp_rate


def coefficients(gpu: GPUSpec, model: ModelSpec, tp: int, o: CostConfig) -> np.ndarray:
    """Every constant of the roofline formula for ``model`` on ``gpu`` at ``tp``, in the order above."""
    shard = model.shard(tp)
    fmts = weight_formats(model, o, gpu)
    mem_rate = o.eta_mem * gpu.hbm_bw
    rate = {name: o.eta_comp * gpu.gemm_flops(f.compute) for name, f in fmts.items()}
    h, hd, qh = model.hidden, model.head_dim, shard.q_heads
    kv_elem = kv_bytes_per_elem(o)
    bf16_attn = o.eta_attn_comp * gpu.bf16_flops
    if model.mla is None:
        attn = [(h * (qh + 2 * shard.kv_heads) * hd, h + (qh + 2 * shard.kv_heads) * hd), (qh * hd * h, qh * hd + h)]
        kv_bytes_per_token = 2 * shard.kv_heads * hd * kv_elem  # K and V, one layer
        work_decode = work_prefill = 4.0 * qh * hd / bf16_attn
    else:
        attn, kv_bytes_per_token, work_decode, work_prefill = _mla_terms(model, qh, kv_elem, bf16_attn)
    mlp = [(h * 2 * shard.intermediate, h + 2 * shard.intermediate), (shard.intermediate * h, shard.intermediate + h)]
    gemm_coeffs = [_gemm(p, io, fmts["attention"], mem_rate, rate["attention"]) for p, io in attn]
    gemm_coeffs += [_gemm(p, io, fmts["mlp"], mem_rate, rate["mlp"]) for p, io in mlp]
    lm_params = h * shard.vocab
    lm_head = _gemm(lm_params, h + shard.vocab, fmts["head"], mem_rate, rate["head"])
    kv_s_per_token = kv_bytes_per_token / (o.eta_attn * gpu.hbm_bw)
    # Small kernels: read+write the residual stream twice (norms), read gate/up and write the product.
    small_fixed_s = o.small_kernels_per_layer * o.small_kernel_s
    small_s_per_token = (4 * h + 3 * shard.intermediate) * ACT_BYTES / mem_rate
    alpha = o.allreduce_alpha_s if o.allreduce_alpha_s is not None else gpu.allreduce_alpha_s
    beta = o.allreduce_beta_Bps if o.allreduce_beta_Bps is not None else gpu.allreduce_beta_Bps
    window = model.window
    head = [
        *(x for g in gemm_coeffs for x in g), *lm_head, kv_s_per_token, work_decode,
        small_fixed_s, small_s_per_token, alpha, beta, o.gemm_floor_s ** 2, o.attn_floor_s ** 2,
        model.num_layers, model.hidden, model.vocab, tp, float(o.cuda_graph_padding), o.cuda_graph_max_tokens,
        o.host_overhead_s, o.host_overhead_per_seq_s, 2.0,
        model.dense_layers, model.num_layers - model.dense_layers, window.num_layers if window else 0,
        window.size if window else 0, work_prefill,
    ]
    return np.array(head + _moe_terms(model, tp, o, gpu, fmts["experts"], mem_rate, beta))


def _mla_terms(model: ModelSpec, qh: int, kv_elem: float, bf16_attn: float):
    """MLA's two attention GEMMs, latent KV bytes per token and layer, and FLOP seconds per score position."""
    m, h = model.mla, model.hidden
    qk = m.qk_nope_head_dim + m.qk_rope_head_dim
    latent = m.kv_lora_rank + m.qk_rope_head_dim
    q_path = h * m.q_lora_rank + m.q_lora_rank * qh * qk if m.q_lora_rank else h * qh * qk
    absorbed = qh * m.kv_lora_rank * (m.qk_nope_head_dim + m.v_head_dim)  # W_UK and W_UV
    qkv = (q_path + h * latent + absorbed, h + m.q_lora_rank + qh * qk + latent)
    o = (qh * m.v_head_dim * h, qh * m.v_head_dim + h)
    # The latent is one KV "head" shared by all query heads: every GPU of a TP group holds all of it.
    kv_bytes = latent * kv_elem
    work_decode = 2.0 * qh * (latent + m.kv_lora_rank) / bf16_attn  # scores over 576, values over 512
    work_prefill = 2.0 * qh * (qk + m.v_head_dim) / bf16_attn  # per-head K and V expanded
    return [qkv, o], kv_bytes, work_decode, work_prefill


def _moe_terms(model: ModelSpec, tp: int, o: CostConfig, gpu: GPUSpec, fmt: Format, mem_rate: float,
               beta: float) -> list[float]:
    moe = model.moe
    if moe is None:
        if o.ep > 1:
            raise ConfigError(f"cost.ep: {o.ep}, but {model.name} has no experts")
        return [0.0] * (TABLE - ROUTER)
    ep = o.ep
    if tp % ep or moe.num_experts % ep:
        raise ConfigError(f"cost.ep: {ep} must divide cost.tp {tp} and {model.name}'s {moe.num_experts} experts")
    moe_tp = tp // ep
    if moe.expert_intermediate % moe_tp or moe.shared_intermediate % tp:
        raise ConfigError(f"cost.tp: {tp} (with cost.ep {ep}) does not divide {model.name}'s expert width "
                          f"{moe.expert_intermediate}")
    h, width = model.hidden, moe.expert_intermediate
    comp = o.eta_moe_comp * gpu.gemm_flops(fmt.compute)
    bf16_rate = o.eta_comp * gpu.bf16_flops
    router = _gemm(h * moe.num_experts, h + moe.num_experts, FORMATS["bf16"], mem_rate, bf16_rate)
    s = moe.shared_intermediate // tp
    shared_rate = o.eta_comp * gpu.gemm_flops(fmt.compute)
    shared = [*_gemm(h * 2 * s, h + 2 * s, fmt, mem_rate, shared_rate), *_gemm(s * h, s + h, fmt, mem_rate, shared_rate)]
    if s == 0:
        shared = [0.0] * 6
    routed = []
    for params, io in ((2 * h * width, h + 2 * width // moe_tp), (width * h, width // moe_tp + h)):
        routed += [params * fmt.bytes_per_param / tp / mem_rate, io * ACT_BYTES / ep / mem_rate, 2.0 * params / tp / comp]
    a2a = h * ACT_BYTES * (ep - 1) / ep / ep / beta
    pi = inclusion_probabilities(moe.num_experts, moe.top_k, o.expert_skew, o.expert_load)
    table = distinct_table(pi)
    return [*router, *shared, *routed, moe.top_k, ep, a2a, table.size, pi.size, *table, *pi]
