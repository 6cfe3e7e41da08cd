"""What a specplan process sets before numpy and numba load, to start in a fraction of the CPU time.

Both are start-up costs of libraries, not of simulating (``benchmarks/bench_vidur.py`` prints them):

- OpenBLAS, loaded by numpy (and another copy by scipy), starts a worker thread per core, and each
  spins a while before it sleeps, beside the imports that follow: about 0.2 CPU-s a process on two
  cores. Nothing specplan computes with BLAS is big enough to use a second thread, so a command
  runs it on one unless the user chose otherwise.
- numba's CPU target, as it initialises, looks for BLAS by importing ``scipy.linalg.cython_blas``,
  and so runs ``scipy.linalg``'s package import (scipy's array-API layer, numpy's f2py and testing
  modules): about 0.1 CPU-s for one extension module's function table.
- Python's cyclic collector runs every 700 new container objects, and the imports and numba's target
  make hundreds of thousands that live as long as the process (classes, functions, numba's typing
  templates): some 280 passes, two or three of them over the whole heap, find nothing to free, about
  0.1 CPU-s. ``pause_collector`` keeps it off until the first run's loop (``resume_collector``).
"""

from __future__ import annotations

import gc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import MutableMapping

# Read by OpenBLAS (in this order) when it loads; a user's own setting of any of them is kept.
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")
SCIPY_BLAS = "scipy.linalg.cython_blas"


def one_blas_thread(environ: MutableMapping[str, str] = os.environ) -> bool:
    """Run OpenBLAS on one thread (``OPENBLAS_NUM_THREADS=1``) in this process and its children, when
    numpy has not loaded it yet and the user set none of ``BLAS_THREAD_VARIABLES``; True if it did."""
    if "numpy" in sys.modules or any(name in environ for name in BLAS_THREAD_VARIABLES):
        return False
    environ["OPENBLAS_NUM_THREADS"] = "1"
    return True


_paused = False  # the collector is off because pause_collector turned it off


def pause_collector() -> bool:
    """Turn Python's cyclic collector off for the process's start-up; True if it did (not if the user's
    code had turned it off already). Reference counting still frees everything that is not in a cycle."""
    global _paused
    if not gc.isenabled():
        return False
    gc.disable()
    _paused = True
    return True


def resume_collector() -> bool:
    """Turn the collector back on if ``pause_collector`` turned it off; True if it did. A run's loop calls
    it as it starts (``memory.collector_spared``), so a process's start-up ends at its first loop."""
    global _paused
    if not _paused:
        return False
    _paused = False
    gc.enable()
    return True


def load_scipy_blas() -> bool:
    """Load scipy's BLAS function table (``scipy.linalg.cython_blas``) as the module of that name, without
    ``scipy.linalg``'s package import; True if it did.

    numba's probe (``numba.np.linalg.ensure_blas``, run as ``numba.np.arraymath`` is imported) then finds
    the module loaded, and its kernels read BLAS from the same table as before. A later
    ``import scipy.linalg`` runs as usual and reuses this module. Does nothing if the module is
    loaded already, if numba's target is already set up, if scipy or the extension is missing, or if
    the extension fails to load on its own (numba's probe then imports it as before).
    """
    if SCIPY_BLAS in sys.modules or "numba.np.arraymath" in sys.modules:
        return False
    scipy = importlib.util.find_spec("scipy")
    if scipy is None or not scipy.submodule_search_locations:
        return False
    folders = [os.path.join(folder, "linalg") for folder in scipy.submodule_search_locations]
    spec = importlib.machinery.PathFinder.find_spec(SCIPY_BLAS, folders)
    if spec is None:
        return False
    try:
        module = importlib.util.module_from_spec(spec)
        sys.modules[SCIPY_BLAS] = module
        spec.loader.exec_module(module)
    except Exception:  # a scipy whose table needs its package first: numba's own import then runs
        sys.modules.pop(SCIPY_BLAS, None)
        return False
    return True
