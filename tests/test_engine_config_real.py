"""Real launch lines and TensorRT-LLM options files (tests/data/engine_configs, sources in SOURCES.md)
import to the mapping read off each file by hand, and ``--engine-config`` on each gives the scenario
written out by hand; pasted-command forms and bad files are refused in one line."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from specplan.config import load_config
from specplan.engine_config import engine_config_layer, import_engine_config
from specplan.errors import ConfigError

DATA = Path(__file__).parent / "data" / "engine_configs"
NONE = {"decoding_type": "none"}

# file -> sections, each value read off the file (comments say where a value comes from)
EXPECTED = {
    # env prefix; eagle -> Eagle3; dynamic SD ranges carried; the catalogue's Llama-3.1-8B
    "vllm_dynamic_sd_eagle.sh": {
        "engine": {"engine": "vllm"}, "cost": {"model_name": "llama-3.1-8b"},
        "speculation": {"decoding_type": "Eagle3", "max_draft_len": 3,
                        "num_speculative_tokens_per_batch_size": [[1, 64, 3], [65, 128, 1], [129, 512, 0]]}},
    "vllm_dynamic_sd_eagle3.sh": {
        "engine": {"engine": "vllm"}, "cost": {"model_name": "llama-3.1-8b"},
        "speculation": {"decoding_type": "Eagle3", "max_draft_len": 5, "num_speculative_tokens_per_batch_size":
                        [[1, 16, 5], [17, 32, 4], [33, 64, 3], [65, 128, 1], [129, 512, 0]]}},
    "vllm_configuration_ngram.sh": {
        "engine": {"engine": "vllm"},
        "speculation": {"decoding_type": "vllm_ngram", "max_draft_len": 5, "prompt_lookup_max": 4}},
    # --flag=value and dotted --speculative-config.KEY=VALUE
    "vllm_issue_32090_glm_mtp.sh": {
        "engine": {"engine": "vllm", "max_num_tokens": 65536, "max_batch_size": 512}, "cost": {"tp": 8},
        "speculation": {"decoding_type": "MTP", "max_draft_len": 1}},
    # two env prefixes, --model, -tp=4, no speculative config: no speculation
    "vllm_llm_scaler_364_glm_flash.sh": {
        "engine": {"engine": "vllm", "max_num_tokens": 8192, "max_model_len": 45312, "kv_block_size": 64},
        "cost": {"tp": 4}, "speculation": NONE},
    # {"method": "suffix"} alone: K = suffix_decoding_max_tree_depth = 24
    "vllm_openhands_suffix.sh": {
        "engine": {"engine": "vllm"}, "cost": {"tp": 2}, "speculation": {"decoding_type": "suffix", "max_draft_len": 24}},
    # options file /tmp/config.yml (through $EXTRA_LLM_API_FILE) read beside the command
    "trtllm_serve_llama33.sh": {
        "engine": {"engine": "trtllm", "max_batch_size": 1024, "max_num_tokens": 2048},
        "cost": {"tp": 1, "kv_cache_dtype": "fp8"},  # config.yml's kv_cache_config.dtype: fp8
        "speculation": NONE},
    # srun ... bash -c "trtllm-llmapi-launch trtllm-serve ..."
    "trtllm_srun_deepseek_v3.sh": {
        "engine": {"engine": "trtllm", "max_batch_size": 161, "max_num_tokens": 1160},
        "cost": {"model_name": "deepseek-v3", "tp": 16}, "speculation": NONE},
    # trtllm-llmapi-launch; --config bf16-tep2-mtp3.yaml (2048 blocks = 65536 tokens / 32)
    "trtllm_llmapi_launch_qwen38.sh": {
        "engine": {"engine": "trtllm", "max_batch_size": 8, "max_num_tokens": 8192, "enable_chunked_prefill": True,
                   "overlap_scheduler": True, "kv_num_blocks": 2048, "enable_prefix_caching": False},
        "speculation": {"decoding_type": "MTP", "max_draft_len": 3}},
    # mpirun with its options, model path last
    "trtllm_mpirun_deepseek_r1.sh": {
        "engine": {"engine": "trtllm", "max_batch_size": 128, "max_num_tokens": 4096}, "cost": {"tp": 16},
        "speculation": NONE},
    "config.yml": {"engine": {"engine": "trtllm"}, "cost": {"kv_cache_dtype": "fp8"}, "speculation": NONE},
    "srun_config.yml": {"engine": {"engine": "trtllm"}, "speculation": NONE},
    "extra-llm-api-config.yml": {"engine": {"engine": "trtllm"}, "speculation": NONE},
    "bf16-tep2-mtp3.yaml": {
        "engine": {"engine": "trtllm", "max_batch_size": 8, "max_num_tokens": 8192, "enable_chunked_prefill": True,
                   "overlap_scheduler": True, "kv_num_blocks": 2048, "enable_prefix_caching": False},
        "speculation": {"decoding_type": "MTP", "max_draft_len": 3}},
    "eagle3.yaml": {"engine": {"engine": "trtllm"}, "speculation": {"decoding_type": "Eagle3", "max_draft_len": 4}},
    "eagle3_sa.yaml": {"engine": {"engine": "trtllm"}, "speculation": {"decoding_type": "Eagle3", "max_draft_len": 4}},
    "ngram.yaml": {"engine": {"engine": "trtllm", "overlap_scheduler": False},
                   "speculation": {"decoding_type": "NGram", "max_draft_len": 3, "max_matching_ngram_size": 4,
                                   "is_public_pool": True}},
    "sa.yaml": {"engine": {"engine": "trtllm"}, "speculation": {"decoding_type": "SA", "max_draft_len": 4}},
    # num_nextn_predict_layers 1 -> K 1
    "trt_issue_4708_mtp.yml": {
        "engine": {"engine": "trtllm", "max_batch_size": 196, "max_num_tokens": 50000}, "cost": {"tp": 8},
        "speculation": {"decoding_type": "MTP", "max_draft_len": 1}},
}


def test_the_collection_is_complete():
    lines = [f for f in EXPECTED if f.endswith(".sh")]
    yamls = [f for f in EXPECTED if not f.endswith(".sh")]
    assert len(lines) + 1 >= 10 and len(yamls) >= 8  # + the refused draft-model line below
    listed = (DATA / "SOURCES.md").read_text()
    assert all(f"`{f}`" in listed for f in [*EXPECTED, "vllm_api_server_draft_model.sh"])


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_config_imports_to_the_hand_mapping(name):
    assert import_engine_config(DATA / name).sections == EXPECTED[name]


def _flatten(sections: dict) -> list[str]:
    return [f"{s}.{k}={json.dumps(v)}" for s, vals in sections.items() for k, v in vals.items() if s != "speculation"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_engine_config_option_gives_the_hand_set_scenario(name):
    """``--engine-config FILE`` on the default scenario equals the same settings given by hand
    (model-based drafters take their acceptance from an alpha the scenario sets)."""
    sections = EXPECTED[name]
    common = ["workload.num_requests=5", "acceptance.mode=alpha"]
    via_file = load_config(None, common, engine_config_layer(DATA / name))
    by_hand = load_config(None, [*common, *_flatten(sections), f"speculation={json.dumps(sections['speculation'])}"])
    assert via_file == by_hand


def test_simulated_import_equals_the_hand_set_run():
    """The summaries of a run through --engine-config and of the hand-set run agree."""
    from specplan.simulator.run import simulate

    args = ["workload.num_requests=12", "workload.trace=null", "workload.prompt_len=64", "workload.output_len=32",
            "acceptance.mode=alpha", "cost.model=linear_gamma", "engine.enable_prefix_caching=false"]
    for name in ("vllm_openhands_suffix.sh", "ngram.yaml"):
        sections = EXPECTED[name]
        a = simulate(load_config(None, args, engine_config_layer(DATA / name)))
        b = simulate(load_config(None, [*args, *_flatten(sections), f"speculation={json.dumps(sections['speculation'])}"]))
        assert a.summary == b.summary and a.summary["completed_requests"] == 12


def test_a_draft_model_without_method_is_refused_naming_it():
    with pytest.raises(ConfigError, match="facebook/opt-125m.*draft_model"):
        import_engine_config(DATA / "vllm_api_server_draft_model.sh")


# ----------------------------------------------------------------------------- pasted forms
def _write(tmp_path, text, name="serve.sh"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_quoted_binary_path_python_m_and_redirects(tmp_path):
    path = _write(tmp_path, '"/opt/venv/bin/vllm" serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 16K '
                            '--no-enable-prefix-caching > serve.log 2>&1 &\n')
    r = import_engine_config(path)
    # 16K is vLLM's human_readable_int: 16 * 1024
    assert r.sections["engine"] == {"engine": "vllm", "max_model_len": 16384, "enable_prefix_caching": False}
    path = _write(tmp_path, "python3 -m vllm.entrypoints.openai.api_server --model meta-llama/Llama-3.1-8B-Instruct "
                            "--enable-prefix-caching --max-num-seqs 8 --scheduling-policy fcfs | tee log\n")
    assert import_engine_config(path).sections["engine"] == {"engine": "vllm", "enable_prefix_caching": True,
                                                             "max_batch_size": 8}


def test_dotted_speculative_config_is_not_ignored(tmp_path):
    path = _write(tmp_path, "vllm serve m --speculative-config.method ngram --speculative-config.num_speculative_tokens 4 "
                            "--speculative-config.prompt_lookup_max 3\n")
    assert import_engine_config(path).sections["speculation"] == {"decoding_type": "vllm_ngram", "max_draft_len": 4,
                                                                  "prompt_lookup_max": 3}


@pytest.mark.parametrize("text, words", [
    ("vllm serve m --max-num-seqs 8 --max_num_seqs 16\n", ["--max_num_seqs", "twice", "'8'", "'16'"]),
    ("vllm serve m -tp 2 --tensor-parallel-size 4\n", ["-tp", "--tensor-parallel-size", "once"]),
    ("vllm serve m --speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 3}' "
     "--speculative-config.num_speculative_tokens 5\n", ["num_speculative_tokens", "twice"]),
    ("trtllm-serve m --tp_size $TP\n", ["--tp-size", "$TP", "not expanded"]),
])
def test_a_setting_given_twice_or_unexpanded_is_named(tmp_path, text, words):
    with pytest.raises(ConfigError) as err:
        import_engine_config(_write(tmp_path, text))
    assert all(w in str(err.value) for w in words), str(err.value)


def test_trt_yaml_without_speculative_config_does_not_keep_the_scenario_drafter(tmp_path):
    path = _write(tmp_path, "max_batch_size: 16\nkv_cache_config:\n  enable_block_reuse: true\n", "opts.yaml")
    cfg = load_config(None, layer=engine_config_layer(path))  # the default scenario drafts with SA K=4
    assert cfg.speculation.decoding_type == "none" and cfg.engine.enable_prefix_caching is True


def cli(*args):
    return subprocess.run([sys.executable, "-m", "specplan", *args], capture_output=True, text=True)


def test_config_import_says_which_sections_were_kept():
    run = cli("config", "import", str(DATA / "sa.yaml"))
    assert run.returncode == 0, run.stderr
    kept = [ln for ln in run.stderr.splitlines() if ln.strip().startswith("kept")]
    assert [ln.split()[1] for ln in kept] == ["engine:", "cost:"]


BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefg", "bcdefgh"))


@pytest.mark.parametrize("content, words", [
    (b"", ["empty engine config"]),
    (b"# only a comment\n\n", ["empty engine config"]),
    (b"max_batch_size: 8\nname: caf\xe9\n", ["not UTF-8"]),
    (BOMB.encode(), ["aliases expand"]),
])
def test_bad_files_are_refused_in_one_line(tmp_path, content, words):
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    run = cli("config", "import", str(path))
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and all(w in run.stderr for w in words), run.stderr


# ----------------------------------------------------------------------------- KV-cache dtype
@pytest.mark.parametrize("text, name, kv", [
    # vLLM CacheDType: fp8 is fp8_e4m3, one byte per element like fp8_e5m2; bfloat16 / float16 two bytes
    ("vllm serve m --kv-cache-dtype fp8\n", "serve.sh", "fp8"),
    ("vllm serve m --kv-cache-dtype=fp8_e5m2\n", "serve.sh", "fp8"),
    ("vllm serve m --kv-cache-dtype float16\n", "serve.sh", "bf16"),
    # TensorRT-LLM KvCacheConfig.dtype
    ("kv_cache_config:\n  dtype: fp8\n", "opts.yaml", "fp8"),
])
def test_kv_cache_dtype_maps_to_cost_kv_cache_dtype(tmp_path, text, name, kv):
    r = import_engine_config(_write(tmp_path, text, name))
    assert r.sections["cost"]["kv_cache_dtype"] == kv
    assert load_config(None, layer=engine_config_layer(_write(tmp_path, text, name))).cost.kv_cache_dtype == kv


@pytest.mark.parametrize("text, name, why", [
    ("vllm serve m --kv-cache-dtype auto\n", "serve.sh", "auto"),
    ("kv_cache_config:\n  dtype: nvfp4\n", "opts.yaml", "bf16 or fp8"),
])
def test_kv_cache_dtype_auto_or_unpriced_is_reported_not_applied(tmp_path, text, name, why):
    r = import_engine_config(_write(tmp_path, text, name))
    assert "kv_cache_dtype" not in r.sections.get("cost", {})
    assert any(why in reason for _, reason in r.ignored)
