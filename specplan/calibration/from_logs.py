"""Calibration from an engine's own logs: acceptance and, where the logs allow, a linear step cost.

Two log kinds, told apart by content:

- **vLLM Prometheus metrics text** (``GET /metrics``). The spec-decode counters of
  ``vllm/v1/spec_decode/metrics.py`` (``SpecDecodingProm``): ``vllm:spec_decode_num_drafts``,
  ``..._num_draft_tokens``, ``..._num_accepted_tokens`` and ``..._num_accepted_tokens_per_pos``
  (label ``position`` = 0..K-1; the client library appends ``_total`` to counter names). Per
  ``SpecDecodingStats.observe_draft`` a draft that accepts ``a`` tokens adds 1 to positions
  ``0..a-1``, so ``n_p``, the count at position p, is the number of drafts that accepted more than
  p tokens, and with ``n_{-1}`` = drafts the conditional rate at position p is ``n_p / n_{p-1}``;
  ``P(accepted = a) = (n_{a-1} - n_a) / drafts``. The mean acceptance length is vLLM's own,
  ``1 + accepted / drafts`` (bonus token included). A draft shorter than K (the n-gram proposer
  found fewer tokens) still counts as a draft, so the rates are per draft, as vLLM reports them.
  The histograms ``vllm:iteration_tokens_total`` (tokens per engine step) and
  ``vllm:inter_token_latency_seconds`` (or the older ``vllm:time_per_output_token_seconds``) give
  means only: no batch composition per step, so no cost fit from vLLM metrics.
- **TensorRT-LLM per-iteration statistics** (``llm.get_stats()`` / ``trtllm-serve`` ``/metrics``:
  a JSON array, or JSON lines, of ``IterationStats`` objects or their JSON strings; field names from
  ``cpp/include/tensorrt_llm/executor/types.h``): ``iterLatencyMS``, ``inflightBatchingStats``
  (``numContextRequests``, ``numGenRequests``, ``numCtxTokens``) and ``specDecodingStats``
  (``numDraftTokens``, ``numAcceptedTokens``, ``numRequestsWithDraftTokens``). Each iteration
  computes ``N = numCtxTokens + numGenRequests + numDraftTokens`` tokens over
  ``B = numContextRequests + numGenRequests`` sequences; ``T = c0 + c_tok N + c_seq B`` is fitted by
  least squares (``c_kv`` is 0: the stats do not carry the resident context). The stats hold only
  per-iteration totals of drafted and accepted tokens, so per-position rates are the i.i.d. alpha
  that gives the logged mean accepted per draft at the logged draft length (stated in the output).

Outputs in ``--out``: ``acceptance.json``, ``cost.json`` (when fitted) and ``scenario.yaml``, whose
``acceptance`` and ``cost`` sections a scenario copies (or runs as is: ``specplan simulate DIR/scenario.yaml``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import yaml

from specplan.atomic import atomic_write_text
from specplan.cost_models.linear import fit_linear
from specplan.errors import TraceError

_SPEC = "vllm:spec_decode_num_"


# ----------------------------------------------------------------------------- vLLM metrics
def parse_prometheus(text: str, source: str = "metrics") -> dict[str, list[tuple[dict, float]]]:
    """Samples of a Prometheus text exposition: ``name -> [(labels, value), ...]``, read by
    ``prometheus_client``'s own parser (label values with ``}``, escaped quotes and newlines are
    read as the format defines them)."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, list[tuple[dict, float]]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                out.setdefault(sample.name, []).append((dict(sample.labels), float(sample.value)))
    except ValueError as exc:
        raise TraceError(f"{source}: not Prometheus text exposition ({exc})") from None
    return out


