"""Sizes that cannot fit the machine are refused up front with the estimate (``specplan.limits``), and
the per-unit figures it uses hold on a real run."""

from __future__ import annotations

import tracemalloc

import pytest

from specplan import limits
from specplan.cli import main
from specplan.config import build_config
from specplan.errors import ConfigError

TINY = {"workload": {"trace": None, "num_requests": 16, "prompt_len": 16, "output_len": 8},
        "acceptance": {"mode": "alpha"}}


def _doc(**sections) -> dict:
    return {**TINY, **{k: {**TINY.get(k, {}), **v} for k, v in sections.items()}}


def test_machine_memory_is_the_kernels_memtotal():
    with open("/proc/meminfo", encoding="ascii") as f:
        total = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemTotal:"))
    assert limits.machine_memory_bytes() == pytest.approx(total, rel=0.01)


def test_refusal_is_count_times_bytes_against_memory(monkeypatch):
    monkeypatch.setattr(limits, "machine_memory_bytes", lambda: 10**9)
    parts = {"x.n": (1000, 10**6, "things"), "x.m": (0, 5, "others")}
    assert limits.memory_refusal(parts) is None  # exactly 1 GB fits in 1 GB
    field, message = limits.memory_refusal({**parts, "x.m": (1, 5, "others")})
    # The largest part is named, with 1000 x 1 MB = 1 GB, the 5 bytes of the rest, and (1e9 - 5) // 1e6 = 999.
    assert field == "x.n"
    assert "1,000 things need about 1 GB" in message and "plus 0.005 KB" in message
    assert "this machine has 1 GB" in message and "at most about 999 fit" in message


def test_unknown_machine_memory_refuses_nothing(monkeypatch):
    monkeypatch.setattr(limits, "machine_memory_bytes", lambda: None)
    assert limits.memory_refusal({"a": (10**15, 10**6, "things")}) is None


REQUESTS_BYTES = TINY["workload"]["num_requests"] * limits.LENGTHS_REQUEST_BYTES  # synthetic lengths, alpha


@pytest.mark.parametrize("sections,field,unit,rest", [
    # poisson arrivals: no clients; the rest is the requests
    ({"cluster": {"replicas": 1_000}}, "cluster.replicas", limits.REPLICA_BYTES, REQUESTS_BYTES),
    # 1,000 trace requests, each sent by a client of its own (concurrency beyond the requests starts no
    # client), plus one replica: the requests are the largest part
    ({"workload": {"arrival": "closed_loop", "concurrency": 10**9, "num_requests": 1_000, "trace": "specbench",
                   "sample_with_replacement": True}}, "workload.num_requests",
     limits.REQUEST_BYTES + limits.CLIENT_BYTES, limits.REPLICA_BYTES),
])
def test_config_refused_at_the_boundary_the_estimate_draws(monkeypatch, sections, field, unit, rest):
    (section, values), = sections.items()
    key = field.split(".")[1]
    count = values[key]
    monkeypatch.setattr(limits, "machine_memory_bytes", lambda: count * unit + rest)
    build_config(_doc(**sections))  # exactly fits
    with pytest.raises(ConfigError, match=f"{field}: {count + 1:,} .* but this machine has"):
        build_config(_doc(**{section: {**values, key: count + 1}}))


def test_open_loop_concurrency_is_not_counted(monkeypatch):
    monkeypatch.setattr(limits, "machine_memory_bytes", lambda: 10**8)
    build_config(_doc(workload={"arrival": "poisson", "concurrency": 10**9}))  # no clients without closed_loop
    build_config(_doc(workload={"arrival": "closed_loop", "concurrency": 10**9}))  # 16 requests: 16 clients start
    # 80,000 clients (96 MB) or requests (16 MB) alone fit 100 MB; both count, and the larger is named
    with pytest.raises(ConfigError, match="workload.concurrency"):
        build_config(_doc(workload={"arrival": "closed_loop", "concurrency": 10**9, "num_requests": 80_000}))


