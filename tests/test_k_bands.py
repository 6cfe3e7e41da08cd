"""The K each batch size gets, as bands, against brute-force lookups written from the engines' rules, and the
warning for a schedule whose meaning differs between TensorRT-LLM's NGram code and its docstring."""

import json
import random
import sys
import warnings

import pytest

from specplan.config import build_config
from specplan.simulator.k_bands import (describe_bands, k_shares, path_bands,
                                        schedule_reading_warning)
from specplan.simulator.run import resolve


def _cfg(engine: str, decoding_type: str, schedule, max_batch_size: int = 16, **spec):
    return resolve(build_config({"engine": {"engine": engine, "max_batch_size": max_batch_size},
                                 "speculation": {"decoding_type": decoding_type, "max_draft_len": 4,
                                                 "draft_len_schedule": schedule, **spec}}))


def _per_size(bands) -> list[int]:
    return [b.k for b in bands for _ in range(b.lo, b.hi + 1)]


# The engines' rules, by definition rather than by bisect:
def lower_bound_k(schedule: dict, size: int) -> int:
    """Drafter.get_draft_len_for_batch_size: the K of the largest key <= size, 0 below every key."""
    below = [key for key in schedule if key <= size]
    return schedule[max(below)] if below else 0


def upper_bound_k(schedule: dict, size: int) -> int:
    """utils.get_draft_len_for_batch_size: the K of the smallest key >= size, 0 above every key."""
    above = [key for key in schedule if key >= size]
    return schedule[min(above)] if above else 0


def vllm_k(schedule: dict, size: int) -> int:
    """The same bands as vLLM ranges ending at each key; past the last range vLLM carries the last K."""
    return upper_bound_k(schedule, size) if size <= max(schedule) else schedule[max(schedule)]


def _schedules(n: int, max_batch: int):
    rng = random.Random(7)
    for _ in range(n):
        keys = sorted(rng.sample(range(1, max_batch + 1), rng.randint(1, 5)))
        # TensorRT-LLM: the smallest key maps to max_draft_len; every K <= max_draft_len
        yield {key: (4 if i == 0 else rng.randint(0, 4)) for i, key in enumerate(keys)}


@pytest.mark.parametrize("engine, drafter, rule", [("trtllm", "NGram", lower_bound_k), ("trtllm", "SA", upper_bound_k),
                                                    ("vllm", "vllm_ngram", vllm_k)])
def test_bands_equal_the_engine_lookup_at_every_batch_size(engine, drafter, rule):
    for schedule in _schedules(40, 24):
        (bands,) = path_bands(_cfg(engine, drafter, schedule, max_batch_size=24))
        assert _per_size(bands) == [rule(schedule, b) for b in range(1, 25)], schedule
        assert all(a.k != b.k for a, b in zip(bands, bands[1:]))  # adjacent bands merged


def test_bands_in_words_for_the_issue_schedule():
    # {8: 4, 16: 0} at max_batch_size 16: NGram keys start bands, SA keys end them
    assert describe_bands(_cfg("trtllm", "NGram", {8: 4, 16: 0})) == "batch 1-7: K 0 (off); 8-15: 4; 16+: 0 (off)"
    assert describe_bands(_cfg("trtllm", "SA", {8: 4, 16: 0})) == "batch 1-8: K 4; 9+: 0 (off)"
    assert describe_bands(_cfg("trtllm", "NGram", None)) == "batch 1+: K 4"


def test_max_concurrency_switches_the_drafter_off_above_it():
    # should_use_spec_decode: min(active, max_batch_size, max_num_tokens // (1 + K)) <= max_concurrency
    assert describe_bands(_cfg("trtllm", "NGram", None, max_concurrency=5)) == "batch 1-5: K 4; 6+: 0 (off)"


def test_share_of_steps_at_each_k():
    # a step that did not speculate counts at K 0 whatever K it looked up
    from specplan.simulator.iteration_sums import SUMMED, iteration_figures

    columns = {name: [0, 0, 0, 0] for name in SUMMED} | {"k": [4, 4, 2, 4], "spec_on": [True, True, True, False]}
    counts = iteration_figures(columns)["k_counts"]
    assert counts == {0: 1, 2: 1, 4: 2}
    assert k_shares(counts) == {0: 0.25, 2: 0.25, 4: 0.5} and list(k_shares({4: 1, 0: 3})) == [0, 4]


