"""``specplan simulate``: run one scenario (the bundled default when no config is given)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Optional

import typer
from rich.table import Table

from specplan.cli.choices import SimulateFormat
from specplan.config import SimConfig
from specplan.errors import ConfigError
from specplan.simulator.table_files import FORMATS, TABLES

SUMMARY_KEYS = (
    "completed_requests", "output_tokens", "throughput_tok_s", "goodput_tok_s", "mean_acceptance_length", "acceptance_rate",
    "iterations", "spec_iterations", "gate_tripped_iteration", "preemptions", "ttft_s", "tpot_s", "itl_s", "e2e_s",
    "overcharged_tokens", "overcharged_tokens_spec_off", "overcharged_tokens_queued",
)


# What simulate --out writes (run.save's tables and summary; speculative/ and baseline/ with --baseline).
SIMULATE_OUTPUTS = tuple(f"{name}.{ext}" for name in TABLES for ext in FORMATS) + (
    "summary.json", "config.yaml", "timeline.json", "speculative", "baseline")


# A fleet's per-replica table: summary key (and percentile) -> column header.
REPLICA_COLUMNS = {("tp", None): "tp", ("requests", None): "requests", ("throughput_tok_s", None): "tok/s",
                   ("mean_acceptance_length", None): "accept len", ("ttft_s", "p99"): "TTFT p99 ms",
                   ("tpot_s", "p50"): "TPOT p50 ms", ("tpot_s", "p99"): "TPOT p99 ms",
                   ("preemptions", None): "preempted"}


def describe_scenario(cfg: SimConfig, cost_line: str) -> str:
    """Say first what is simulated: workload, engine settings, speculation, cost profile."""
    w, e, sp, a = cfg.workload, cfg.engine, cfg.speculation, cfg.acceptance
    traffic = (f"{w.concurrency} closed-loop clients" if w.arrival == "closed_loop"
               else f"{w.arrival} arrivals at {w.rate:g} req/s" if w.arrival != "trace" else "trace timestamps")
    source = f"trace '{w.trace}'" if w.trace else f"synthetic {w.prompt_len}-token prompts, {w.output_len}-token outputs"
    if sp.decoding_type == "none":
        spec = "no speculation"
    else:
        sched = (f", draft_len_schedule {sp.draft_len_schedule}" if sp.draft_len_schedule else
                 f", per-batch-size ranges {sp.num_speculative_tokens_per_batch_size}"
                 if sp.num_speculative_tokens_per_batch_size else "")
        gate = (f", gate window {sp.acceptance_rate_window_size} threshold {sp.acceptance_rate_threshold}"
                if sp.acceptance_rate_window_size else "")
        conc = f", max_concurrency {sp.max_concurrency}" if sp.max_concurrency else ""
        acc = "exact drafter replay" if a.mode == "drafter" else f"{a.mode} oracle"
        spec = f"{sp.decoding_type} max_draft_len {sp.max_draft_len}{sched}{conc}{gate}; acceptance from {acc}"
    c = cfg.cluster
    fleet = (f" on {c.replicas} replicas behind a {c.router} router" + (f" (tp {c.tp})" if c.tp else "")
             if c.replicas > 1 else "")
    return (
        f"Simulating {w.num_requests} requests from {source}, {traffic}{fleet}.\n"
        f"Engine: {e.engine}, max_batch_size {e.max_batch_size}, max_num_tokens {e.max_num_tokens}, "
        f"{e.capacity_scheduler_policy}{', chunked prefill' if e.enable_chunked_prefill else ''}"
        f"{', overlap scheduler' if e.overlap_scheduler else ''}.\n"
        f"Speculation: {spec}.\nCost: {cost_line}."
    )


def warn_schedule_reading(cfg: SimConfig) -> None:
    """Warn (one line) when the schedule reads differently in the engine's code and its docs."""
    import warnings

    from specplan.simulator.k_bands import schedule_reading_warning

    text = schedule_reading_warning(cfg)
    if text:
        warnings.warn(text, stacklevel=2)


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _ms(seconds: Optional[float]) -> Optional[float]:
    return None if seconds is None else seconds * 1e3


