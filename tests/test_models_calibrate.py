"""``specplan calibrate`` on mixture-of-experts and MLA models: random weights of a config's shapes (no
download), a fixed count of passes (never a time budget), the experts sweep, and the latent attention
checked against the unabsorbed per-head form it stands for."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from specplan.cost_models.models import get_model
from specplan.cost_models.moe import expected_distinct, inclusion_probabilities
from specplan.cost_models.profile import read_profile

torch = pytest.importorskip("torch")

from specplan.calibration.grid import Point  # noqa: E402
from specplan.calibration.mla_block import mla_attention, mla_weights  # noqa: E402
from specplan.calibration.moe_block import forced_routing, moe_mlp, uniform_routing  # noqa: E402
from specplan.calibration.stack import DecoderStack, rotary, with_layers  # noqa: E402

# A 2-layer Qwen3-MoE-shaped model: 8 experts, top-2, small hidden (measured in seconds on one core).
QWEN3_MOE_TINY = {"model_type": "qwen3_moe", "num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 4,
                  "num_key_value_heads": 2, "head_dim": 32, "intermediate_size": 512, "moe_intermediate_size": 512,
                  "num_experts": 8, "num_experts_per_tok": 2, "vocab_size": 1024}
DEEPSEEK_TINY = {"model_type": "deepseek_v3", "num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 4,
                 "num_key_value_heads": 4, "intermediate_size": 256, "moe_intermediate_size": 64,
                 "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1, "first_k_dense_replace": 1,
                 "q_lora_rank": 48, "kv_lora_rank": 32, "qk_nope_head_dim": 16, "qk_rope_head_dim": 8,
                 "v_head_dim": 16, "vocab_size": 1024}


def _config(tmp_path, name, data):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(data))
    return folder


def test_calibrate_a_tiny_moe_model_on_the_cpu_writes_a_profile_and_the_experts_sweep(tmp_path):
    import typer

    from specplan.cli import calibrate as calibrate_cli

    root = typer.Typer()
    root.callback()(lambda: None)
    calibrate_cli.register(root)
    out = tmp_path / "out"
    model = _config(tmp_path, "qwen3-moe-tiny", QWEN3_MOE_TINY)
    result = CliRunner().invoke(root, ["calibrate", "--model", str(model), "--device", "cpu", "--passes", "1",
                                       "--no-draft-bench", "--out", str(out)])
    assert result.exit_code == 0, result.output
    profile = read_profile(out / "profile.yaml")
    assert profile.name == "cpu/qwen3-moe-tiny" and profile.model_shape.num_layers == 2
    meta = yaml.safe_load((out / "meta.yaml").read_text())
    assert meta["model"]["moe"]["num_experts"] == 8 and meta["passes"] == 1
    sweep = meta["experts"]
    # 16 tokens x top-2 = 32 assignments at every point; experts from top_k doubling to all 8.
    assert sweep["tokens"] == 16 and sweep["distinct"] == [2, 4, 8] and sweep["moe_layers"] == 2
    rows = pd.read_csv(out / "experts.csv")
    assert set(rows["distinct"]) == {2, 4, 8} and (rows.groupby(["distinct", "mode"]).size() == 1).all()
    # Physics, generously: same tokens and FLOPs, four times the expert weights read and GEMMs launched.
    seconds = dict(zip(sweep["distinct"], sweep["seconds"]))
    assert seconds[8] > seconds[2] and sweep["s_per_distinct_expert_per_layer"] > 0
    assert all(math.isfinite(s) and s > 0 for s in sweep["seconds"])
    # The profile prices the steps it measured (finite, positive).
    fwd = pd.read_csv(out / "measurements.csv")
    assert set(fwd["sweep"]) >= {"tokens", "batch", "draft_len", "lm_head"}


def test_uniform_routing_touches_the_expected_distinct_experts(tmp_path):
    moe = get_model(str(_config(tmp_path, "qwen3-moe-tiny", QWEN3_MOE_TINY))).moe
    gen = torch.Generator().manual_seed(3)
    pi = inclusion_probabilities(moe.num_experts, moe.top_k)
    for tokens in (1, 2, 3, 6):
        draws = [uniform_routing(tokens, moe, gen, "cpu") for _ in range(2000)]
        assert all(len({int(e) for e in r.choices[t]}) == moe.top_k for r in draws[:50] for t in range(tokens))
        mean = np.mean([r.distinct for r in draws])
        assert mean == pytest.approx(float(expected_distinct(pi, tokens)), rel=0.03)  # E(1 - (1 - k/E)^n)


def test_forced_routing_touches_exactly_d_experts_with_balanced_loads(tmp_path):
    moe = get_model(str(_config(tmp_path, "qwen3-moe-tiny", QWEN3_MOE_TINY))).moe
    gen = torch.Generator().manual_seed(0)
    for d in (2, 3, 5, 8):
        r = forced_routing(16, moe, d, gen, "cpu")
        loads = [end - start for _, start, end in r.segments]
        assert r.distinct == d and sum(loads) == 32 and max(loads) - min(loads) <= 1
        assert all(len(set(row.tolist())) == 2 for row in r.choices)  # a token's two experts differ
    with pytest.raises(ValueError):
        forced_routing(16, moe, 1, gen, "cpu")


def test_moe_mlp_matches_a_per_token_loop_over_its_experts(tmp_path):
    model = get_model(str(_config(tmp_path, "qwen3-moe-tiny", QWEN3_MOE_TINY)))
    stack = DecoderStack(model, 1, "cpu", torch.float64, 64)
    lay, moe = stack.layers[1], model.moe
    y = torch.randn(5, model.hidden, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        got = moe_mlp(lay, y, moe.top_k, None)
        probs = (y @ lay["router"].T).softmax(-1)
        want = torch.zeros_like(y)
        for t in range(5):
            weights, experts = probs[t].topk(moe.top_k)
            for w, e in zip(weights, experts):
                gate, up = (lay["experts_gu"][e] @ y[t]).chunk(2)
                want[t] += w * (lay["experts_down"][e] @ (torch.nn.functional.silu(gate) * up))
    assert torch.allclose(got, want, atol=1e-12)


def test_absorbed_mla_equals_per_head_attention_over_the_decompressed_keys(tmp_path):
    model = get_model(str(_config(tmp_path, "deepseek-tiny", DEEPSEEK_TINY)))
    m, h, heads = model.mla, model.hidden, model.num_heads
    gen = torch.Generator().manual_seed(2)
    lay = mla_weights(m, h, heads, 64 * (m.kv_lora_rank + m.qk_rope_head_dim), "cpu", torch.float64,
                      lambda shape: torch.randn(shape, dtype=torch.float64, generator=gen) * 0.3)
    stack = DecoderStack(model, 1, "cpu", torch.float64, 64)
    b, q, ctx = 2, 3, 5
    y = torch.randn(b * q, h, dtype=torch.float64, generator=gen)
    cos, sin = stack.rope_tables(ctx, q, m.qk_rope_head_dim)
    with torch.inference_mode():
        got = mla_attention(lay, m, y, b, q, ctx, lambda x: rotary(x, cos, sin), stack.sdpa)
        # Reference: keys and values decompressed per head from the cached latent (W_UK, W_UV), plain
        # causal attention of each new position over its row's ctx + own-and-earlier new positions.
        width = m.kv_lora_rank + m.qk_rope_head_dim
        cache = lay["latent"][: b * (ctx + q) * width].view(b, ctx + q, width)
        c_kv, k_rope = cache[..., :m.kv_lora_rank], cache[..., m.kv_lora_rank:]
        qa = torch.nn.functional.rms_norm(y @ lay["q_a"].T, (m.q_lora_rank,), lay["q_norm"], 1e-6)
        qfull = (qa @ lay["q_b"].T).view(b, q, heads, -1)
        q_nope, q_rope = qfull.split([m.qk_nope_head_dim, m.qk_rope_head_dim], -1)
        q_rope = rotary(q_rope, cos, sin)
        out = torch.zeros(b, q, heads, m.v_head_dim, dtype=torch.float64)
        for r in range(b):
            for i in range(q):
                keys = ctx + i + 1
                for hh in range(heads):
                    k_nope = c_kv[r, :keys] @ lay["w_uk"][hh].T  # [keys, nope]
                    v = c_kv[r, :keys] @ lay["w_uv"][hh]  # [keys, v_head_dim]
                    scores = (k_nope @ q_nope[r, i, hh] + k_rope[r, :keys] @ q_rope[r, i, hh])
                    scores = scores / math.sqrt(m.kv_lora_rank + m.qk_rope_head_dim)  # SDPA's scale on the latent
                    out[r, i, hh] = scores.softmax(-1) @ v
        want = out.reshape(b * q, heads * m.v_head_dim) @ lay["wo"].T
    assert torch.allclose(got, want, atol=1e-10)


def test_deepseek_shaped_stack_steps_and_layers_keep_their_proportions(tmp_path):
    model = get_model(str(_config(tmp_path, "deepseek-tiny", DEEPSEEK_TINY)))
    stack = DecoderStack(model, 1, "cpu", torch.float32, 256)
    assert "wgu" in stack.layers[0] and "router" in stack.layers[1] and "shared_gu" in stack.layers[1]
    with torch.inference_mode():
        for point in (Point("x", 4, 5, 16), Point("x", 1, 32, 0, True)):
            assert stack.step(point)().shape == (point.logit_tokens,)
    ds = with_layers(get_model("deepseek-v3"), 4)  # 58 of 61 layers MoE
    assert (ds.num_layers, ds.moe.num_moe_layers) == (4, 4)
    oss = with_layers(get_model("gpt-oss-120b"), 4)  # 18 of 36 sliding
    assert (oss.window.num_layers, oss.moe.num_moe_layers) == (2, 4)

