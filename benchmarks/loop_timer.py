"""CPU seconds of the executor loop alone, for the benchmarks: ``simulate(cfg, observe=timer)``.

These are in-process figures, for comparisons within one process (start-up and exit excluded); what
a user's command costs is measured on whole processes (``cpu_clock.child_cpu``).
"""

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


def measure(data: dict, repeat: int) -> tuple[dict, float, float]:
    """(summary, best whole-call CPU seconds, best in-loop CPU seconds) of ``simulate`` on the scenario
    ``data`` (a config mapping), in this process, ``repeat`` times after one warm-up run."""
    from specplan.config import build_config
    from specplan.simulator.run import simulate

    cfg = build_config(data)
    loop = LoopTimer()
    simulate(cfg)  # warm-up: imports, compiled-code caches
    whole = []
    for _ in range(repeat):
        t0 = time.process_time()
        res = simulate(cfg, observe=loop)
        whole.append(time.process_time() - t0)
    return res.summary, min(whole), min(loop.seconds)
