"""Calibrate the step-time model from an engine's own steps, and check it on steps it did not see.

Inputs (``specplan calibrate --from-logs``):

- a **vLLM step log**, ``engine_steps.csv`` as ``specplan validate --engine vllm`` writes it: every
  request in every engine step (``scheduled`` tokens, ``drafted`` tokens verified, ``is_prefill``,
  ``context`` tokens resident before the step) with the step's measured ``step_s`` and, of it, the
  scheduler's own ``host_s``. Each step reduces to the simulator's ``BatchTerms`` exactly;
- a **TensorRT-LLM iteration log** (``IterationStats`` JSON lines, see ``from_logs``): per iteration
  ``iterLatencyMS``, ``inflightBatchingStats`` (``numContextRequests``, ``numGenRequests``,
  ``numCtxTokens``), ``specDecodingStats`` (``numDraftTokens``, ``numRequestsWithDraftTokens``) and
  ``kvCacheStats`` (``usedNumBlocks`` x ``tokensPerBlock``: the resident KV, to block granularity).
  Without the per-row split, generation rows are taken as one token over the resident KV each, and a
  context chunk as starting at 0, which the fit then prices (stated in the output).

The model is the measured profile's (``cost_models.profile``), so the result is a profile the simulator
takes (``--set cost.model=profile --set cost.profile=DIR/profile.yaml``)::

    T = g(N) + c_L N_logits + a_kv KV + a_dec W_dec + a_pre W_pre          (forward)
        + host.step_s + host.per_seq_s B                                    (host, per step)
        + [drafting] (host.draft_step_s + host.draft_per_seq_s R_draft)     (drafter)

``g`` is piecewise linear over knots, written as non-negative increments so that it never falls (more
tokens never take less time). The host step term is the median of the measured ``host_s`` when the log
has it (the rest is fitted); otherwise it is part of ``g(1)``. Which terms are kept, and how ``g`` is
knotted, is chosen by cross-validation on the fitting steps (``step_forms``: terms that move together
within one run are not all kept); the rest are 0. Each is one non-negative least-squares problem in
relative error (each step's row divided by its measured time), columns scaled to unit maximum.

The engine's first step is warm-up (``step_errors.WARMUP_STEPS``): neither fitted nor checked, its
measured and predicted seconds reported. Held out: by default every other step (``alternate``: odd
steps fit, even steps checked), or the second half (``first-half``). The report: the form kept and the best forms' scores; median and p90
absolute per-step error, its bias, the throughput error over the held-out steps, the mean-TPOT error of the whole run priced by the fit, and
the residuals per class of step (``step_errors.residuals``).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import yaml

from specplan.atomic import atomic_write_text
from specplan.calibration.step_forms import StepForm, select_form
from specplan.calibration.step_errors import WARMUP_STEPS, request_tpot, residuals, step_classes
from specplan.config import CostConfig
from specplan.cost_models.base import StepBatch
from specplan.cost_models.draft import DraftCost
from specplan.cost_models.profile import (
    PROFILE_FORMAT, AttentionTerms, Curve, HostTerms, MeasuredRange, ModelShape, ProfileCostModel, ProfileFile,
    Provenance, write_profile,
)
from specplan.cost_models.terms import BatchTerms
from specplan.errors import TraceError

REQUIRED = ("step", "request", "scheduled", "drafted", "committed", "is_prefill", "context", "step_s")
SPLITS = ("alternate", "first-half")
# Recorded in the profile for TP communication, which is 0 at TP 1 whatever the shape.
_NO_SHAPE = ModelShape(name="from engine steps", num_layers=1, hidden=1, vocab=1)


# ----------------------------------------------------------------------------- inputs
def read_step_log(path: str | Path) -> pd.DataFrame:
    """The rows of a ``validate --engine vllm`` step log, checked (one-line ``TraceError`` naming the column)."""
    try:
        df = pd.read_csv(path)
    except (OSError, ValueError) as exc:
        raise TraceError(f"{path}: not a readable CSV step log ({str(exc).splitlines()[0]})") from None
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise TraceError(f"{path}: column {missing[0]} missing; give the engine_steps.csv that "
                         f"`specplan validate --engine vllm` writes (columns {', '.join(REQUIRED)})")
    for col in ("scheduled", "drafted", "context", "step_s"):
        bad = ~np.isfinite(pd.to_numeric(df[col], errors="coerce")) | (pd.to_numeric(df[col], errors="coerce") < 0)
        if bad.any():
            line = int(np.flatnonzero(bad.to_numpy())[0]) + 2
            raise TraceError(f"{path}:{line}: {col} must be a number >= 0, got {df[col].iloc[line - 2]!r}")
    if (df.groupby("step")["step_s"].first() <= 0).any():
        raise TraceError(f"{path}: step_s must be > 0 in every step")
    if df["is_prefill"].dtype != bool:
        df["is_prefill"] = df["is_prefill"].astype(str).str.lower().map({"true": True, "false": False})
        if df["is_prefill"].isna().any():
            raise TraceError(f"{path}: is_prefill must be True or False")
    return df


def vllm_step_terms(rows: pd.DataFrame) -> pd.DataFrame:
    """Per step: the simulator's ``BatchTerms`` of its rows, the drafting rows, the measured seconds."""
    out = []
    for step, g in rows.groupby("step", sort=True):
        q = g["scheduled"].to_numpy(dtype=np.int64)
        c = g["context"].to_numpy(dtype=np.int64)
        t = BatchTerms.of(StepBatch(q, c, g["is_prefill"].to_numpy(dtype=bool)))
        host = float(g["host_s"].iloc[0]) if "host_s" in g else np.nan
        out.append({"step": int(step), "rows": t.num_seqs, "num_tokens": t.num_tokens, "logit_tokens": t.logit_tokens,
                    "kv": t.kv_decode + t.kv_prefill, "work_decode": t.work_decode, "work_prefill": t.work_prefill,
                    "max_context": t.max_context, "context_tokens": t.context_tokens,
                    "drafting_rows": int((g["drafted"] > 0).sum()), "committed": int(g["committed"].sum()),
                    "prefill": bool(g["is_prefill"].any()), "step_s": float(g["step_s"].iloc[0]), "host_s": host})
    return pd.DataFrame(out)