def test_ngram_warning_names_both_readings_and_the_intended_schedule():
    text = schedule_reading_warning(_cfg("trtllm", "NGram", {8: 4, 16: 0}))
    assert "\n" not in text
    assert "lower bounds" in text and "batch 1-7: K 0 (off); 8-15: 4; 16+: 0 (off)" in text
    assert "upper bounds" in text and "batch 1-8: K 4; 9+: 0 (off)" in text
    # the documented bands (K 4 at 1-8, 0 at 9-16) written as lower bounds
    assert text.endswith("write {1: 4, 9: 0}")


def test_no_warning_where_code_and_docs_agree_or_the_schedule_starts_at_one():
    assert schedule_reading_warning(_cfg("trtllm", "SA", {8: 4, 16: 0})) is None  # one-model: upper bounds both
    assert schedule_reading_warning(_cfg("trtllm", "NGram", {1: 4, 9: 0})) is None
    assert schedule_reading_warning(_cfg("vllm", "vllm_ngram", {8: 4, 16: 0})) is None
    assert schedule_reading_warning(_cfg("trtllm", "NGram", {16: 4}, max_batch_size=16)) is not None


def _main(monkeypatch, capsys, *args):
    from specplan.cli import main

    monkeypatch.setattr(sys, "argv", ["specplan", *map(str, args)])
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        main()
    return capsys.readouterr()


SMALL = {"engine": {"max_batch_size": 16, "kv_num_blocks": 20000},
         "speculation": {"decoding_type": "NGram", "max_draft_len": 4, "draft_len_schedule": {8: 4, 16: 0}},
         "acceptance": {"mode": "alpha", "alpha": 0.7},
         "workload": {"trace": None, "arrival": "closed_loop", "concurrency": 4, "num_requests": 8,
                      "prompt_len": 16, "output_len": 16},
         "cost": {"model": "linear_gamma", "t_base_s": 0.01, "gamma": 0.1}}


def test_simulate_shows_bands_shares_and_one_warning_line(tmp_path, monkeypatch, capsys):
    import yaml

    (tmp_path / "s.yaml").write_text(yaml.safe_dump(SMALL))
    out = _main(monkeypatch, capsys, "simulate", tmp_path / "s.yaml", "--format", "json")
    summary = json.loads(out.out)
    assert summary["k_bands"] == "batch 1-7: K 0 (off); 8-15: 4; 16+: 0 (off)"
    assert summary["k_shares"] == {"0": 1.0}  # 4 clients: never 8 active, so K 0 at every step
    warned = [line for line in out.err.splitlines() if "draft_len_schedule" in line and "lower bounds" in line]
    assert len(warned) == 1 and warned[0].startswith("warning: ")
    assert "UserWarning" not in out.err and ".py:" not in out.err


ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def _flat(text: str) -> str:
    return " ".join(text.replace("#", " ").split())


def test_examples_are_written_in_the_paths_own_reading_with_their_bands():
    import yaml

    from specplan.config import load_config
    from specplan.engine_config import engine_config_layer

    # the sweep example: each schedule's comment states its bands at the largest max_batch_size it zips (32)
    text = (ROOT / "examples" / "sweep_schedule_gate.yaml").read_text()
    sweep = yaml.safe_load(text)
    stated = [line.split("# bands: ")[1].strip() for line in text.splitlines() if "# bands: " in line]
    base = sweep["base"]
    schedules = sweep["grid"]["speculation.draft_len_schedule"]
    assert len(stated) == len(schedules) == 3
    for schedule, bands in zip(schedules, stated):
        cfg = _cfg("trtllm", base["speculation"]["decoding_type"], schedule, max_batch_size=32)
        assert describe_bands(cfg) == bands and schedule_reading_warning(cfg) is None
    # the known case: the schedule its header promises, and the bands it gives
    header = _flat((ROOT / "examples" / "recommend_known_case.yaml").read_text())
    known = _cfg("trtllm", "NGram", {1: 4, 9: 0}, max_batch_size=16)
    assert "draft_len_schedule {1: 4, 9: 0}" in header and f"bands: {describe_bands(known)}" in header
    # the TensorRT-LLM options file, imported as specplan simulate --engine-config reads it
    options = ROOT / "examples" / "engine_configs" / "extra_llm_api_options.yaml"
    cfg = resolve(load_config(None, layer=engine_config_layer(options)))
    assert f"bands: {describe_bands(cfg)}" in options.read_text() and schedule_reading_warning(cfg) is None
    # the README's config block (max_batch_size 64)
    readme = _flat((ROOT / "README.md").read_text())
    block = _cfg("trtllm", "NGram", {1: 4, 5: 2, 9: 1, 33: 0}, max_batch_size=64)
    assert "draft_len_schedule: {1: 4, 5: 2, 9: 1, 33: 0}" in readme
    assert describe_bands(block).removeprefix("batch ") in readme and schedule_reading_warning(block) is None
