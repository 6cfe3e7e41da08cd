"""linear_gamma, table, linear, drafting cost, catalogues and make_cost_model, against hand arithmetic."""

import json
import subprocess
import sys

import numpy as np
import pytest

from specplan.config import CostConfig
from specplan.cost_models.base import StepBatch
from specplan.cost_models.draft import DraftCost, DraftCostSection, NGramHostTable, SAKernelCost
from specplan.cost_models.hardware import get_gpu, gpu_key_for_device
from specplan.cost_models.linear import LinearCoefficients, fit_linear
from specplan.cost_models.models import get_model, load_hf_config
from specplan.cost_models.registry import make_cost_model
from specplan.errors import ConfigError


def rows(*query_lens, context=100):
    q = np.array(query_lens)
    return StepBatch(q, np.full(len(q), context), np.zeros(len(q), dtype=bool))


# --- linear_gamma and table --------------------------------------------------------------------


def test_linear_gamma_tables_interpolate_over_batch_by_hand():
    m = make_cost_model(CostConfig(model="linear_gamma", t_base_s={1: 0.010, 65: 0.026}, gamma={1: 0.0, 65: 0.32}))
    # B = 33: halfway, t_base 18 ms, gamma 0.16; K = 4 -> 18 * (1 + 0.64) = 29.52 ms.
    assert m.step_time(StepBatch.decode(33, 5)) == pytest.approx(0.02952)
    # Clamped beyond the table; a prefill chunk of 9 over 1 row counts K_eff = 8.
    assert m.step_time(StepBatch.decode(200, 1)) == pytest.approx(0.026)
    chunk = StepBatch(np.array([9]), np.array([0]), np.array([True]))
    assert m.step_time(chunk) == pytest.approx(0.010)  # gamma(1) = 0


def test_table_reproduces_seed_002_round_costs_exactly():
    cost_ms = {k: 10 + 0.7 * k + 0.1 * k * k for k in range(9)}
    m = make_cost_model(CostConfig(model="table", table_s={1: {k: v / 1e3 for k, v in cost_ms.items()}}))
    for k, ms in cost_ms.items():
        assert m.step_time(StepBatch.decode(1, 1 + k)) == pytest.approx(ms / 1e3, rel=1e-12)
    # Rows of 3 and 4 tokens: K_eff = 2.5, halfway between K = 2 (11.8 ms) and K = 3 (12.999... ms).
    assert m.step_time(rows(3, 4)) == pytest.approx((11.8 + 13.0) / 2 / 1e3)


def test_table_is_bilinear_in_batch_and_k():
    m = make_cost_model(CostConfig(model="table", table_s={1: {0: 0.01, 4: 0.02}, 9: {0: 0.02, 4: 0.06}}))
    # B = 5, K = 2: row B=1 gives 15 ms, row B=9 gives 40 ms; halfway -> 27.5 ms.
    assert m.step_time(StepBatch.decode(5, 3)) == pytest.approx(0.0275)


def test_table_needs_its_table():
    with pytest.raises(ConfigError, match="cost.table_s"):
        make_cost_model(CostConfig(model="table"))


# --- linear ------------------------------------------------------------------------------------


COEF = {"c0_s": 2e-3, "c_tok_s": 1e-5, "c_kv_s": 2e-8, "c_seq_s": 4e-6}


def test_linear_model_by_hand_and_draft_fraction():
    m = make_cost_model(CostConfig(model="linear", linear_coefficients=COEF))
    # 4 rows of 1 token over 1000 context: 2 ms + 4 * 10 us + 4000 * 20 ns + 4 * 4 us = 2.136 ms.
    assert m.step_time(StepBatch.decode(4, 1, 1000)) == pytest.approx(2.136e-3)
    frac = make_cost_model(CostConfig(model="linear", linear_coefficients=COEF, draft_fraction=0.1))
    assert frac.step_time(StepBatch.decode(4, 1, 1000)) == pytest.approx(2.136e-3)  # no drafts verified
    assert frac.step_time(StepBatch.decode(4, 3, 1000)) == pytest.approx(1.1 * (2.136e-3 + 8 * 1e-5))
    assert frac.draft_time("NGram", 4, 2) == 0.0