def trtllm_step_terms(records: Sequence[dict], source: str) -> pd.DataFrame:
    """Per iteration of TensorRT-LLM ``IterationStats`` records: the terms, approximated as the module
    docstring says (no per-row split in the stats)."""
    out = []
    for i, rec in enumerate(records):
        ib, sd, kv = (rec.get(k) or {} for k in ("inflightBatchingStats", "specDecodingStats", "kvCacheStats"))
        ctx_req, gen_req = int(ib.get("numContextRequests", 0)), int(ib.get("numGenRequests", 0))
        ctx_tok, draft = int(ib.get("numCtxTokens", 0)), int(sd.get("numDraftTokens", 0))
        if ctx_req + gen_req == 0 or not rec.get("iterLatencyMS"):
            continue
        resident = float(kv.get("usedNumBlocks", 0)) * float(kv.get("tokensPerBlock", 0))
        chunk = ctx_tok / max(ctx_req, 1)
        out.append({"step": i + 1, "rows": ctx_req + gen_req, "num_tokens": ctx_tok + gen_req + draft,
                    "logit_tokens": ctx_req + gen_req + draft, "kv": resident,
                    "work_decode": resident if gen_req else 0.0,
                    "work_prefill": ctx_req * chunk * (chunk + 1) / 2, "max_context": int(resident),
                    "context_tokens": int(resident), "drafting_rows": int(sd.get("numRequestsWithDraftTokens", 0)),
                    "committed": gen_req + ctx_req, "prefill": ctx_req > 0,
                    "step_s": float(rec["iterLatencyMS"]) / 1e3, "host_s": np.nan})
    if len(out) < 8:
        raise TraceError(f"{source}: {len(out)} timed iterations with scheduled requests; a step-time fit needs >= 8")
    return pd.DataFrame(out)


