"""``specplan capacity SCENARIO --rate R ... --slo-ttft-ms X --slo-tpot-ms Y --out DIR``: the fewest
replicas (and GPUs) meeting the SLO at each rate, with speculation off and with each candidate."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from specplan.cli.choices import Backend, positive_number


def _cell(v) -> str:
    import pandas as pd

    if pd.isna(v):
        return "-"
    return f"{v:g}" if isinstance(v, float) else str(v)


CAPACITY_OUTPUTS = ("capacity.csv", "gpus_needed.png", "gpus_needed.csv", "records")
# capacity.csv's columns shown on the terminal, with short headers (the CSV keeps the long names).
SHOWN = {"rate": "req/s", "config": "config", "replicas": "replicas", "gpus": "GPUs",
         "replicas_saved": "saved", "gpu_hours_saved_per_day": "GPU-h/day saved", "monotone": "monotone"}


def capacity(
    scenario: Path = typer.Argument(..., metavar="SCENARIO.yaml", help="Scenario YAML (poisson or gamma arrivals; the rate is searched over)."),
    rate: list[float] = typer.Option(..., "--rate", callback=positive_number, metavar="RATE", help="Fleet request rate in req/s (repeatable)."),
    slo_ttft_ms: float = typer.Option(..., "--slo-ttft-ms", callback=positive_number, metavar="MS", help="TTFT target at --percentile, ms."),
    slo_tpot_ms: float = typer.Option(..., "--slo-tpot-ms", callback=positive_number, metavar="MS", help="TPOT target at --percentile, ms."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Clear --out first if it holds another run."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a bar per search round."),
    out: Path = typer.Option(..., "--out", metavar="DIR", help=(
        "Folder: capacity.csv, gpus_needed.png (its data in gpus_needed.csv), records (re-run to resume).")),
    candidates: Optional[Path] = typer.Option(
        None, "--candidates", metavar="SWEEP.yaml", help="Sweep YAML of speculation.* axes (K, schedule, gate); default: the scenario's own."),
    percentile: int = typer.Option(99, "--percentile", metavar="P", help="SLO percentile: 50, 90 or 99."),
    max_replicas: int = typer.Option(16, "--max-replicas", min=1, metavar="N", help="Largest fleet searched."),
    backend: Backend = typer.Option(Backend.local, "--backend", case_sensitive=False, help="local: a process pool."),
    workers: Optional[int] = typer.Option(None, "--workers", metavar="N", help="Local processes (default: all cores)."),
    address: Optional[str] = typer.Option(None, "--address", metavar="HOST:PORT", help="Ray cluster address."),
) -> None:
    """Search the fewest replicas meeting a TTFT/TPOT SLO per rate, with and without speculation."""
    from specplan.atomic import atomic_write
    from specplan.cli.output import claim_output_dir, console as make_console
    from specplan.cli.progress import compile_notice
    from specplan.cli.scenario import load_scenario
    from specplan.config import read_yaml
    from specplan.errors import ConfigError
    from specplan.limits import fleet_refusal
    from specplan.reports.capacity import capacity_figure
    from specplan.sweeps.capacity import SLO, check_scenario, read_candidates, search_capacity
    from specplan.sweeps.runners import make_runner

    slo = SLO(slo_ttft_ms / 1e3, slo_tpot_ms / 1e3, percentile)
    base = load_scenario(scenario)
    refusal = fleet_refusal(base, max_replicas, "--max-replicas")  # the largest fleet the search may run
    if refusal is not None:
        raise ConfigError(": ".join(refusal))
    if candidates is not None:
        cands = read_candidates(candidates, read_yaml(scenario))
    elif base.speculation.decoding_type != "none":
        cands = {f"{base.speculation.decoding_type} K={base.speculation.max_draft_len}": base.speculation}
    else:
        raise ConfigError(f"{scenario}: speculation is off; give --candidates or a speculation section")
    check_scenario(base)  # bad input before the folder is claimed
    inputs = {"scenario": base.model_dump(mode="json"), "rates": rate, "slo": [slo.ttft_s, slo.tpot_s, percentile],
              "candidates": {k: v.model_dump(mode="json") for k, v in cands.items()}, "max_replicas": max_replicas}
    claim_output_dir(out, "capacity", inputs, overwrite, CAPACITY_OUTPUTS)
    compile_notice()
    console = make_console()
    with make_runner(str(backend), workers, address) as runner:
        table = search_capacity(base, rate, slo, cands, runner, out, max_replicas, progress)
    atomic_write(out / "capacity.csv", lambda p: table.to_csv(p, index=False))
    figure = capacity_figure(table, out / "gpus_needed.png")
    shown = Table(title=f"Fewest replicas meeting p{percentile} TTFT <= {slo_ttft_ms:g} ms and TPOT <= "
                        f"{slo_tpot_ms:g} ms (tp {base.cost.tp} per replica)")
    for col, head in SHOWN.items():
        # The config label folds rather than being cut: it is the one column an operator pastes from.
        shown.add_column(head, justify="left" if col == "config" else "right",
                         overflow="fold" if col == "config" else "ellipsis")
    for row in table.itertuples(index=False):
        shown.add_row(*(_cell(getattr(row, c)) for c in SHOWN))
    console.print(shown)
    if not table.monotone.all():
        console.print("[yellow]warning:[/] meeting the SLO was not monotone in the replica count for some rows "
                      "(see the 'evaluated' column of capacity.csv); their answers are not trustworthy.")
    unmet = table[table.replicas.isna()]
    if len(unmet):
        console.print(f"{len(unmet)} row(s) not met even at {max_replicas} replicas: raise --max-replicas.")
    console.print(f"Wrote {out / 'capacity.csv'} and {figure}.")


def register(app: typer.Typer) -> None:
    app.command()(capacity)
