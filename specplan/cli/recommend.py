"""``specplan recommend``: the draft-length schedule and gate that maximise goodput under SLOs, as engine configs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from specplan.cli.choices import Backend
from specplan.errors import ConfigError

TRTLLM_FILE = "trtllm_speculative_config.yaml"
VLLM_FILE = "vllm_speculative_config.json"
SUMMARY_FILE = "recommendation.json"
NO_CONFIG_EXIT = 3  # the search ran, but no candidate has goodput under the SLOs (README, "recommend")
RECOMMENDED_FIELDS = ("decoding_type", "max_draft_len", "draft_len_schedule", "acceptance_rate_window_size",
                      "acceptance_rate_threshold")


def _numbers(text: Optional[str], option: str, kind=float) -> Optional[list]:
    if text is None:
        return None
    try:
        values = [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"{option}: expected comma-separated numbers, got {text!r}") from None
    if not values or any(v <= 0 for v in values):
        raise ConfigError(f"{option}: expected one or more positive numbers, got {text!r}")
    return values


def _pct(gain: Optional[float]) -> str:
    return "n/a (zero goodput)" if gain is None else f"{gain * 100:+.1f}%"


def _print(console: Console, rec) -> None:
    from specplan.sweeps.recommend import merge_schedule

    cap = rec.best.speculation.max_draft_len if rec.speculates else max(rec.band_k)
    bands = Table(title=f"Per band (cap max_draft_len = {cap}): goodput tok/s summed over the probes", header_style="bold")
    bands.add_column("batch sizes")
    bands.add_column("probes")
    for k in range(cap + 1):
        bands.add_column(f"K={k}", justify="right")
    bands.add_column("best K", justify="right")
    for band, good, k in zip(rec.bands, rec.band_goodput[cap], rec.band_k[cap]):
        bands.add_row(str(band), ",".join(map(str, band.probes)),
                      *[f"{good[j]:.0f}" if j in good else "-" for j in range(cap + 1)], str(k))
    console.print(bands)
    cands = Table(title="Candidates at the requested traffic", header_style="bold")
    cands.add_column("candidate")
    cands.add_column("draft_len_schedule")
    for s in rec.scenarios:
        cands.add_column(f"{s}: goodput / p99 TPOT ms", justify="right")
    for c in rec.candidates:
        row = [c.name + (" *" if c is rec.best else ""), str(c.schedule or "-")]
        row += [f"{r['goodput_tok_s']:.0f} / {(r['tpot_s']['p99'] or 0) * 1e3:.2f}" for r in rec.results[c.name]]
        cands.add_row(*row)
    console.print(cands)
    best_sched = merge_schedule(rec.bands, rec.band_k[cap], rec.keys)
    console.print(f"Best draft_len_schedule found: {best_sched} (max_draft_len {cap}).")
    if rec.speculates:
        sp = rec.best.speculation
        console.print(f"Recommended: {rec.best.name}: max_draft_len {sp.max_draft_len}"
                      + (f", draft_len_schedule {sp.draft_len_schedule}" if sp.draft_len_schedule else ", no schedule"))
    else:
        console.print("Recommended: no speculation (no candidate beats it in goodput at this traffic).")
    gate = (f"acceptance_rate_window_size {rec.gate[0]}, acceptance_rate_threshold {rec.gate[1]:g}; "
            if rec.gate else "none; ")
    console.print(f"Gate: {gate}{rec.gate_note}.")
    tripped = [r["gate_tripped_iteration"] for r in rec.gated_results if r["gate_tripped_iteration"] is not None]
    if tripped:
        console.print(f"[yellow]With this gate, speculation is switched off under your workload's own acceptance "
                      f"(iteration {tripped[0]}): below break-even there.[/yellow]")
    console.print(f"Predicted goodput gain: {_pct(rec.gain(rec.none.name))} against no speculation, "
                  f"{_pct(rec.gain(rec.best_fixed.name))} against the best fixed K ({rec.best_fixed.name}).")


def _no_config(rec, slo_tpot_ms: float, slo_ttft_ms: Optional[float], out: Path) -> None:
    """Say that nothing qualifies, with the closest candidate seen, and exit ``NO_CONFIG_EXIT``."""
    cand, row = rec.closest()
    tpot, ttft = row["tpot_s"]["p99"], row["ttft_s"]["p99"]
    seen = (f"{cand.name}: p99 TPOT {tpot * 1e3:.3g} ms" if tpot is not None else f"{cand.name}: no TPOT measured")
    seen += f", p99 TTFT {ttft * 1e3:.3g} ms" if ttft is not None else ""
    slo = f"TPOT <= {slo_tpot_ms:g} ms" + (f", TTFT <= {slo_ttft_ms:g} ms" if slo_ttft_ms else "")
    typer.echo(f"error: no configuration meets the SLO ({slo}): every candidate's goodput is 0; closest was "
               f"{seen}. No engine config written ({out / SUMMARY_FILE} has the figures); relax the SLO or change "
               "the scenario.", err=True)
    raise typer.Exit(NO_CONFIG_EXIT)


def recommend(
    config: Optional[Path] = typer.Argument(None, help="Scenario YAML; the bundled default when omitted."),
    slo_tpot_ms: float = typer.Option(..., "--slo-tpot-ms", help="TPOT SLO per request (ms)."),
    slo_ttft_ms: Optional[float] = typer.Option(None, "--slo-ttft-ms", help="TTFT SLO per request (ms)."),
    rates: Optional[str] = typer.Option(None, "--rates", help="Comma-separated arrival rates (req/s) to confirm at; default: the config's traffic."),
    max_draft_len: Optional[int] = typer.Option(None, "--max-draft-len", help="Largest K searched (default: the config's max_draft_len)."),
    bands: Optional[str] = typer.Option(None, "--bands", help="Comma-separated band upper edges, ending at max_batch_size (default: powers of two)."),
    probe_requests: int = typer.Option(8, "--probe-requests", help="Requests per client in each closed-loop band probe."),
    gate_window: int = typer.Option(128, "--gate-window", help="acceptance_rate_window_size of a recommended gate."),
    set_: list[str] = typer.Option([], "--set", help="Override a config field: section.key=value (repeatable)."),
    engine_config: Optional[Path] = typer.Option(None, "--engine-config", help="A TensorRT-LLM options YAML, vLLM speculative-config JSON or serve command line applied over the scenario (see specplan config import)."),
    out: Path = typer.Option(Path("specplan-recommend"), "--out", help="Engine configs, summary and run records (re-run to resume)."),
    backend: Backend = typer.Option(Backend.local, "--backend", case_sensitive=False, help="local: a process pool."),
    workers: Optional[int] = typer.Option(None, "--workers", help="Local processes (default: all cores)."),
    address: Optional[str] = typer.Option(None, "--address", help="Ray cluster address."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show progress bars."),
) -> None:
    """Find per batch-size band the K that maximises goodput under the SLOs; write TensorRT-LLM and vLLM configs."""
    from specplan.atomic import atomic_write_text
    from specplan.config import load_config
    from specplan.engine_config import export
    from specplan.outputs import check_output_dir
    from specplan.sweeps.recommend import recommend as search
    from specplan.sweeps.records import RecordStore
    from specplan.sweeps.runners import make_runner

    if slo_tpot_ms <= 0 or (slo_ttft_ms is not None and slo_ttft_ms <= 0):
        raise ConfigError("--slo-tpot-ms / --slo-ttft-ms: must be > 0")
    from specplan.engine_config import engine_config_layer

    cfg = load_config(config, set_, engine_config_layer(engine_config))
    check_output_dir(out)
    console = Console()
    console.print(f"Searching {cfg.engine.engine} {cfg.speculation.decoding_type} up to max_batch_size "
                  f"{cfg.engine.max_batch_size} for the most goodput under TPOT <= {slo_tpot_ms:g} ms"
                  + (f", TTFT <= {slo_ttft_ms:g} ms" if slo_ttft_ms else "") + ".")
    with make_runner(str(backend), workers, address) as runner:
        rec = search(cfg, runner, RecordStore(out / "records"), slo_tpot_s=slo_tpot_ms / 1e3,
                     slo_ttft_s=slo_ttft_ms / 1e3 if slo_ttft_ms else None, rates=_numbers(rates, "--rates"),
                     k_max=max_draft_len, band_edges=_numbers(bands, "--bands", int),
                     probe_requests_per_client=probe_requests, gate_window=gate_window, progress=progress)
    if rec.meets_slo:
        _print(console, rec)
    summary = {
        "meets_slo": rec.meets_slo,
        "recommended": rec.recommended.model_dump(mode="json", include=set(RECOMMENDED_FIELDS)) if rec.speculates else None,
        "gate_note": rec.gate_note,
        "gain_vs_no_speculation": rec.gain(rec.none.name),
        "gain_vs_best_fixed_k": rec.gain(rec.best_fixed.name),
        "best_fixed_k": rec.best_fixed.speculation.max_draft_len,
        "band_k": {str(cap): ks for cap, ks in rec.band_k.items()},
        "bands": [str(b) for b in rec.bands],
        "goodput_tok_s": {c.name: [r["goodput_tok_s"] for r in rec.results[c.name]] for c in rec.candidates},
        "scenarios": rec.scenarios,
    }
    text = json.dumps(summary, indent=2) + "\n"
    atomic_write_text(out / SUMMARY_FILE, text)
    if not rec.speculates:  # a config left by an earlier run here would read as this run's advice
        for stale in (TRTLLM_FILE, VLLM_FILE):
            (out / stale).unlink(missing_ok=True)
    if not rec.meets_slo:
        _no_config(rec, slo_tpot_ms, slo_ttft_ms, out)
        console.print(f"Wrote {out / SUMMARY_FILE}; no engine configs, since speculation does not pay here.")
        return
    simulated = cfg.engine.engine
    keys = dict(keys=rec.keys, max_batch_size=cfg.engine.max_batch_size)  # the path's schedule keys
    trt = export.write_trtllm_yaml(export.trtllm_speculative_config(rec.recommended, **keys), out / TRTLLM_FILE,
                                   comment=None if simulated == "trtllm" else
                                   "translated from a vLLM simulation; not itself simulated")
    vllm = export.write_vllm_json(export.vllm_speculative_config(rec.recommended, **keys), out / VLLM_FILE)
    console.print(f"Wrote {trt} (TensorRT-LLM: speculative_config in the LLM API options YAML)"
                  + ("" if simulated == "trtllm" else ", a translation") + ".")
    console.print(f"Wrote {vllm} (vLLM: --speculative-config \"$(cat {vllm})\")"
                  + ("" if simulated == "vllm" else ", a translation of the same bands: vLLM has no gate") + ".")
    console.print(f"Wrote {out / SUMMARY_FILE}.")


def register(app: typer.Typer) -> None:
    app.command()(recommend)
