"""The fidelity harness on the CPU: calibrate the tiny model, validate both bundled scenarios against that
profile through ``specplan validate``, and check the report against its own per-iteration data. Also the
replay's pieces (per-request KV cache, paged layout, padding, slots) and the comparison's re-timing.

CPU error bound: the replay and the profile's grid points are timed the same way (thread CPU time,
fastest call), but on a shared 2-core machine the CPU time of the same step drifts by tens of percent
between the calibration and the replay (and up to 3x under load), so a bound on the error's size
could fail for the machine's sake. The bound asserted is one only a wrong computation breaks: the
median predicted/measured ratio within a factor of 4 either way. A unit slip (ms for s), a profile of
the wrong layer count or batch, or replaying the wrong number of rows is off by 8x or more.
"""

import json

import numpy as np
import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from specplan.cli import calibrate as calibrate_cli
from specplan.cli import validate as validate_cli
from specplan.errors import SpecplanError
from specplan.validation.compare import retime
from specplan.validation.schedule import Step, steps_from_run

torch = pytest.importorskip("torch")

CPU_RATIO_BOUND = 4.0


def app():
    root = typer.Typer()
    calibrate_cli.register(root)
    validate_cli.register(root)
    return root


@pytest.fixture(scope="module")
def validated(tmp_path_factory, cpu_calibration):
    cal = cpu_calibration
    runner = CliRunner()
    out = tmp_path_factory.mktemp("validate")
    result = runner.invoke(app(), ["validate", "--profile", str(cal / "profile.yaml"), "--device", "cpu",
                                   "--scenario", "low", "--scenario", "high", "--out", str(out)])
    assert result.exit_code == 0, (result.output, result.exception)
    return out


