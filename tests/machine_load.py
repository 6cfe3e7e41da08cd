"""How much of the machine other processes took while a command ran: timings of the real engine and of
the microbenchmark are compared against bars only where they ran alone."""

from __future__ import annotations

import os
import resource
import subprocess
import time


def _busy_s() -> float | None:
    """CPU seconds the whole machine has been busy (user, nice, system, irq, softirq and steal in
    /proc/stat: a hypervisor's steal counts as another's load), or None where there is no /proc/stat."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:9]]
    except OSError:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def run_alone(cmd: list[str], **kwargs) -> tuple[subprocess.CompletedProcess, float]:
    """Run ``cmd`` (``subprocess.run`` with ``kwargs``, output captured); also return the share of the
    machine's CPU time that other processes took meanwhile: the machine's busy time less the command's
    own CPU time, over wall time x cores. 1.0 where it cannot be told."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    own0, busy0, wall0 = usage.ru_utime + usage.ru_stime, _busy_s(), time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    own, busy1, wall = usage.ru_utime + usage.ru_stime - own0, _busy_s(), time.monotonic() - wall0
    if busy0 is None or busy1 is None:
        return proc, 1.0
    return proc, max(0.0, busy1 - busy0 - own) / (wall * os.cpu_count())