def test_linear_fit_recovers_known_coefficients():
    rng = np.random.default_rng(0)
    tokens, kv, seqs = rng.integers(1, 4000, 40), rng.integers(0, 500_000, 40), rng.integers(1, 256, 40)
    truth = LinearCoefficients(**COEF)
    seconds = truth.c0_s + truth.c_tok_s * tokens + truth.c_kv_s * kv + truth.c_seq_s * seqs
    fitted = fit_linear(tokens, kv, seqs, seconds)
    assert np.allclose([fitted.c0_s, fitted.c_tok_s, fitted.c_kv_s, fitted.c_seq_s],
                       [truth.c0_s, truth.c_tok_s, truth.c_kv_s, truth.c_seq_s], rtol=1e-6)


def test_linear_needs_coefficients():
    with pytest.raises(ConfigError, match="linear_coefficients"):
        make_cost_model(CostConfig(model="linear"))
    with pytest.raises(ConfigError, match="c_seq_s: missing"):
        LinearCoefficients.from_mapping({"c0_s": 1, "c_tok_s": 1, "c_kv_s": 1})


# --- drafting cost -----------------------------------------------------------------------------


def draft(sm_count=132):
    table = NGramHostTable(pool_entries=[100, 10000], draft_len=[1, 3],
                           seconds_per_request=[[1e-6, 3e-6], [5e-6, 9e-6]])
    return DraftCost(DraftCostSection(ngram_host=table, sa_kernel=SAKernelCost()), sm_count)


def test_ngram_host_time_is_bilinear_in_log_pool_and_k():
    d = draft()
    # pool 1000 is halfway in log10 between 100 and 10000: K=1 -> 3 us, K=3 -> 6 us; K=2 -> 4.5 us.
    assert d.time("NGram", 4, 2, pool_entries=1000) == pytest.approx(4 * 4.5e-6)
    assert d.time("NGram", 1, 8, pool_entries=10**7) == pytest.approx(9e-6)  # clamped
    assert d.time("vllm_ngram", 4, 2, pool_entries=1000) == pytest.approx(4 * 4.5e-6 / 25)


def test_sa_kernel_is_flat_up_to_the_sm_count_then_waves():
    d = draft(sm_count=132)
    assert d.time("SA", 1, 4, 1024) == pytest.approx(10e-6)
    assert d.time("SA", 132, 4, 1024) == pytest.approx(10e-6)
    assert d.time("SA", 133, 4, 1024) == pytest.approx(20e-6)
    assert d.time("SA", 1, 4, 4096) == pytest.approx(10e-6 * 1.10)  # two doublings above 1K, 5% each


def test_no_drafting_costs_nothing_and_unknown_drafters_fail():
    d = draft()
    assert d.time("none", 8, 4) == d.time("NGram", 0, 4) == d.time("NGram", 8, 0) == 0.0
    with pytest.raises(ConfigError, match="decoding_type"):
        d.time("eagle", 8, 4)


def test_bundled_draft_costs_are_microseconds_per_request():
    d = DraftCost.default(132)
    per_request = d.time("NGram", 1, 4, pool_entries=1000)
    assert 1e-7 < per_request < 1e-3
    assert d.time("NGram", 64, 4, 1000) == pytest.approx(64 * per_request)


# --- catalogues --------------------------------------------------------------------------------


