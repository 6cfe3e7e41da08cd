"""``specplan workloads list | show | export``: the bundled traces and any trace file."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Optional

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

PERCENTILES = (0, 10, 25, 50, 75, 90, 99, 100)


def length_table(requests) -> Table:
    """Percentiles, mean and total of prompt and output lengths."""
    table = Table(show_header=True, header_style="bold")
    table.add_column("tokens")
    for p in PERCENTILES:
        table.add_column({0: "min", 100: "max"}.get(p, f"p{p}"), justify="right")
    table.add_column("mean", justify="right")
    table.add_column("total", justify="right")
    for label, lens in (("prompt", [r.prompt_len for r in requests]), ("output", [r.output_len for r in requests])):
        arr = np.asarray(lens)
        table.add_row(label, *[f"{v:.0f}" for v in np.percentile(arr, PERCENTILES)], f"{arr.mean():.1f}", str(int(arr.sum())))
    return table


workloads_app = typer.Typer(help="Bundled real traces: list them, show length distributions, export token traces.", no_args_is_help=True)

@workloads_app.command("list")
def list_() -> None:
    """The bundled traces with request counts, token totals and categories."""
    from specplan.workloads.bundled import bundled_traces

    console = Console()
    table = Table(show_header=True, header_style="bold", title="bundled workloads")
    for col in ("name", "requests", "prompt tokens", "output tokens", "categories"):
        table.add_column(col, justify="right" if "tokens" in col or col == "requests" else "left")
    for name, trace in bundled_traces("workload").items():
        c = trace.info["counts"]
        table.add_row(name, str(c["requests"]), str(c["prompt_tokens"]), str(c["output_tokens"]), ", ".join(c["categories"]))
    console.print(table)
    logs = Table(show_header=True, header_style="bold", title="recorded acceptance (acceptance.mode: recorded)")
    for col in ("name", "workload", "requests", "steps", "tokens/step"):
        logs.add_column(col)
    for name, trace in bundled_traces("recorded_acceptance").items():
        c = trace.info["counts"]
        logs.add_row(name, trace.info["workload"], str(c["requests"]), str(c["steps"]), f"{c['tokens_per_step']:.3f}")
    console.print(logs)

@workloads_app.command("show")
def show(
    name: str = typer.Argument(..., help="Bundled trace name or trace file."),
    fmt: Optional[str] = typer.Option(None, "--format", help="Trace format when a file's cannot be sniffed."),
    tokenizer: Optional[str] = typer.Option(None, "--tokenizer", help="llama2, llama3 or a tokenizer path (text traces)."),
    template: Optional[str] = typer.Option(None, "--template", help="vicuna, llama-2, llama-3 or chatml (text traces)."),
) -> None:
    """Length distributions (percentiles of prompt and output lengths) and categories of a trace."""
    from specplan.workloads.formats import load_workload

    requests = load_workload(name, format=fmt, tokenizer=tokenizer, template=template)
    console = Console()
    sessions = len({r.session for r in requests if r.session is not None})
    console.print(f"{name}: {len(requests)} requests" + (f" in {sessions} session{'s' * (sessions != 1)}" if sessions else ""))
    console.print(length_table(requests))
    cats = Counter(r.category or "-" for r in requests)
    console.print("categories: " + ", ".join(f"{c} {n}" for c, n in sorted(cats.items())))

@workloads_app.command("export")
def export(
    name: str = typer.Argument(..., help="Bundled trace name or trace file."),
    out: Path = typer.Option(..., "--out", help="Token trace to write (.jsonl, or .jsonl.gz compressed)."),
    fmt: Optional[str] = typer.Option(None, "--format", help="Trace format when a file's cannot be sniffed."),
    tokenizer: Optional[str] = typer.Option(None, "--tokenizer", help="llama2, llama3 or a tokenizer path (text traces)."),
    template: Optional[str] = typer.Option(None, "--template", help="vicuna, llama-2, llama-3 or chatml (text traces)."),
) -> None:
    """Write a trace as a token trace (JSON lines of prompt and output token ids)."""
    from specplan.outputs import check_output_file
    from specplan.workloads.formats import load_workload
    from specplan.workloads.tokentrace import write_token_trace

    check_output_file(out)
    requests = load_workload(name, format=fmt, tokenizer=tokenizer, template=template)
    write_token_trace(requests, out)
    typer.echo(f"wrote {len(requests)} requests to {out}")


def register(app: typer.Typer) -> None:
    app.add_typer(workloads_app, name="workloads")
