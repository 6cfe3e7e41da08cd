"""``specplan simulate``: run one scenario (the bundled default when no config is given)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from specplan.config import SimConfig, load_config
from specplan.outputs import check_output_dir

SUMMARY_KEYS = (
    "completed_requests", "output_tokens", "throughput_tok_s", "mean_acceptance_length", "acceptance_rate",
    "iterations", "spec_iterations", "gate_tripped_iteration", "preemptions", "ttft_s", "tpot_s", "itl_s", "e2e_s",
)


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
    return (
        f"Simulating {w.num_requests} requests from {source}, {traffic}.\n"
        f"Engine: {e.engine}, max_batch_size {e.max_batch_size}, max_num_tokens {e.max_num_tokens}, "
        f"{e.capacity_scheduler_policy}{', chunked prefill' if e.enable_chunked_prefill else ''}"
        f"{', overlap scheduler' if e.overlap_scheduler else ''}.\n"
        f"Speculation: {spec}.\nCost: {cost_line}."
    )


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _table(summary: dict, baseline: Optional[dict]) -> Table:
    table = Table(show_header=True, header_style="bold")
    table.add_column("metric")
    table.add_column("speculative" if baseline else "value", justify="right")
    if baseline:
        table.add_column("baseline", justify="right")
    for key in SUMMARY_KEYS:
        val = summary[key]
        if isinstance(val, dict):
            for p in ("p50", "p90", "p99"):
                row = [f"{key} {p}", _fmt(val[p])]
                if baseline:
                    row.append(_fmt(baseline[key][p]))
                table.add_row(*row)
        else:
            row = [key, _fmt(val)]
            if baseline:
                row.append(_fmt(baseline[key]))
            table.add_row(*row)
    return table


def register(app: typer.Typer) -> None:
    @app.command()
    def simulate(
        config: Optional[Path] = typer.Argument(None, help="Scenario YAML; the bundled default when omitted."),
        set_: list[str] = typer.Option([], "--set", help="Override a field: section.key=value (repeatable)."),
        baseline: bool = typer.Option(False, "--baseline", help="Also run without speculation and report the speedup."),
        fmt: str = typer.Option("table", "--format", help="table or json."),
        out: Optional[Path] = typer.Option(None, "--out", help="Write tables (Parquet, CSV) and summary here."),
    ) -> None:
        """Simulate one engine replica serving a workload, with speculative decoding as configured."""
        from specplan.simulator.run import baseline_config, build_cost, resolve, simulate as run_sim

        if fmt not in ("table", "json"):
            raise typer.BadParameter("--format must be table or json")
        cfg = load_config(config, set_)
        if out is not None:
            check_output_dir(out)
        cost = build_cost(cfg)
        console = Console(stderr=fmt == "json")
        resolved = resolve(cfg)  # AUTO expanded, engine presets applied: what the engine would run
        if resolved.speculation.model_copy(update={"k_from": None}) != cfg.speculation.model_copy(update={"k_from": None}):
            console.print(f"Resolved speculative config ({cfg.engine.engine}): "
                          f"{resolved.speculation.model_dump(exclude_defaults=True)}")
        console.print(describe_scenario(resolved, cost.describe()))
        result = run_sim(cfg, cost)
        base = run_sim(baseline_config(cfg), cost) if baseline else None
        summary = {k: result.summary[k] for k in SUMMARY_KEYS} | {"seed": cfg.seed}
        summary["resolved_speculation"] = result.description.get("speculation")
        if base is not None:
            summary["baseline"] = {k: base.summary[k] for k in SUMMARY_KEYS}
            summary["speedup"] = result.summary["throughput_tok_s"] / base.summary["throughput_tok_s"]
        if out is not None:
            result.save(out / "speculative" if base else out)
            if base is not None:
                base.save(out / "baseline")
        if fmt == "json":
            from specplan.simulator.metrics import plain

            print(json.dumps(plain(summary)))
            return
        console.print(_table(summary, summary.get("baseline")))
        if base is not None:
            console.print(f"Speedup (output throughput, speculative / baseline): {summary['speedup']:.3f}x; "
                          f"mean TPOT {base.summary['tpot_s']['mean'] * 1e3:.2f} ms -> "
                          f"{result.summary['tpot_s']['mean'] * 1e3:.2f} ms")
