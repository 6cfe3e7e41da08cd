"""The ``specplan`` executable and ``python -m specplan``: the process set up first (``startup``), before
numpy or numba load, then the CLI's console (``specplan.cli.console``)."""

import sys

from specplan import startup

# Commands that run a device's own work (torch, a real engine) in this process or its re-executed
# copy: BLAS threading there is the machine's as the user left it.
DEVICE_COMMANDS = ("calibrate", "validate")
# Commands whose process starts with the collector off until its first run's loop. Others (a sweep's
# parent, recommend, report) may run long without a loop of their own, so keep it on throughout.
COLLECTOR_PAUSED_COMMANDS = ("simulate",)


def console() -> None:
    """One BLAS thread (except for ``DEVICE_COMMANDS``), the collector off until the first loop (for
    ``COLLECTOR_PAUSED_COMMANDS``), scipy's BLAS table for numba's probe, then the command."""
    command = sys.argv[1] if len(sys.argv) > 1 else None
    if command in COLLECTOR_PAUSED_COMMANDS:
        startup.pause_collector()
    if command not in DEVICE_COMMANDS:
        startup.one_blas_thread()
    startup.load_scipy_blas()
    from specplan.cli import console as cli_console

    cli_console()
