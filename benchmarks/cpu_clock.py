"""CPU seconds of whole child processes, for the benchmarks: what a user's command costs, start-up and exit included.

``getrusage(RUSAGE_CHILDREN)`` counts, in user and system time, every descendant that has been waited
for, whatever else the machine runs; the wall clock is never used. A descendant that outlives its
parent unwaited (a sweep's forkserver, which holds its workers' time; the browser processes that draw
plots) would be lost to it, so the benchmark process makes itself their subreaper (Linux
``PR_SET_CHILD_SUBREAPER``) and, after each child, waits for every such orphan too.

specplan's own modules are compiled to bytecode before the first child, as ``pip install`` does for a
regular install (and Python on first import of an editable one): a machine that sets
``PYTHONDONTWRITEBYTECODE`` would otherwise compile some 50 modules from source in every child
(about 0.05 CPU-s).
"""

from __future__ import annotations

import compileall
import ctypes
import functools
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

ROOT = Path(__file__).resolve().parent.parent


class ChildFailed(SystemExit):
    """A child process exited non-zero; the message names it and quotes its last line of stderr."""


PR_SET_CHILD_SUBREAPER = 36  # <linux/prctl.h>


def _adopt_orphans() -> None:
    """Become the reaper of orphaned descendants (idempotent)."""
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")


def _reap_orphans() -> None:
    """Wait for every descendant left behind (they end once the child that started them is gone)."""
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@functools.cache
def _package_bytecode() -> None:
    """Compile specplan's modules to bytecode in their ``__pycache__`` (once per benchmark process)."""
    if not compileall.compile_dir(ROOT / "specplan", quiet=1):
        raise ChildFailed("compiling specplan's modules to bytecode failed")


def child_cpu_split(argv: list[str], env: dict | None = None, python: str = sys.executable,
                    cwd: Path = ROOT, name: str | None = None) -> tuple[float, float, str]:
    """CPU seconds (user + sys) of one child process ``python ARGV``: the child with the descendants
    it waited for, then the descendants it left running (orphans, waited for here), and its stdout.
    A child that fails ends the benchmark with its ``name`` (by default its first arguments) and its
    last line of stderr (exit 1)."""
    _package_bytecode()
    _adopt_orphans()
    before = _children_cpu()
    proc = subprocess.run([python, *argv], cwd=cwd, env=env, capture_output=True, text=True)
    waited = _children_cpu()
    _reap_orphans()
    left = _children_cpu() - waited
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines() or ["(no stderr)"]
        name = name or f"{Path(python).name} {' '.join(argv[:3])} ..."
        raise ChildFailed(f"{name} failed (exit {proc.returncode}): {lines[-1][:300]}")
    return waited - before, left, proc.stdout


def child_cpu(argv: list[str], env: dict | None = None, python: str = sys.executable,
              cwd: Path = ROOT, name: str | None = None) -> tuple[float, str]:
    """CPU seconds of one child process ``python ARGV`` and all its descendants, and its stdout
    (``child_cpu_split``'s two parts together)."""
    own, left, stdout = child_cpu_split(argv, env, python, cwd, name)
    return own + left, stdout


def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    """``min / median / max`` of ``values``, each formatted with ``fmt``."""
    return " / ".join(fmt.format(v) for v in (min(values), statistics.median(values), max(values)))


def bad_input(message: str) -> NoReturn:
    """Refuse a bad option: one line on stderr naming it and the fix, exit 2."""
    print(message, file=sys.stderr)
    raise SystemExit(2)
