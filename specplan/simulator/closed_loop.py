"""Closed-loop clients that one replica's spans serve themselves, in the order SimPy would.

A closed-loop client (``Frontend._client``) sends a request, waits for its completion, thinks, and
sends the next of its queue (``Frontend.client_queues``: client ``c`` of ``C`` sends requests ``c, c + C,
c + 2C, ...``, each followed by its session's turns). Each completion is a SimPy event, and every event
ends a span (``span``): at batch 64 a step completes a request more often than not. Where nothing but
the executor takes part (one replica, no think time, and a completion heard by nothing the span
cannot do itself: ``owns_clients``), the span sends the clients' requests and no frontend process
runs:

- at time 0 every client's process starts before the executor's (their events were made first), so
  the first ``C`` requests wait at the executor's first loop top;
- a completion at ``t`` succeeds its client's event during the commit; the executor then runs on,
  through its loop top (admission) and the next step's schedule, until it yields that step's
  timeout, and only then do the clients woken at ``t`` run and send their next requests (in the
  order of the completions, with arrival time ``t``). So a request sent at ``t`` is admitted at the
  loop top after the next commit (``VISIBLE`` marks what the loop top may take), or at ``t`` itself
  when the executor has nothing active: it waits for the wake-up the first send triggers, which runs
  after every client woken at ``t`` has sent;
- the completions' blocks become cached (prefix caching, as ``PrefixCache.on_finish``) and their
  slots are released (``span._release``) in the span too.

``ClosedLoop`` also stands in the executor's ``waiting`` list: the requests sent and not yet
admitted, of which Python's loop top takes the visible ones.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from specplan.acceptance.oracles import AcceptanceOracle
from specplan.simulator.open_loop import ADMITTED, IDLE_FOR_GOOD, MUST_ADMIT, RUNNING, SUBMITTED, admit
from specplan.simulator.prefix_cache import OFF, cache_finished
from specplan.simulator.state import N_ACTIVE

# Slots of ``ClosedLoop.ints`` after the two it shares with ``open_loop`` (requests sent, admitted):
# requests the executor's loop top may admit (sent before its last step was scheduled), the clients.
VISIBLE, CLIENTS = 2, 3
CLOSED = 2  # ``SpanState.owns_arrivals`` of a replica whose spans serve closed-loop clients
NO_SESSIONS = np.zeros(0, dtype=np.int64)  # ``ClosedLoop.following`` without sessions (and of no closed loop)


def heard_in_python(ex) -> bool:
    """Whether something only Python can tell hears an executor's completions: a legacy gate,
    TensorRT-LLM's SeqSlots or an oracle's own ``on_finish``."""
    return ex.legacy_gate is not None or ex._slots is not None or type(ex.oracle).on_finish is not AcceptanceOracle.on_finish


def owns_clients(ex) -> bool:
    """Whether an executor's spans serve its closed-loop clients themselves: it is the only replica,
    its steps span, the clients send at once (no think time), and a completion matters to nothing but
    the request state, the prefix cache and the client (``heard_in_python`` says no)."""
    w = ex.w
    thinks = w.think_time is not None and bool((np.asarray(w.think_time) > 0).any())
    return ex.stepper is None and w.arrivals is None and not thinks and not heard_in_python(ex) and ex._spans()


class ClosedLoop:
    """The closed-loop clients of ``frontend`` (no think time) as the spans serve them; as ``waiting``,
    the requests sent and not yet admitted that the executor's loop top may take. ``sent`` is a ring of
    one place a client (a client has at most one request sent and not admitted): the ``k``-th request
    sent is at ``k % C``. Their times go into the frontend's own ``arrival``, and ``following`` gives
    each request's successor in its client's queue (-1 after the last); without sessions it is empty
    and the successor of ``g`` is ``g + C`` (ten million requests hold no array but their times)."""

    def __init__(self, frontend) -> None:
        n = len(frontend.w.prompt_lens)
        queues = frontend.client_queues()
        firsts = [int(q[0]) for q in queues if len(q)]  # every client's process starts before the executor's
        self.sent = np.zeros(len(queues), dtype=np.int64)
        self.sent[:len(firsts)] = firsts
        self.times = frontend.arrival
        self.times[firsts] = 0.0
        self.following = NO_SESSIONS
        if frontend._successors:
            self.following = np.full(n, -1, dtype=np.int64)
            for queue in map(np.asarray, queues):
                self.following[queue[:-1]] = queue[1:]
        self.ints = np.array([len(firsts), 0, len(firsts), len(queues)], dtype=np.int64)

    def __len__(self) -> int:
        return int(self.ints[VISIBLE] - self.ints[ADMITTED])

    def __getitem__(self, first: slice) -> list[int]:
        """The first ``first.stop`` visible waiting requests (``waiting[:room]``)."""
        start = int(self.ints[ADMITTED])
        return self.sent.take(range(start, start + min(first.stop, len(self))), mode="wrap").tolist()

    def __delitem__(self, first: slice) -> None:
        """Admitted: the first ``first.stop`` visible waiting requests leave the queue."""
        self.ints[ADMITTED] += min(first.stop, len(self))


def arrays(closed_loop: ClosedLoop) -> tuple:
    """A ``ClosedLoop``'s sent requests, their times, no new-run flags, its counters and the successors,
    as the span reads them (``open_loop.arrays``' order, then ``following``)."""
    return closed_loop.sent, closed_loop.times, np.zeros(0, dtype=np.bool_), closed_loop.ints, closed_loop.following


@njit(cache=True)
def on_finish(a, count, t):
    """The ``count`` completions of the step committed at ``t`` (``a.finished``, in order), in the span
    (``a``, a ``span_state.SpanState``): their blocks cached, and each one's client's next request sent."""
    ints, sent, times, rid = a.arrival_ints, a.arrival_order, a.arrival_times, a.rid
    for j in range(count):
        g = rid[a.finished[j]]
        if a.pc_mode != OFF:
            cache_finished(g, a.pc_off, a.pc_ids, a.pc_cached)
        nxt = a.following[g] if len(a.following) else g + ints[CLIENTS]
        if 0 <= nxt < len(times):
            sent[ints[SUBMITTED] % len(sent)] = nxt
            times[nxt] = t
            ints[SUBMITTED] += 1


@njit(cache=True)
def loop_top(a, t):
    """The executor's loop top at ``t`` (``open_loop.loop_top``'s counterpart): admit the visible
    waiting requests there is room for; with nothing active, the clients woken at ``t`` send first
    (the wake-up runs after them), then admit again. Returns what is left to do and the time."""
    ints, counters = a.arrival_ints, a.counters
    while True:
        queued, room = ints[VISIBLE] - ints[ADMITTED], a.max_active - counters[N_ACTIVE]
        if queued and room > 0 and not admit(a.arrival_order, ints, min(queued, room), a.prompt_lens, a.output_lens,
                                             a.rid, a.plen, a.olen, a.ctx_target, a.act, a.free, counters):
            return MUST_ADMIT, t
        if counters[N_ACTIVE]:
            return RUNNING, t
        if ints[VISIBLE] == ints[SUBMITTED]:
            return IDLE_FOR_GOOD, t  # nothing active, nothing sent: every client's requests are done
        ints[VISIBLE] = ints[SUBMITTED]
