"""Engine configs in: hand-written TensorRT-LLM / vLLM files map to the values they spell, and every
file ``recommend`` writes reads back to the same scenario sections."""

import json
import subprocess
import sys

import pytest
import yaml

from specplan.config import SpeculationConfig, load_config
from specplan.engine_config import engine_config_layer
from specplan.engine_config import export, import_engine_config
from specplan.errors import ConfigError

TRT_YAML = """\
max_batch_size: 48
max_num_tokens: 4096
kv_cache_config:
  free_gpu_memory_fraction: 0.9
  tokens_per_block: 64
  max_tokens: 100000
speculative_config:
  decoding_type: NGram
  max_draft_len: 5
  max_matching_ngram_size: 3
  draft_len_schedule: {4: 5, 16: 2}
  acceptance_rate_window_size: 100
  acceptance_rate_threshold: 0.2
"""
VLLM_JSON = '{"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4}'


def cli(*args):
    return subprocess.run([sys.executable, "-m", "specplan", *args], capture_output=True, text=True)


def test_hand_written_trtllm_yaml_maps_to_its_values(tmp_path):
    path = tmp_path / "extra_llm_api_options.yaml"
    path.write_text(TRT_YAML)
    run = cli("config", "import", str(path), "--format", "json")
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["sections"] == {
        # 100000 tokens in 64-token blocks: ceil(1562.5) = 1563 blocks
        "engine": {"engine": "trtllm", "max_batch_size": 48, "max_num_tokens": 4096, "kv_block_size": 64,
                   "kv_num_blocks": 1563},
        "speculation": {"decoding_type": "NGram", "max_draft_len": 5, "max_matching_ngram_size": 3,
                        "draft_len_schedule": {"4": 5, "16": 2}, "acceptance_rate_window_size": 100,
                        "acceptance_rate_threshold": 0.2},
    }
    assert {i["field"] for i in report["ignored"]} == {"kv_cache_config.free_gpu_memory_fraction"}


