"""A sweep's worker parses each trace and recorded log once, whatever the config points vary
(rate, sample size, seed, K), and every record is the one a fresh process would write."""

import json

import numpy as np

import specplan.acceptance.recorded as recorded
import specplan.workloads.traffic as traffic
from specplan.config import build_config
from specplan.sweeps import runners
from specplan.sweeps.runners import run_record


def _files(tmp_path):
    rng = np.random.default_rng(0)
    trace, log = tmp_path / "trace.jsonl", tmp_path / "log.jsonl"
    with trace.open("w") as t, log.open("w") as g:
        for i in range(6):
            prompt, output = rng.integers(0, 50, 12).tolist(), rng.integers(0, 50, 20).tolist()
            t.write(json.dumps({"id": f"r{i}", "prompt_ids": prompt, "output_ids": output}) + "\n")
            g.write(json.dumps({"id": f"r{i}", "prompt_ids": prompt, "output_ids": output,
                                "run_length_per_position": rng.integers(0, 5, 20).tolist()}) + "\n")
    return trace, log


def _points(trace, log):
    for rate, n, seed, k in [(2.0, 10, 0, 2), (4.0, 10, 0, 3), (4.0, 16, 1, 3), (8.0, 16, 1, 2)]:
        yield build_config({
            "seed": seed, "engine": {"engine": "vllm"}, "speculation": {"decoding_type": "vllm_ngram", "max_draft_len": k},
            "acceptance": {"mode": "recorded", "recorded_path": str(log)},
            "workload": {"trace": str(trace), "arrival": "poisson", "rate": rate, "num_requests": n,
                         "sample_with_replacement": True},
            "cost": {"model": "linear_gamma"}}).model_dump(mode="json")


def _forget():
    for memo in (runners._build_requests, runners._load_trace, runners._build_cost, recorded._parsed_log):
        memo.cache_clear()


def test_one_parse_per_trace_and_log_per_worker(tmp_path, monkeypatch):
    trace, log = _files(tmp_path)
    fresh = []
    for cfg in _points(trace, log):
        _forget()  # each run alone, as in a process of its own
        fresh.append(run_record(cfg))
    _forget()
    parses = {"trace": 0, "log": 0}

    def counted(name, fn):
        def wrapper(*args, **kwargs):
            parses[name] += 1
            return fn(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(traffic, "load_workload", counted("trace", traffic.load_workload))
    monkeypatch.setattr(recorded, "_read_log", counted("log", recorded._read_log))
    shared = [run_record(cfg) for cfg in _points(trace, log)]
    assert parses == {"trace": 1, "log": 1}
    assert shared == fresh
    _forget()
