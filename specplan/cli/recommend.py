"""``specplan recommend``: the draft-length schedule and gate that maximise goodput under SLOs, as engine configs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from specplan.cli.choices import Backend, number_list, positive_number
from specplan.cli.output import console as make_console

SUMMARY_FILE = "recommendation.json"
NO_CONFIG_EXIT = 3  # the search ran, but no candidate has goodput under the SLOs (README, "recommend")
RECOMMENDED_FIELDS = ("decoding_type", "max_draft_len", "draft_len_schedule", "acceptance_rate_window_size",
                      "acceptance_rate_threshold")


def _pct(gain: Optional[float]) -> str:
    return "n/a (zero goodput)" if gain is None else f"{gain * 100:+.1f}%"


def _figures(s: dict) -> str:
    """The figures quoted for one run: goodput, throughput, p99 TPOT and TTFT."""
    return (f"goodput {s['goodput_tok_s']:.1f} tok/s, throughput {s['throughput_tok_s']:.1f} tok/s, "
            f"p99 TPOT {_ms(s['tpot_s']['p99'])} ms, p99 TTFT {_ms(s['ttft_s']['p99'])} ms")


def _ms(seconds: Optional[float]) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.2f}"


def _print_search(console: Console, rec, bands_of) -> None:
    """The search itself: per-band probes and the candidates at the requested traffic (specplan settings)."""
    cap = rec.best.speculation.max_draft_len if rec.speculates else max(rec.band_k)
    bands = Table(title=f"Search, per band (cap max_draft_len = {cap}): goodput tok/s summed over the probes",
                  header_style="bold")
    bands.add_column("batch sizes")
    bands.add_column("probes")
    for k in range(cap + 1):
        bands.add_column(f"K={k}", justify="right")
    bands.add_column("best K", justify="right")
    for band, good, k in zip(rec.bands, rec.band_goodput[cap], rec.band_k[cap]):
        bands.add_row(str(band), ",".join(map(str, band.probes)),
                      *[f"{good[j]:.0f}" if j in good else "-" for j in range(cap + 1)], str(k))
    console.print(bands)
    cands = Table(title="Search, candidates at the requested traffic (ungated)", header_style="bold")
    cands.add_column("candidate")
    cands.add_column("K per batch size")
    for s in rec.scenarios:
        cands.add_column(f"{s}: goodput / p99 TPOT ms", justify="right")
    for c in rec.candidates:
        row = [c.name + (" *" if c is rec.best else ""), bands_of(c.speculation)]
        row += [f"{r['goodput_tok_s']:.0f} / {_ms(r['tpot_s']['p99'])}" for r in rec.results[c.name]]
        cands.add_row(*row)
    console.print(cands)
    if rec.speculates:
        sp = rec.best.speculation
        console.print(f"Recommended: {rec.best.name}: max_draft_len {sp.max_draft_len}"
                      + (f", draft_len_schedule {sp.draft_len_schedule}" if sp.draft_len_schedule else ", no schedule")
                      + f" ({bands_of(sp)}).")
    else:
        console.print("Recommended: no speculation (no candidate beats it in goodput at this traffic).")
    gate = (f"acceptance_rate_window_size {rec.gate[0]}, acceptance_rate_threshold {rec.gate[1]:g}; "
            if rec.gate else "none; ")
    console.print(f"Gate: {gate}{rec.gate_note}.")


def _print_export(console: Console, exp, scenarios, k_bands: Optional[str]) -> None:
    """One written file and its simulated figures, each next to the same engine without speculation."""
    from specplan.simulator.k_bands import format_shares  # imported here: ``specplan.cli`` loads no numba

    what = "speculation" if exp.speculates else "no speculation (the engine's plain config)"
    console.print(f"{exp.path} ({exp.engine}, {what})" + (f"; {exp.note}" if exp.note else "") + ":", markup=False)
    if exp.error:
        console.print(f"  not simulated: {exp.error}", markup=False)
        return
    console.print(f"  K per batch size: {k_bands}", markup=False)
    for label, run, base in zip(scenarios, exp.results, exp.baseline):
        trip = run["gate_tripped_iteration"]
        shares = format_shares(run["k_shares"]) if run.get("k_shares") else "-"
        console.print(f"  {label}: {_figures(run)}; steps at each K: {shares}"
                      + (f"; the gate trips at iteration {trip} of {run['iterations']}" if trip is not None else ""),
                      markup=False)
        console.print(f"  {label} without speculation: {_figures(base)}", markup=False)
    console.print(f"  goodput gain over no speculation: {_pct(exp.gain)}", markup=False)


def _export_json(exp, scenarios, k_bands: Optional[str]) -> dict:
    def figures(s: dict) -> dict:
        return {"goodput_tok_s": s["goodput_tok_s"], "throughput_tok_s": s["throughput_tok_s"],
                "tpot_p99_s": s["tpot_s"]["p99"], "ttft_p99_s": s["ttft_s"]["p99"],
                "gate_tripped_iteration": s["gate_tripped_iteration"], "k_shares": s.get("k_shares")}

    return {"file": exp.path.name, "engine": exp.engine, "speculates": exp.speculates, "substitute": exp.note,
            "error": exp.error, "k_bands": k_bands, "scenarios": list(scenarios),
            "results": [figures(s) for s in exp.results], "baseline": [figures(s) for s in exp.baseline],
            "gain_vs_no_speculation": exp.gain if not exp.error else None}


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
    config: Optional[Path] = typer.Argument(None, metavar="CONFIG.yaml", help="Scenario YAML; the bundled default when omitted."),
    slo_tpot_ms: float = typer.Option(..., "--slo-tpot-ms", callback=positive_number, metavar="MS", help="TPOT SLO per request (ms)."),
    slo_ttft_ms: Optional[float] = typer.Option(None, "--slo-ttft-ms", callback=positive_number, metavar="MS", help="TTFT SLO per request (ms)."),
    rates: Optional[str] = typer.Option(None, "--rates", metavar="RATE,...", help="Comma-separated arrival rates (req/s) to confirm at; default: the config's traffic."),
    max_draft_len: Optional[int] = typer.Option(None, "--max-draft-len", metavar="K", help="Largest K searched (default: the config's max_draft_len)."),
    bands: Optional[str] = typer.Option(None, "--bands", metavar="EDGE,...", help="Comma-separated band upper edges, ending at max_batch_size (default: powers of two)."),
    probe_requests: int = typer.Option(8, "--probe-requests", metavar="N", help="Requests per client in each closed-loop band probe."),
    gate_window: int = typer.Option(128, "--gate-window", metavar="N", help="acceptance_rate_window_size of a recommended gate."),
    set_: list[str] = typer.Option([], "--set", metavar="SECTION.KEY=VALUE", help="Override a config field: section.key=value (repeatable)."),
    engine_config: Optional[Path] = typer.Option(None, "--engine-config", metavar="FILE", help="A TensorRT-LLM options YAML, vLLM speculative-config JSON or serve command line applied over the scenario (see specplan config import)."),
    out: Path = typer.Option(Path("specplan-recommend"), "--out", metavar="DIR", help="Engine configs, summary and run records (re-run to resume)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Clear --out first if it holds another run."),
    backend: Backend = typer.Option(Backend.local, "--backend", case_sensitive=False, help="local: a process pool."),
    workers: Optional[int] = typer.Option(None, "--workers", metavar="N", help="Local processes (default: all cores)."),
    address: Optional[str] = typer.Option(None, "--address", metavar="HOST:PORT", help="Ray cluster address."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show progress bars."),
) -> None:
    """Find per batch-size band the K that maximises goodput under the SLOs; write TensorRT-LLM and vLLM configs."""
    from specplan.atomic import atomic_write_text
    from specplan.cli.scenario import load_scenario
    from specplan.config import build_config
    from specplan.engine_config import engine_config_layer, import_engine_config, merge_sections
    from specplan.cli.output import claim_output_dir
    from specplan.cli.progress import compile_notice
    from specplan.simulator.k_bands import describe_bands
    from specplan.simulator.run import resolve
    from specplan.sweeps.exports import ALL_FILES, simulate_exports, write_exports
    from specplan.sweeps.recommend import recommend as search, scenario_workloads
    from specplan.sweeps.records import RecordStore
    from specplan.sweeps.runners import make_runner

    cfg = load_scenario(config, set_, engine_config_layer(engine_config))
    rates_list = number_list(rates, "--rates")
    band_edges = number_list(bands, "--bands", int)
    inputs = {"scenario": cfg.model_dump(mode="json"), "slo_ms": [slo_tpot_ms, slo_ttft_ms], "rates": rates_list,
              "max_draft_len": max_draft_len, "bands": band_edges, "probe_requests": probe_requests,
              "gate_window": gate_window}
    claim_output_dir(out, "recommend", inputs, overwrite, (SUMMARY_FILE, "records", *ALL_FILES))
    compile_notice()
    console = make_console()
    console.print(f"Searching {cfg.engine.engine} {cfg.speculation.decoding_type} up to max_batch_size "
                  f"{cfg.engine.max_batch_size} for the most goodput under TPOT <= {slo_tpot_ms:g} ms"
                  + (f", TTFT <= {slo_ttft_ms:g} ms" if slo_ttft_ms else "") + ".")
    scenario = cfg.model_dump(mode="json", exclude_unset=True)  # the scenario searched, --set applied

    def load(path: Path):
        """What ``simulate SCENARIO --engine-config FILE`` runs: the file's sections over the scenario."""
        return build_config(merge_sections(scenario, import_engine_config(path).sections), str(path))

    def bands_of(speculation) -> str:
        return describe_bands(resolve(cfg.model_copy(update={"speculation": speculation})))

    store = RecordStore(out / "records")
    with make_runner(str(backend), workers, address) as runner:  # one pool for the search and the files' runs
        rec = search(cfg, runner, store, slo_tpot_s=slo_tpot_ms / 1e3,
                     slo_ttft_s=slo_ttft_ms / 1e3 if slo_ttft_ms else None, rates=rates_list,
                     k_max=max_draft_len, band_edges=band_edges,
                     probe_requests_per_client=probe_requests, gate_window=gate_window, progress=progress)
        if not rec.meets_slo:
            atomic_write_text(out / SUMMARY_FILE, json.dumps(_summary(rec, []), indent=2) + "\n")
            for stale in ALL_FILES:  # a config left by an earlier run here would read as this run's advice
                (out / stale).unlink(missing_ok=True)
            _no_config(rec, slo_tpot_ms, slo_ttft_ms, out)
        _print_search(console, rec, bands_of)
        exports = write_exports(rec, cfg, out)
        slo = {"slo_tpot_s": slo_tpot_ms / 1e3, "slo_ttft_s": slo_ttft_ms / 1e3 if slo_ttft_ms else None}
        simulate_exports(exports, load, [w for _, w in scenario_workloads(cfg, rates_list)], slo, runner, store,
                         progress)
    console.print("Written, each simulated as written (specplan simulate SCENARIO --engine-config FILE, SCENARIO "
                  "being the one searched, its --set applied):")
    k_bands = {}
    for exp in exports:
        k_bands[exp.path] = None if exp.error else describe_bands(resolve(load(exp.path)))
        _print_export(console, exp, rec.scenarios, k_bands[exp.path])
    summary = _summary(rec, [_export_json(e, rec.scenarios, k_bands[e.path]) for e in exports])
    atomic_write_text(out / SUMMARY_FILE, json.dumps(summary, indent=2) + "\n")
    console.print(f"Wrote {out / SUMMARY_FILE}.")


def _summary(rec, exports: list[dict]) -> dict:
    """``recommendation.json``: the search and, per written file, its simulated figures. The gain
    against no speculation is the simulated engine's file's, as written (gate included)."""
    own = exports[0] if exports else None
    return {
        "meets_slo": rec.meets_slo,
        "recommended": rec.recommended.model_dump(mode="json", include=set(RECOMMENDED_FIELDS)) if rec.speculates else None,
        "gate_note": rec.gate_note,
        "gain_vs_no_speculation": own["gain_vs_no_speculation"] if own else None,
        "gain_vs_best_fixed_k": rec.gain(rec.best_fixed.name),  # in the search (ungated candidates)
        "best_fixed_k": rec.best_fixed.speculation.max_draft_len,
        "band_k": {str(cap): ks for cap, ks in rec.band_k.items()},
        "bands": [str(b) for b in rec.bands],
        "goodput_tok_s": {c.name: [r["goodput_tok_s"] for r in rec.results[c.name]] for c in rec.candidates},
        "scenarios": rec.scenarios,
        "exports": exports,
    }


def register(app: typer.Typer) -> None:
    app.command()(recommend)