def summary_rows(summary: dict, baseline: Optional[dict]) -> list[list]:
    """``[metric, value(, baseline value)]`` per row; latency percentiles in milliseconds, named
    ``tpot p99 (ms)``."""
    rows = []
    for key in SUMMARY_KEYS:
        val = summary[key]
        if isinstance(val, dict):
            for p in ("p50", "p90", "p99"):
                ms = [_ms(d[key][p]) for d in (summary, baseline) if d is not None]
                rows.append([f"{key.removesuffix('_s')} {p} (ms)", *ms])
        else:
            rows.append([key, val, *([baseline[key]] if baseline else [])])
    return rows


def _table(rows: list[list], baseline: bool) -> Table:
    table = Table(show_header=True, header_style="bold")
    table.add_column("metric")
    table.add_column("speculative" if baseline else "value", justify="right")
    if baseline:
        table.add_column("baseline", justify="right")
    for name, *values in rows:
        table.add_row(name, *map(_fmt, values))
    return table


def replica_table(per_replica: list[dict]) -> Table:
    """A fleet's replicas side by side (``description["cluster"]["per_replica"]``), latencies in ms."""
    table = Table(title="per replica", show_header=True, header_style="bold")
    table.add_column("replica", justify="right")
    for head in REPLICA_COLUMNS.values():
        table.add_column(head, justify="right")
    for i, rep in enumerate(per_replica):
        table.add_row(str(i), *(_fmt(rep[key] if p is None else _ms(rep[key][p])) for key, p in REPLICA_COLUMNS))
    return table


def _csv(rows: list[list], baseline: bool) -> str:
    import csv
    import io

    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["metric", "speculative", "baseline"] if baseline else ["metric", "value"])
    writer.writerows([["" if v is None else v for v in row] for row in rows])
    return buf.getvalue()


def _run_with_progress(cfg: SimConfig, cost, description: str, announce: Optional[Callable[[], None]] = None):
    """``simulate`` with a bar of completed requests once it runs longer than a couple of seconds;
    ``announce()`` runs once the first executor is built (its inputs checked), before the run."""
    from specplan.cli.progress import compile_notice, progress_bar
    from specplan.simulator.run import simulate as run_sim

    seen: list = []

    def started(executor) -> None:
        if not seen and announce is not None:
            announce()
        compile_notice()  # the workload is read and the oracle built: no input error can follow the notice
        seen.append(executor)

    with progress_bar(description, lambda: (seen[0].done, seen[0].n) if seen else (0, cfg.workload.num_requests)):
        return run_sim(cfg, cost, observe=started)


