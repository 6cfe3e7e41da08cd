"""How the local pool's worker processes start: importing this very package, with the compiled kernels
loaded, and exiting with the sweep.

All are set-up a ``LocalRunner`` gives its forkserver pool (``specplan.sweeps.runners``).
"""

from __future__ import annotations

import os
import select
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def exit_with_sweep(sweep_pid: int) -> None:
    """Pool-worker initializer: exit as soon as the sweep's process is gone, even after SIGKILL.

    A killed sweep cannot shut its pool down, and forkserver workers would otherwise wait forever
    for work (keeping the forkserver alive too). A daemon thread waits on a pidfd of the sweep's
    process (Linux), or polls it once a second elsewhere.
    """
    try:
        fd = os.pidfd_open(sweep_pid)
    except (AttributeError, OSError):  # no pidfd_open here, or the sweep is already gone
        fd = None
        if not _process_exists(sweep_pid):
            os._exit(1)

    def watch() -> None:
        if fd is not None:
            select.select([fd], [], [])
        else:
            while _process_exists(sweep_pid):
                time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="specplan-sweep-watch", daemon=True).start()


@contextmanager
def this_package_first() -> Iterator[None]:
    """Environment under which the forkserver (and so every worker) imports this very package.

    The forkserver is started as ``python -c ...``, which puts the current folder first on
    ``sys.path`` and (on Python 3.11) ignores the parent's ``sys.path``. Run from a folder holding a
    directory named ``specplan`` (a clone's own folder, say), the workers would import that directory
    as a namespace package instead of the installed one and fail every run. ``PYTHONSAFEPATH`` keeps
    the current folder off ``sys.path`` (3.11+), and the folder above this package goes first on
    ``PYTHONPATH`` (a regular package wins over a namespace portion wherever it is on the path).
    """
    root = str(Path(__file__).resolve().parents[2])
    saved = {name: os.environ.get(name) for name in ("PYTHONSAFEPATH", "PYTHONPATH")}
    os.environ["PYTHONSAFEPATH"] = "1"
    os.environ["PYTHONPATH"] = os.pathsep.join([root] + ([saved["PYTHONPATH"]] if saved["PYTHONPATH"] else []))
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def load_cached_kernels() -> int:
    """Load every compiled kernel of the imported specplan modules that numba's on-disk cache holds for
    the current code (each signature its index lists), numba's CPU target first; returns how many.
    The target's BLAS probe finds scipy's table loaded (``startup.load_scipy_blas``).

    A worker would otherwise pay these on its first runs (the target alone is about a third of a
    CPU-second). Nothing is compiled: an entry for other code, or another machine, is passed over, and
    a kernel the cache lacks compiles on first use as before. Reads the cache index through numba's
    ``Dispatcher._cache`` (there is no public listing of cached signatures).
    """
    from numba.core.dispatcher import Dispatcher
    from numba.core.registry import cpu_target

    from specplan.startup import load_scipy_blas

    load_scipy_blas()  # before the target's set-up probes for BLAS
    codegen = cpu_target.target_context.codegen()
    loaded = 0
    for name, module in list(sys.modules.items()):
        if not name.startswith("specplan.") or module is None:
            continue
        for kernel in list(vars(module).values()):
            if not isinstance(kernel, Dispatcher) or kernel.__module__ != name:
                continue  # not a kernel, or one another module defines (loaded with that module)
            cache = kernel._cache  # a kernel without ``cache=True`` has a NullCache: no index
            for key in cache._cache_file._load_index() if hasattr(cache, "_cache_file") else ():
                sig = key[0]
                if key == cache._index_key(sig, codegen) and sig not in kernel.overloads:
                    kernel.compile(sig)  # found in the cache: loaded, not compiled
                    loaded += 1
    return loaded
