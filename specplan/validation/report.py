"""The validation's files: ``report.md``, ``iterations.csv``, ``predicted_vs_measured.png``, ``summary.json``.

Each is written to a temporary file beside its target and renamed into place. ``iterations.csv`` holds
one row per replayed iteration of every scenario (``scenario`` first), predicted terms and measured
seconds side by side; every figure in the report and the summary is computed from those columns.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pandas as pd

from specplan.config import SimConfig
from specplan.atomic import atomic_write, atomic_write_text
from specplan.simulator.metrics import plain

CSV_COLUMNS = (
    "scenario", "iteration", "kind", "batch_rows", "prefill_rows", "drafting_rows", "k", "num_tokens", "padded_tokens",
    "context_tokens", "committed", "pred_step_s", "pred_host_s", "pred_padding_s", "pred_attention_s",
    "pred_forward_s", "pred_draft_s", "pred_s", "meas_forward_s", "meas_forward_alt_s", "replays", "meas_draft_s",
    "meas_s", "err",
)


@dataclass
class ScenarioResult:
    """One scenario's comparison (``compare``) and how it was replayed."""

    label: str
    config: SimConfig
    table: pd.DataFrame
    per_iteration: dict
    end_to_end: dict
    terms: list[dict]
    bins: list[dict]
    attention: str
    attention_fallback: Optional[str]
    drafter: str
    padding: Optional[int]
    kv_slots: dict
    simulated: dict
    warnings: list[str] = field(default_factory=list)

    def summary(self) -> dict:
        sp, w, e = self.config.speculation, self.config.workload, self.config.engine
        return {
            "scenario": {"drafter": sp.decoding_type, "max_draft_len": sp.max_draft_len,
                         "draft_len_schedule": sp.draft_len_schedule, "clients": w.concurrency,
                         "requests": w.num_requests, "trace": w.trace, "max_batch_size": e.max_batch_size,
                         "max_num_tokens": e.max_num_tokens},
            "simulated": self.simulated, "per_iteration": self.per_iteration, "end_to_end": self.end_to_end,
            "terms": self.terms,
            "bins": self.bins, "attention": self.attention, "attention_fallback": self.attention_fallback,
            "drafter": self.drafter, "padding_max_tokens": self.padding, "kv_slots": self.kv_slots,
            "cost_model_warnings": self.warnings, "config": self.config.model_dump(mode="json"),
        }


def _pct(x: Optional[float], signed: bool = True) -> str:
    if x is None:
        return "—"
    return f"{x:+.1%}" if signed else f"{x:.1%}"


def _ms(x: Optional[float]) -> str:
    return "—" if x is None else f"{x * 1e3:.3f}"


