"""Open-loop arrivals that one replica's spans submit themselves, in the order SimPy would.

The frontend's open loop (``Frontend._open_loop``) sends each request at its arrival time: a
process that, for each request in order, yields a timeout of ``arrival - now`` when that is
positive and then submits it. Every such timeout is a SimPy event, and every event ends a span
(``span``): at six requests a second, most of a run's Python is that. Where nothing but the
executor takes part (one replica, no sessions, and a completion heard by nothing but the request
state: ``Executor._quiet_finish``), the span submits the arrivals itself and no frontend process runs:

- the submit times are the frontend's own: ``T = T_prev + (arrival - T_prev)`` when that delay is
  positive, else ``T_prev`` (the same run of the process), from ``T = 0``; they are computed once
  (``submit_times``) and are what the frontend records (``Frontend.arrival``), all of them, as the
  frontend goes on sending after the executor stops at ``max_sim_time``;
- events at the same time run in the order SimPy made them (its event ids): the span numbers the
  events it stands in for, the frontend's timeouts and the executor's step timeouts, as they would
  be made (``STAMP``), and a frontend event runs before a step's end when its time is earlier, or
  equal and its number lower (``submit_before``);
- the executor's loop top, run after each commit, is the span's too: it admits waiting requests
  while there is room (``admit``, as ``RequestState.add`` and ``admit`` do; where ``add`` would
  grow the state, the span returns to Python), and with nothing active it waits for the
  frontend's next event.

``OpenLoop`` also stands in the executor's ``waiting`` list: the requests submitted and not yet
admitted are a range of the arrival order.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from specplan.simulator.state import FREE, N_ACTIVE, SLOTS

# Slots of ``OpenLoop.ints``: requests submitted so far (in arrival order), admitted so far, the next
# event number, and the number of the frontend's pending event.
SUBMITTED, ADMITTED, STAMP, FRONTEND_STAMP = range(4)
_IN_ID_ORDER = np.zeros(0, dtype=np.int64)  # ``OpenLoop.order`` of requests sent in id order
# What ``loop_top`` leaves the span to do: run on, return for Python to admit (``RequestState.add``
# grows first), or return with nothing active (every request done).
RUNNING, MUST_ADMIT, IDLE_FOR_GOOD = range(3)
OPEN = 1  # ``SpanState.owns_arrivals`` of a replica whose spans submit its open loop's arrivals


@njit(cache=True)
def submit_times(arrivals, times):
    """The times the frontend submits requests arriving at ``arrivals`` (in sending order), into
    ``times`` (which may be ``arrivals`` itself); returns whether each one starts a new run of the
    process (a timeout before it)."""
    new_event = np.zeros(len(arrivals), dtype=np.bool_)
    now = 0.0
    for k in range(len(arrivals)):
        delay = arrivals[k] - now
        if delay > 0:
            now = now + delay
            new_event[k] = True
        times[k] = now
    return new_event


def owns_arrivals(ex) -> bool:
    """Whether an executor's spans submit its arrivals themselves: it is the only replica, every step
    spans with no drafts, and completions matter to nothing but the request state
    (``span.quiet_finish``, which also means an open loop without sessions)."""
    return ex.stepper is None and ex._quiet_finish and not ex.s.speculate and ex._spans()


class OpenLoop:
    """The arrivals of ``frontend`` (open loop, no sessions) as the spans submit them; as ``waiting``,
    the requests submitted and not yet admitted. Records the frontend's submit times at once. Requests
    sent in id order (the usual) keep no order array (``order`` empty) and their times in the
    frontend's own ``arrival``: ten million requests' ids and times are 160 MB."""

    def __init__(self, frontend) -> None:
        order = frontend.open_loop_order()
        if isinstance(order, range):  # every request, in id order
            self.order, self.times = _IN_ID_ORDER, frontend.arrival
            self.new_event = submit_times(np.ascontiguousarray(frontend.w.arrivals, dtype=np.float64), self.times)
        else:
            self.order, self.times = np.asarray(order, dtype=np.int64), np.empty(len(order))
            self.new_event = submit_times(np.ascontiguousarray(frontend.w.arrivals[self.order]), self.times)
            frontend.arrival[self.order] = self.times
        # At time 0 the frontend's process starts first (event 0, then the executor's, 1): it submits
        # those due at 0 and makes the timeout of the next (event 2).
        first = int(np.argmax(self.new_event)) if self.new_event.any() else len(self.order)
        self.ints = np.array([first, 0, 3, 2], dtype=np.int64)

    def __len__(self) -> int:
        return int(self.ints[SUBMITTED] - self.ints[ADMITTED])

    def __getitem__(self, first: slice) -> list[int]:
        """The first ``first.stop`` waiting requests (``waiting[:room]``)."""
        start = int(self.ints[ADMITTED])
        end = start + min(first.stop, len(self))
        return self.order[start:end].tolist() if len(self.order) else list(range(start, end))

    def __delitem__(self, first: slice) -> None:
        """Admitted: the first ``first.stop`` waiting requests leave the queue."""
        self.ints[ADMITTED] += min(first.stop, len(self))


_NONE = (_IN_ID_ORDER, np.zeros(0), np.zeros(0, dtype=np.bool_), np.zeros(4, dtype=np.int64))


def arrays(open_loop) -> tuple:
    """An ``OpenLoop``'s order, submit times, new-run flags and counters as a span reads them; for
    None (the frontend submits the arrivals), empty ones the span never reads."""
    return _NONE if open_loop is None else (open_loop.order, open_loop.times, open_loop.new_event, open_loop.ints)


@njit(cache=True)
def num_waiting(ints):
    """Requests submitted and not yet admitted."""
    return ints[SUBMITTED] - ints[ADMITTED]


@njit(cache=True)
def next_event(times, ints):
    """The time of the frontend's pending event (infinity once every request is submitted)."""
    return times[ints[SUBMITTED]] if ints[SUBMITTED] < len(times) else np.inf


