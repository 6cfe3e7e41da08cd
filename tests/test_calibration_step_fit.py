"""Step-time calibration from an engine's own steps (``specplan.calibration.step_fit``), without vLLM.

The synthetic logs are priced by a closed form written out here (the profile form's terms recomputed
from the rows by hand), so the fit must recover it; ``tests/data/vllm_engine_steps.csv`` is a real
vLLM CPU run's step log (SmolLM2-135M, 24 prompts, K = 5), whose measured step times the fit must
predict on steps it did not see.
"""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from specplan.calibration import step_fit
from specplan.calibration.step_forms import StepForm, select_form
from specplan.cli import app
from specplan.config import build_config
from specplan.cost_models.profile import read_profile
from specplan.errors import TraceError

DATA = Path(__file__).parent / "data"
TRUTH = dict(step=3e-3, per_seq=1e-4, tok=2e-5, logit=1e-5, kv=1e-8, dec=2e-9, pre=1e-9, d_step=5e-4, d_seq=2e-5)


def _truth_seconds(g: pd.DataFrame, truth: dict = TRUTH) -> float:
    """The closed form, from the rows: KV = sum(ctx + q), work = sum q (ctx + (q + 1) / 2) by row kind,
    logits = every decode position plus one per prefill row."""
    q, c, pre = g["scheduled"].to_numpy(float), g["context"].to_numpy(float), g["is_prefill"].to_numpy(bool)
    work = q * (c + (q + 1) / 2)
    logits = q[~pre].sum() + pre.sum()
    drafting = int((g["drafted"] > 0).sum())
    t = (truth["step"] + truth["per_seq"] * len(g) + truth["tok"] * q.sum() + truth["logit"] * logits
         + truth["kv"] * (c + q).sum() + truth["dec"] * work[~pre].sum() + truth["pre"] * work[pre].sum())
    return t + (truth["d_step"] + truth["d_seq"] * drafting if drafting else 0.0)


def _synthetic_log(steps: int = 120, seed: int = 0, truth: dict = TRUTH) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(1, steps + 1):
        b = int(rng.integers(1, 24))
        for r in range(b):
            pre = bool(rng.random() < 0.15)
            q = int(rng.integers(16, 700)) if pre else 1 + int(rng.integers(0, 6))
            rows.append({"step": s, "request": f"r{r}", "scheduled": q, "drafted": 0 if pre else q - 1,
                         "accepted": 0, "committed": 0 if pre else 1, "accepted_stats": 0, "is_prefill": pre,
                         "context": int(rng.integers(0, 900))})
    df = pd.DataFrame(rows)
    secs = df.groupby("step").apply(_truth_seconds, truth, include_groups=False)
    df["step_s"] = df["step"].map(secs)
    df["host_s"] = truth["step"]
    return df


def test_fit_recovers_a_closed_form_on_held_out_steps(tmp_path):
    log = _synthetic_log()
    path = tmp_path / "engine_steps.csv"
    log.to_csv(path, index=False)
    report = step_fit.calibrate_steps([path], tmp_path / "cal")
    held = report["heldout"]
    # step 1 is warm-up; of steps 2-120 the odd ones are fitted, the even ones held out
    assert held["steps"] == 60 and report["fitted_steps"] == 59
    assert held["median_step_ape"] < 0.01 and abs(held["throughput_error"]) < 0.01
    profile = read_profile(tmp_path / "cal" / "profile.yaml")
    assert profile.host.step_s == pytest.approx(TRUTH["step"])  # the measured host time, as logged
    assert profile.cuda_graph_padding is False
    # every step of the run, priced by the simulator's own profile model, against the closed form
    terms = step_fit.vllm_step_terms(log)
    pred = step_fit.predict(profile, terms)
    assert np.median(np.abs(pred / terms["step_s"].to_numpy() - 1)) < 0.01


def test_cross_validation_keeps_the_terms_the_steps_are_made_of():
    # Steps priced by a closed form with no KV, LM-head or drafting term: every form holding the true
    # terms fits them exactly (cross-validation error ~0), so the one-standard-error rule keeps the one
    # with the fewest unknowns: exactly the true terms, over a straight token curve.
    truth = {**TRUTH, "kv": 0.0, "logit": 0.0, "d_step": 0.0, "d_seq": 0.0}
    terms = step_fit.vllm_step_terms(_synthetic_log(truth=truth))
    form, scores = select_form(terms.iloc[1:], truth["step"])
    assert form == StepForm("affine", ("work_decode", "work_prefill", "rows"))
    assert scores[0]["cv_error"] < 1e-9 and [s["form"] for s in scores if s["kept"]] == [form.label]
    # and with every term present, every term is kept
    form, _ = select_form(step_fit.vllm_step_terms(_synthetic_log()).iloc[1:], TRUTH["step"])
    assert set(form.terms) == {"logit_tokens", "kv", "work_decode", "work_prefill", "rows", "draft_step", "drafting_rows"}


