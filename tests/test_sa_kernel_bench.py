"""The SA kernel benchmark's CPU-checkable parts: the grid, the synthetic text, and the exact input path
its CUDA graphs replay (run here through the Triton interpreter against the brute-force reference).
The CUDA-graph capture and event timing themselves need a GPU."""

from __future__ import annotations

import time
from types import SimpleNamespace

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip(
    "triton", reason="triton is not installed (the CPU build of torch does not ship it): pip install 'triton==3.9.0'"
)

import sa_reference as ref  # noqa: E402

from specplan.calibration.sa_kernel import bench, primitives  # noqa: E402
from specplan.calibration.sa_kernel.slots import SAKernelPool  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def test_grid_covers_the_issue_and_keeps_accepted_within_k_plus_one():
    configs = bench.sweep_configs()
    assert configs[0] == bench.BASE and (bench.BASE.B, bench.BASE.ctx) == (64, 4096)
    assert {c.B for c in configs if c.sweep == "batch"} >= {1, 64, 256}
    assert {c.ctx for c in configs if c.sweep == "ctx"} >= {1024, 262144}
    assert {c.mode for c in configs} == {"extend", "ngram", "global"}
    assert max(c.active_slots for c in configs if c.mode == "global") == primitives.MAX_GLOBAL_SLOTS
    for c in configs:
        assert 1 <= c.accepted <= c.K + 1, c


def test_synthetic_text_is_deterministic_in_range_and_copies_its_source():
    source = bench.synthetic_text(np.random.default_rng(3), 2000)
    again = bench.synthetic_text(np.random.default_rng(3), 2000)
    assert np.array_equal(source, again) and source.dtype == np.int32
    assert source.min() >= 0 and source.max() < bench.VOCAB
    cont = bench.synthetic_text(np.random.default_rng(4), 500, source=source)
    src_8grams = {tuple(source[i:i + 8]) for i in range(len(source) - 7)}
    copied = sum(tuple(cont[i:i + 8]) in src_8grams for i in range(len(cont) - 7))
    assert copied > 20  # spans copied from the prompt: the drafter has something to find


def test_step_inputs_replay_like_the_reference():
    """Launch the kernel on the bench's own step buffers, block by block as the graph replays them: each
    buffer is 16-byte aligned, and every step drafts what the reference drafts from the growing text."""
    prompt = bench.synthetic_text(np.random.default_rng(0), 40) % 5  # small alphabet: frequent matches
    b, per_step, k, block, n_steps = 3, 2, 3, 2, 4
    steps = bench.StepInputs(prompt, b, per_step, k + 1, n_steps, seed=1, block=block, device=DEVICE)
    pool = SAKernelPool(b, len(prompt) + n_steps * per_step, b, k, DEVICE)
    for slot in range(b):
        pool.build(slot, prompt.tolist())
    pool.stage(list(range(b)), [[] for _ in range(b)])
    pool.reserve(list(range(b)), n_steps * per_step)
    texts = {slot: prompt.tolist() for slot in range(b)}
    table = steps.table.cpu().numpy()
    for start in range(0, n_steps, block):
        steps.stage(block)
        for i in range(block):
            assert steps.accepted[i].data_ptr() % 16 == 0 and steps.lens[i].data_ptr() % 16 == 0
            pool.launch_extend(b, k, accepted=steps.accepted[i], accepted_lens=steps.lens[i])
            for slot in range(b):
                texts[slot] += table[start + i, slot * (k + 1):slot * (k + 1) + per_step].tolist()
                want_len, want_draft = ref.longest(texts[slot], k)
                assert int(pool.match_len[slot]) == want_len
                assert pool.draft[slot, :k].tolist() == want_draft + [-1] * (k - len(want_draft))
    assert len({tuple(t) for t in texts.values()}) == b  # each request has its own continuation


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error raised without a GPU")
def test_bench_needs_a_gpu():
    with pytest.raises(RuntimeError, match="bench_sa_kernel needs a CUDA device"):
        bench.bench_sa_kernel("cpu", budget_s=1.0)