@njit(cache=True)
def submit_next(new_event, ints):
    """The frontend's pending event: it submits its request and those due in the same run, and makes
    the next timeout. (An idle executor's wake-up, made at the first submit, runs before that timeout
    at the same instant, so it needs no number: the span runs the executor at once.)"""
    k = ints[SUBMITTED] + 1
    while k < len(new_event) and not new_event[k]:
        k += 1
    ints[SUBMITTED] = k
    if k < len(new_event):
        ints[FRONTEND_STAMP] = ints[STAMP]
        ints[STAMP] += 1


@njit(cache=True)
def submit_before(times, new_event, ints, end, stamp):
    """The frontend's events that SimPy runs before the executor's event at ``end`` numbered ``stamp``."""
    while ints[SUBMITTED] < len(times):
        at = times[ints[SUBMITTED]]
        if not (at < end or (at == end and ints[FRONTEND_STAMP] < stamp)):
            return
        submit_next(new_event, ints)


@njit(cache=True)
def admit(order, ints, count, prompt_lens, output_lens, rid, plen, olen, ctx_target, act, free, counters):
    """``RequestState.add`` then ``admit`` of the next ``count`` waiting requests (the ``ADMITTED``-th on of
    ``order``, read round it; none: in id order): recycled slots first, from the end, then new ones.
    False, changing nothing, where ``add`` would grow the state first."""
    num_free, slots = counters[FREE], counters[SLOTS]
    if count > num_free + len(plen) - slots:
        return False
    take, a, first = min(count, num_free), counters[N_ACTIVE], ints[ADMITTED]
    for j in range(count):
        slot = free[num_free - 1 - j] if j < take else slots + j - take
        r = order[(first + j) % len(order)] if len(order) else first + j  # (a closed loop's order is a ring)
        rid[slot], olen[slot] = r, output_lens[r]
        plen[slot] = ctx_target[slot] = prompt_lens[r]
        act[a + j] = slot
    counters[FREE], counters[SLOTS], counters[N_ACTIVE] = num_free - take, slots + count - take, a + count
    ints[ADMITTED] = first + count
    return True


@njit(cache=True)
def loop_top(a, t):
    """The executor's loop top, which the span (``span.run_span``, state ``a``) runs after each commit at
    time ``t``: admit the waiting requests there is room for, and with nothing active wait for the
    frontend's next event, submit and admit again. Returns what is left to do and the time."""
    ints, counters = a.arrival_ints, a.counters
    while True:
        queued, room = num_waiting(ints), a.max_active - counters[N_ACTIVE]
        if queued and room > 0 and not admit(a.arrival_order, ints, min(queued, room), a.prompt_lens, a.output_lens,
                                             a.rid, a.plen, a.olen, a.ctx_target, a.act, a.free, counters):
            return MUST_ADMIT, t
        if counters[N_ACTIVE]:
            return RUNNING, t
        if ints[SUBMITTED] == len(a.arrival_times):
            return IDLE_FOR_GOOD, t
        t = a.arrival_times[ints[SUBMITTED]]  # idle until the frontend's next event, which wakes it
        submit_next(a.arrival_new, ints)


@njit(cache=True)
def submit_during(a, end):
    """A step ending at ``end`` is made a timeout now (its number): the frontend's events SimPy runs
    before it submit their requests. Returns the requests then waiting."""
    ints = a.arrival_ints
    ints[STAMP] += 1
    submit_before(a.arrival_times, a.arrival_new, ints, end, ints[STAMP] - 1)
    return num_waiting(ints)
