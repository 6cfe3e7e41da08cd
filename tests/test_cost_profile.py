"""The calibrated (profile) model and the profile file: hand-computed predictions, extrapolation
warnings and its floor, one-line errors for bad files (the fit itself: test_calibration_synthetic)."""

import warnings

import numpy as np
import pytest
import yaml

from specplan.config import CostConfig
from specplan.cost_models.base import StepBatch
from specplan.cost_models.draft import DraftCost
from specplan.cost_models.profile import ProfileCostModel, parse_profile, read_profile, write_profile
from specplan.cost_models.registry import cost_model_from_profile, make_cost_model
from specplan.errors import ConfigError

RAW = CostConfig(host_overhead_s=0.0, host_overhead_per_seq_s=0.0, cuda_graph_padding=False)

PROFILE = {
    "format": "specplan-profile/1",
    "name": "test/hand",
    "provenance": {"kind": "measured", "source": "hand-written"},
    "gpu": "h200",
    "tp": 1,
    "model_shape": {"name": "hand", "num_layers": 2, "hidden": 64, "vocab": 100},
    "token_time": {"tokens": [1, 100, 1000], "seconds": [1e-3, 2e-3, 11e-3]},
    "lm_head_time": {"tokens": [1, 1000], "seconds": [1e-4, 1.1e-3]},
    "attention": {"kv_s_per_token": 1e-7, "decode_work_s": 1e-9, "prefill_work_s": 2e-9},
    "measured_range": {"tokens": [1, 1000], "logit_tokens": [1, 1000], "max_context": 4096, "max_batch": 256},
}


def model(options=RAW, **changes):
    profile = parse_profile(yaml.safe_dump({**PROFILE, **changes}), "test profile")
    return ProfileCostModel(profile, DraftCost.default(132), options)


def chunk(n, context=0):
    return StepBatch(np.array([n]), np.array([context]), np.array([True]))


def test_prediction_by_hand():
    # 3 generation rows of 2 tokens over 100: N = 6 -> g = 1 ms + 5/99 ms; logits 6 -> h = 0.1 ms + 5/999 ms;
    # KV 3 * 102 = 306 tokens -> 30.6 us; decode work 3 * 2 * (100 + 1.5) = 609 -> 0.609 us.
    by_hand = (1e-3 + 5 / 99 * 1e-3) + (1e-4 + 5 / 999 * 1e-3) + 306e-7 + 609e-9
    assert model().step_time(StepBatch.decode(3, 2, 100)) == pytest.approx(by_hand, rel=1e-12)
    # One prefill chunk of 500 over 1000: N 500, one logit, KV 1500, prefill work 500 * 1250.5.
    by_hand = (2e-3 + 400 / 900 * 9e-3) + 1e-4 + 1500e-7 + 2e-9 * 500 * 1250.5
    assert model().step_time(chunk(500, 1000)) == pytest.approx(by_hand, rel=1e-12)


def test_host_overhead_padding_and_tp_are_added():
    host = model(CostConfig(host_overhead_s=1e-3, host_overhead_per_seq_s=1e-5, cuda_graph_padding=False))
    assert host.step_time(StepBatch.decode(3, 2, 100)) - model().step_time(StepBatch.decode(3, 2, 100)) == \
        pytest.approx(1e-3 + 3e-5)
    padded = model(CostConfig(host_overhead_s=0.0, host_overhead_per_seq_s=0.0))
    assert padded.step_time(StepBatch.decode(9, 1, 0)) - model().step_time(StepBatch.decode(9, 1, 0)) == \
        pytest.approx(7 / 99 * 1e-3)  # 9 tokens pad to 16 in the token-level term only
    tp = cost_model_profile_tp2()
    # 2 layers x 2 + 1 all-reduces of 6 * 64 * 2 bytes plus a gather of 6 * 100 * 2 bytes, H200 links.
    by_hand = 5 * (10e-6 + 6 * 64 * 2 / 300e9) + (10e-6 + 6 * 100 * 2 / 300e9)
    assert tp.step_time(StepBatch.decode(3, 2, 100)) - model().step_time(StepBatch.decode(3, 2, 100)) == \
        pytest.approx(by_hand)