def _markdown(results: list[ScenarioResult], meta: dict) -> str:
    prof, rep = meta["profile"], meta["replay"]
    held = prof.get("heldout_median_abs_error")
    lines = [
        "# specplan validate: predicted against measured step times",
        "",
        f"- Profile **{prof['name']}** ({prof['kind']}, {prof['source']}"
        + (f", measured on {prof['measured_on']} {prof.get('date') or ''}" if prof.get("measured_on") else "")
        + (f", held-out median error {held:.1%}" if held is not None else "") + ").",
        f"- Replayed model {meta['model']['name']} ({meta['model']['num_layers']} layers, random weights), "
        f"{rep['dtype']} on {rep['device_name']} ({rep['device']}), torch {rep['torch']}, {rep['threads']} thread(s).",
        f"- Timing: {rep['timing']}; {rep['warmup_steps']} warm-up steps run untimed first. Padding: {rep['padding']}.",
        "",
        "Errors are (predicted − measured) / measured. Per iteration, the device step is compared: forward (with "
        "the model's CUDA-graph padding, which the replay applies) plus drafting; the engine's host overhead is "
        "predicted only and left out on both sides. End to end (throughput, mean TPOT, p99 ITL), the simulated "
        "schedule is re-timed with measured device steps plus the same predicted host overhead.",
        "",
        "| scenario | iterations | median APE | p90 APE | bias | throughput | mean TPOT | p99 ITL |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        e, x = r.per_iteration, r.end_to_end
        lines.append(f"| {r.label} | {e['iterations']} | {_pct(e['median_ape'], False)} | "
                     f"{_pct(e['p90_ape'], False)} | {_pct(e['bias'])} | {_pct(x['throughput_tok_s']['error'])} | "
                     f"{_pct(x['mean_tpot_s']['error'])} | {_pct(x['p99_itl_s']['error'])} |")
    for r in results:
        sc = r.summary()["scenario"]
        k = f"K from schedule {sc['draft_len_schedule']}" if sc["draft_len_schedule"] else f"K = {sc['max_draft_len']}"
        lines += ["", f"## {r.label}", "",
                  f"{sc['drafter']} drafting, {k}; {sc['clients']} clients, {sc['requests']} requests ({sc['trace']}); "
                  f"max batch {sc['max_batch_size']}, max tokens {sc['max_num_tokens']}. "
                  f"Attention: {r.attention}"
                  + (f" (varlen kernel not used: {r.attention_fallback})" if r.attention_fallback else "")
                  + f". Drafting: {r.drafter}. KV: {r.kv_slots['slots']} slots of {r.kv_slots['slot_tokens']} tokens.",
                  "",
                  "| end to end | predicted | measured | error |", "|---|---:|---:|---:|"]
        x = r.end_to_end
        lines.append(f"| throughput (tok/s) | {x['throughput_tok_s']['predicted']:.1f} | "
                     f"{x['throughput_tok_s']['measured']:.1f} | {_pct(x['throughput_tok_s']['error'])} |")
        for key, name in (("mean_tpot_s", "mean TPOT (ms)"), ("p99_itl_s", "p99 ITL (ms)")):
            lines.append(f"| {name} | {_ms(x[key]['predicted'])} | {_ms(x[key]['measured'])} | "
                         f"{_pct(x[key]['error'])} |")
        lines += ["", "| term (summed over iterations) | predicted (ms) | measured (ms) | error |",
                  "|---|---:|---:|---:|"]
        for t in r.terms:
            lines.append(f"| {t['term']} | {_ms(t['predicted_s'])} | {_ms(t['measured_s'])} | {_pct(t['error'])} |")
        lines += ["", "| by | bin | iterations | median APE | bias | error of sums | forward error of sums |",
                  "|---|---|---:|---:|---:|---:|---:|"]
        for b in r.bins:
            lines.append(f"| {b['by']} | {b['bin']} | {b['iterations']} | {_pct(b['median_ape'], False)} | "
                         f"{_pct(b['bias'])} | {_pct(b['sum_error'])} | {_pct(b['forward_sum_error'])} |")
        if r.warnings:
            lines += ["", "Cost-model warnings during this scenario:", ""] + [f"- {w}" for w in r.warnings]
    lines += ["", f"Elapsed {meta['elapsed_s']} s. Per-iteration data: `iterations.csv`; figure: "
              "`predicted_vs_measured.png`; everything above: `summary.json`.", ""]
    return "\n".join(lines)


def _plot(results: list[ScenarioResult], path: Path) -> None:
    import matplotlib.pyplot as plt

    colours = {"decode": "tab:blue", "mixed": "tab:orange", "prefill": "tab:red"}
    fig, axes = plt.subplots(2, len(results), figsize=(5.2 * len(results), 8.4), squeeze=False)
    for col, r in enumerate(results):
        t = r.table
        top, bottom = axes[0, col], axes[1, col]
        for kind, sel in t.groupby("kind"):
            top.scatter(sel["meas_s"] * 1e3, sel["pred_s"] * 1e3, s=10, alpha=0.7, label=kind, color=colours.get(kind))
            bottom.scatter(sel["iteration"], sel["err"] * 100, s=8, alpha=0.7, color=colours.get(kind))
        lo = min(t["meas_s"].min(), t["pred_s"].min()) * 1e3
        hi = max(t["meas_s"].max(), t["pred_s"].max()) * 1e3
        top.plot([lo, hi], [lo, hi], color="grey", lw=0.8, ls="--")
        top.set_xlabel("measured device step (ms)")
        top.set_ylabel("predicted device step (ms)")
        e = r.per_iteration
        top.set_title(f"{r.label}: median APE {e['median_ape']:.1%}, bias {e['bias']:+.1%}")
        top.legend(fontsize=8)
        bottom.axhline(0.0, color="grey", lw=0.8)
        bottom.set_xlabel("iteration")
        bottom.set_ylabel("error (%)")
        for ax in (top, bottom):
            ax.grid(alpha=0.3)
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="png", dpi=110))
    plt.close(fig)


def write_outputs(out: Path, results: list[ScenarioResult], meta: dict) -> None:
    """Write the four files under ``out`` (created if needed)."""
    out.mkdir(parents=True, exist_ok=True)
    csv = pd.concat([r.table.assign(scenario=r.label) for r in results], ignore_index=True)
    atomic_write_text(out / "iterations.csv", csv[list(CSV_COLUMNS)].to_csv(index=False))
    summary = {**meta, "scenarios": {r.label: r.summary() for r in results}}
    atomic_write_text(out / "summary.json", json.dumps(plain(summary), indent=2) + "\n")
    atomic_write_text(out / "report.md", _markdown(results, meta))
    _plot(results, out / "predicted_vs_measured.png")

