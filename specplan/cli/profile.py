"""``specplan profile list | show | plot``: step-time profiles and their gamma(B, K) view.

``NAME|PATH`` is a profile file, or a bundled name ``GPU/MODEL[/tpN]``: a file shipped under
``specplan/data/profiles`` (``list`` shows them with their provenance), or for any catalogued GPU and
model without one, the analytic roofline of that pair. T(B, 1) includes the default per-step host
overhead; gamma is derived from step times at the given context.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from specplan.cli.choices import TableFormat
from specplan.cli.output import console as make_console
from specplan.errors import ConfigError
from specplan.outputs import check_output_file

profile_app = typer.Typer(help="Step-time profiles: list them, show and plot gamma(B, K).", no_args_is_help=True)

NAME_HELP = "Profile file, or bundled name GPU/MODEL or GPU/MODEL/tpN (e.g. h200/llama-3.1-8b)."


@profile_app.command("list")
def list_profiles() -> None:
    """List the bundled profiles, whether each is measured or analytic, and where it comes from."""
    # The cost models are imported in each command: they compile with numba, which ``specplan.cli`` does not load.
    from specplan.cost_models.hardware import GPUS
    from specplan.cost_models.models import catalogue_names
    from specplan.cost_models.registry import bundled_profile_names, load_profile

    table = Table(show_header=True, header_style="bold")
    for col in ("name", "kind", "source"):
        table.add_column(col)
    for name in bundled_profile_names():
        profile, _ = load_profile(name)
        table.add_row(name, profile.provenance.kind, " ".join(profile.provenance.source.split()))
    console = make_console()
    console.print(table)
    console.print(f"Any other GPU/MODEL or GPU/MODEL/tpN with GPU in {', '.join(GPUS)} and MODEL in {', '.join(catalogue_names())} "
                  "resolves to that pair's analytic roofline.", markup=False)


@profile_app.command("show")
def show(
    name: str = typer.Argument(..., help=NAME_HELP),
    context: int = typer.Option(1024, "--context", min=0, help="Context length of every row (tokens)."),
    fmt: TableFormat = typer.Option(TableFormat.table, "--format", case_sensitive=False),
) -> None:
    """Print T(B, 1) and gamma(B, K) for B = 1..256 and K = 1..8."""
    from specplan.cost_models.gamma import gamma_view, render_table
    from specplan.cost_models.registry import cost_model_from_profile

    model = cost_model_from_profile(name)
    view = gamma_view(model, context)
    if fmt == "json":
        print(json.dumps({"profile": name, **view}))
        return
    console = make_console()
    console.print(model.describe())
    console.print(render_table(view, f"{name}: T(B,1) and γ(B,K) at context {context}"))


@profile_app.command("plot")
def plot(
    name: str = typer.Argument(..., help=NAME_HELP),
    out: Path = typer.Option(..., "--out", help="Image file to write (PNG, SVG or PDF by extension)."),
    context: int = typer.Option(1024, "--context", min=0, help="Context length of every row (tokens)."),
) -> None:
    """Draw T(B, 1) and gamma(B, K) against B, one curve per K; a measured profile's curves are dashed
    where they extrapolate past its calibration grid, the batch sizes beyond it shaded."""
    check_output_file(out)
    from matplotlib.backend_bases import FigureCanvasBase

    from specplan.cost_models.gamma import gamma_view, plot_view
    from specplan.cost_models.registry import cost_model_from_profile, load_profile

    kinds = FigureCanvasBase.get_supported_filetypes()  # what savefig can write, by extension
    if out.suffix and out.suffix[1:].lower() not in kinds:
        raise ConfigError(f"--out {out}: matplotlib writes no {out.suffix!r} images; end the name in "
                          f"{', '.join('.' + k for k in sorted(kinds))}")
    model = cost_model_from_profile(name)
    measured = load_profile(name)[0].measured_range
    with warnings.catch_warnings():  # the figure marks the extrapolation; no per-dimension warnings
        warnings.simplefilter("ignore")
        plot_view(gamma_view(model, context), model.describe(), out, measured)
    console = Console(stderr=True)
    if measured is not None:
        console.print(f"measured up to B = {measured.max_batch}, context {measured.max_context}, "
                      f"{measured.tokens[0]}-{measured.tokens[1]} tokens per step; dashed and shaded beyond",
                      markup=False)
    console.print(f"wrote {out}")


def register(app: typer.Typer) -> None:
    app.add_typer(profile_app, name="profile")