def test_catalogue_shapes_and_aliases():
    m = get_model("meta-llama/Llama-3.1-8B-Instruct")
    assert (m.num_layers, m.hidden, m.num_kv_heads, m.intermediate, m.vocab) == (32, 4096, 8, 14336, 128256)
    assert get_model("Qwen/Qwen2.5-7B-Instruct").num_kv_heads == 4
    assert get_model("mistralai/Mistral-7B-v0.3").vocab == 32768
    assert get_gpu("H200-SXM").hbm_bw == 4.8e12 and get_gpu("b200").bf16_flops == 2250e12
    assert gpu_key_for_device("NVIDIA H200") == "h200" and gpu_key_for_device("NVIDIA H200 NVL") is None
    shard = get_model("llama-3.1-70b").shard(16)
    assert (shard.q_heads, shard.kv_heads) == (4, 1)  # KV heads replicated when fewer than GPUs
    with pytest.raises(ConfigError, match="cost.gpu"):
        get_gpu("tpu")
    with pytest.raises(ConfigError, match="cost.model_name"):
        get_model("gpt-5")


def test_hf_config_loading_and_one_line_errors(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                                "intermediate_size": 128, "vocab_size": 1000}))
    m = get_model(str(path))
    assert (m.num_kv_heads, m.head_dim) == (4, 16)
    path.write_text(json.dumps({"hidden_size": 64, "num_attention_heads": 4}))
    with pytest.raises(ConfigError) as exc:
        load_hf_config(path)
    assert str(path) in str(exc.value) and "num_hidden_layers: missing" in str(exc.value)
    assert "\n" not in str(exc.value)
    # Experts without a model_type: which architecture routes them is unknown, so the file is refused,
    # naming the missing field and the experts field that made it matter (never read as dense).
    path.write_text(json.dumps({"num_local_experts": 8}))
    with pytest.raises(ConfigError) as exc:
        load_hf_config(path)
    message = str(exc.value)
    assert "model_type: missing" in message and "num_local_experts" in message and "\n" not in message


# --- make_cost_model ---------------------------------------------------------------------------


def test_make_cost_model_defaults_and_profiles():
    default = make_cost_model(CostConfig())
    assert default.name == "roofline" and "H200" in default.describe()
    by_profile = make_cost_model(CostConfig(model="profile"))  # bundled h200/llama-3.1-8b, analytic
    assert "bundled h200/llama-3.1-8b" in by_profile.describe()
    batch = StepBatch.decode(32, 5, 2048)
    assert by_profile.step_time(batch) == default.step_time(batch)


def test_every_cost_knob_is_a_config_field():
    from specplan.config import build_config

    m = make_cost_model(CostConfig(host_overhead_s=0.002, eta_mem=0.5))
    assert m.options.eta_mem == 0.5 and m.options.host_overhead_s == 0.002
    with pytest.raises(ConfigError, match="cost.eta_memory: unknown field"):
        build_config({"cost": {"eta_memory": 0.5}})
    with pytest.raises(ConfigError, match="cost.eta_comp"):
        build_config({"cost": {"eta_comp": 0.0}})


def test_simulator_and_cost_models_never_import_torch():
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from specplan.config import CostConfig\n"
        "from specplan.cost_models.registry import make_cost_model\n"
        "from specplan.cost_models.base import StepBatch\n"
        "import specplan.cli.calibrate, specplan.cli.profile, specplan.simulator.run\n"
        "for kind in ('roofline', 'profile'):\n"
        "    make_cost_model(CostConfig(model=kind)).step_time(StepBatch.decode(8, 3, 512))\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_bad_draft_costs_file_is_one_line_naming_file_and_field(tmp_path):
    path = tmp_path / "draft.yaml"
    path.write_text("format: specplan-draft-costs/1\nngram_host: {pool_entries: [10], draft_len: [1, 2], "
                    "seconds_per_request: [[1.0e-6]]}\n")
    with pytest.raises(ConfigError) as exc:
        make_cost_model(CostConfig(draft_costs=str(path)))
    assert str(path) in str(exc.value) and "ngram_host" in str(exc.value) and "\n" not in str(exc.value)
