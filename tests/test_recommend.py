"""``recommend`` on a scenario whose best schedule is known by construction; engine exports and validators."""

import json
import sys

import pytest
import yaml

from specplan.config import SpeculationConfig
from specplan.errors import ConfigError
from specplan.engine_config import export
from specplan.sweeps.recommend import Band, bands_from_edges, default_band_edges, merge_schedule

ALPHA, K_MAX, MAX_BATCH = 0.7, 4, 16
T = 0.010  # seconds per step
# gamma = 0 up to batch 8 (a step costs T whatever K), gamma = 1 above (T * (1 + K)); linear in K,
# so two K columns per row define it, and B <= 8 / B >= 9 are clamped to the rows at 8 and 9.
TABLE = {1: {0: T, K_MAX: T}, 8: {0: T, K_MAX: T}, 9: {0: T, K_MAX: T * (1 + K_MAX)}}
SCENARIO = {
    "seed": 0,
    "engine": {"engine": "trtllm", "max_batch_size": MAX_BATCH, "kv_num_blocks": 100000},
    "speculation": {"decoding_type": "NGram", "max_draft_len": K_MAX},
    "acceptance": {"mode": "alpha", "alpha": ALPHA},
    "workload": {"trace": None, "arrival": "poisson", "rate": 20.0, "num_requests": 60, "prompt_len": 1, "output_len": 64},
    "cost": {"model": "table", "table_s": TABLE},
}


def expected_schedule() -> dict[int, int]:
    """By hand: with i.i.d. acceptance a, a round of K drafts commits E[L] = (1 - a^(K+1)) / (1 - a)
    tokens. Where a step costs T at every K (B <= 8) the best K maximises E[L]: K_MAX. Where it costs
    T (1 + K) (B > 8) it maximises E[L] / (1 + K) < 1 for K > 0: K = 0. Bands are 1, 2, 3-4, 5-8,
    9-16; TensorRT-LLM's NGram drafter reads schedule keys as lower bounds (bisect_right), so each
    run of equal K is keyed by its first batch size."""
    def committed(k):
        return (1 - ALPHA ** (k + 1)) / (1 - ALPHA)

    flat = max(range(K_MAX + 1), key=committed)
    steep = max(range(K_MAX + 1), key=lambda k: committed(k) / (1 + k))
    assert (flat, steep) == (K_MAX, 0)
    per_band = {start: flat if start <= 8 else steep for start in (1, 2, 3, 5, 9)}
    merged, prev = {}, None
    for start in sorted(per_band):  # keep each run's first batch size
        if per_band[start] != prev:
            merged[start] = per_band[start]
        prev = per_band[start]
    return merged


def test_bands_and_merging():
    assert default_band_edges(16) == [1, 2, 4, 8, 16]
    assert default_band_edges(48) == [1, 2, 4, 8, 16, 32, 48]
    bands = bands_from_edges([1, 2, 4, 8, 16], 16)
    assert bands == [Band(1, 1), Band(2, 2), Band(3, 4), Band(5, 8), Band(9, 16)]
    assert bands[3].probes == (5, 8) and bands[0].probes == (1,)
    assert merge_schedule(bands, [4, 4, 2, 2, 0]) == {2: 4, 8: 2, 16: 0}
    assert merge_schedule(bands, [4, 4, 2, 2, 0], "lower_bound") == {1: 4, 3: 2, 9: 0}
    with pytest.raises(ConfigError, match="last edge must be engine.max_batch_size"):
        bands_from_edges([1, 8], 16)


def test_recommend_finds_the_schedule_known_by_construction(tmp_path, monkeypatch, capsys):
    from specplan.cli import main

    config = tmp_path / "scenario.yaml"
    config.write_text(yaml.safe_dump(SCENARIO))
    out = tmp_path / "rec"
    monkeypatch.setattr(sys, "argv", ["specplan", "recommend", str(config), "--slo-tpot-ms", "50", "--rates", "20,400",
                                      "--probe-requests", "2", "--workers", "2", "--out", str(out), "--no-progress"])
    main()
    printed = capsys.readouterr().out
    want = expected_schedule()
    assert want == {1: K_MAX, 9: 0}
    assert str(want) in printed

    summary = json.loads((out / "recommendation.json").read_text())
    assert summary["band_k"][str(K_MAX)] == [K_MAX, K_MAX, K_MAX, K_MAX, 0]
    assert summary["recommended"]["max_draft_len"] == K_MAX
    assert {int(k): v for k, v in summary["recommended"]["draft_len_schedule"].items()} == want
    # the schedule beats both alternatives: no speculation (slow at small batches) and every fixed K
    # (5x step cost above batch 8)
    assert summary["gain_vs_no_speculation"] > 0
    assert summary["gain_vs_best_fixed_k"] > 0
    # verify is free up to batch 8 and speculation is off above: it never loses, so no gate
    assert "no gate needed" in summary["gate_note"]

    trt = export.load_trtllm_yaml(out / "trtllm_speculative_config.yaml")
    assert trt["decoding_type"] == "NGram" and trt["max_draft_len"] == K_MAX and trt["draft_len_schedule"] == want
    vllm = export.load_vllm_json(out / "vllm_speculative_config.json")
    assert vllm["method"] == "ngram" and vllm["num_speculative_tokens"] == K_MAX
    assert vllm["num_speculative_tokens_per_batch_size"] == [[1, 8, K_MAX], [9, 16, 0]]


