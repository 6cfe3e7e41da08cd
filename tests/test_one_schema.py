"""One definition per setting: ``specplan acceptance`` and ``specplan simulate`` read the same pydantic
model, so they refuse the same values with the same line (after the source prefix) and accept the same."""

from __future__ import annotations

import sys

import pytest
import typer

from specplan.acceptance.drafters.settings import DrafterSettings
from specplan.config import SpeculationConfig, build_config
from specplan.errors import ConfigError

# What the exact drafters read (each is a flag of `specplan acceptance`) ...
DRAFTER_FIELDS = {
    "max_draft_len", "max_matching_ngram_size", "is_keep_all", "is_use_oldest", "is_public_pool",
    "enable_global_pool", "global_pool_size", "prompt_lookup_min", "prompt_lookup_max", "suffix_max_tree_depth",
    "suffix_max_cached_requests", "suffix_max_spec_factor", "suffix_max_spec_offset", "suffix_min_token_prob",
    "pld_variant", "eos_token_ids",
}
# ... and what only the engine's control plane reads (no meaning for a one-request replay).
CONTROL_FIELDS = {
    "decoding_type", "sa_config", "draft_len_schedule", "num_speculative_tokens_per_batch_size", "schedule_lookup",
    "k_from", "max_concurrency", "verify_width", "acceptance_rate_window_size", "acceptance_rate_threshold",
    "acceptance_window", "acceptance_length_threshold", "gate_denominator",
}

# (drafter, field, invalid value) for every drafter field that has invalid values.
INVALID = [
    ("SA", "max_matching_ngram_size", 0),
    ("NGram", "max_matching_ngram_size", 0),
    ("pld", "max_matching_ngram_size", -2),
    ("NGram", "max_draft_len", -1),
    ("SA", "global_pool_size", 0),
    ("vllm_ngram", "prompt_lookup_min", 0),
    ("vllm_ngram", "prompt_lookup_max", 0),
    ("suffix", "suffix_max_tree_depth", 0),
    ("suffix", "suffix_max_cached_requests", -2),
    ("suffix", "suffix_max_spec_factor", -1.0),
    ("suffix", "suffix_min_token_prob", 1.5),
    ("pld", "pld_variant", "fast"),
]
# Values that depend on another field: both paths must agree on the pair.
PAIRS = [
    ("SA", {"enable_global_pool": True, "max_matching_ngram_size": 100}, False),  # llm_args: [1, 64] with the pool
    ("SA", {"max_matching_ngram_size": 100}, True),  # without the pool any size >= 1
    ("SA", {"global_pool_size": 64}, False),  # requires enable_global_pool
    ("SA", {"enable_global_pool": True, "global_pool_size": 2000}, False),
    ("vllm_ngram", {"prompt_lookup_min": 6, "prompt_lookup_max": 5}, False),
    ("vllm_ngram", {"prompt_lookup_min": 2, "prompt_lookup_max": 4}, True),
]


def _flag(field: str) -> str:
    return "--" + ("eos-token-id" if field == "eos_token_ids" else field.replace("_", "-"))


def _cli(argv, monkeypatch, capsys) -> tuple[int, str]:
    from specplan.cli import main

    monkeypatch.setattr(sys, "argv", ["specplan", *argv])
    with pytest.raises(SystemExit) as exit_info:
        main()
    return exit_info.value.code, capsys.readouterr().err.strip()


def _body(line: str) -> str:
    """The message after the source prefix (``error: SOURCE: ``)."""
    return line.split(": ", 2)[2]


def test_every_speculation_field_is_classified():
    assert set(SpeculationConfig.model_fields) == DRAFTER_FIELDS | CONTROL_FIELDS
    assert not DRAFTER_FIELDS & CONTROL_FIELDS


def test_every_drafter_field_is_an_acceptance_flag():
    from specplan.cli import app

    command = typer.main.get_command(app).commands["acceptance"]
    flags = {opt for p in command.params for opt in p.opts}
    assert {_flag(f) for f in DRAFTER_FIELDS} <= flags


def test_every_drafter_field_with_invalid_values_is_walked():
    walked = {f for _, f, _ in INVALID} | {f for _, kw, _ in PAIRS for f in kw}
    constrained = {f for f, info in SpeculationConfig.model_fields.items() if f in DRAFTER_FIELDS
                   and (info.metadata or info.annotation not in (bool, float, "bool", "float"))}
    assert constrained - walked <= {"is_keep_all", "is_use_oldest", "is_public_pool", "enable_global_pool",
                                    "suffix_max_spec_offset", "eos_token_ids"}


@pytest.mark.parametrize("kind, field, value", INVALID, ids=[f"{k}-{f}" for k, f, _ in INVALID])
def test_both_commands_refuse_alike(kind, field, value, monkeypatch, capsys):
    code_sim, sim = _cli(["simulate", "--set", f"speculation.decoding_type={kind}",
                          "--set", f"speculation.{field}={value}"], monkeypatch, capsys)
    code_acc, acc = _cli(["acceptance", "specbench", "--drafter", kind, _flag(field), str(value)],
                         monkeypatch, capsys)
    assert code_sim == code_acc == 2
    assert "\n" not in sim and "\n" not in acc and "Traceback" not in sim + acc
    assert field in sim and _body(sim) == _body(acc)


@pytest.mark.parametrize("kind, fields, valid", PAIRS, ids=[f"{k}-{'-'.join(f)}" for k, f, _ in PAIRS])
def test_both_models_agree_on_dependent_values(kind, fields, valid):
    outcomes = []
    for build in (lambda: build_config({"speculation": {"decoding_type": kind, **fields}}),
                  lambda: DrafterSettings(kind=kind, **fields)):
        try:
            build()
            outcomes.append(None)
        except ConfigError as exc:
            outcomes.append(_body("error: " + str(exc)))
    assert (outcomes[0] is None) == valid and outcomes[0] == outcomes[1]


@pytest.mark.parametrize("spelling, canonical", [("sa", "SA"), ("ngram", "NGram"), ("vllm-ngram", "vllm_ngram"),
                                                 ("VLLM_NGRAM", "vllm_ngram"), ("Suffix", "suffix"), ("eagle3", "Eagle3")])
def test_one_spelling_per_drafter_with_aliases(spelling, canonical):
    cfg = build_config({"speculation": {"decoding_type": spelling}, "acceptance": {"mode": "alpha"}})
    assert cfg.speculation.decoding_type == canonical
    if canonical not in ("Eagle3",):
        assert DrafterSettings(kind=spelling).kind == canonical
