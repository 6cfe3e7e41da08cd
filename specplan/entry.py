"""The ``specplan`` executable and ``python -m specplan``: the process set up first (``startup``), before
numpy or numba load, then the CLI's console (``specplan.cli.console``)."""

from specplan import startup


def console() -> None:
    """One BLAS thread, scipy's BLAS table for numba's probe, then the command."""
    startup.one_blas_thread()
    startup.load_scipy_blas()
    from specplan.cli import console as cli_console

    cli_console()