def test_nothing_meets_the_slo_exits_3_without_engine_configs(tmp_path, monkeypatch, capsys):
    """A TPOT SLO of 1 us: every step takes 10 ms, so no request of any candidate qualifies."""
    from specplan.cli import main

    config = tmp_path / "scenario.yaml"
    config.write_text(yaml.safe_dump(SCENARIO))
    out = tmp_path / "rec"
    out.mkdir()
    (out / "trtllm_speculative_config.yaml").write_text("left by an earlier run\n")
    with pytest.raises(SystemExit) as exit_info:
        main(["recommend", str(config), "--slo-tpot-ms", "0.001", "--max-draft-len", "2", "--probe-requests", "1",
              "--workers", "1", "--out", str(out), "--no-progress"])
    assert exit_info.value.code == 3
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(err) == 1 and "no configuration meets the SLO (TPOT <= 0.001 ms)" in err[0]
    # every step takes at least T and commits at most 1 + 2 tokens (K <= 2): the closest TPOT is >= T / 3
    tpot_ms = float(err[0].split("p99 TPOT ")[1].split(" ms")[0])
    assert tpot_ms >= T * 1e3 / 3
    summary = json.loads((out / "recommendation.json").read_text())
    assert summary["meets_slo"] is False and summary["recommended"] is None
    assert all(g == 0 for gs in summary["goodput_tok_s"].values() for g in gs)
    assert not (out / "trtllm_speculative_config.yaml").exists() and not (out / "vllm_speculative_config.json").exists()


