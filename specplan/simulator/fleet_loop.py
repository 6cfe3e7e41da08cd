"""A fleet's draft-free steps in one compiled loop over all its replicas.

A replica's span (``specplan.simulator.span``) ends at the next queued SimPy event, and in a fleet
that is nearly always another replica's step: alone, each replica would go through SimPy once per
step. Instead, a replica whose span ends pending hands that step to the fleet's ``Stepper``
(``Stepper.hold``) rather than yielding a timeout. The stepper keeps one SimPy event, at the
earliest held step, and there ``run_fleet`` advances every replica's held steps in the order SimPy
would have ended them, until a step needs Python (a completion, an admission, full logs) or the
next queued event comes first. Results are those of every step through SimPy:

- a held step gets the event id its timeout would have had, drawn when it is scheduled (steps
  scheduled inside ``run_fleet`` take consecutive ids drawn before it, so they sort after every
  queued event and before every later one); steps end in (time, priority, id) order, and a step
  that ties with a queued event goes after it exactly when its timeout would have;
- each replica's span ends strictly before the earliest other held step or queued event, as its
  own spans do before the next queued event;
- a step that needs Python resumes its replica's process in place (``Stepper._pass`` runs the
  process's callback on the held event), as the step's own timeout would: through a new SimPy
  event, a client freed earlier in that instant could submit first and change what the replica
  admits.

SimPy has no public call to push an event with a given id, so the stepper writes its event into the
environment's queue itself (``_queue``, ``_eid``), as ``span.advance_clock`` sets its clock.
"""

from __future__ import annotations

import heapq
import itertools

import numpy as np
import simpy
from numba import njit
from numba.core import types
from numba.experimental import structref
from simpy.events import NORMAL

from specplan.simulator import span, span_state
from specplan.simulator.span import run_span

# Columns of ``FleetState.ints`` and ``.floats``: a replica's held step (its rows, 0 when none held,
# its event id), what its next span continues from, and the held step's start, seconds and end.
HELD_N, EID, EM_N, IT_N, IT, QUEUED = range(6)
START, STEP, END = range(3)
# What ``run_fleet`` left in ``FleetState.out``: its status, the replica it stopped at, the ids it
# used, and in ``out_time`` the clock.
WAIT, STOPPED = range(2)


@structref.register
class FleetStateType(types.StructRef):
    def preprocess_fields(self, fields):
        return tuple((name, types.unliteral(typ)) for name, typ in fields)


class FleetState(structref.StructRefProxy):
    """The replicas' ``SpanState`` (a tuple, so ``run_fleet`` is compiled once per number of
    replicas and cached; a typed list would cost each process 0.25 s of compiling), their held
    steps and ``run_fleet``'s result."""


structref.define_proxy(FleetState, FleetStateType, ["reps", "ints", "floats", "out", "out_time"])


@njit(cache=True)
def fleet_state(reps, ints, floats, out, out_time):
    """A ``FleetState`` (compiled and cached, like ``span_state.span_state``)."""
    return FleetState(reps, ints, floats, out, out_time)


@njit(cache=True)
def _before(t, eid, head_t, head_priority, head_eid):
    # (t, NORMAL, eid) sorts before the queue's head: SimPy's own order of events.
    if t != head_t:
        return t < head_t
    if NORMAL != head_priority:
        return NORMAL < head_priority
    return eid < head_eid


@njit(cache=True)
def earliest(ints, floats, skip=-1):
    """The replica whose held step SimPy would end first (by end, then event id), other than
    ``skip``; -1 when none is held."""
    i = -1
    for r in range(ints.shape[0]):
        if r != skip and ints[r, HELD_N] and (i < 0 or floats[r, END] < floats[i, END]
                                              or (floats[r, END] == floats[i, END] and ints[r, EID] < ints[i, EID])):
            i = r
    return i


@njit(cache=True)
def run_fleet(fs, head_t, head_priority, head_eid, next_eid):
    """Advance the held steps in SimPy's order, each replica by ``span.run_span`` from its held
    step to just before the earliest other held step or the queue's head, until a replica needs
    Python (``STOPPED``) or the head comes first (``WAIT``). Steps scheduled here take the ids
    ``next_eid``, ``next_eid + 1``, ...; ``out`` returns (status, replica, ids used)."""
    reps, ints, floats = fs.reps, fs.ints, fs.floats
    used, status, who, t = 0, WAIT, -1, fs.out_time[0]
    while True:
        i = earliest(ints, floats)
        if i < 0 or not _before(floats[i, END], ints[i, EID], head_t, head_priority, head_eid):
            break
        other = earliest(ints, floats, i)
        horizon = head_t if other < 0 else min(head_t, floats[other, END])
        a = reps[i]
        run_span(a, ints[i, EM_N], ints[i, IT_N], floats[i, END], horizon, ints[i, IT], ints[i, QUEUED],
                 ints[i, HELD_N], floats[i, START], floats[i, STEP])
        t = a.out_time[0]
        ints[i, IT], ints[i, EM_N], ints[i, IT_N] = a.out[1], a.out[3], a.out[4]
        if a.out[0] != span.PENDING:
            ints[i, HELD_N] = 0
            status, who = STOPPED, i
            break
        ints[i, HELD_N], ints[i, EID] = a.out[2], next_eid + used
        floats[i, START], floats[i, STEP], floats[i, END] = t, a.out_time[1], t + a.out_time[1]
        used += 1
    fs.out[0], fs.out[1], fs.out[2] = status, who, used
    fs.out_time[0] = t