class _FakeEvent:
    """Host-clock stand-in for torch.cuda.Event, so the bench's bookkeeping runs without a GPU."""

    def __init__(self, enable_timing=False):
        self.t = None

    def record(self):
        self.t = time.perf_counter()

    def elapsed_time(self, end):
        return (end.t - self.t) * 1e3


@pytest.mark.parametrize("mode", ["extend", "global"])
def test_time_config_bookkeeping_without_a_gpu(mode, monkeypatch):
    """Run one tiny configuration of the timing routine with graphs replaced by direct calls and events by
    host clocks: every staged step fits the reserved capacity, and the rows carry the expected metrics."""
    if torch.cuda.is_available():
        pytest.skip("on a GPU the real routine runs (bench_sa_kernel)")
    monkeypatch.setattr(bench, "_capture", lambda fn: SimpleNamespace(replay=fn))
    monkeypatch.setattr(bench, "L2_FLUSH_BYTES", 1 << 12)
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    # Global search walks up to 64 suffix tokens per request, slow in the interpreter: keep its texts short.
    cfg = bench.Config(sweep="test", mode=mode, B=2, accepted=1 if mode == "global" else 2, K=2,
                       ctx=8 if mode == "global" else 48, active_slots=3)
    rows = bench._time_config(cfg, bench._Templates(seed=0), torch.device("cpu"), steps_per_graph=2,
                              replays=2, warm_replays=1, seed=0)
    metrics = [r["metric"] for r in rows]
    assert metrics.count("gpu_us_per_step") == 2 and metrics.count("gpu_us_per_step_cold_l2") == 2
    assert {"eager_host_us_per_step", "match_len_mean"} <= set(metrics)
    assert all(r["B"] == 2 and r["mode"] == mode for r in rows)
    if mode == "global":
        assert rows[0]["active_slots"] == 3
    else:
        assert np.isnan(rows[0]["active_slots"])
    assert next(r["value"] for r in rows if r["metric"] == "match_len_mean") > 0


def test_time_build_rows_without_a_gpu(monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("on a GPU the real routine runs (bench_sa_kernel)")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    rows = bench._time_build(300, torch.device("cpu"), seed=0, repeats=2)
    by_metric = {(r["metric"], r["rep"]): r["value"] for r in rows}
    assert set(by_metric) == {(m, rep) for m in ("build_s", "copy_s", "slot_bytes") for rep in (0, 1)}
    assert by_metric[("slot_bytes", 0)] > 300 * 4  # at least the tokens themselves
    assert all(r["prompt_len"] == 300 for r in rows)


def test_fit_sa_kernel_cost_feeds_the_cost_model():
    # A hand-made bench table: 8 us per step up to B = 64, 16 us at B = 256 (cold L2), and 10% more
    # per doubling of the history (4K -> 8K -> 16K: 8, 8.8, 9.6 us).
    import pandas as pd

    from specplan.calibration.sa_kernel.bench import BASE, fit_sa_kernel_cost
    from specplan.cost_models.draft import DraftCost, DraftCostSection, NGramHostTable, SAKernelCost

    rows = [dict(sweep="batch", B=b, ctx=BASE.ctx, metric="gpu_us_per_step_cold_l2", value=v)
            for b, v in [(1, 8.0), (64, 8.0), (256, 16.0)]]
    rows += [dict(sweep="ctx", B=BASE.B, ctx=c, metric="gpu_us_per_step_cold_l2", value=v)
             for c, v in [(BASE.ctx, 8.0), (2 * BASE.ctx, 8.8), (4 * BASE.ctx, 9.6)]]
    fit = fit_sa_kernel_cost(pd.DataFrame(rows))
    assert fit["batch"] == [1, 64, 256] and fit["size_doubling_factor"] == pytest.approx(0.1)
    section = DraftCostSection(ngram_host=NGramHostTable(pool_entries=[1], draft_len=[1], seconds_per_request=[[0.0]]),
                               sa_kernel=SAKernelCost(**fit))
    cost = DraftCost(section, sm_count=132)
    assert cost.time("SA", 160, 4, BASE.ctx) == pytest.approx(12e-6)  # halfway between B = 64 and 256
    assert cost.time("SA", 64, 4, 2 * BASE.ctx) == pytest.approx(8.8e-6)