def test_fitted_token_curve_never_falls():
    # Noise that inverts neighbours must not make g fall: the fit's increments are non-negative, in the
    # form with a knot in every doubling bin (where noise has the most room) and in the form kept.
    log = _synthetic_log(seed=1)
    rng = np.random.default_rng(2)
    log["step_s"] = log["step_s"] * log["step"].map(dict(enumerate(rng.uniform(0.7, 1.3, 200))))
    terms = step_fit.vllm_step_terms(log)
    doubling = StepForm("doubling", ("logit_tokens", "kv", "work_decode", "work_prefill", "rows"))
    for form in (doubling, None):
        profile, _ = step_fit.fit_step_profile(terms, "noisy", "test", form)
        assert len(profile.token_time.tokens) > 2 or form is None
        assert np.all(np.diff(profile.token_time.seconds) >= 0)


def test_scenario_runs_with_the_fitted_profile(tmp_path):
    log = _synthetic_log(steps=40)
    path = tmp_path / "engine_steps.csv"
    log.to_csv(path, index=False)
    res = CliRunner().invoke(app, ["calibrate", "--from-logs", str(path), "--out", str(tmp_path / "cal")])
    assert res.exit_code == 0, res.output
    printed = json.loads(res.output)
    assert printed["heldout"]["steps"] == 20
    from specplan.cost_models.registry import make_cost_model

    cfg = build_config({"cost": {"model": "profile", "profile": str(tmp_path / "cal" / "profile.yaml")}}, "test")
    model = make_cost_model(cfg.cost)
    from specplan.cost_models.base import StepBatch

    # one decode row of 1 token over 100 tokens, priced by hand from the fitted profile's own terms
    p = read_profile(tmp_path / "cal" / "profile.yaml")
    by_hand = (p.token_time.seconds[0] + p.lm_head_time.seconds[0] + p.attention.kv_s_per_token * 101
               + p.attention.decode_work_s * 101 + p.host.step_s + p.host.per_seq_s)
    got = model.step_time(StepBatch(np.array([1]), np.array([100]), np.array([False])))
    assert got == pytest.approx(by_hand, rel=1e-9)


def test_real_vllm_step_log_predicted_on_held_out_steps(tmp_path):
    # Recorded on the shared 2-core development machine under other jobs' load: the same step shape
    # repeats only to about 28% (the median deviation of the 20 full-batch decode steps from their
    # median), so the bar here is structure, not the noise: on the held-out steps the profile must beat
    # the two baselines a fit could fall back to (the training steps' median time, and their median
    # seconds per token times the step's tokens). The bars are the next test's, on a quiet machine.
    log = DATA / "vllm_engine_steps.csv"
    report = step_fit.calibrate_steps([log], tmp_path / "cal")
    held = report["heldout"]
    terms = step_fit.vllm_step_terms(step_fit.read_step_log(log))
    train, test = step_fit.split_steps(terms.iloc[1:], "alternate")
    measured = test["step_s"].to_numpy()
    constant = np.median(np.abs(np.median(train["step_s"]) / measured - 1))
    per_token = np.median(np.abs(np.median(train["step_s"] / train["num_tokens"]) * test["num_tokens"] / measured - 1))
    assert held["steps"] == len(test) and held["median_step_ape"] < min(constant, per_token)
    for grouping in (lambda t: not t.startswith("draft"), lambda t: t.startswith("draft")):
        part = [r for r in held["residuals"] if grouping(r["term"])]
        assert sum(r["steps"] for r in part) == len(test)
        assert sum(r["share_of_error"] for r in part) == pytest.approx(1.0)
    profile = read_profile(tmp_path / "cal" / "profile.yaml")
    assert np.all(np.diff(profile.token_time.seconds) >= 0) and profile.host.step_s < 0.01