def simulate(
    config: Optional[Path] = typer.Argument(None, metavar="CONFIG.yaml", help="Scenario YAML; the bundled default when omitted."),
    set_: list[str] = typer.Option([], "--set", metavar="SECTION.KEY=VALUE", help="Override a field: section.key=value (repeatable)."),
    engine_config: Optional[Path] = typer.Option(None, "--engine-config", metavar="FILE", help="A TensorRT-LLM options YAML, vLLM speculative-config JSON or serve command line applied over the scenario (see specplan config import)."),
    baseline: bool = typer.Option(False, "--baseline", help="Also run without speculation and report the speedup."),
    fmt: SimulateFormat = typer.Option(SimulateFormat.table, "--format", case_sensitive=False,
                                       help="Latencies in ms in table and csv; a fleet's replicas in table and json."),
    out: Optional[Path] = typer.Option(None, "--out", metavar="DIR", help="Write tables (Parquet) and summary here."),
    csv: bool = typer.Option(False, "--csv", help="With --out: also write each table as CSV."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Clear --out first if it holds another run."),
    timeline: bool = typer.Option(False, "--timeline", help="With --out: also write timeline.json (Chrome trace "
                                  "events; open in Perfetto)."),
) -> None:
    """Simulate one engine replica serving a workload, with speculative decoding as configured."""
    from specplan.cli.output import claim_output_dir, console as make_console
    from specplan.simulator.k_bands import describe_bands, format_shares
    from specplan.simulator.paths import path_for
    from specplan.simulator.run import baseline_config, build_cost, resolve

    if timeline and out is None:
        raise ConfigError("--timeline: give --out DIR to write timeline.json into")
    if csv and out is None:
        raise ConfigError("--csv: give --out DIR to write the CSV tables into")
    from specplan.engine_config import engine_config_layer
    from specplan.cli.scenario import load_scenario

    cfg = load_scenario(config, set_, engine_config_layer(engine_config))
    if out is not None:
        claim_output_dir(out, "simulate", {"scenario": cfg.model_dump(mode="json"), "baseline": baseline},
                         overwrite, SIMULATE_OUTPUTS)
    cost = build_cost(cfg)
    console = make_console(stderr=fmt != "table")
    resolved = resolve(cfg)  # AUTO expanded, engine presets applied: what the engine would run

    def announce() -> None:  # once the run is built: a refusal of its inputs comes alone, before this
        if resolved.speculation.model_copy(update={"k_from": None}) != cfg.speculation.model_copy(update={"k_from": None}):
            console.print(f"Resolved speculative config ({cfg.engine.engine}): "
                          f"{resolved.speculation.model_dump(exclude_defaults=True)}")
        console.print(describe_scenario(resolved, cost.describe()))
        warn_schedule_reading(resolved)
        console.print(f"K per batch size ({path_for(cfg.engine.engine, resolved.speculation.decoding_type).name} "
                      f"path): {describe_bands(resolved)}")

    result = _run_with_progress(cfg, cost, "simulating", announce)
    base = _run_with_progress(baseline_config(cfg), cost, "baseline") if baseline else None
    summary = {k: result.summary[k] for k in SUMMARY_KEYS} | {"seed": cfg.seed}
    summary["resolved_speculation"] = result.description.get("speculation")
    summary["k_bands"] = describe_bands(resolved)
    summary["k_shares"] = result.summary["k_shares"]
    per_replica = result.description.get("cluster", {}).get("per_replica")
    if per_replica is not None:
        summary["per_replica"] = [{k: rep[k] for k in ("tp", "requests", *SUMMARY_KEYS)} for rep in per_replica]
    if base is not None:
        summary["baseline"] = {k: base.summary[k] for k in SUMMARY_KEYS}
        summary["speedup"] = result.summary["throughput_tok_s"] / base.summary["throughput_tok_s"]
    if out is not None:
        for run, where in ((result, out / "speculative" if base else out), (base, out / "baseline")):
            if run is not None:
                run.save(where, csv=csv)
                if timeline:
                    from specplan.reports.timeline import write_timeline

                    write_timeline(run.iterations, run.requests, where / "timeline.json")
    if fmt == "json":
        from specplan.simulator.metrics import plain

        print(json.dumps(plain(summary)))
        return
    rows = summary_rows(summary, summary.get("baseline"))
    if fmt == "csv":
        print(_csv(rows, base is not None), end="")
        return
    console.print(_table(rows, base is not None))
    console.print(f"Steps at each K: {format_shares(summary['k_shares'])}")
    if per_replica is not None:
        console.print(replica_table(per_replica))
    if base is not None:
        console.print(f"Speedup (output throughput, speculative / baseline): {summary['speedup']:.3f}x; "
                      f"mean TPOT {base.summary['tpot_s']['mean'] * 1e3:.2f} ms -> "
                      f"{result.summary['tpot_s']['mean'] * 1e3:.2f} ms")


def register(app: typer.Typer) -> None:
    app.command()(simulate)