@pytest.mark.parametrize("spec,trt,vllm", [
    ({"decoding_type": "NGram", "max_draft_len": 3, "max_matching_ngram_size": 4, "draft_len_schedule": {4: 3, 32: 1},
      "acceptance_rate_window_size": 64, "acceptance_rate_threshold": 0.25},
     {"decoding_type": "NGram", "max_draft_len": 3, "max_matching_ngram_size": 4, "is_keep_all": True,
      "is_use_oldest": True, "is_public_pool": True, "draft_len_schedule": {4: 3, 32: 1},
      "acceptance_rate_window_size": 64, "acceptance_rate_threshold": 0.25},
     # the NGram drafter reads {4: 3, 32: 1} as lower bounds: 1-3 -> 0, 4-31 -> 3, 32 and up -> 1
     {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 4,
      "num_speculative_tokens_per_batch_size": [[1, 3, 0], [4, 31, 3], [32, 32, 1]]}),
    ({"decoding_type": "SA", "max_draft_len": 5, "max_matching_ngram_size": -1},
     {"decoding_type": "SA", "max_draft_len": 5, "max_matching_ngram_size": -1},
     {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_min": 1, "prompt_lookup_max": 5}),
    ({"decoding_type": "suffix", "max_draft_len": 6},
     {"decoding_type": "SA", "max_draft_len": 6, "max_matching_ngram_size": -1},
     {"method": "suffix", "num_speculative_tokens": 6, "suffix_decoding_max_tree_depth": 24,
      "suffix_decoding_max_cached_requests": 10000, "suffix_decoding_max_spec_factor": 1.0,
      "suffix_decoding_min_token_prob": 0.1}),
])
def test_exports_and_round_trip(tmp_path, spec, trt, vllm):
    setting = SpeculationConfig.model_validate(spec)
    assert export.trtllm_speculative_config(setting) == trt
    assert export.vllm_speculative_config(setting) == vllm
    export.write_trtllm_yaml(trt, tmp_path / "t.yaml")
    export.write_vllm_json(vllm, tmp_path / "v.json")
    assert export.load_trtllm_yaml(tmp_path / "t.yaml") == trt
    assert export.load_vllm_json(tmp_path / "v.json") == vllm


GOOD_TRT = {"decoding_type": "NGram", "max_draft_len": 4, "draft_len_schedule": {8: 4, 16: 0}}


@pytest.mark.parametrize("change,needle", [
    ({"draft_len_schedule": {4: 2, 8: 1}}, "smallest key (4) must map to max_draft_len"),
    ({"draft_len_schedule": {1: 4, 8: 6}}, "<= max_draft_len"),
    ({"draft_len_schedule": {0: 4}}, "keys (batch sizes) must be >= 1"),
    ({"draft_len_schedule": {1: 4, 8: -1}}, "values (draft lengths) must be >= 0"),
    ({"max_concurrency": 8}, "mutually exclusive"),
    ({"max_draft_len": 0, "draft_len_schedule": None}, "max_draft_len: must be an integer >= 1"),
    ({"acceptance_rate_window_size": 64}, "must be given together"),
    ({"acceptance_rate_window_size": 64, "acceptance_rate_threshold": 1.5}, "acceptance_rate_threshold"),
    ({"decoding_type": "Eagle"}, "decoding_type: 'Eagle' is not a model-free"),
    ({"num_speculative_tokens_per_batch_size": [[1, 8, 4]]}, "num_speculative_tokens_per_batch_size: unknown field"),
    ({"draft_len_schedule": {"8": 4}}, "integer batch size"),
])
def test_trtllm_validator_rejects_with_one_line(change, needle):
    bad = {k: v for k, v in {**GOOD_TRT, **change}.items() if v is not None}
    export.validate_trtllm_speculative_config(GOOD_TRT)
    with pytest.raises(ConfigError) as exc:
        export.validate_trtllm_speculative_config(bad)
    assert needle in str(exc.value) and "\n" not in str(exc.value)


GOOD_VLLM = {"method": "ngram", "num_speculative_tokens": 4, "num_speculative_tokens_per_batch_size": [[1, 8, 4], [9, 16, 0]]}


@pytest.mark.parametrize("change,needle", [
    ({"num_speculative_tokens_per_batch_size": [[2, 8, 4]]}, "first range must start at 1"),
    ({"num_speculative_tokens_per_batch_size": [[1, 8, 4], [8, 16, 0]]}, "batch-size ranges must not overlap"),
    ({"num_speculative_tokens_per_batch_size": [[9, 16, 0], [2, 8, 4]]}, "first range must start at 1"),
    ({"num_speculative_tokens_per_batch_size": [[1, 8, 4], [9, 16, 1, 64, 0]]}, "entries must all be 3-item or all 5-item"),
    ({"num_speculative_tokens_per_batch_size": [[1, 8, 5]]}, "K must be in [0, num_speculative_tokens = 4]"),
    ({"num_speculative_tokens_per_batch_size": [[1, 0, 4]]}, "need 1 <= start <= end"),
    ({"num_speculative_tokens_per_batch_size": [[1, 8]]}, "three or five integers"),
    ({"num_speculative_tokens_per_batch_size": []}, "non-empty list"),
    ({"num_speculative_tokens": 0}, "num_speculative_tokens: must be an integer >= 1"),
    ({"prompt_lookup_min": 4, "prompt_lookup_max": 2}, "prompt_lookup_min: must be <= prompt_lookup_max"),
    ({"method": "eagle"}, "method: 'eagle' is not a model-free"),
    ({"draft_len_schedule": {1: 4}}, "draft_len_schedule: unknown field"),
    ({"method": "suffix", "suffix_decoding_min_token_prob": 2}, "suffix_decoding_min_token_prob"),
])
def test_vllm_validator_rejects_with_one_line(change, needle):
    export.validate_vllm_speculative_config(GOOD_VLLM)
    with pytest.raises(ConfigError) as exc:
        export.validate_vllm_speculative_config({**GOOD_VLLM, **change})
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_vllm_validator_sorts_ranges_as_vllm_does():
    # validate_and_normalize_dynamic_sd_schedule sorts the entries: an unsorted list is valid.
    export.validate_vllm_speculative_config({**GOOD_VLLM, "num_speculative_tokens_per_batch_size": [[9, 16, 0], [1, 8, 4]]})


def test_nothing_to_export_without_an_engine_drafter():
    with pytest.raises(ConfigError, match="no model-free engine drafter config"):
        export.trtllm_speculative_config(SpeculationConfig(decoding_type="none"))