def test_quiet_vllm_runs_fit_on_half_of_one_predict_the_other_half_and_another_run(tmp_path):
    # Two real vLLM CPU runs recorded on a quiet machine (`specplan validate --engine vllm --num-prompts 24
    # --max-tokens 96 --max-num-batched-tokens 1024`, SmolLM2-135M, 2 threads): K = 5 with all 24
    # sequences, and K = 3 with --max-num-seqs 8. Identical runs of the first repeated their total
    # time to within 3.9% (25.04, 24.10, 24.68 s). Fitted on the first run's odd steps, the profile
    # must predict its even steps and the whole second run to the bars: median step error
    # below 10%, throughput and mean TPOT within 5%; and the engine's first step is the warm-up no
    # steady-state fit prices (about 2x its later 1,024-token prefills).
    first = DATA / "vllm_steps_k5_24seqs_chunk1024.csv"
    report = step_fit.calibrate_steps([first], tmp_path / "cal")
    held = report["heldout"]
    assert held["median_step_ape"] < 0.10 and abs(held["throughput_error"]) < 0.05
    assert abs(report["whole_run"]["tpot_error"]) < 0.05
    assert report["warmup"]["measured_s"][0] > 1.5 * report["warmup"]["predicted_s"][0]
    profile = read_profile(tmp_path / "cal" / "profile.yaml")
    rows = step_fit.read_step_log(DATA / "vllm_steps_k3_8seqs_chunk1024.csv")
    second = step_fit.run_report(profile, step_fit.vllm_step_terms(rows), rows)
    assert second["steps"] == rows["step"].nunique() - 1
    assert second["median_step_ape"] < 0.10
    assert abs(second["throughput_error"]) < 0.05 and abs(second["tpot_error"]) < 0.05
    # the form kept is named in the report and in the profile's provenance
    assert report["form"] in profile.provenance.source and sum(s["kept"] for s in report["forms_scored"]) == 1


def test_trtllm_iteration_stats(tmp_path):
    # IterationStats JSON lines priced by a closed form in the approximated terms (module docstring):
    # one generation token per row over the resident KV, context chunks from 0.
    rng = np.random.default_rng(3)
    lines = []
    for i in range(60):
        ctx_req, gen_req = int(rng.integers(0, 3)), int(rng.integers(1, 30))
        ctx_tok, draft = ctx_req * int(rng.integers(64, 512)), gen_req * int(rng.integers(0, 4))
        used, per_block = int(rng.integers(10, 400)), 32
        kv = used * per_block
        chunk = ctx_tok / max(ctx_req, 1)
        n = ctx_tok + gen_req + draft
        t = 2e-3 + 3e-5 * n + 1e-5 * (ctx_req + gen_req + draft) + 1e-8 * kv + 2e-9 * kv \
            + 1e-9 * ctx_req * chunk * (chunk + 1) / 2 + 5e-5 * (ctx_req + gen_req)
        lines.append(json.dumps({"iterLatencyMS": t * 1e3, "inflightBatchingStats": {
            "numContextRequests": ctx_req, "numGenRequests": gen_req, "numCtxTokens": ctx_tok},
            "specDecodingStats": {"numDraftTokens": draft, "numRequestsWithDraftTokens": 0, "numAcceptedTokens": 0},
            "kvCacheStats": {"usedNumBlocks": used, "tokensPerBlock": per_block}}))
    path = tmp_path / "iteration_stats.jsonl"
    path.write_text("\n".join(lines) + "\n")
    report = step_fit.calibrate_steps([path], tmp_path / "cal", "first-half")
    assert report["engine"] == "trtllm" and report["heldout"]["median_step_ape"] < 0.02


@pytest.mark.parametrize("edit, message", [
    (lambda df: df.drop(columns="context"), "column context missing"),
    (lambda df: df.assign(step_s=-1.0), "step_s must be"),
    (lambda df: df.assign(is_prefill="maybe"), "is_prefill"),
])
def test_bad_step_log_is_one_line(tmp_path, edit, message):
    path = tmp_path / "engine_steps.csv"
    edit(_synthetic_log(steps=10)).to_csv(path, index=False)
    res = CliRunner().invoke(app, ["calibrate", "--from-logs", str(path), "--out", str(tmp_path / "cal")])
    assert isinstance(res.exception, TraceError) and message in str(res.exception)


def test_holdout_must_be_known(tmp_path):
    path = tmp_path / "engine_steps.csv"
    _synthetic_log(steps=10).to_csv(path, index=False)
    with pytest.raises(TraceError, match="--holdout"):
        step_fit.calibrate_steps([path], tmp_path / "cal", "random")


def test_output_folder_checked_before_fitting(tmp_path):
    path = tmp_path / "engine_steps.csv"
    _synthetic_log(steps=10).to_csv(path, index=False)
    (tmp_path / "file").write_text("x")
    res = CliRunner().invoke(app, ["calibrate", "--from-logs", str(path), "--out", str(tmp_path / "file" / "cal")])
    assert "not a directory" in str(res.exception) and not (tmp_path / "file" / "cal").exists()