def _counter(samples: dict, name: str, source: str = "metrics") -> float | None:
    """A counter summed over its label sets (engines, models), under either exported name; a value
    that is NaN, infinite or negative is refused naming the counter."""
    for key in (f"{name}_total", name):
        if key in samples:
            values = [v for _, v in samples[key]]
            bad = [v for v in values if not math.isfinite(v) or v < 0]
            if bad:
                raise TraceError(f"{source}: {key}: counter value {bad[0]} is not a finite number >= 0")
            return sum(values)
    return None


def _histogram_mean(samples: dict, *names: str) -> float | None:
    for name in names:
        total, count = _counter(samples, f"{name}_sum"), _counter(samples, f"{name}_count")
        if total is not None and count:
            return total / count
    return None


def vllm_acceptance(texts: Sequence[tuple[str, str]]) -> dict:
    """Acceptance from vLLM metrics texts ``[(source, text)]``, counters summed over the files."""
    drafts = accepted = draft_tokens = 0.0
    per_pos: dict[int, float] = {}
    tokens, itl = [], []
    for source, text in texts:
        samples = parse_prometheus(text, source)
        d = _counter(samples, f"{_SPEC}drafts", source)
        a = _counter(samples, f"{_SPEC}accepted_tokens", source)
        if d is None or a is None:
            raise TraceError(f"{source}: no {_SPEC}drafts / {_SPEC}accepted_tokens counters (was speculation on?)")
        t = _counter(samples, f"{_SPEC}draft_tokens", source)
        if t is None:
            raise TraceError(f"{source}: {_SPEC}draft_tokens: missing (SpecDecodingProm exports it with the drafts)")
        if a > t:
            raise TraceError(f"{source}: {_SPEC}accepted_tokens {a:g} exceeds {_SPEC}draft_tokens {t:g}; "
                             "the counters are from different runs or engines")
        drafts, accepted, draft_tokens = drafts + d, accepted + a, draft_tokens + t
        for key in (f"{_SPEC}accepted_tokens_per_pos_total", f"{_SPEC}accepted_tokens_per_pos"):
            for labels, v in samples.get(key, []):
                if "position" not in labels or not labels["position"].isdigit():
                    raise TraceError(f"{source}: {key} sample without an integer 'position' label")
                per_pos[int(labels["position"])] = per_pos.get(int(labels["position"]), 0.0) + v
            if key in samples:
                break
        tokens.append(_histogram_mean(samples, "vllm:iteration_tokens_total"))
        itl.append(_histogram_mean(samples, "vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"))
    if drafts <= 0:
        raise TraceError(f"{texts[0][0]}: {_SPEC}drafts is 0: no speculative steps were logged")
    if not per_pos:
        raise TraceError(f"{texts[0][0]}: no {_SPEC}accepted_tokens_per_pos samples (per-position counts)")
    k = max(per_pos) + 1
    counts = np.array([drafts] + [per_pos.get(p, 0.0) for p in range(k)])
    if np.any(np.diff(counts) > 1e-9):
        raise TraceError(f"{texts[0][0]}: accepted counts per position must not increase with the position")
    rates = [float(counts[p + 1] / counts[p]) if counts[p] > 0 else 0.0 for p in range(k)]
    dist = (-np.diff(np.append(counts, 0.0))) / drafts
    out = {"engine": "vllm", "max_draft_len": k, "num_drafts": int(drafts), "per_position": rates,
           "length_dist": [float(x) for x in dist], "mean_acceptance_length": 1.0 + accepted / drafts,
           "mean_draft_length": draft_tokens / drafts}
    observed = {"mean_tokens_per_step": _mean(tokens), "mean_inter_token_latency_s": _mean(itl)}
    out["observed"] = {k_: v for k_, v in observed.items() if v is not None}
    return out