def test_report_files_and_error_bound(validated):
    for name in ("report.md", "iterations.csv", "summary.json"):
        assert (validated / name).stat().st_size > 0
    assert (validated / "predicted_vs_measured.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads((validated / "summary.json").read_text())
    assert set(summary["scenarios"]) == {"low", "high"}
    assert summary["replay"]["device"] == "cpu" and summary["profile"]["kind"] == "measured"
    for name, sc in summary["scenarios"].items():
        bias = sc["per_iteration"]["bias"]  # median of predicted / measured - 1
        assert 1 / CPU_RATIO_BOUND < 1 + bias < CPU_RATIO_BOUND, (name, sc["per_iteration"])
        assert sc["per_iteration"]["iterations"] == sc["simulated"]["iterations"]
    high = summary["scenarios"]["high"]
    assert high["scenario"]["draft_len_schedule"] and {b["bin"] for b in high["bins"] if b["by"] == "kind"} >= {
        "decode", "mixed"}


def test_report_numbers_follow_from_iterations_csv(validated):
    csv = pd.read_csv(validated / "iterations.csv")
    summary = json.loads((validated / "summary.json").read_text())
    report = (validated / "report.md").read_text()
    for name, sc in summary["scenarios"].items():
        t = csv[csv["scenario"] == name]
        assert t["iteration"].tolist() == list(range(1, len(t) + 1))
        # Independent recomputation from the raw columns.
        meas = t["meas_forward_s"] + t["meas_draft_s"]
        pred = t["pred_forward_s"] + t["pred_draft_s"]
        err = pred / meas - 1
        median_ape = float(np.median(np.abs(err)))
        assert median_ape == pytest.approx(sc["per_iteration"]["median_ape"], rel=1e-9)
        assert float(np.percentile(np.abs(err), 90)) == pytest.approx(sc["per_iteration"]["p90_ape"], rel=1e-9)
        assert float(np.median(err)) == pytest.approx(sc["per_iteration"]["bias"], rel=1e-9)
        assert f"| {name} | {len(t)} | {median_ape:.1%} |" in report
        # The host share is the documented default (126 us per step + 4 us per sequence, CostConfig in config.py)
        # and nothing is charged for drafting on rows that did not draft.
        np.testing.assert_allclose(t["pred_host_s"], 126e-6 + 4e-6 * t["batch_rows"], rtol=1e-9)
        assert (t.loc[t["drafting_rows"] == 0, "pred_draft_s"].abs() < 1e-15).all()
        tput = sc["end_to_end"]["throughput_tok_s"]
        committed = t["committed"].sum()
        assert committed / t["pred_step_s"].sum() == pytest.approx(tput["predicted"], rel=1e-9)
        assert committed / (meas + t["pred_host_s"]).sum() == pytest.approx(tput["measured"], rel=1e-9)
        # The predicted side of the re-timed latencies is the simulation's own.
        sim = sc["simulated"]
        assert sc["end_to_end"]["mean_tpot_s"]["predicted"] == pytest.approx(sim["tpot_s"]["mean"], rel=1e-9)
        assert sc["end_to_end"]["p99_itl_s"]["predicted"] == pytest.approx(sim["itl_s"]["p99"], rel=1e-9)
        assert (t["meas_forward_s"] > 0).all() and (t["meas_draft_s"][t["drafting_rows"] > 0] > 0).all()


def test_one_line_errors(tmp_path):
    runner = CliRunner()
    result = runner.invoke(app(), ["validate", "--profile", str(tmp_path / "missing.yaml"), "--device", "cpu",
                                   "--out", str(tmp_path / "o")])
    assert isinstance(result.exception, SpecplanError) and "missing.yaml" in str(result.exception)
    result = runner.invoke(app(), ["validate", "--profile", "h200/llama-3.1-8b", "--device", "cpu", "--scenario",
                                   "medium", "--out", str(tmp_path / "o")])
    assert isinstance(result.exception, SpecplanError) and "'medium'" in str(result.exception)
    assert "\n" not in str(result.exception)


# ----------------------------------------------------------------------------- replay pieces
def _step(it, rids, q, ctx, prefill):
    n = len(rids)
    return Step(it, np.array(rids), np.array(q), np.array(ctx), np.array(prefill), np.zeros(n, bool),
                np.zeros(n, np.int64), 0)


def _replayed_hidden(kind, steps, tokens):
    from specplan.calibration import attention as at
    from specplan.calibration.stack import DecoderStack
    from specplan.validation import replay as rp
    from specplan.cost_models.models import get_model

    torch.set_num_threads(1)
    plan = rp.plan_slots(steps)
    stack = DecoderStack(get_model("tiny"), 1, "cpu", torch.float32, plan.kv_tokens, seed=0)
    if kind == "rows":
        attention = at.RowAttention(stack, plan.num_slots, plan.slot_len)
    else:  # the CUDA path's layout and kernel inputs, with a reference in place of the FlashAttention kernel
        attention = at.VarlenAttention(stack, plan.num_slots, plan.slot_len, at.varlen_reference)
    rope = at.rope_cache(stack, plan.slot_len)
    with torch.inference_mode():
        return [rp.MixedStep(stack, attention, s, slots, tokens, rope, None).hidden()
                for s, slots in zip(steps, plan.slots)]


def test_kv_cache_grows_like_a_single_prefill_and_varlen_layout_agrees():
    """Prefill two requests, then one verify row of 3 over request 0 mixed with a prefill chunk of request 1:
    the verify row's hidden states equal those of one 10-token pass over the same tokens (KV writes,
    rotary positions and the bottom-right causal mask are right), with either cache layout."""
    rng = np.random.default_rng(0)
    tokens = [rng.integers(0, 2048, 40) for _ in range(2)]
    tokens.append(tokens[0].copy())
    steps = [_step(1, [0, 1], [7, 12], [0, 0], [True, True]),
             _step(2, [0, 1], [3, 5], [7, 12], [False, True]),
             _step(3, [2], [10], [0], [False])]
    rows = _replayed_hidden("rows", steps, tokens)
    varlen = _replayed_hidden("varlen", steps, tokens)
    assert [h.shape[0] for h in rows] == [2, 4, 10]  # logits: last prefill position, every verify position
    for a, b in zip(rows, varlen):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(rows[1][:3], rows[2][7:10], rtol=1e-4, atol=1e-5)


def test_padding_and_slots():
    from specplan.calibration import attention as at
    from specplan.calibration.stack import DecoderStack
    from specplan.validation import replay as rp
    from specplan.cost_models.models import get_model

    steps = [_step(1, [0, 1], [5, 4], [20, 30], [False, False]), _step(2, [0], [5], [22], [False]),
             _step(3, [2], [300], [0], [True])]
    plan = rp.plan_slots(steps)
    assert plan.slot_len == 300  # the longest context + query
    assert plan.num_slots == 2 and plan.slots[2][0] == 0  # request 2 takes the lowest slot freed
    stack = DecoderStack(get_model("tiny"), 1, "cpu", torch.float32, plan.kv_tokens, seed=0)
    attention = at.RowAttention(stack, plan.num_slots, plan.slot_len)
    rope = at.rope_cache(stack, plan.slot_len)
    tokens = [np.arange(400)] * 3
    with torch.inference_mode():
        step = rp.MixedStep(stack, attention, steps[0], plan.slots[0], tokens, rope, pad_to=512)
        assert (step.tokens, step.padded) == (9, 16)  # vLLM's captured sizes: multiples of 8
        assert step().shape == (9,)  # padded tokens run the GEMMs but get no attention and no logits
        assert rp.MixedStep(stack, attention, steps[2], plan.slots[2], tokens, rope, pad_to=256).padded == 300


def test_steps_from_a_run_and_exact_retiming(make_config):
    from specplan.simulator.run import simulate
    from specplan.workloads.traffic import build_requests

    cfg = make_config(workload={"trace": "synthetic:copy_prob=0.5,prompt_len=40,output_len=30", "concurrency": 2,
                                "num_requests": 3},
                      speculation={"decoding_type": "SA", "max_draft_len": 3}, acceptance={"mode": "drafter"},
                      # TensorRT-LLM rounds a truncated chunk down to the KV block: blocks of 8 leave room
                      # for a chunk beside the generation rows in a 32-token budget
                      engine={"enable_chunked_prefill": True, "max_num_tokens": 32, "kv_block_size": 8})
    requests = build_requests(cfg.workload, cfg.seed)
    res = simulate(cfg, requests=requests, record_batches=True)
    steps = steps_from_run(res.batches, res.iterations, np.array([r.prompt_len for r in requests]))
    assert [s.iteration for s in steps] == res.iterations["iteration"].tolist()
    for s in steps:
        assert (s.drafting == ~s.prefill).all() and (s.committed[s.drafting] >= 1).all()
        assert (s.query[s.drafting] == 1 + s.k).all()  # SA verifies the runtime K
    assert any(s.prefill.any() and (~s.prefill).any() for s in steps)  # chunked prefill mixes rows
    its = res.iterations
    np.testing.assert_allclose(retime(its, its["step_s"].to_numpy()), its["start_s"] + its["step_s"], rtol=1e-12)
    doubled = retime(its, 2 * its["step_s"].to_numpy())
    assert doubled[-1] == pytest.approx(its["start_s"].iloc[0] + 2 * its["step_s"].sum())


def test_sa_kernel_drafter_drafts_what_the_simulator_drafts():
    """The GPU path's SA drafter (run here by the Triton interpreter, launched eagerly instead of from a CUDA
    graph) keeps each request's automaton in step with the trace, through a step without speculation and a
    slot handed to a new request: its drafts equal the simulator's SA drafter's."""
    pytest.importorskip("triton")
    from specplan.validation import replay as rp
    from specplan.config import SpeculationConfig
    from specplan.acceptance.drafters import make_drafter_oracle
    from specplan.workloads.synthetic import CopyProcess, LengthModel, synthetic_requests

    class EagerSADrafter(rp.SAKernelDrafter):
        def _timed_launch(self, batch, k):
            self.pool.launch_extend(batch, k, self.max_ngram)
            return 0.0

    requests = synthetic_requests(3, CopyProcess(0.6, 8, 50), LengthModel.constant(40), LengthModel.constant(30), 0)
    oracle = make_drafter_oracle(SpeculationConfig(decoding_type="SA", max_draft_len=4), requests, 8)
    drafter = EagerSADrafter(requests, num_slots=2, max_batch=8, max_k=4, max_ngram=-1, device="cpu")
    # (requests, their KV slots, committed output tokens, K); K = 0 is a step without drafting.
    schedule = [([0, 1], [0, 1], [1, 1], 4), ([0, 1], [0, 1], [3, 2], 4), ([0, 1], [0, 1], [4, 3], 0),
                ([0, 1], [0, 1], [5, 4], 2), ([0, 1], [0, 1], [11, 7], 4), ([2], [0], [1], 4), ([2], [0], [4], 3)]
    checked = 0
    for rids, slots, committed, k in schedule:
        if k == 0:
            continue
        n = len(rids)
        step = Step(0, np.array(rids), np.full(n, 1 + k), np.array(committed) + 39, np.zeros(n, bool),
                    np.ones(n, bool), np.array(committed), k)
        drafter(step, np.array(slots))
        drafts = drafter.pool.draft[:n, :k].numpy()
        for row, (rid, c) in enumerate(zip(rids, committed)):
            np.testing.assert_array_equal(drafts[row][drafts[row] >= 0], oracle.propose(rid, c, k))
            checked += 1
    assert checked == 10
