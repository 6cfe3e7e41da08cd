"""The one face of specplan: ``specplan simulate | acceptance | workloads | profile | calibrate | sweep
| report | recommend | validate | config | capacity``. Each command lives in its own module with a ``register(app)``."""

from __future__ import annotations

import atexit
import gc
import importlib
import os
import sys
import threading
import warnings
from pathlib import Path
from typing import NoReturn

import typer

from specplan.errors import SpecplanError, one_line

app = typer.Typer(
    name="specplan",
    help="Simulate model-free speculative decoding in an LLM serving engine before you deploy it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # click's plain help: option names whole and text wrapped at any width
)

# One module per command group; each defines register(app).
_COMMAND_MODULES = ("simulate", "workloads", "acceptance", "sweep", "report", "recommend", "profile", "calibrate",
                    "validate", "config", "capacity")

for _name in _COMMAND_MODULES:
    importlib.import_module(f"specplan.cli.{_name}").register(app)


def _usage_error_types() -> tuple[type, ...]:
    """The ClickException classes that can be raised: typer >= 0.29 bundles its own copy of click (and
    need not install click at all); older typer raises click's. Only modules already imported can raise."""
    names = ("typer._click.exceptions", "click.exceptions")
    return tuple(mod.ClickException for mod in map(sys.modules.get, names) if mod is not None)


def _usage_message(exc) -> str:
    """``Error``-free click wording, plus which command's ``--help`` to read."""
    ctx = getattr(exc, "ctx", None)
    hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
    return one_line(exc.format_message()) + hint


def main(argv: list[str] | None = None) -> None:
    """Console entry point: user errors print one line on stderr and exit 2, never a traceback.

    The one error path: specplan's own errors, click/typer usage errors (whichever copy raised them),
    pydantic validation errors that escaped a loader, and operating-system errors on a named file.
    """
    from pydantic import ValidationError

    from specplan.config import format_validation_error

    usage_errors = _usage_error_types()
    warnings.showwarning = _show_warning
    try:
        code = app(args=argv, prog_name="specplan", standalone_mode=False)
    except SpecplanError as exc:
        _fail(one_line(exc))
    except (typer.Exit, *_exit_types()) as exc:
        sys.exit(getattr(exc, "exit_code", 0))
    except (typer.Abort, KeyboardInterrupt):
        _fail("interrupted", 130)
    except ValidationError as exc:
        _fail(format_validation_error(exc, "input"))
    except OSError as exc:
        if exc.filename is None:
            raise
        _fail(f"{exc.filename}: {exc.strerror or exc}")
    except usage_errors as exc:
        if type(exc).__name__ == "NoArgsIsHelpError":  # a bare group: its help is the answer
            print(exc.ctx.get_help(), file=sys.stderr)
            sys.exit(2)
        _fail(_usage_message(exc))
    if isinstance(code, int) and code:  # a command's own exit status; success returns to the caller
        sys.exit(code)


def console() -> None:
    """The ``specplan`` executable and ``python -m specplan``: ``main``, then the process ends at once.

    Once the command has returned (or exited with its status), what the process registered to run at
    exit runs (``atexit``: pools, finalizers, log handlers), stdout and stderr are flushed and the
    process leaves with ``os._exit``: the interpreter's teardown (every module's clean-up, the
    collector's last passes over what the run built, numba's and LLVM's shutdown) is work nobody
    reads. A command that raised anything else ends as Python ends it (its traceback). In-process
    callers (tests, ``CliRunner``) use ``main``, which returns or raises ``SystemExit`` as usual.
    """
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code
    _end_process(code)


def _end_process(code) -> NoReturn:
    """Leave with ``code`` (``sys.exit``'s reading of it) without the interpreter's teardown."""
    if code is None:
        code = 0
    elif not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    gc.freeze()  # where Python's own exit runs after all (below), its collector skips what the run built
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        sys.exit(code)  # a thread Python's exit would wait for (a pool's manager, say): exit as Python does
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except OSError:  # a closed pipe (``| head``): Python's own exit reports it as usual
        sys.exit(code)
    os._exit(code)


def _exit_types() -> tuple[type, ...]:
    """click's own Exit classes (``ctx.exit``), next to typer's."""
    names = ("typer._click.exceptions", "click.exceptions")
    return tuple(getattr(mod, "Exit") for mod in map(sys.modules.get, names) if mod is not None and hasattr(mod, "Exit"))


_PACKAGE_DIR = Path(__file__).resolve().parents[1]
_python_showwarning = warnings.showwarning


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning raised in specplan as one line, ``warning: ...``, without its category and source
    line; other packages' warnings as Python prints them."""
    if not Path(filename).resolve().is_relative_to(_PACKAGE_DIR):
        _python_showwarning(message, category, filename, lineno, file, line)
        return
    print(f"warning: {one_line(message)}", file=sys.stderr if file is None else file)


def _fail(message: str, code: int = 2) -> None:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(code)
