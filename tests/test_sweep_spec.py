"""Sweep specs: expansion order and values, base paths, and one-line errors for bad specs."""

import copy
import sys

import pytest
import yaml

from specplan.errors import ConfigError
from specplan.sweeps.spec import check_size, count_points, expand, parse_sweep, read_sweep

BASE = {
    "seed": 3,
    "engine": {"max_batch_size": 8, "kv_num_blocks": 100000},
    "speculation": {"decoding_type": "NGram", "max_draft_len": 2},
    "acceptance": {"mode": "alpha", "alpha": 0.7},
    "workload": {"trace": None, "arrival": "poisson", "rate": 5.0, "num_requests": 10, "prompt_len": 8, "output_len": 16},
    "cost": {"model": "linear_gamma", "t_base_s": 0.01, "gamma": 0.1},
}


def _spec(**parts):
    return {"base": copy.deepcopy(BASE), **parts}


def _error(data) -> str:
    with pytest.raises(ConfigError) as exc:
        expand(parse_sweep(data, "s.yaml"))
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_grid_then_zip_then_seeds_in_order():
    spec = parse_sweep(_spec(grid={"speculation.max_draft_len": [1, 3], "workload.rate": [2.0, 4.0, 8.0]},
                             zip={"engine.max_batch_size": [4, 8], "workload.concurrency": [4, 8]},
                             seeds=[0, 1]), "s.yaml")
    points = expand(spec)
    assert len(points) == 2 * 3 * 2 * 2
    got = [(p.config.speculation.max_draft_len, p.config.workload.rate, p.config.engine.max_batch_size,
            p.config.workload.concurrency, p.config.seed) for p in points]
    want = [(k, r, b, b, s) for k in (1, 3) for r in (2.0, 4.0, 8.0) for b in (4, 8) for s in (0, 1)]
    assert got == want
    # fields no axis touches keep the base's values
    assert {p.config.acceptance.alpha for p in points} == {0.7}
    assert spec.axes == ["speculation.max_draft_len", "workload.rate", "engine.max_batch_size", "workload.concurrency"]


def test_points_are_counted_before_expanding_and_a_huge_grid_is_refused():
    spec = parse_sweep(_spec(grid={"speculation.max_draft_len": [1, 3], "workload.rate": [2.0, 4.0, 8.0]},
                             zip={"engine.max_batch_size": [4, 8]}, seeds=[0, 1, 2]), "s.yaml")
    assert count_points(spec) == len(expand(spec)) == 2 * 3 * 2 * 3
    assert check_size(spec, 36) == 36
    # refused from the axis lengths alone, before any point is built
    huge = parse_sweep(_spec(grid={f"workload.{f}": list(range(1, 11)) for f in ("rate", "concurrency")}
                             | {f"engine.{f}": list(range(1, 11)) for f in ("max_batch_size", "max_num_tokens")}),
                       "big.yaml")
    assert count_points(huge) == 10 ** 4
    with pytest.raises(ConfigError, match=r"big.yaml: 10,000 points \(workload.rate 10 x .*\) exceed --max-points 9,999"):
        check_size(huge, 9_999)


def test_without_seeds_the_base_seed_is_used_and_sections_can_be_axes():
    points = expand(parse_sweep(_spec(grid={"cost": [{"model": "linear_gamma", "gamma": 0.0},
                                                     {"model": "table", "table_s": {1: {0: 0.01, 4: 0.02}}}]}), "s"))
    assert [p.config.seed for p in points] == [3, 3]
    assert [p.config.cost.model for p in points] == ["linear_gamma", "table"]
    assert points[0].config.cost.gamma == 0.0  # the section is replaced, not merged


def test_base_path_is_relative_to_the_sweep_file(tmp_path):
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "scenario.yaml").write_text(yaml.safe_dump(BASE))
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump({"base": "cfg/scenario.yaml", "grid": {"workload.rate": [1.0, 2.0]}}))
    points = expand(read_sweep(tmp_path / "sweep.yaml"))
    assert [p.config.workload.rate for p in points] == [1.0, 2.0]
    assert points[0].config.workload.num_requests == 10


@pytest.mark.parametrize("parts,needles", [
    ({"grid": {"speculation.max_draft_lenn": [1]}}, ["grid.speculation.max_draft_lenn", "unknown field"]),
    ({"grid": {"speculation.max_draft_len.x": [1]}}, ["'speculation.max_draft_len' is not a section"]),
    ({"zip": {"specul.max_draft_len": [1]}}, ["zip.specul.max_draft_len", "unknown field"]),
    ({"grid": {"workload.rate": []}}, ["grid.workload.rate", "empty axis"]),
    ({"grid": {"workload.rate": 4.0}}, ["grid.workload.rate", "expected a list"]),
    ({"zip": {"workload.rate": [1.0, 2.0], "engine.max_batch_size": [4, 8, 16]}},
     ["zip: axes of unequal length", "workload.rate has 2", "engine.max_batch_size has 3"]),
    ({"grid": {"workload.rate": [1.0]}, "zip": {"workload.rate": [2.0]}}, ["workload.rate", "both grid and zip"]),
    ({"grid": {"seed": [1, 2]}}, ["grid.seed", "seeds:"]),
    ({"seeds": []}, ["seeds: expected a non-empty list"]),
    ({"seeds": [1, 1]}, ["seeds: duplicate"]),
    ({"axes": {}}, ["axes: unknown key"]),
    # the value is checked by the config's own rules, the message names the point and the field
    ({"grid": {"speculation.max_draft_len": [2, -1]}},
     ["point speculation.max_draft_len=-1", "speculation.max_draft_len", "greater than or equal to 0"]),
    ({"grid": {"speculation.draft_len_schedule": [{4: 1}]}}, ["draft_len_schedule", "smallest key (4) must map to max_draft_len"]),
    # engine presets are applied too: vLLM has no NGram drafter
    ({"grid": {"engine.engine": ["trtllm", "vllm"]}}, ["point engine.engine=vllm", "vllm has no 'NGram' drafter"]),
])
def test_bad_specs_fail_with_one_line_naming_the_axis(parts, needles):
    msg = _error(_spec(**parts))
    assert msg.startswith("s.yaml")
    for needle in needles:
        assert needle in msg


def test_cli_prints_one_line_and_exits_2(tmp_path, monkeypatch, capsys):
    from specplan.cli import main

    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(_spec(zip={"workload.rate": [1.0], "engine.max_batch_size": [4, 8]})))
    monkeypatch.setattr(sys, "argv", ["specplan", "sweep", str(path), "--out", str(tmp_path / "out"), "--no-progress"])
    with pytest.raises(SystemExit) as exc:
        main()
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: ") and "zip: axes of unequal length" in err
    assert not (tmp_path / "out").exists()  # nothing ran, nothing written
