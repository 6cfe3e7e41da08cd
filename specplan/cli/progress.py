"""A progress bar for long single runs (``simulate``, ``acceptance``): rich on stderr, shown only
when stderr is a terminal and only once the work has taken longer than a couple of seconds, so
short runs and piped or logged output stay clean."""

from __future__ import annotations

import sys
import threading
from contextlib import contextmanager
from typing import Callable, Iterator, Optional

DELAY_S = 2.0
REFRESH_S = 0.25


@contextmanager
def progress_bar(description: str, poll: Optional[Callable[[], tuple[int, int]]] = None,
                 enabled: Optional[bool] = None) -> Iterator[None]:
    """Show a bar while the block runs. ``poll()`` returns ``(done, total)`` (read from another
    thread, so it must only read); without it the bar shows elapsed time only. ``enabled`` defaults
    to whether stderr is a terminal."""
    if not (sys.stderr.isatty() if enabled is None else enabled):
        yield
        return
    stop = threading.Event()

    def show() -> None:
        if stop.wait(DELAY_S):
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        columns = [TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn()]
        if poll is not None:
            columns.insert(2, MofNCompleteColumn())
        with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
            task = bar.add_task(description, total=None)
            while not stop.wait(REFRESH_S):
                if poll is not None:
                    done, total = poll()
                    bar.update(task, completed=done, total=total)

    thread = threading.Thread(target=show, name="specplan-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def kernels_cached() -> bool:
    """Whether numba's on-disk cache holds the kernels every run compiles (the step's pricing and the
    scheduler) for their current source: numba drops an index whose source stamp changed. A numba
    whose cache internals differ counts as cached (no notice rather than a wrong one)."""
    from specplan.simulator.scheduler import schedule_step
    from specplan.simulator.step import price_step

    try:
        return all(bool(kernel._cache._cache_file._load_index()) for kernel in (price_step, schedule_step))
    except AttributeError:
        return True


def compile_notice(enabled: Optional[bool] = None) -> None:
    """One line on stderr before the first run after an install or a change: numba compiles the
    kernels then (tens of seconds on a small machine) and caches them for every later run. Shown,
    like the progress bars, when stderr is a terminal unless ``enabled`` says otherwise."""
    if (sys.stderr.isatty() if enabled is None else enabled) and not kernels_cached():
        print("compiling the simulator's kernels (first run only; later runs load them from the cache)",
              file=sys.stderr)
