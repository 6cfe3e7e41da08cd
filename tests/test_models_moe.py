"""The distinct-experts term against a brute-force router, and the MoE step price built on it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specplan.config import CostConfig
from specplan.cost_models.base import StepBatch
from specplan.cost_models.hardware import get_gpu
from specplan.cost_models.layer_costs import ALPHA, BETA, ROUTED_DOWN, ROUTED_GU, TABLE, TABLE_LEN
from specplan.cost_models.models import get_model
from specplan.cost_models.moe import distinct_at, expected_distinct, inclusion_probabilities
from specplan.cost_models.roofline import RooflineCostModel
from specplan.errors import ConfigError

BATCHES = (1, 2, 5, 16, 64, 256)
DRAFTS = (0, 1, 4, 8)


def _uniform_router(rng, trials, tokens, experts, k):
    """Distinct experts touched: each token takes the top-k of random router scores (iid, so uniform)."""
    scores = rng.random((trials, tokens, experts), dtype=np.float32)
    picked = np.argpartition(scores, experts - k, axis=-1)[..., experts - k:]
    return _distinct(picked, trials, experts)


def _skewed_router(rng, trials, tokens, pi):
    """Distinct experts touched: each token draws len(pi)-of-them by systematic sampling in a random order,
    so expert i is among its sum(pi) distinct picks with probability pi_i."""
    experts = pi.size
    order = np.argsort(rng.random((trials, tokens, experts)), axis=-1)
    cum = np.cumsum(pi[order], axis=-1)
    u = rng.random((trials, tokens, 1))
    hit = (np.floor(cum - u) - np.floor(np.concatenate([np.zeros_like(u), cum[..., :-1]], -1) - u)) > 0
    assert np.allclose(hit.sum(-1), round(pi.sum()))  # every token routes to exactly k distinct experts
    touched = np.zeros((trials, experts), dtype=bool)
    t_idx, _, e_idx = np.nonzero(hit)
    touched[t_idx, order[hit]] = True
    return touched.sum(1).mean()


def _distinct(picked, trials, experts):
    touched = np.zeros((trials, experts), dtype=bool)
    touched[np.arange(trials)[:, None, None], picked] = True
    return touched.sum(1).mean()


def _trials(tokens, experts):
    return int(max(40, min(1000, 3e6 // (tokens * experts))))


@pytest.mark.parametrize("b", BATCHES)
def test_uniform_distinct_experts_match_brute_force_top_k(b):
    rng = np.random.default_rng(b)
    experts, k = 256, 8
    pi = inclusion_probabilities(experts, k)
    for drafts in DRAFTS:
        n = b * (1 + drafts)
        mc = _uniform_router(rng, _trials(n, experts), n, experts, k)
        assert expected_distinct(pi, n) == pytest.approx(mc, rel=0.01), (b, drafts)


@pytest.mark.parametrize("load", ["zipf", "histogram"])
def test_skewed_distinct_experts_match_brute_force_router(load):
    rng = np.random.default_rng(7)
    experts, k = 64, 6
    if load == "zipf":
        pi = inclusion_probabilities(experts, k, skew=1.2)
        assert pi.max() == 1.0  # the most popular expert's share would exceed one per token: capped
    else:
        pi = inclusion_probabilities(experts, k, load=rng.gamma(0.5, size=experts) * 1000)
    assert pi.sum() == pytest.approx(k) and pi.max() <= 1.0
    for b in BATCHES:
        for drafts in DRAFTS:
            n = b * (1 + drafts)
            mc = _skewed_router(rng, _trials(n, experts), n, pi)
            assert expected_distinct(pi, n) == pytest.approx(mc, rel=0.01), (load, b, drafts)


def test_uniform_closed_form_and_popular_experts_touch_fewer():
    pi = inclusion_probabilities(256, 8)
    n = np.arange(0, 2000)
    assert np.allclose(expected_distinct(pi, n), 256 * (1 - (1 - 8 / 256) ** n))
    skewed = inclusion_probabilities(256, 8, skew=1.0)
    assert (expected_distinct(skewed, n[1:]) < expected_distinct(pi, n[1:]) + 1e-9).all()
    assert distinct_at(np.zeros(0), pi, 5.0) == pytest.approx(256 * (1 - (31 / 32) ** 5))
    with pytest.raises(ConfigError, match="cost.expert_load"):
        inclusion_probabilities(256, 8, load=[1.0] * 10)


def test_hand_case_batch_1_k4_top8_of_256_and_the_weight_bytes_it_reads():
    # DeepSeek-V3 (top-8 of 256 routed experts of width 2048, FP8 weights) on 8 x H200: the verify step of
    # one row with K = 4 routes 5 tokens and touches 1 - (1 - 8/256)^5 of each layer's experts.
    model = RooflineCostModel(get_gpu("h200"), get_model("deepseek-v3"), 8, CostConfig(dtype="fp8"))
    c = model.coefficients
    length = int(c[TABLE_LEN])
    fraction = distinct_at(c[TABLE:TABLE + length], c[TABLE + length:], 5.0) / 256
    assert fraction == pytest.approx(1 - (1 - 8 / 256) ** 5, rel=1e-12)
    assert fraction == pytest.approx(0.146785, abs=1e-6)  # (31/32)^5 = 0.853215
    mem_rate = 0.8 * 4.8e12
    per_expert = 3 * 7168 * 2048 * 1.0 / 8  # gate, up, down at one byte per weight, split over 8 GPUs
    layer_bytes = (c[ROUTED_GU] + c[ROUTED_DOWN]) * mem_rate * fraction * 256
    assert layer_bytes == pytest.approx(per_expert * 256 * (1 - (31 / 32) ** 5), rel=1e-9)


def test_moe_gamma_is_high_at_small_batch_unlike_its_dense_twin():
    gpu = get_gpu("h200")
    moe = RooflineCostModel(gpu, get_model("qwen3-30b-a3b"), 1, CostConfig(cuda_graph_padding=False))
    g = [moe.gamma(b, 4) for b in (1, 4, 64)]
    assert g[0] > 0.2 and g[1] > g[2]  # verifying 4 drafts at B=1 reads up to 5x the experts
    spec = get_model("qwen3-30b-a3b")
    from dataclasses import replace
    twin = replace(spec, moe=None, intermediate=8 * spec.moe.expert_intermediate)  # equal active MLP width
    dense = RooflineCostModel(gpu, twin, 1, CostConfig(cuda_graph_padding=False))
    assert dense.gamma(1, 4) < 0.02 < g[0]


def test_expert_parallel_all_to_all_replaces_the_mlp_all_reduce():
    spec = get_model("qwen3-30b-a3b")
    opts = dict(cuda_graph_padding=False)
    tp = RooflineCostModel(get_gpu("h100"), spec, 4, CostConfig(**opts))
    ep = RooflineCostModel(get_gpu("h100"), spec, 4, CostConfig(ep=4, **opts))
    batch = StepBatch.decode(16, 5, 1024)
    n, h, k, layers = 80, 2048, 8, 48
    alpha, beta = ep.coefficients[ALPHA], ep.coefficients[BETA]
    a2a = 2 * (alpha + n * k * h * 2 * (3 / 4) / 4 / beta)  # dispatch + combine of each GPU's quarter
    allreduce = alpha + n * h * 2 / beta
    diff = ep.components(batch)["tp_comm"] - tp.components(batch)["tp_comm"]
    assert diff == pytest.approx(layers * (a2a - allreduce), rel=1e-9)
    # Each GPU reads D/4 whole experts instead of D quarter-experts: the same weight bytes per distinct expert.
    for part in (ROUTED_GU, ROUTED_DOWN):
        assert ep.coefficients[part] == pytest.approx(tp.coefficients[part], rel=1e-12)
    with pytest.raises(ConfigError, match="cost.ep"):
        RooflineCostModel(get_gpu("h100"), spec, 4, CostConfig(ep=3))
    with pytest.raises(ConfigError, match="cost.ep"):
        RooflineCostModel(get_gpu("h100"), get_model("llama-3.1-8b"), 2, CostConfig(ep=2))


def test_sliding_window_caps_the_kv_a_token_reads():
    # gpt-oss-120b on H100: 18 full layers read the whole context, 18 sliding layers at most 128 keys.
    opts = CostConfig(attn_floor_s=0.0)
    m = RooflineCostModel(get_gpu("h100"), get_model("gpt-oss-120b"), 1, opts)
    ctx = 4096
    kv_s = 2 * 8 * 64 * 2 / (0.7 * 3.35e12)
    work_s = 4 * 64 * 64 / (0.5 * 989e12)
    full = math.hypot((ctx + 1) * kv_s, (ctx + 1) * work_s)
    window = math.hypot((128 + 1) * kv_s, 128 * work_s)
    got = m.components(StepBatch.decode(1, 1, ctx))["attention_decode"]
    assert got == pytest.approx(18 * full + 18 * window, rel=1e-9)