class Stepper:
    """Holds the pending steps of a fleet's spanning replicas and runs them in ``run_fleet``."""

    def __init__(self, env: simpy.Environment, replicas: list) -> None:
        self.env = env
        self.replicas = replicas  # the executors, in replica order (``ex.replica`` is the index)
        num = len(replicas)
        self.ints, self.floats = np.zeros((num, 6), dtype=np.int64), np.zeros((num, 3))
        self._out, self._out_time = np.zeros(3, dtype=np.int64), np.zeros(1)
        self._held: list = [None] * num  # each replica's event, fired when its held step needs Python
        self._state, self._of = None, [None] * num  # the FleetState and the SpanStates it holds
        # Replicas that held a step (their Python ran just before) or got a request since the loop
        # last took the FleetState: only their arrays can have grown and their queues changed, so
        # only their SpanStates and queue lengths are looked at again.
        self._touched = set(range(num))
        self._queued: dict = {}  # (time, eid) -> this stepper's events in the SimPy queue
        self._live = None  # the key of the one at the earliest held step (the others are stale)
        self._passing = False

    def hold(self, ex, it: int, n: int, step_s: float) -> simpy.Event:
        """Take a replica's pending step (``n`` rows from now, ``step_s`` seconds); the event it
        returns fires with the replica's span result when a step needs its Python."""
        i = ex.replica
        now = self.env.now
        self.ints[i] = n, next(self.env._eid), ex.trace.emissions.n, ex.trace.iterations.n, it, len(ex.waiting)
        self.floats[i] = now, step_s, now + step_s
        self._held[i] = event = simpy.Event(self.env)
        self._touched.add(i)
        if not self._passing:
            self._wake()
        return event

    def queued(self, i: int) -> None:
        """A request joined replica ``i``'s waiting queue: its held steps see the queue's length."""
        self._touched.add(i)

    def horizon(self) -> float:
        """The end of the earliest held step or queued event: a replica's span stops before it."""
        first = earliest(self.ints, self.floats)
        return self.env.peek() if first < 0 else min(self.env.peek(), float(self.floats[first, END]))

    def _fleet_state(self):
        spans, rebuild = self._of, False
        for i in self._touched:
            ex = self.replicas[i]
            self.ints[i, QUEUED] = len(ex.waiting)  # once here rather than at each of a burst's arrivals
            state = span_state.state_for(ex)
            rebuild = rebuild or state is not spans[i]
            spans[i] = state
        self._touched.clear()
        if rebuild:
            self._state = fleet_state(tuple(spans), self.ints, self.floats, self._out, self._out_time)
        return self._state

    def _pass(self, event: simpy.Event) -> None:
        """This stepper's event: run held steps until the queue's head comes first, then queue
        the event of the earliest one."""
        key = (self.env.now, event.eid)
        del self._queued[key]
        if key != self._live:
            return  # stale: an earlier step was held after this event was queued
        self._live = None
        env, self._passing = self.env, True
        try:
            while True:
                head = env._queue[0] if env._queue else (np.inf, NORMAL, 0)
                next_eid = next(env._eid)
                self._out_time[0] = env.now
                run_fleet(self._fleet_state(), head[0], head[1], head[2], next_eid)
                status, i, used = self._out.tolist()
                if used > 1:
                    env._eid = itertools.count(next_eid + used)
                span.advance_clock(env, float(self._out_time[0]))
                if status == WAIT:
                    break
                ex, held = self.replicas[i], self._held[i]
                self._held[i] = None
                result = span.result(ex)
                held._ok, held._value = True, result
                callbacks, held.callbacks = held.callbacks, None
                for callback in callbacks:  # the replica's process resumes now, as its timeout would
                    callback(held)
        finally:
            self._passing = False
        self._wake()

    def _wake(self) -> None:
        """Queue this stepper's event at the earliest held step, with that step's own event id."""
        first = earliest(self.ints, self.floats)
        if first < 0:
            return
        key = (float(self.floats[first, END]), int(self.ints[first, EID]))
        if key == self._live:
            return
        self._live = key
        if key not in self._queued:
            event = simpy.Event(self.env)
            event._ok, event._value, event.eid = True, None, key[1]
            event.callbacks.append(self._pass)
            self._queued[key] = event
            heapq.heappush(self.env._queue, (key[0], NORMAL, key[1], event))