def _mean(values: Iterable[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return float(np.mean(vals)) if vals else None


# ----------------------------------------------------------------------------- TensorRT-LLM iteration stats
def _iteration_records(source: str, text: str) -> list[dict]:
    stripped = text.lstrip()
    try:
        items = json.loads(stripped) if stripped.startswith("[") else [json.loads(ln) for ln in text.splitlines() if ln.strip()]
    except json.JSONDecodeError as exc:
        raise TraceError(f"{source}:{exc.lineno}: invalid JSON ({exc.msg})") from None
    out = []
    for i, item in enumerate(items):
        try:
            rec = json.loads(item) if isinstance(item, str) else item  # get_stats() may hand out JSON strings
        except json.JSONDecodeError as exc:
            raise TraceError(f"{source}: record {i}: a string that is not IterationStats JSON ({exc.msg})") from None
        if not isinstance(rec, dict) or "iterLatencyMS" not in rec:
            raise TraceError(f"{source}: record {i}: not a TensorRT-LLM IterationStats object (no iterLatencyMS)")
        out.append(rec)
    return out


def _number(value, where: str) -> float:
    """A finite number >= 0, else one line naming the field."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
        raise TraceError(f"{where} must be a finite number >= 0, got {value!r}")
    return float(value)


def _field(rec: dict, section: str, name: str, source: str, i: int) -> float:
    """``rec[section][name]``; a missing section or field is named, never read as 0."""
    part = rec.get(section)
    if not isinstance(part, dict):
        raise TraceError(f"{source}: record {i}: {section}: missing or not an object (IterationStats carries it)")
    if name not in part:
        raise TraceError(f"{source}: record {i}: {section}.{name}: missing; the stats cannot be read without it")
    return _number(part[name], f"{source}: record {i}: {section}.{name}")


def _iid_alpha(mean_accepted: float, k: int) -> float:
    """The alpha with sum_{i=1..k} alpha^i = mean_accepted (bisection: the sum rises with alpha)."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if sum(mid ** i for i in range(1, k + 1)) < mean_accepted else (lo, mid)
    return (lo + hi) / 2


def trtllm_calibration(texts: Sequence[tuple[str, str]]) -> tuple[dict | None, dict | None]:
    """Acceptance (or None without speculative iterations) and the linear cost fit (or None with
    fewer than four timed iterations) from TensorRT-LLM iteration-stats files."""
    n_tok, n_seq, secs, draft_ms = [], [], [], []
    drafted = accepted = with_draft = 0.0
    for source, text in texts:
        for i, rec in enumerate(_iteration_records(source, text)):
            latency = _number(rec["iterLatencyMS"], f"{source}: record {i}: iterLatencyMS")
            ctx_req = _field(rec, "inflightBatchingStats", "numContextRequests", source, i)
            gen_req = _field(rec, "inflightBatchingStats", "numGenRequests", source, i)
            ctx_tok = _field(rec, "inflightBatchingStats", "numCtxTokens", source, i)
            draft = 0.0
            if rec.get("specDecodingStats") is not None:  # absent: an iteration without speculation
                draft = _field(rec, "specDecodingStats", "numDraftTokens", source, i)
                acc = _field(rec, "specDecodingStats", "numAcceptedTokens", source, i)
                if acc > draft:
                    raise TraceError(f"{source}: record {i}: specDecodingStats.numAcceptedTokens {acc:g} exceeds "
                                     f"numDraftTokens {draft:g}")
                drafted, accepted = drafted + draft, accepted + acc
                with_draft += _field(rec, "specDecodingStats", "numRequestsWithDraftTokens", source, i)
                if "iterLatencyMS" in rec["specDecodingStats"]:  # the drafter's own time this iteration
                    draft_ms.append(_field(rec, "specDecodingStats", "iterLatencyMS", source, i))
            if ctx_req + gen_req > 0 and latency > 0:
                n_tok.append(ctx_tok + gen_req + draft)
                n_seq.append(ctx_req + gen_req)
                secs.append(latency / 1e3)
    acceptance = None
    if with_draft > 0:
        k = int(round(drafted / with_draft))
        mean_acc = accepted / with_draft
        alpha = _iid_alpha(min(mean_acc, k - 1e-9), k) if k >= 1 else 0.0
        acceptance = {"engine": "trtllm", "max_draft_len": k, "num_drafts": int(with_draft),
                      "per_position": [alpha] * k, "mean_acceptance_length": 1.0 + mean_acc,
                      "mean_draft_length": drafted / with_draft,
                      **({"mean_draft_latency_ms": float(np.mean(draft_ms))} if draft_ms else {}),
                      "assumption": "i.i.d. per position: TensorRT-LLM's iteration stats carry drafted and "
                                    "accepted totals only; alpha matches the mean accepted per draft at this K"}
    cost = None
    if len(secs) >= 4:
        coef = fit_linear(np.array(n_tok), np.zeros(len(secs)), np.array(n_seq), np.array(secs))
        pred = coef.c0_s + coef.c_tok_s * np.array(n_tok) + coef.c_seq_s * np.array(n_seq)
        cost = {"linear_coefficients": {"c0_s": coef.c0_s, "c_tok_s": coef.c_tok_s, "c_kv_s": 0.0, "c_seq_s": coef.c_seq_s},
                "iterations": len(secs), "rel_rmse": float(np.sqrt(np.mean(((pred - secs) / secs) ** 2))),
                "note": "c_kv_s is 0: the iteration stats do not carry the resident KV context"}
    return acceptance, cost


# ----------------------------------------------------------------------------- command
def _kind(source: str, text: str) -> str:
    head = text.lstrip()[:1]
    if head in ("[", "{"):
        return "trtllm"
    if _SPEC in text or "vllm:" in text:
        return "vllm"
    raise TraceError(f"{source}: neither vLLM Prometheus metrics text nor TensorRT-LLM iteration-stats JSON")


def calibrate_from_logs(paths: Sequence[str | Path], out: str | Path, holdout: str | None = None) -> dict:
    """Fit acceptance (and a linear cost where the logs allow) from engine logs; write ``out``.

    All files must come from one engine. Returns the printed summary: ``acceptance`` (with
    ``per_position`` and ``mean_acceptance_length``), ``cost`` (or None) and the files written.
    A step log (``engine_steps.csv``), or any log with ``holdout`` given, gets the step-time fit of
    ``step_fit`` instead (a profile, checked on held-out steps).
    """
    if holdout is not None or any(Path(p).suffix == ".csv" for p in paths):
        from specplan.calibration.step_fit import calibrate_steps

        return calibrate_steps(paths, out, holdout or "alternate")
    texts = []
    for p in paths:
        path = Path(p)
        if not path.is_file():
            raise TraceError(f"--from-logs {path}: no such file")
        texts.append((str(path), path.read_text()))
    kinds = {_kind(s, t) for s, t in texts}
    if len(kinds) > 1:
        raise TraceError("--from-logs: give the logs of one engine at a time (vLLM metrics or TensorRT-LLM stats)")
    if kinds == {"vllm"}:
        acceptance, cost = vllm_acceptance(texts), None
    else:
        acceptance, cost = trtllm_calibration(texts)
        if acceptance is None and cost is None:
            raise TraceError(f"{texts[0][0]}: no speculative iterations and too few timed iterations to fit a cost")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    scenario: dict = {}
    written = []
    if acceptance is not None:
        acceptance["sources"] = [s for s, _ in texts]
        atomic_write_text(out / "acceptance.json", json.dumps(acceptance, indent=2) + "\n")
        scenario["acceptance"] = {"mode": "per_position", "per_position": acceptance["per_position"]}
        written.append(str(out / "acceptance.json"))
    if cost is not None:
        atomic_write_text(out / "cost.json", json.dumps(cost, indent=2) + "\n")
        scenario["cost"] = {"model": "linear", "linear_coefficients": cost["linear_coefficients"]}
        written.append(str(out / "cost.json"))
    atomic_write_text(out / "scenario.yaml", yaml.safe_dump(scenario, sort_keys=False))
    written.append(str(out / "scenario.yaml"))
    return {"acceptance": acceptance, "cost": cost, "written": written}
