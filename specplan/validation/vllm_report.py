"""``summary.json``, ``report.md`` and ``iterations.csv`` of a ``validate --engine vllm`` run, each
written atomically (``specplan.atomic``)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from specplan.atomic import atomic_write, atomic_write_text
from specplan.simulator.metrics import plain


def _markdown(summary: dict) -> str:
    s = summary
    lines = [
        "# specplan validate --engine vllm", "",
        f"Model `{s['model']}` on {s['device']}; {s['requests']} requests, up to {s['max_tokens']} new tokens, "
        f"speculative config `{json.dumps(s['speculative_config'])}`; vLLM settings "
        f"`{json.dumps(s['engine_settings'])}`.", "",
        f"Speculative output equals plain greedy output: **{s['greedy_equal']}** "
        f"({s['greedy_equal_requests']}/{s['requests']} requests).", "",
        "| | engine (vLLM) | simulated (specplan, `engine: vllm`) |", "| --- | --- | --- |",
        f"| iterations | {s['engine_iterations']} | {s['sim_iterations']} |", "",
        f"Iterations compared: {s['iterations_compared']}; differing: **{s['iterations_differing']}** "
        f"(by column: {', '.join(f'{k} {v}' for k, v in s['iterations_differing_by_column'].items())}).", "",
        f"Requests with equal step counts: **{s['requests_steps_equal']}/{s['requests']}**; equal drafted: "
        f"{s['requests_drafted_equal']}; equal accepted: {s['requests_accepted_equal']}.", "",
    ]
    first = s["first_difference"]
    if first is None:
        lines.append("No iteration differs: the simulator scheduled, drafted, accepted and committed exactly what "
                     "vLLM did in every step.")
    else:
        lines += [f"First difference at iteration {first['iteration']} ({', '.join(first['columns'])}):", "",
                  "| | " + " | ".join(first["engine"]) + " |", "|" + " --- |" * (len(first["engine"]) + 1),
                  "| engine | " + " | ".join(str(v) for v in first["engine"].values()) + " |",
                  "| sim | " + " | ".join(str(v) for v in first["sim"].values()) + " |"]
    if "timing" in s:
        t = s["timing"]
        lines += ["", f"Step times, priced by profile `{s['profile']}`: median per-iteration error "
                      f"{t['median_step_ape']:.1%} (p90 {t['p90_step_ape']:.1%}, bias {t['step_bias']:+.1%}) over "
                      f"{t['iterations_timed']} iterations after the engine's warm-up step{_warmup(t)}; throughput {t['sim_throughput_tok_s']:.1f} tok/s simulated "
                      f"against {t['engine_throughput_tok_s']:.1f} measured ({t['throughput_error']:+.1%}); mean TPOT "
                      f"{t['sim_mean_tpot_s'] * 1e3:.2f} ms against {t['engine_mean_tpot_s'] * 1e3:.2f} ms "
                      f"({t['tpot_error']:+.1%})."]
        if t.get("extrapolated"):
            lines += ["", "The profile extrapolated: " + "; ".join(t["extrapolated"]) + "."]
        if t.get("residuals"):
            lines += ["", "Where the error sits (per class of step: prefill steps, decode steps by batch rows, steps "
                          "verifying drafts or not; the share of the total absolute error in seconds):", "",
                      "| steps | count | median error | bias | share of error |", "| --- | --- | --- | --- | --- |"]
            lines += [f"| {r['term']} | {r['steps']} | {r['median_ape']:.1%} | {r['bias']:+.1%} | "
                      f"{r['share_of_error']:.0%} |" for r in t["residuals"]]
    lines += ["", "`iterations.csv` holds every iteration's engine and simulated columns and whether they differ; "
                  "`requests.csv` every request's steps, drafted and accepted on both sides; `engine_steps.csv` "
                  "every request in every engine step, with its context and the step's measured and host seconds "
                  "(`specplan calibrate --from-logs engine_steps.csv` fits a step-time profile to them); `metrics.prom` vLLM's own Prometheus metrics of the run "
                  "(`specplan calibrate --from-logs metrics.prom` fits acceptance from them)."]
    return "\n".join(lines) + "\n"


def write_outputs(out: Path, summary: dict, iterations: pd.DataFrame, requests: pd.DataFrame,
                  engine_steps: pd.DataFrame, metrics_text: str | None) -> None:
    """Write the three files, ``requests.csv``, ``engine_steps.csv`` (every request in every engine step)
    and, when vLLM registered them, its Prometheus metrics as ``metrics.prom`` (the input of
    ``specplan calibrate --from-logs``) under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(out / "engine_steps.csv", lambda p: engine_steps.to_csv(p, index=False))
    if metrics_text is not None:
        atomic_write_text(out / "metrics.prom", metrics_text)
    atomic_write(out / "iterations.csv", lambda p: iterations.to_csv(p, index=False))
    atomic_write(out / "requests.csv", lambda p: requests.to_csv(p, index=True, index_label="request"))
    atomic_write_text(out / "summary.json", json.dumps(plain(summary), indent=2) + "\n")
    atomic_write_text(out / "report.md", _markdown(summary))


def _warmup(t: dict) -> str:
    """The warm-up steps' seconds, engine against simulated (``step_errors.WARMUP_STEPS``)."""
    w = t.get("warmup") or {}
    pairs = [f"{e:.2f} s measured, {s:.2f} s simulated" for e, s in zip(w.get("engine_s", []), w.get("sim_s", []))]
    return f" ({'; '.join(pairs)})" if pairs else ""
