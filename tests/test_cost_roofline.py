"""Analytic roofline against figures computed outside the code: COSTS.md §2e's derived table, Vidur's
measured GEMM times (COSTS.md §2a), published parameter counts, and hand arithmetic."""

import json

import numpy as np
import pytest

from specplan.cost_models.base import StepBatch
from specplan.cost_models.hardware import get_gpu
from specplan.cost_models.models import get_model, load_hf_config
from specplan.config import CostConfig
from specplan.cost_models.roofline import RooflineCostModel

NO_HOST = CostConfig(host_overhead_s=0.0, host_overhead_per_seq_s=0.0)


def roofline(gpu="h200", model="llama-3.1-8b", tp=1, options=CostConfig()):
    return RooflineCostModel(get_gpu(gpu), get_model(model), tp, options)


# COSTS.md §2e (BF16, decode at context 1K): step time at B=1 and B=64.
SECTION_2E = [
    ("h100", "llama-3.1-8b", 1, 5.7e-3, 9.3e-3),
    ("h200", "llama-3.1-8b", 1, 3.9e-3, 6.5e-3),
]


@pytest.mark.parametrize("gpu,model,tp,t1,t64", SECTION_2E)
@pytest.mark.parametrize("options", [NO_HOST, CostConfig()], ids=["gpu-only", "with-host-overhead"])
def test_step_time_within_25pct_of_costs_2e(gpu, model, tp, t1, t64, options):
    m = roofline(gpu, model, tp, options)
    assert m.step_time(StepBatch.decode(1, 1, 1024)) == pytest.approx(t1, rel=0.25)
    assert m.step_time(StepBatch.decode(64, 1, 1024)) == pytest.approx(t64, rel=0.25)


def test_b1_decode_streams_the_published_weights_once():
    # Llama-3.1-8B has 8.03B parameters; the input embedding (128256 x 4096 = 0.525B) is gathered, not
    # streamed, so a B=1 step reads 7.505B bf16 parameters: 15.01 GB / 4.8 TB/s = 3.127 ms at eta 1.
    opts = CostConfig(eta_mem=1.0, host_overhead_s=0, host_overhead_per_seq_s=0, gemm_floor_s=0,
                       attn_floor_s=0, small_kernels_per_layer=0)
    t = roofline(options=opts).step_time(StepBatch.decode(1, 1, 0))
    assert t == pytest.approx((8.030e9 - 0.525e9) * 2 / 4.8e12, rel=0.01)


def test_gemm_part_tracks_vidur_measured_h100_llama2_7b(tmp_path):
    # COSTS.md §2a: per-layer qkv+o+gate/up+down time (us) measured by Vidur on H100, Llama-2-7B TP1.
    cfg = {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 32,
           "intermediate_size": 11008, "vocab_size": 32000, "_name_or_path": "meta-llama/Llama-2-7b-hf"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    model = load_hf_config(path)
    m = RooflineCostModel(get_gpu("h100"), model, 1, CostConfig(cuda_graph_padding=False))
    tokens = [1, 32, 64, 128, 256, 512, 1024, 2048, 4096]
    measured_us = np.array([156, 159, 162, 180, 260, 328, 565, 1080, 2222])
    pred_us = np.array([m.components(StepBatch.decode(n, 1, 0))["gemm"] / 32 * 1e6 for n in tokens])
    err = np.abs(pred_us - measured_us) / measured_us
    assert np.median(err) < 0.12 and err.max() < 0.30


def test_gamma_rises_with_batch_and_falls_with_context():
    m = roofline(options=CostConfig(cuda_graph_padding=False))
    by_batch = [m.gamma(b, 4, 1024) for b in (1, 16, 64, 128, 256)]
    assert all(a < b for a, b in zip(by_batch, by_batch[1:]))
    assert by_batch[0] < 0.01  # B=1: weight streaming hides 4 extra positions (COSTS.md §2a, 0.00-0.01)
    by_context = [m.gamma(64, 4, c) for c in (256, 1024, 4096, 16384, 65536)]
    assert all(a > b for a, b in zip(by_context, by_context[1:]))
    # COSTS.md §2e: gamma(K=4) at 8K context stays <= 0.09 on H200 8B up to B=256.
    assert max(m.gamma(b, 4, 8192) for b in (64, 128, 256)) <= 0.09


def test_gamma_depends_on_k_through_total_tokens():
    m = roofline(options=CostConfig(cuda_graph_padding=False))
    gammas = [m.gamma(128, k, 1024) for k in (1, 2, 4, 8)]
    assert len(set(np.round(gammas, 4))) == 4
    # T(B, 1+K) depends on B and K only through the rows' total tokens and KV: 64 rows of 3 = 96 rows of 2.
    # Both read the same weights; only attention differs, and by little at context 0.
    t_a = m.components(StepBatch.decode(64, 3, 0))["gemm"]
    t_b = m.components(StepBatch.decode(96, 2, 0))["gemm"]
    assert t_a == t_b


def test_cuda_graph_padding_makes_a_staircase():
    pad = roofline(options=NO_HOST)
    gemm = [pad.components(StepBatch.decode(n, 1, 0))["gemm"] for n in (9, 12, 16, 17)]
    assert gemm[0] == gemm[1] == gemm[2] < gemm[3]  # 9..16 pad to 16; 17 pads to 24
    assert pad.components(StepBatch.decode(3, 1, 0))["gemm"] == pad.components(StepBatch.decode(4, 1, 0))["gemm"]
    big = [pad.components(StepBatch.decode(1, n, 0))["gemm"] for n in (513, 514)]
    assert big[0] < big[1]  # beyond the largest captured size (512): eager, unpadded


def test_tp_communication_is_two_allreduces_per_layer_by_hand():
    m = roofline("h100", "llama-3.1-70b", 8)
    n = 64
    c = m.components(StepBatch.decode(n, 1, 1024))
    # 80 layers x 2 + 1 (embedding) all-reduces of n * 8192 * 2 bytes, one logits gather of n * 128256 * 2.
    by_hand = 161 * (10e-6 + n * 8192 * 2 / 300e9) + (10e-6 + n * 128256 * 2 / 300e9)
    assert c["tp_comm"] == pytest.approx(by_hand, rel=1e-9)
    assert roofline("h100", "llama-3.1-8b", 1).components(StepBatch.decode(n, 1, 1024))["tp_comm"] == 0.0


def test_prefill_chunk_attention_grows_with_chunk_times_context():
    m = roofline(options=NO_HOST)
    t = [m.components(StepBatch(np.array([512]), np.array([c]), np.array([True])))["attention_prefill"]
         for c in (4096, 16384, 65536)]
    # FLOPs are proportional to chunk * (ctx + (chunk + 1) / 2); compute-bound at these contexts.
    work = np.array([4096, 16384, 65536]) + 256.5
    assert np.allclose(np.array(t[1:]) / t[0], work[1:] / work[0], rtol=0.02)


def test_host_overhead_and_empty_batch():
    m = roofline(options=CostConfig(host_overhead_s=1e-3, host_overhead_per_seq_s=1e-5))
    assert m.components(StepBatch.decode(10, 1, 0))["host"] == pytest.approx(1e-3 + 10 * 1e-5)
    assert m.step_time(StepBatch.decode(0, 1, 0)) == 0.0


def test_fp8_halves_weight_streaming():
    def gemm(dtype):
        opts = CostConfig(dtype=dtype, gemm_floor_s=0.0)
        return roofline(options=opts).components(StepBatch.decode(1, 1, 0))["gemm"]

    assert gemm("fp8") == pytest.approx(gemm("bf16") / 2, rel=0.01)