# ----------------------------------------------------------------------------- fit
def fit_step_profile(train: pd.DataFrame, name: str, source: str,
                     form: StepForm | None = None) -> tuple[ProfileFile, list[dict]]:
    """A measured profile (with ``host`` terms, no CUDA-graph padding) fitted to per-step terms in the
    ``form`` given or the one cross-validation keeps (``step_forms.select_form``; its scores returned,
    empty when given); terms the form leaves out are 0."""
    host_measured = train["host_s"].notna().all()
    h0 = float(np.median(train["host_s"])) if host_measured else 0.0
    scores: list[dict] = []
    if form is None:
        form, scores = select_form(train, h0)
    theta, knots = form.solve(train, h0)
    m = len(knots)
    g = np.cumsum(theta[:m])
    w = dict.fromkeys(("logit_tokens", "kv", "work_decode", "work_prefill", "rows", "draft_step", "drafting_rows"), 0.0)
    w.update({t: float(v) for t, v in zip(form.terms, theta[m:])})
    l_max = max(int(train["logit_tokens"].max()), 2)
    # The LM-head curve is linear: c_L per logit token (a Curve needs one positive value).
    c_logit = w["logit_tokens"]
    lm = Curve(tokens=[1, l_max], seconds=[c_logit, max(c_logit * l_max, 1e-12)])
    profile = ProfileFile(
        format=PROFILE_FORMAT, name=name, provenance=Provenance(kind="measured", source=f"{source}; form {form.label}"),
        model_shape=_NO_SHAPE, token_time=Curve(tokens=[int(k) for k in knots], seconds=[float(v) for v in g]),
        lm_head_time=lm, attention=AttentionTerms(kv_s_per_token=w["kv"], decode_work_s=w["work_decode"],
                                                  prefill_work_s=w["work_prefill"]),
        measured_range=MeasuredRange(tokens=(int(knots[0]), int(knots[-1])), logit_tokens=(1, l_max),
                                     max_context=int(train["max_context"].max()), max_batch=int(train["rows"].max())),
        host=HostTerms(step_s=h0, per_seq_s=w["rows"], draft_step_s=w["draft_step"],
                       draft_per_seq_s=w["drafting_rows"]),
        cuda_graph_padding=False,
    )
    return profile, scores


def predict(profile: ProfileFile, terms: pd.DataFrame, drafter: str = "vllm_ngram") -> np.ndarray:
    """Seconds per step as the simulator prices them with ``profile``: forward and host, plus drafting."""
    model = ProfileCostModel(profile, DraftCost.default(132), CostConfig(), source=profile.name)
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the range check is the caller's (``MeasuredRange``)
        for r in terms.itertuples(index=False):
            bt = BatchTerms(int(r.rows), int(r.num_tokens), int(r.logit_tokens), float(r.kv), 0.0,
                            float(r.work_decode), float(r.work_prefill), int(r.max_context), int(r.context_tokens), 0)
            s = model.step_time_terms(bt)
            if r.drafting_rows > 0:
                s += model.draft_time(drafter, int(r.drafting_rows), 1)
            out.append(s)
    return np.array(out)


