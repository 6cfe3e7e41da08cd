"""Whether a run's queue grows without bound: an overloaded point is never a recommendation.

A finite run of an overloaded engine still completes every request, so its throughput and (without
a TTFT SLO) its goodput look fine; what gives it away is the queue. While requests keep arriving,
a stable engine completes them as fast as they come, so the number in the system (arrived, not
finished) hovers around a level; an overloaded one falls further behind every second.

The criterion, over the second half of the arrival window ``(t_last / 2, t_last]`` (``t_last`` the
last arrival, times from the first): the requests in the system grew by ``arrived - completed`` in
it; the run is **unstable** when that growth exceeds ``UNSTABLE_GROWTH`` (10%) of the arrivals in
the window and at least ``MIN_GROWTH`` requests. The first half is left out as warm-up (the queue
fills from empty); a stable queue's growth over the window is noise around zero, an overloaded
one's is ``1 - mu / lambda`` of the arrivals (service rate mu under arrival rate lambda). A
closed-loop workload cannot overload (each client waits for its answer), and its growth stays at
the number of clients at most.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

UNSTABLE_GROWTH = 0.1
MIN_GROWTH = 3


def _window_counts(arrival_s, finish_s) -> Optional[tuple[int, int]]:
    """``(arrived, completed)`` in the second half of the arrival window; None without one."""
    arrival = np.asarray(arrival_s, dtype=float)
    finish = np.asarray(finish_s, dtype=float)
    known = arrival[~np.isnan(arrival)]
    if len(known) < 2 or known.max() <= known.min():
        return None
    t_last = float(known.max())
    mid = float(known.min()) + (t_last - float(known.min())) / 2
    arrived = int(((known > mid) & (known <= t_last)).sum())
    completed = int(((finish > mid) & (finish <= t_last)).sum())  # NaN (never finished) compares False
    return arrived, completed


def stability(arrival_s, finish_s) -> dict:
    """``{"queue_growth": g, "unstable": bool}`` for a run's record (the module docstring's criterion;
    ``queue_growth`` None when fewer than two requests arrived at distinct times)."""
    counts = _window_counts(arrival_s, finish_s)
    if counts is None or counts[0] == 0:
        return {"queue_growth": None, "unstable": False}
    arrived, completed = counts
    growth = (arrived - completed) / arrived
    return {"queue_growth": growth, "unstable": growth > UNSTABLE_GROWTH and arrived - completed >= MIN_GROWTH}