def test_capacity_max_replicas_refused_before_any_work(tmp_path, capsys):
    scenario = tmp_path / "s.yaml"
    scenario.write_text("workload: {trace: null, num_requests: 8, prompt_len: 16, output_len: 8}\n"
                        "acceptance: {mode: alpha}\nspeculation: {decoding_type: NGram, max_matching_ngram_size: 2}\n")
    out = tmp_path / "cap"
    with pytest.raises(SystemExit) as exc:
        main(["capacity", str(scenario), "--rate", "1", "--slo-ttft-ms", "100", "--slo-tpot-ms", "50",
              "--out", str(out), "--max-replicas", str(10**12)])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1
    assert err[0].startswith("error: --max-replicas: 1,000,000,000,000 replicas need about")
    assert not out.exists()


def _peak_bytes(doc: dict) -> int:
    from specplan.simulator.run import simulate

    cfg = build_config(doc)
    tracemalloc.start()
    try:
        simulate(cfg)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_per_replica_and_per_client_figures_bound_a_measured_run():
    """The constants are upper bounds on what one more replica / client allocates, and not far above it
    (within 5x): bytes allocated, measured by tracemalloc, not time."""
    _peak_bytes(_doc(cluster={"replicas": 2}))  # compile and cache first
    per_replica = (_peak_bytes(_doc(cluster={"replicas": 34})) - _peak_bytes(_doc(cluster={"replicas": 2}))) / 32
    assert limits.REPLICA_BYTES / 5 < per_replica <= limits.REPLICA_BYTES
    closed = {"arrival": "closed_loop"}
    closed["num_requests"] = 5_000  # a client for each request: one without a request never starts
    per_client = (_peak_bytes(_doc(workload={**closed, "concurrency": 5_000}))
                  - _peak_bytes(_doc(workload={**closed, "concurrency": 1_000}))) / 4_000
    assert limits.CLIENT_BYTES / 5 < per_client <= limits.CLIENT_BYTES


def test_per_request_figures_price_what_the_run_reads(monkeypatch):
    """Synthetic lengths that nothing reads as tokens are priced at the lengths-only figure; a trace's
    requests, or synthetic ones whose drafter reads tokens, at the full one (``run_reads.lengths_only``)."""
    n = 1_000_000
    for doc, each in ((_doc(workload={"num_requests": n}), limits.LENGTHS_REQUEST_BYTES),
                      (_doc(workload={"num_requests": n}, acceptance={"mode": "drafter"}), limits.REQUEST_BYTES),
                      (_doc(workload={"trace": "specbench", "num_requests": n, "sample_with_replacement": True}),
                       limits.REQUEST_BYTES)):
        monkeypatch.setattr(limits, "machine_memory_bytes", lambda: 10**12)
        cfg = build_config(doc)
        monkeypatch.setattr(limits, "machine_memory_bytes", lambda: n * each + limits.REPLICA_BYTES)
        assert limits.fleet_refusal(cfg, 1) is None  # exactly fits
        monkeypatch.setattr(limits, "machine_memory_bytes", lambda: n * each + limits.REPLICA_BYTES - 1)
        assert limits.fleet_refusal(cfg, 1)[0] == "workload.num_requests"


def test_lengths_only_request_figure_bounds_a_measured_run(monkeypatch):
    """What one more lengths-only request allocates once the logs are at their chunk's size (they go
    to disk beyond it): at most ``LENGTHS_REQUEST_BYTES`` and not far below it (within 5x). The
    engine holds slots for the requests in flight (and a few hundred finished), so this is what is
    kept by request id."""
    from specplan.simulator import spill

    monkeypatch.setattr(spill, "CHUNK_ROWS", 1 << 12)
    shape = {"arrival": "closed_loop", "concurrency": 64}
    _peak_bytes(_doc(workload={**shape, "num_requests": 1_000}))  # compile and cache first
    per_request = (_peak_bytes(_doc(workload={**shape, "num_requests": 100_000}))
                   - _peak_bytes(_doc(workload={**shape, "num_requests": 20_000}))) / 80_000
    print(f"{per_request:.0f} bytes a request")
    assert limits.LENGTHS_REQUEST_BYTES / 5 < per_request <= limits.LENGTHS_REQUEST_BYTES