# ----------------------------------------------------------------------------- check
def split_steps(terms: pd.DataFrame, how: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(fit, held_out)``: odd and even steps (``alternate``, by step number) or the first and second
    half (``first-half``)."""
    if how == "alternate":
        odd = (terms["step"].to_numpy() % 2) == 1
        return terms[odd], terms[~odd]
    if how == "first-half":
        h = len(terms) // 2
        return terms.iloc[:h], terms.iloc[h:]
    raise TraceError(f"--holdout: {how!r}; use one of {', '.join(SPLITS)}")


def step_errors(terms: pd.DataFrame, predicted: np.ndarray) -> dict:
    """Per-step error of ``predicted`` against ``terms.step_s``, and the throughput error over those steps."""
    m = terms["step_s"].to_numpy(dtype=float)
    rel = (predicted - m) / m
    return {"steps": int(len(m)), "median_step_ape": float(np.median(np.abs(rel))),
            "p90_step_ape": float(np.quantile(np.abs(rel), 0.9)), "step_bias": float(rel.mean()),
            "throughput_error": float(m.sum() / predicted.sum() - 1)}


def run_report(profile: ProfileFile, terms: pd.DataFrame, rows: pd.DataFrame | None) -> dict:
    """Errors of the whole run after its warm-up (``WARMUP_STEPS``) priced by ``profile``; with per-request
    rows, the mean-TPOT error and the residuals by class of step."""
    pred = predict(profile, terms)
    w = WARMUP_STEPS
    out = step_errors(terms.iloc[w:], pred[w:])
    if rows is not None:
        tpot_m = request_tpot(rows, terms["step_s"].to_numpy()).mean()
        out["tpot_error"] = float(request_tpot(rows, pred).mean() / tpot_m - 1)
        out["residuals"] = residuals(step_classes(rows).iloc[w:], terms["step_s"].to_numpy()[w:], pred[w:])
    return out


def calibrate_steps(paths: Sequence[str | Path], out: str | Path, holdout: str = "alternate") -> dict:
    """Fit a profile to the steps of one step log (vLLM CSV or TensorRT-LLM iteration JSON), check it on
    the held-out steps, write ``profile.yaml``, ``step_fit.json`` and ``scenario.yaml`` under ``out``."""
    from specplan.calibration.from_logs import _iteration_records  # TensorRT-LLM stats parsing lives there
    from specplan.outputs import check_output_dir

    if len(paths) != 1:
        raise TraceError("--from-logs: give one step log (engine_steps.csv or an iteration-stats file) at a time")
    path = Path(paths[0])
    if not path.is_file():
        raise TraceError(f"--from-logs {path}: no such file")
    check_output_dir(out)
    rows = None
    if path.suffix == ".csv":
        rows = read_step_log(path)
        terms, engine = vllm_step_terms(rows), "vllm"
    else:
        terms, engine = trtllm_step_terms(_iteration_records(str(path), path.read_text()), str(path)), "trtllm"
    if len(terms) < 8 + WARMUP_STEPS:
        raise TraceError(f"{path}: {len(terms)} steps; a step-time fit needs >= {8 + WARMUP_STEPS} (the first is warm-up)")
    train, test = split_steps(terms.iloc[WARMUP_STEPS:], holdout)
    name = f"{engine}-steps/{path.parent.name or path.stem}"
    source = f"specplan calibrate --from-logs {path} ({engine} steps, fitted on {holdout} {len(train)} of {len(terms)})"
    profile, scores = fit_step_profile(train, name, source)
    pred = predict(profile, test)
    held = step_errors(test, pred)
    if rows is not None:
        held["residuals"] = residuals(step_classes(rows[rows["step"].isin(test["step"])]), test["step_s"], pred)
    provenance = profile.provenance.model_copy(update={"heldout_median_abs_error": round(held["median_step_ape"], 5),
                                                       "heldout_points": held["steps"]})
    profile = profile.model_copy(update={"provenance": provenance})
    report = {"engine": engine, "source": str(path), "holdout": holdout, "fitted_steps": int(len(train)),
              "form": next(s["form"] for s in scores if s["kept"]), "forms_scored": scores,
              "warmup": {"steps": WARMUP_STEPS, "measured_s": terms["step_s"].iloc[:WARMUP_STEPS].tolist(),
                         "predicted_s": predict(profile, terms.iloc[:WARMUP_STEPS]).tolist()},
              "heldout": held, "whole_run": run_report(profile, terms, rows),
              "host_measured": bool(terms["host_s"].notna().all())}
    out = Path(out)
    write_profile(profile, out / "profile.yaml")
    atomic_write_text(out / "step_fit.json", json.dumps(report, indent=2) + "\n")
    scenario = {"cost": {"model": "profile", "profile": str(out / "profile.yaml")}}
    atomic_write_text(out / "scenario.yaml", yaml.safe_dump(scenario, sort_keys=False))
    report["written"] = [str(out / f) for f in ("profile.yaml", "step_fit.json", "scenario.yaml")]
    return report
