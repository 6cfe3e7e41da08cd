"""Bad configs fail with one clear line naming the field."""

import pytest

from specplan.config import build_config, load_config
from specplan.errors import ConfigError


def _err(data) -> str:
    with pytest.raises(ConfigError) as exc:
        build_config(data)
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_unknown_key_names_the_field():
    assert "speculation.max_draft_length" in _err({"speculation": {"max_draft_length": 4}})
    assert "unknown field" in _err({"engine": {"max_batch": 4}})


def test_wrong_type_names_the_field():
    assert "engine.max_batch_size" in _err({"engine": {"max_batch_size": "lots"}})


def test_negative_rate_names_the_field():
    assert "workload.rate" in _err({"workload": {"rate": -1.0}})


@pytest.mark.parametrize("data, field", [
    ({"speculation": {"decoding_type": "MTP"}, "acceptance": {"mode": "drafter"}}, "acceptance.mode"),
    ({"speculation": {"decoding_type": "NGram", "sa_config": {"threshold": 4}}}, "speculation.sa_config"),
    ({"speculation": {"decoding_type": "NGram", "max_draft_len": 2},
      "acceptance": {"mode": "length_dist", "length_dist": [0.2] * 5}}, "acceptance.length_dist"),
    ({"cost": {"model": "linear_gamma"}, "cluster": {"replicas": 2, "tp": [1, 2]}}, "cluster.tp")])
def test_a_rule_across_sections_names_the_field_to_change(data, field):
    """Pydantic places the whole config's rules at the root; the line names the field instead, once."""
    msg = _err(data)
    assert msg.startswith(f"config: {field}: ") and msg.count(field) == 1


@pytest.mark.parametrize(
    "spec,needle",
    [
        ({"max_draft_len": 4, "draft_len_schedule": {4: 2, 8: 1}}, "smallest key (4) must map to max_draft_len"),
        ({"max_draft_len": 4, "draft_len_schedule": {1: 4, 8: 6}}, "<= max_draft_len"),
        ({"max_draft_len": 4, "draft_len_schedule": {0: 4}}, "keys (batch sizes) must be >= 1"),
        ({"max_draft_len": 4, "draft_len_schedule": {4: 4}, "max_concurrency": 8}, "mutually exclusive"),
        ({"num_speculative_tokens_per_batch_size": [[2, 8, 3]]}, "first range must start at 1"),
        ({"num_speculative_tokens_per_batch_size": [[1, 8, 3], [8, 9, 1]]}, "batch-size ranges must not overlap"),
        ({"acceptance_rate_window_size": 100}, "must be given together"),
        ({"decoding_type": "SA", "max_matching_ngram_size": 0}, "-1 (longest match) or >= 1"),
        ({"decoding_type": "SA", "enable_global_pool": True, "max_matching_ngram_size": 65},
         "in [1, 64] with the global pool"),
        ({"decoding_type": "NGram", "max_matching_ngram_size": 0}, "must be >= 1"),
    ],
)
def test_schedule_rules_of_the_engine(spec, needle):
    msg = _err({"speculation": spec})
    assert msg.startswith("config: speculation:") and needle in msg


def test_valid_schedule_is_accepted():
    cfg = build_config({"speculation": {"max_draft_len": 4, "draft_len_schedule": {4: 4, 8: 2, 32: 1}}})
    assert cfg.speculation.draft_len_schedule == {4: 4, 8: 2, 32: 1}


def test_yaml_syntax_error_names_file_and_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("engine:\n  max_batch_size: [1, 2\n")
    with pytest.raises(ConfigError) as exc:
        load_config(path)
    assert str(exc.value).startswith(f"{path}:")


def test_set_override_is_typed(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("engine: {max_batch_size: 4}\n")
    cfg = load_config(path, ["speculation.draft_len_schedule={4: 4, 8: 2}", "engine.overlap_scheduler=true"])
    assert cfg.speculation.draft_len_schedule == {4: 4, 8: 2} and cfg.engine.overlap_scheduler is True
    with pytest.raises(ConfigError, match="engine.max_batch_size"):
        load_config(path, ["engine.max_batch_size=-3"])


def test_bundled_default_loads():
    cfg = load_config()
    assert cfg.workload.trace and cfg.acceptance.mode == "drafter"
