"""The Ray backend on a real local Ray instance gives the local pool's records and table exactly."""

import pandas as pd
import pytest

from specplan.sweeps.runners import LocalRunner, RayRunner
from specplan.sweeps.spec import parse_sweep
from specplan.sweeps.sweep import RECORDS_DIR, run_sweep

SWEEP = {
    "base": {
        "seed": 0,
        "engine": {"max_batch_size": 8, "kv_num_blocks": 100000},
        "speculation": {"decoding_type": "NGram", "max_draft_len": 2},
        "acceptance": {"mode": "alpha", "alpha": 0.7},
        "workload": {"trace": None, "arrival": "poisson", "rate": 20.0, "num_requests": 30, "prompt_len": 8, "output_len": 32},
        "cost": {"model": "table", "table_s": {1: {0: 0.01, 4: 0.012}, 8: {0: 0.012, 4: 0.03}}},
    },
    "grid": {"speculation.max_draft_len": [0, 2, 4], "workload.rate": [10.0, 40.0]},
    "seeds": [0, 1],
}


@pytest.fixture(scope="module")
def ray_local():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_local_and_ray_give_identical_tables_and_records(tmp_path, ray_local):
    spec = parse_sweep(SWEEP, "sweep")
    with LocalRunner(2) as runner:
        local = run_sweep(spec, tmp_path / "local", runner)
    with RayRunner() as runner:
        remote = run_sweep(spec, tmp_path / "ray", runner)
        shared = runner.shared_keys
    # built once on the driver and shared: one cost model; requests per (workload, seed): 2 rates x 2 seeds
    assert sorted(name for name, _ in shared) == ["cost"] + ["requests"] * 4
    assert ray_local.is_initialized()  # a session the runner joined is left running
    assert len(local) == 12 and local["speedup"].notna().all()
    pd.testing.assert_frame_equal(local, remote)
    local_files = sorted((tmp_path / "local" / RECORDS_DIR).iterdir())
    ray_files = sorted((tmp_path / "ray" / RECORDS_DIR).iterdir())
    assert [p.name for p in local_files] == [p.name for p in ray_files]
    assert all(a.read_bytes() == b.read_bytes() for a, b in zip(local_files, ray_files))


@pytest.mark.parametrize("backend", ["local", "ray"])
def test_a_user_error_inside_a_task_surfaces_as_its_one_line(tmp_path, ray_local, backend):
    from specplan.config import build_config
    from specplan.errors import ConfigError
    from specplan.sweeps.records import RecordStore
    from specplan.sweeps.runners import execute, make_runner

    # valid as a config; the run itself fails (a recorded-acceptance run names no log)
    cfg = build_config({**SWEEP["base"], "acceptance": {"mode": "recorded"}})
    with make_runner(backend, 1) as runner, pytest.raises(ConfigError) as exc:
        execute([cfg], runner, RecordStore(tmp_path))
    assert str(exc.value).startswith("acceptance.recorded_path:") and "\n" not in str(exc.value)
    assert not list(tmp_path.iterdir())
    # asked to collect failures instead, the backend runs the good config and names the bad one
    from specplan.sweeps.records import config_key

    good, failures = build_config(SWEEP["base"]), {}
    with make_runner(backend, 1) as runner:
        records = execute([cfg, good], runner, RecordStore(tmp_path), failures=failures)
    assert list(records) == [config_key(good)] and list(failures) == [config_key(cfg)]
    assert failures[config_key(cfg)].error == str(exc.value)


def test_capacity_search_on_ray_gives_the_local_pools_table(tmp_path, ray_local):
    """The capacity search fans its bisection points out on either backend with the same answers."""
    from specplan.config import build_config
    from specplan.sweeps.capacity import SLO, search_capacity

    base = build_config(SWEEP["base"])
    slo, cands = SLO(ttft_s=0.2, tpot_s=0.02, percentile=90), {"NGram K=2": base.speculation}
    with LocalRunner(2) as runner:
        local = search_capacity(base, [20.0, 60.0], slo, cands, runner, tmp_path / "local", max_replicas=8)
    with RayRunner() as runner:
        remote = search_capacity(base, [20.0, 60.0], slo, cands, runner, tmp_path / "ray", max_replicas=8)
    assert local.replicas.notna().all() and local.replicas.max() > 1  # a search, not all at N = 1
    pd.testing.assert_frame_equal(local, remote)