def cost_model_profile_tp2():
    profile = parse_profile(yaml.safe_dump({**PROFILE, "tp": 2}), "test profile")
    return ProfileCostModel(profile, DraftCost.default(132), RAW, allreduce=(10e-6, 300e9))


def test_extrapolation_warns_once_naming_the_range():
    m = model()
    with pytest.warns(UserWarning, match=r"total tokens 2000 is outside the measured range \[1, 1000\]"):
        m.step_time(chunk(2000))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m.step_time(chunk(3000))  # same dimension: no second warning
    with pytest.warns(UserWarning, match=r"context 8000 is outside the measured range \[0, 4096\]"):
        m.step_time(StepBatch.decode(1, 1, 8000))
    # The end segment extends linearly: slope 9 ms / 900 tokens.
    assert m._g(2000) == pytest.approx(11e-3 + 1000 * 1e-5)


def test_extrapolation_never_goes_downhill_or_below_zero():
    """Noisy end segments (falling at the top, steep at the bottom) are extended flat and floored at 0:
    the model's time never drops past the grid and never goes negative, as a linear extension would."""
    m = model(token_time={"tokens": [10, 100, 1000], "seconds": [1e-4, 6e-3, 5e-3]})
    with pytest.warns(UserWarning):
        assert m._g(5000) == pytest.approx(5e-3)  # last slope -1e-6 per token: held flat at 5 ms
        assert m._g(1) == 0.0  # first slope 5.9e-3 / 90 per token would give 1e-4 - 5.9e-4 < 0
        assert m._g(9) == pytest.approx(1e-4 - 5.9e-3 / 90)  # still positive: the linear extension
        assert m.step_time(chunk(1_000_000)) > m.step_time(chunk(1000)) > 0


def test_continuous_across_knots():
    m = model()
    times = np.array([m.step_time(chunk(n)) for n in range(1, 1001)])
    steepest = 1e-5 + 2e-9 * 1000 + 1e-7  # largest token slope + prefill work slope + KV slope
    assert np.abs(np.diff(times)).max() <= steepest


def write(tmp_path, data):
    path = tmp_path / "profile.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


@pytest.mark.parametrize("data,field", [
    ({**PROFILE, "token_time": {"tokens": [1, 100, 1000], "seconds": [1e-3, 2e-3]}}, "token_time"),
    ({**PROFILE, "token_time": {"tokens": [100, 1, 1000], "seconds": [1e-3, 2e-3, 3e-3]}}, "token_time"),
    ({**PROFILE, "attention": {"kv_s_per_token": -1, "decode_work_s": 0, "prefill_work_s": 0}},
     "attention.kv_s_per_token"),
    ({k: v for k, v in PROFILE.items() if k != "lm_head_time"}, "lm_head_time"),
    ({**PROFILE, "tokens_time": {}}, "tokens_time"),
    ({**PROFILE, "format": "specplan-profile/9"}, "format"),
    ("token_time: [1, 2\n", "not valid YAML"),
])
def test_bad_profile_is_one_line_naming_file_and_field(tmp_path, data, field):
    path = write(tmp_path, data)
    with pytest.raises(ConfigError) as exc:
        read_profile(path)
    message = str(exc.value)
    assert str(path) in message and field in message and "\n" not in message


def test_profile_round_trips_through_write_and_make_cost_model(tmp_path):
    profile = parse_profile(yaml.safe_dump(PROFILE), "test")
    path = tmp_path / "sub" / "p.yaml"
    write_profile(profile, path)
    assert not list(path.parent.glob(".*tmp"))  # atomic: no temporary left behind
    via_config = make_cost_model(CostConfig(model="profile", profile=str(path), host_overhead_s=0.0,
                                            host_overhead_per_seq_s=0.0, cuda_graph_padding=False))
    assert via_config.step_time(StepBatch.decode(3, 2, 100)) == model().step_time(StepBatch.decode(3, 2, 100))
    assert cost_model_from_profile(str(path)).name == "profile"
