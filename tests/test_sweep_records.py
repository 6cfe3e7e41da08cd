"""Records: keys, determinism, atomic writes, resume, and a sweep killed with SIGKILL then resumed."""

import copy
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from specplan.config import build_config
from specplan.atomic import atomic_write
from specplan.simulator.metrics import plain
from specplan.sweeps.records import RecordStore, config_json, config_key, record_bytes
from specplan.sweeps.runners import LocalRunner, Runner, execute, run_record
from specplan.sweeps.spec import parse_sweep
from specplan.sweeps.sweep import RECORDS_DIR, TABLE_FILE, run_sweep

BASE = {
    "seed": 0,
    "engine": {"max_batch_size": 8, "kv_num_blocks": 100000},
    "speculation": {"decoding_type": "NGram", "max_draft_len": 2},
    "acceptance": {"mode": "alpha", "alpha": 0.7},
    "workload": {"trace": None, "arrival": "poisson", "rate": 20.0, "num_requests": 30, "prompt_len": 8, "output_len": 32},
    "cost": {"model": "linear_gamma", "t_base_s": 0.01, "gamma": 0.1},
}


class NoRuns(Runner):
    """A runner that fails the test if asked to run anything."""

    workers = 1

    def run(self, configs):
        assert not configs, f"{len(configs)} run(s) were not skipped"
        return iter(())

    def close(self):
        pass


def test_key_is_the_resolved_config_and_seed():
    a = build_config(BASE)
    explicit = copy.deepcopy(BASE)
    explicit["speculation"]["is_keep_all"] = True  # the default, spelled out
    assert config_key(build_config(explicit)) == config_key(a)
    assert config_key(build_config({**BASE, "seed": 1})) != config_key(a)
    other = copy.deepcopy(BASE)
    other["workload"]["rate"] = 21.0
    assert config_key(build_config(other)) != config_key(a)


def test_a_task_runs_the_config_as_simulate_would_engine_presets_included():
    from specplan.simulator.run import simulate

    # vLLM picks K from the scheduled count by default: a preset applied only while k_from is unset
    vllm = build_config({**BASE, "engine": {**BASE["engine"], "engine": "vllm"},
                         "speculation": {"decoding_type": "vllm_ngram", "max_draft_len": 2,
                                         "draft_len_schedule": {2: 2, 8: 1}}})
    record = run_record(config_json(vllm))
    assert record["config"]["speculation"]["k_from"] == "scheduled"
    assert record["config"]["speculation"]["num_speculative_tokens_per_batch_size"] == [[1, 2, 2], [3, 8, 1]]
    assert record["summary"] == plain(simulate(vllm).summary)


def test_same_config_gives_the_same_record_bytes():
    cfg_json = config_json(build_config(BASE))
    first, second = run_record(cfg_json), run_record(cfg_json)
    assert record_bytes(first) == record_bytes(second)
    assert first["summary"]["completed_requests"] == 30


def test_atomic_write_leaves_nothing_when_the_writer_fails(tmp_path):
    target = tmp_path / "x.json"

    def boom(tmp):
        Path(tmp).write_text("half")
        raise RuntimeError("killed mid-write")

    with pytest.raises(RuntimeError):
        atomic_write(target, boom)
    assert list(tmp_path.iterdir()) == []


def test_rerun_skips_everything_recorded(tmp_path):
    spec = parse_sweep({"base": BASE, "grid": {"speculation.max_draft_len": [0, 2]}}, "s")
    with LocalRunner(2) as runner:
        first = run_sweep(spec, tmp_path, runner)
    assert len(list((tmp_path / RECORDS_DIR).glob("*.json"))) == 3  # 2 points + their one shared baseline
    (tmp_path / RECORDS_DIR / ".stale.json.abc123.tmp").write_text("{")  # what a kill mid-write leaves
    again = run_sweep(spec, tmp_path, NoRuns())
    pd.testing.assert_frame_equal(first, again)
    assert not list((tmp_path / RECORDS_DIR).glob(".*.tmp"))
    # the K = 0 point behaves exactly as its baseline
    assert again.loc[again["speculation.max_draft_len"] == 0, "speedup"].item() == 1.0


def test_duplicate_configs_run_once(tmp_path):
    cfg = build_config(BASE)
    with LocalRunner(1) as runner:
        records = execute([cfg, cfg], runner, RecordStore(tmp_path))
    assert list(records) == [config_key(cfg)]


def _descendants(pid: int) -> set[int]:
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        try:
            kids = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        out.update(int(k) for k in kids)
        todo.extend(int(k) for k in kids)
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses /proc and SIGKILL")
def test_sigkill_part_way_then_resume_equals_an_uninterrupted_run(tmp_path):
    sweep = {"base": {**BASE, "workload": {**BASE["workload"], "num_requests": 150, "output_len": 64}},
             "grid": {"speculation.max_draft_len": [1, 2, 3, 4], "workload.rate": [10.0, 40.0, 160.0]},
             "baseline": False}
    spec_path = tmp_path / "sweep.yaml"
    spec_path.write_text(yaml.safe_dump(sweep))
    total = 12

    with LocalRunner(2) as runner:  # the reference: an uninterrupted run
        run_sweep(parse_sweep(sweep, "ref"), tmp_path / "ref", runner)

    out = tmp_path / "killed"
    cmd = [sys.executable, "-c", "from specplan.cli import main; main()", "sweep", str(spec_path),
           "--out", str(out), "--workers", "2", "--no-progress"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    records = out / RECORDS_DIR
    deadline = time.monotonic() + 60
    while len(list(records.glob("*.json"))) < 2:
        assert proc.poll() is None, "the sweep ended before it could be killed"
        assert time.monotonic() < deadline, "no records appeared"
        time.sleep(0.01)
    helpers = _descendants(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done = len(list(records.glob("*.json")))
    assert 2 <= done < total, done
    assert not (out / TABLE_FILE).exists()
    deadline = time.monotonic() + 15  # pool workers die with the sweep (no orphans left computing)
    while any(_alive(p) for p in helpers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in helpers)

    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    ref_files = sorted(p.name for p in (tmp_path / "ref" / RECORDS_DIR).iterdir())
    got_files = sorted(p.name for p in records.iterdir())
    assert got_files == ref_files and len(got_files) == total  # one record per config, nothing stray
    for name in ref_files:
        assert (records / name).read_bytes() == (tmp_path / "ref" / RECORDS_DIR / name).read_bytes()
    pd.testing.assert_frame_equal(pd.read_parquet(out / TABLE_FILE), pd.read_parquet(tmp_path / "ref" / TABLE_FILE))
