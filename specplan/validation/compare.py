"""Predicted against measured: per-iteration terms, errors, error bins and re-timed request timelines.

Every error is signed ``(predicted - measured) / measured``; APE is its absolute value.

What is compared per iteration is the **device step**: the forward (with the cost model's CUDA-graph
padding, which the replay applies too) plus drafting. The simulator's step also carries a per-step
host overhead (the engine's scheduler and sampler, ``cost.host_overhead_s`` + per-sequence term) that
a replay cannot observe; it is excluded from the per-iteration comparison on both sides and carried
unchanged into the end-to-end figures (throughput, TPOT, ITL), which re-time the simulated schedule
with measured device steps plus that predicted host term.

Predicted terms come from the scenario's own cost model evaluated on each iteration's batch, and
from the same model with a term switched off (host overhead, padding, attention); drafting is what
the simulated step holds beyond the forward.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from specplan.config import SimConfig
from specplan.cost_models.base import CostModel, StepBatch
from specplan.cost_models.profile import AttentionTerms, ProfileCostModel
from specplan.cost_models.registry import make_cost_model
from specplan.simulator.metrics import inter_token_latencies
from specplan.validation.schedule import Step


def _attention_fn(raw: CostModel) -> Callable[[StepBatch], float]:
    """The attention seconds a model puts in a step (NaN where it has no attention term of its own)."""
    if isinstance(raw, ProfileCostModel):
        zero = AttentionTerms(kv_s_per_token=0.0, decode_work_s=0.0, prefill_work_s=0.0)
        no_attention = ProfileCostModel(raw.profile.model_copy(update={"attention": zero}), raw.draft, raw.options,
                                        raw.source)
        return lambda b: raw.step_time(b) - no_attention.step_time(b)
    if hasattr(raw, "components"):
        return lambda b: sum(v for k, v in raw.components(b).items() if k.startswith("attention"))
    return lambda b: math.nan


def predicted_terms(cfg: SimConfig, cost: CostModel, steps: Sequence[Step], iterations: pd.DataFrame) -> pd.DataFrame:
    """One row per iteration: its shape and the predicted seconds of each term.

    ``pred_step_s`` is the simulated step (forward + host + drafting); ``pred_host_s``, ``pred_draft_s``,
    ``pred_padding_s`` and ``pred_attention_s`` are its parts; ``pred_forward_s`` is the forward without
    host overhead (padding and attention included); ``pred_s`` = forward + drafting, the device step.
    """
    no_host = make_cost_model(cfg.cost.model_copy(update={"host_overhead_s": 0.0, "host_overhead_per_seq_s": 0.0}))
    raw = make_cost_model(cfg.cost.model_copy(update={"host_overhead_s": 0.0, "host_overhead_per_seq_s": 0.0,
                                                      "cuda_graph_padding": False}))
    attention = _attention_fn(raw)
    its = iterations.set_index("iteration")
    rows = []
    for step in steps:
        batch = step.batch
        full, forward, unpadded = cost.step_time(batch), no_host.step_time(batch), raw.step_time(batch)
        it = its.loc[step.iteration]
        prefill_rows = int(step.prefill.sum())
        rows.append({
            "iteration": step.iteration,
            "kind": "decode" if prefill_rows == 0 else ("prefill" if prefill_rows == len(step.query) else "mixed"),
            "batch_rows": len(step.query), "prefill_rows": prefill_rows, "drafting_rows": int(step.drafting.sum()),
            "k": step.k, "num_tokens": step.num_tokens, "context_tokens": int(step.context.sum()),
            "committed": int(it["committed"]),
            "pred_step_s": float(it["step_s"]), "pred_host_s": full - forward,
            "pred_draft_s": float(it["step_s"]) - full, "pred_padding_s": forward - unpadded,
            "pred_attention_s": attention(batch), "pred_forward_s": forward,
        })
    df = pd.DataFrame(rows)
    df["pred_s"] = df["pred_forward_s"] + df["pred_draft_s"]
    return df


def join_measured(pred: pd.DataFrame, measured: pd.DataFrame) -> pd.DataFrame:
    """Predicted and measured side by side, with ``meas_s`` (forward + drafting) and the error ``err``."""
    df = pred.merge(measured, on="iteration", how="inner", validate="one_to_one")
    if not (df["tokens"] == df["num_tokens"]).all():
        raise ValueError("the replay ran other token counts than the schedule holds")
    df = df.drop(columns="tokens")
    df["meas_s"] = df["meas_forward_s"] + df["meas_draft_s"]
    df["err"] = df["pred_s"] / df["meas_s"] - 1.0
    return df


def error_stats(err: np.ndarray) -> dict:
    """Median and p90 of the absolute percentage error, bias (median signed error), mean signed error."""
    err = np.asarray(err, dtype=float)
    if err.size == 0:
        return {"iterations": 0, "median_ape": None, "p90_ape": None, "bias": None, "mean_error": None}
    ape = np.abs(err)
    return {"iterations": int(err.size), "median_ape": float(np.median(ape)), "p90_ape": float(np.percentile(ape, 90)),
            "bias": float(np.median(err)), "mean_error": float(err.mean())}


def _ratio_error(pred: float, meas: float) -> float | None:
    return float(pred / meas - 1.0) if meas > 0 else None


def term_table(df: pd.DataFrame, cuda: bool) -> list[dict]:
    """Predicted and measured seconds summed over the iterations, per term, with the error of the sums.

    Attention and padding are parts of the forward with no separate measurement; host overhead is
    not observable by the replay (on CUDA the eager-minus-graph launch overhead is shown beside it).
    """
    drafting = df["drafting_rows"] > 0
    rows = [
        ("device step (forward + drafting)", df["pred_s"].sum(), df["meas_s"].sum()),
        ("forward", df["pred_forward_s"].sum(), df["meas_forward_s"].sum()),
        ("drafting", df.loc[drafting, "pred_draft_s"].sum(), df.loc[drafting, "meas_draft_s"].sum()),
        ("attention (part of forward)", df["pred_attention_s"].sum(), None),
        ("padding (part of forward)", df["pred_padding_s"].sum(), None),
        ("host overhead (engine; not replayed)", df["pred_host_s"].sum(), None),
    ]
    if cuda:
        rows.append(("launch overhead, eager - graph (measured only)", None,
                     (df["meas_forward_alt_s"] - df["meas_forward_s"]).sum()))
    out = []
    for name, pred, meas in rows:
        pred = None if pred is None or not np.isfinite(pred) else float(pred)
        meas = None if meas is None else float(meas)
        out.append({"term": name, "predicted_s": pred, "measured_s": meas,
                    "error": _ratio_error(pred, meas) if pred is not None and meas is not None else None})
    return out


def _batch_bin(b: int) -> str:
    hi = 1 << max(0, math.ceil(math.log2(b)))
    lo = hi // 2 + 1 if hi > 1 else 1
    return f"{lo}-{hi}" if lo < hi else str(hi)


def error_bins(df: pd.DataFrame) -> list[dict]:
    """Errors by iteration kind, batch size, predicted attention share (terciles) and padding.

    Each bin: iterations, median APE, bias, and the error of its summed device steps and forwards, so
    a term that carries the error shows as a trend across bins.
    """
    groups: list[tuple[str, pd.Series]] = [
        ("kind", df["kind"]),
        ("batch rows", df["batch_rows"].map(_batch_bin)),
    ]
    share = df["pred_attention_s"] / df["pred_forward_s"]
    if share.notna().all() and share.nunique() >= 3:
        cuts = pd.qcut(share, 3, duplicates="drop")
        labels = {iv: f"{iv.left:.0%}-{iv.right:.0%}" for iv in cuts.cat.categories}
        groups.append(("attention share", cuts.map(labels).astype(str)))
    if (df["padded_tokens"] > df["num_tokens"]).any():
        groups.append(("padded", np.where(df["padded_tokens"] > df["num_tokens"], "padded", "exact")))
    out = []
    for name, key in groups:
        for value, sel in df.groupby(np.asarray(key), sort=False):
            stats = error_stats(sel["err"].to_numpy())
            out.append({"by": name, "bin": str(value), "iterations": stats["iterations"],
                        "median_ape": stats["median_ape"], "bias": stats["bias"],
                        "sum_error": _ratio_error(sel["pred_s"].sum(), sel["meas_s"].sum()),
                        "forward_sum_error": _ratio_error(sel["pred_forward_s"].sum(), sel["meas_forward_s"].sum())})
    order = {"kind": 0, "batch rows": 1, "attention share": 2, "padded": 3}
    return sorted(out, key=lambda r: (order[r["by"]], _sort_key(r["bin"])))


def _sort_key(label: str):
    head = label.split("-")[0].rstrip("%")
    try:
        return (0, float(head), label)
    except ValueError:
        return (1, 0.0, label)


def retime(iterations: pd.DataFrame, steps_s: np.ndarray) -> np.ndarray:
    """End time of every iteration when each takes ``steps_s`` instead of its simulated time.

    The schedule is held fixed and the idle gaps between iterations are kept; in a closed loop
    without think time there are none and the re-timing is exact, since the schedule then does not
    depend on step times.
    """
    start = iterations["start_s"].to_numpy(dtype=float)
    end = start + iterations["step_s"].to_numpy(dtype=float)
    gaps = np.clip(start[1:] - end[:-1], 0.0, None)
    return start[0] + np.cumsum(steps_s) + np.concatenate([[0.0], np.cumsum(gaps)])


def _emission_iterations(iterations: pd.DataFrame, emissions: pd.DataFrame) -> np.ndarray:
    """The iteration (row index) that emitted each chunk: the one ending at its time."""
    end = (iterations["start_s"] + iterations["step_s"]).to_numpy(dtype=float)
    t = emissions["time_s"].to_numpy(dtype=float)
    idx = np.clip(np.searchsorted(end, t), 0, len(end) - 1)
    prev = np.clip(idx - 1, 0, len(end) - 1)
    idx = np.where(np.abs(end[prev] - t) < np.abs(end[idx] - t), prev, idx)
    if not np.allclose(end[idx], t, rtol=1e-9, atol=1e-12):
        raise ValueError("emission times do not fall on iteration ends")
    return idx


def latency_figures(emissions: pd.DataFrame, output_lens: np.ndarray) -> dict:
    """Mean TPOT over completed requests with more than one output token, and p99 ITL (``metrics``'s definitions)."""
    g = emissions.groupby("request")
    span = g["time_s"].max() - g["time_s"].min()
    tokens = g["tokens"].sum()
    olen = output_lens[span.index.to_numpy()]
    done = (tokens.to_numpy() >= olen) & (olen > 1)
    tpot = span.to_numpy()[done] / (olen[done] - 1)
    itl = inter_token_latencies(emissions)
    return {"mean_tpot_s": float(tpot.mean()) if tpot.size else None,
            "p99_itl_s": float(np.percentile(itl, 99)) if itl.size else None}


def end_to_end(df: pd.DataFrame, iterations: pd.DataFrame, emissions: pd.DataFrame, output_lens: np.ndarray) -> dict:
    """Throughput, mean TPOT and p99 ITL, simulated and re-timed with measured device steps.

    A measured step is ``meas_s`` + the predicted host overhead; throughput is committed tokens over
    summed step times (idle time excluded), on the same tokens both ways.
    """
    its = iterations.sort_values("iteration").reset_index(drop=True)
    by_it = df.set_index("iteration").reindex(its["iteration"])
    if by_it["meas_s"].isna().any():
        raise ValueError("a simulated iteration has no measurement")
    pred_steps = its["step_s"].to_numpy(dtype=float)
    meas_steps = (by_it["meas_s"] + by_it["pred_host_s"]).to_numpy(dtype=float)
    committed = float(its["committed"].sum())
    idx = _emission_iterations(its, emissions)
    measured_em = emissions.assign(time_s=retime(its, meas_steps)[idx])
    pred_lat, meas_lat = latency_figures(emissions, output_lens), latency_figures(measured_em, output_lens)
    out = {"committed_tokens": int(committed),
           "throughput_tok_s": {"predicted": committed / pred_steps.sum(), "measured": committed / meas_steps.sum()}}
    for key in ("mean_tpot_s", "p99_itl_s"):
        out[key] = {"predicted": pred_lat[key], "measured": meas_lat[key]}
    for key in ("throughput_tok_s", "mean_tpot_s", "p99_itl_s"):
        p, m = out[key]["predicted"], out[key]["measured"]
        out[key]["error"] = _ratio_error(p, m) if p is not None and m is not None else None
    return out
