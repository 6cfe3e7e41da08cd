"""Each supported architecture's config.json loads into the shapes its fields say; the others are refused
in one line naming the field; KV capacity of MLA and sliding-window models against hand calculations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specplan.config import CostConfig
from specplan.cost_models.capacity import kv_cache_blocks_for
from specplan.cost_models.models import MODELS, catalogue_names, get_model
from specplan.errors import ConfigError

DATA = Path(__file__).parent / "data" / "models"


@pytest.mark.parametrize("key", ["llama-3.1-8b", "mistral-7b", "qwen2.5-7b"])
def test_dense_configs_read_as_the_catalogue_transcribes_them(key):
    assert get_model(str(DATA / key)) == MODELS[key]  # a model folder
    assert get_model(str(DATA / key / "config.json")) == MODELS[key]


def test_every_catalogued_architecture_loads_with_its_published_shapes():
    names = catalogue_names()
    for key in ("qwen3-8b", "mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3", "gpt-oss-120b", "gpt-oss-20b",
                "llama-4-scout-17b-16e", "gemma-3-27b"):
        assert key in names
    ds = get_model("deepseek-ai/DeepSeek-V3")
    assert (ds.moe.num_experts, ds.moe.top_k, ds.moe.num_moe_layers, ds.moe.shared_intermediate) == (256, 8, 58, 2048)
    assert (ds.mla.kv_lora_rank, ds.mla.qk_rope_head_dim, ds.weight_format) == (512, 64, "fp8")
    oss = get_model("openai/gpt-oss-120b")
    assert (oss.moe.num_experts, oss.moe.top_k, oss.window.size, oss.window.num_layers) == (128, 4, 128, 18)
    assert oss.weight_format == "mxfp4" and oss.attention_unquantized
    scout = get_model("meta-llama/Llama-4-Scout-17B-16E-Instruct")
    assert (scout.moe.num_experts, scout.moe.top_k, scout.moe.shared_intermediate, scout.intermediate) == (16, 1, 8192, 16384)
    assert (scout.window.kind, scout.window.size, scout.window.num_layers) == ("chunked", 8192, 36)  # 1 in 4 global
    gemma = get_model("google/gemma-3-27b-it")
    assert (gemma.window.size, gemma.window.num_layers, gemma.vocab, gemma.tied_embeddings) == (1024, 52, 262208, True)
    mixtral = get_model("mistralai/Mixtral-8x7B-Instruct-v0.1")
    assert (mixtral.moe.num_experts, mixtral.moe.top_k, mixtral.moe.expert_intermediate) == (8, 2, 14336)
    assert get_model("Qwen/Qwen3-30B-A3B").moe.expert_intermediate == 768
    assert get_model("qwen3-8b").moe is None


def _refusal(tmp_path, cfg) -> str:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(ConfigError) as exc:
        get_model(str(tmp_path))
    message = str(exc.value)
    assert "\n" not in message and str(path) in message
    return message


def test_unsupported_models_and_fields_are_refused_in_one_line(tmp_path):
    with pytest.raises(ConfigError) as exc:
        get_model(str(DATA / "mamba-2.8b"))
    assert "model_type: 'mamba' is not supported" in str(exc.value) and "\n" not in str(exc.value)
    base = json.loads((DATA / "llama-3.1-8b" / "config.json").read_text())
    assert "num_experts: experts in a dense llama" in _refusal(tmp_path, {**base, "num_experts": 8})
    assert "quantization_config.quant_method: 'bitsandbytes'" in _refusal(
        tmp_path, {**base, "quantization_config": {"quant_method": "bitsandbytes"}})
    assert "quantization_config.bits" in _refusal(tmp_path, {**base, "quantization_config": {"quant_method": "awq", "bits": 8}})
    assert "layer_types: 'linear_attention'" in _refusal(tmp_path, {**base, "layer_types": ["linear_attention"] * 32})
    no_type = {k: v for k, v in base.items() if k != "model_type"}
    assert "model_type: missing, and n_routed_experts" in _refusal(tmp_path, {**no_type, "n_routed_experts": 64})
    ds = json.loads(Path(get_model.__code__.co_filename).parent.parent.joinpath(
        "data", "models", "deepseek-v3", "config.json").read_text())
    assert "moe_layer_freq: 2" in _refusal(tmp_path, {**ds, "moe_layer_freq": 2})
    awq = {**base, "quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128}}
    (tmp_path / "config.json").write_text(json.dumps(awq))
    assert get_model(str(tmp_path)).weight_format == "int4"


def test_deepseek_v3_kv_capacity_on_8_h200_matches_a_hand_calculation():
    # FP8 checkpoint (attention, MLPs, experts at 1 byte), BF16 embedding, LM head, norms and router; FP8 KV.
    attention = 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168  # q_a q_b kv_a kv_b o
    assert attention == 187_105_280
    weights = (61 * (attention * 1 + 2 * 7168 * 2) + 3 * 3 * 7168 * 18432 * 1
               + 58 * (257 * 3 * 7168 * 2048 * 1 + 256 * 7168 * 2) + 2 * 129280 * 7168 * 2)
    assert 665e9 < weights < 680e9  # 671B parameters, nearly all at one byte
    budget = 0.9 * 141e9 - weights / 8
    per_block = 61 * (512 + 64) * 1 * 32  # the latent is held whole by each of the 8 GPUs
    cost = CostConfig(gpu="h200", model_name="deepseek-v3", tp=8, kv_cache_dtype="fp8")
    assert kv_cache_blocks_for(cost, 32) == int(budget // per_block)
    assert kv_cache_blocks_for(cost, 32) * 32 > 1.1e6  # over a million tokens of latent per GPU


def test_gpt_oss_120b_kv_capacity_with_its_sliding_window_matches_a_hand_calculation():
    # One H100: MXFP4 experts (4 bits + an E8M0 scale per 32 = 0.53125 byte), attention, router,
    # embeddings in BF16; 18 full layers, 18 sliding layers of 128 tokens (attention biases omitted).
    weights = (36 * (2880 * 64 * (2 * 64 + 2 * 8) * 2 + 2 * 2880 * 2 + 128 * 3 * 2880 * 2880 * 0.53125
                     + 128 * 2880 * 2) + 2 * 201088 * 2880 * 2)
    assert 60e9 < weights < 70e9
    layer = 2 * 8 * 64 * 2  # K and V of the 8 KV heads, BF16
    window_reserve = 64 * (128 // 32 + 1) * 32 * 18 * layer  # 64 requests x 5 blocks x 18 sliding layers
    blocks = int((0.9 * 80e9 - weights - window_reserve) // (18 * layer * 32))
    cost = CostConfig(gpu="h100", model_name="gpt-oss-120b")
    assert kv_cache_blocks_for(cost, 32, max_seqs=64) == blocks
    # Without the engine's request cap the window layers are counted like full ones.
    assert kv_cache_blocks_for(cost, 32) == int((0.9 * 80e9 - weights) // (36 * layer * 32))
