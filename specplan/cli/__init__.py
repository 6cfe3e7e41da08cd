"""The one face of specplan: ``specplan simulate | acceptance | workloads | profile | calibrate | sweep
| report | recommend | validate | config | capacity``. Each command lives in its own module with a ``register(app)``."""

from __future__ import annotations

import importlib
import sys

import typer

from specplan.errors import SpecplanError

app = typer.Typer(
    name="specplan",
    help="Simulate model-free speculative decoding in an LLM serving engine before you deploy it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# One module per command group; each defines register(app).
_COMMAND_MODULES = ("simulate", "workloads", "acceptance", "sweep", "report", "recommend", "profile", "calibrate",
                    "validate", "config", "capacity")

for _name in _COMMAND_MODULES:
    importlib.import_module(f"specplan.cli.{_name}").register(app)


def main() -> None:
    """Console entry point: user errors print one line on stderr and exit 2, never a traceback."""
    try:
        code = app(standalone_mode=False)  # a command's typer.Exit(code) comes back as its return value
        if isinstance(code, int) and code:
            sys.exit(code)
    except SpecplanError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.exit(1)
    except Exception as exc:  # click usage errors
        import click

        if isinstance(exc, click.exceptions.ClickException):
            exc.show()
            sys.exit(exc.exit_code)
        raise