def test_hand_written_vllm_json_maps_to_its_values(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(VLLM_JSON)
    run = cli("config", "import", str(path), "--format", "json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["sections"] == {
        "engine": {"engine": "vllm"},
        "speculation": {"decoding_type": "vllm_ngram", "max_draft_len": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4},
    }


def test_serve_command_lines(tmp_path):
    vllm = tmp_path / "serve.sh"
    vllm.write_text("# production\nvllm serve meta-llama/Llama-3.1-8B-Instruct --max-num-seqs 32 \\\n"
                    "  --max_num_batched_tokens=2048 --enable-chunked-prefill --block-size 16 -tp 2 \\\n"
                    f"  --speculative-config '{VLLM_JSON}'\n")
    r = import_engine_config(vllm)
    assert r.sections == {"engine": {"engine": "vllm", "max_batch_size": 32, "max_num_tokens": 2048,
                                     "enable_chunked_prefill": True, "kv_block_size": 16},
                          # the served model is the catalogue's Llama-3.1-8B
                          "cost": {"model_name": "llama-3.1-8b", "tp": 2},
                          "speculation": {"decoding_type": "vllm_ngram", "max_draft_len": 4, "prompt_lookup_min": 2,
                                          "prompt_lookup_max": 4}}
    assert r.ignored == []
    (tmp_path / "opts.yaml").write_text(TRT_YAML)
    trt = tmp_path / "trt.sh"
    trt.write_text("trtllm-serve /models/llama --backend pytorch --max_batch_size 8 --tp_size 4 "
                   "--extra_llm_api_options opts.yaml\n")
    r = import_engine_config(trt)
    # the options file is applied after the flags, as trtllm-serve does: its max_batch_size wins
    assert r.sections["engine"]["max_batch_size"] == 48 and r.sections["cost"] == {"tp": 4}
    assert r.sections["speculation"]["draft_len_schedule"] == {4: 5, 16: 2}


# What recommend writes: speculation.recommended = the scenario's drafter at the searched cap with the
# merged schedule (and, for TensorRT-LLM, a gate), exported for both engines.
RECOMMENDED = [
    SpeculationConfig(decoding_type="NGram", max_draft_len=4, draft_len_schedule={8: 4, 16: 0},
                      acceptance_rate_window_size=128, acceptance_rate_threshold=0.3),
    SpeculationConfig(decoding_type="SA", max_draft_len=3, draft_len_schedule={2: 3, 32: 1}),
    SpeculationConfig(decoding_type="vllm_ngram", max_draft_len=4, prompt_lookup_min=2, prompt_lookup_max=5,
                      draft_len_schedule={4: 4, 16: 2}),
    SpeculationConfig(decoding_type="suffix", max_draft_len=6, draft_len_schedule={1: 6, 64: 3}),
]


@pytest.mark.parametrize("spec", RECOMMENDED, ids=lambda s: s.decoding_type)
def test_every_exported_config_reads_back_to_the_same_sections(spec, tmp_path):
    trt_cfg, vllm_cfg = export.trtllm_speculative_config(spec), export.vllm_speculative_config(spec)
    trt = export.write_trtllm_yaml(trt_cfg, tmp_path / "t.yaml", comment="translated")
    vllm = export.write_vllm_json(vllm_cfg, tmp_path / "v.json")
    for path, engine, writer in ((trt, "trtllm", export.trtllm_speculative_config),
                                 (vllm, "vllm", export.vllm_speculative_config)):
        sections = import_engine_config(path).sections
        assert sections["engine"] == {"engine": engine}
        imported = SpeculationConfig.model_validate(sections["speculation"])
        assert writer(imported) == (trt_cfg if engine == "trtllm" else vllm_cfg)  # the identical file again
        again = tmp_path / f"again-{path.name}"
        (export.write_trtllm_yaml if engine == "trtllm" else export.write_vllm_json)(writer(imported), again)
        assert import_engine_config(again).sections == sections


def test_same_engine_files_carry_the_simulated_setting():
    ngram, _, vngram, _ = RECOMMENDED
    # TensorRT-LLM NGram: the file spells out the n-gram size the engine defaults to (2)
    got = import_engine_config_from(export.trtllm_speculative_config(ngram), "trtllm")
    assert got == ngram.model_copy(update={"max_matching_ngram_size": 2})
    # vLLM: the schedule {4: 4, 16: 2} as inclusive ranges [1, 4] -> 4, [5, 16] -> 2
    got = import_engine_config_from(export.vllm_speculative_config(vngram), "vllm")
    assert got == vngram.model_copy(update={"draft_len_schedule": None,
                                            "num_speculative_tokens_per_batch_size": [[1, 4, 4], [5, 16, 2]]})


def import_engine_config_from(cfg, engine, tmp=None):
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / ("t.yaml" if engine == "trtllm" else "v.json")
        (export.write_trtllm_yaml if engine == "trtllm" else export.write_vllm_json)(cfg, path)
        return SpeculationConfig.model_validate(import_engine_config(path).sections["speculation"])


def test_engine_config_option_equals_the_sections_inline(tmp_path):
    path = tmp_path / "opts.yaml"
    path.write_text(TRT_YAML)
    via_option = load_config(None, ["workload.num_requests=5"], engine_config_layer(path))
    inline = yaml.safe_load(TRT_YAML)
    by_hand = load_config(None, ["workload.num_requests=5", "engine.max_batch_size=48", "engine.max_num_tokens=4096",
                                 "engine.kv_block_size=64", "engine.kv_num_blocks=1563",
                                 f"speculation={json.dumps(inline['speculative_config'])}"])
    assert via_option == by_hand


@pytest.mark.parametrize("text, field", [
    ("speculative_config: {decoding_type: Medusa, max_draft_len: 2}", "decoding_type"),
    ("speculative_config: {decoding_type: NGram, max_draft_len: 4, draft_len_schedule: {2: 3}}", "draft_len_schedule"),
    ("max_batch_size: 0", "max_batch_size"),
])
def test_bad_engine_configs_name_the_field(tmp_path, text, field):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    run = cli("simulate", "--engine-config", str(path))
    assert run.returncode == 2
    assert field in run.stderr and "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1
    with pytest.raises(ConfigError):
        import_engine_config(path)


@pytest.mark.parametrize("name, engine, k", [("extra_llm_api_options.yaml", "trtllm", 5), ("vllm_serve.sh", "vllm", 3)])
def test_example_engine_configs(name, engine, k):
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "examples" / "engine_configs" / name
    cfg = load_config(None, layer=engine_config_layer(path))
    assert cfg.engine.engine == engine and cfg.speculation.max_draft_len == k


def test_sweep_takes_the_engine_config_over_its_base(tmp_path):
    import pandas as pd

    opts = tmp_path / "spec.json"
    opts.write_text(VLLM_JSON)
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(yaml.safe_dump({
        "base": {"workload": {"trace": None, "num_requests": 4, "prompt_len": 8, "output_len": 8},
                 "acceptance": {"mode": "alpha"}, "cost": {"model": "linear_gamma"}},
        "grid": {"workload.rate": [1.0]}, "baseline": False}))
    run = cli("sweep", str(sweep), "--out", str(tmp_path / "out"), "--workers", "1", "--no-progress",
              "--engine-config", str(opts))
    assert run.returncode == 0, run.stderr
    assert len(pd.read_parquet(tmp_path / "out" / "results.parquet")) == 1
    (record,) = (tmp_path / "out" / "records").glob("*.json")
    config = json.loads(record.read_text())["config"]
    assert config["engine"]["engine"] == "vllm"
    assert {k: config["speculation"][k] for k in ("decoding_type", "max_draft_len", "prompt_lookup_min", "prompt_lookup_max")} \
        == {"decoding_type": "vllm_ngram", "max_draft_len": 4, "prompt_lookup_min": 2, "prompt_lookup_max": 4}
