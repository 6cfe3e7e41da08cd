"""The local pool's forkserver preload (``LocalRunner``), imported there and nowhere else: importing it
loads what every run needs into the forkserver, so every worker, a fork of it, starts with it and no
run pays it (about 0.3 CPU-s on each worker's first run otherwise): the modules ``run_record`` imports,
the exact drafters, pandas (a record reads the run's tables) and the compiled kernels, numba's CPU target first
(``workers.load_cached_kernels``). Paid once per sweep, whatever the number of workers. The collector is
off meanwhile (``startup.pause_collector``), as in a command's start-up; each worker turns it on as its
first run's loop starts."""

from specplan import startup

startup.pause_collector()

import pandas  # noqa: E402, F401

import specplan.cost_models.registry  # noqa: E402, F401
import specplan.simulator.cost_split  # noqa: E402, F401
import specplan.simulator.run  # noqa: E402, F401
import specplan.sweeps.stability  # noqa: E402, F401
from specplan.sweeps.workers import load_cached_kernels  # noqa: E402

load_cached_kernels()
