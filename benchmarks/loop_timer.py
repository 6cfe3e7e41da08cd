"""CPU seconds of the executor loop alone, for the benchmarks: ``simulate(cfg, observe=timer)``."""

from __future__ import annotations

import time


class LoopTimer:
    """An ``observe`` hook that times ``Executor.run`` (the loop) of every run it sees; ``seconds``
    holds one entry per run."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    def __call__(self, ex) -> None:
        inner = ex.run

        def timed():
            t0 = time.process_time()
            trace = inner()
            self.seconds.append(time.process_time() - t0)
            return trace

        ex.run = timed
