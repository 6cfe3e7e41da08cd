"""The request frontend: arrivals, closed-loop clients and multi-turn sessions.

It feeds the executor's waiting queue (``py_executor``'s request queue, vLLM's ``waiting``) and
learns about completions from it; it knows nothing about scheduling or speculation.
"""

from __future__ import annotations

import weakref
from types import MethodType
from typing import Callable, Optional

import numpy as np
import simpy


class Frontend:
    """Submits requests at their arrival times (open loop) or when a client is free (closed loop).

    ``workload`` is a ``specplan.simulator.inputs.Workload``. A session's next turn is sent after the
    previous turn completes and its think time passes.
    """

    def __init__(self, env: simpy.Environment, workload, on_submit: Callable[[int], None]) -> None:
        self.env = env
        self.w = workload
        self.arrival = np.full(len(workload.prompt_lens), np.nan)
        # The owner (an executor or a fleet) holds this frontend, so its submit method is held weakly:
        # a strong one would close a reference cycle, and a finished run's logs would wait for a full
        # collection, which a process of many small runs reaches only after thousands of them.
        self._on_submit = weakref.WeakMethod(on_submit) if isinstance(on_submit, MethodType) else lambda: on_submit
        self._successors: dict[int, list[int]] = {}
        if workload.predecessor is not None:
            later = np.flatnonzero(workload.predecessor >= 0)  # later turns only: no list of every request
            for rid, pred in zip(later.tolist(), workload.predecessor[later].tolist()):
                self._successors.setdefault(pred, []).append(rid)
        self._completion: dict[int, simpy.Event] = {}

    def _think(self, rid: int) -> float:
        return 0.0 if self.w.think_time is None else float(self.w.think_time[rid])

    def _submit(self, rid: int) -> None:
        self.arrival[rid] = self.env.now
        self._on_submit()(rid)

    def _roots(self):
        # The first turns, in id order: every request when none has a predecessor (a range: ten
        # million ids held by none).
        p = self.w.predecessor
        return range(len(self.w.prompt_lens)) if p is None else np.flatnonzero(p < 0)

    def open_loop_order(self):
        """The first turns in the order they are sent: by arrival time, ties in id order."""
        roots = self._roots()
        times = self.w.arrivals if self.w.predecessor is None else self.w.arrivals[roots]  # all roots: no copy
        # Roots already in arrival order (a Poisson process's cumulative times) are sent as they are.
        return roots if not (times[1:] < times[:-1]).any() else np.asarray(roots)[np.argsort(times, kind="stable")]

    def _open_loop(self):
        for rid in map(int, self.open_loop_order()):  # not a list of every request
            delay = self.w.arrivals[rid] - self.env.now
            if delay > 0:
                yield self.env.timeout(delay)
            self._submit(rid)

    def _client(self, queue):
        """A closed-loop client: send each request of ``queue`` in turn, wait for it, think, send the next."""
        for rid in map(int, queue):
            think = self._think(rid)
            if think > 0:
                yield self.env.timeout(think)
            done = self.env.event()
            self._completion[rid] = done
            self._submit(rid)
            yield done

    def _session_followup(self, rid: int):
        think = self._think(rid)
        if think > 0:
            yield self.env.timeout(think)
        self._submit(rid)

    def start(self) -> None:
        """Start the arrival process (open loop) or one process per client (closed loop)."""
        if self.w.arrivals is not None:
            self.env.process(self._open_loop())
            return
        for queue in self.client_queues():
            self.env.process(self._client(queue))

    def client_queues(self) -> list:
        """Each closed-loop client's requests in the order it sends them: client c of C sends every C-th
        root request, each followed by its session's turns (a view or a range of the roots when there
        are no sessions, not a list)."""
        roots = self._roots()
        clients = max(1, min(self.w.concurrency, len(roots)))  # a client without a request never runs
        if not self._successors:
            return [roots[c::clients] for c in range(clients)]
        queues = []
        for c in range(clients):
            queue: list[int] = []
            for root in roots[c::clients].tolist():
                queue.append(root)
                nxt: Optional[list[int]] = self._successors.get(root, [])
                while nxt:
                    queue.append(nxt[0])
                    nxt = self._successors.get(nxt[0], [])
            queues.append(queue)
        return queues

    @property
    def hears_finish(self) -> bool:
        """Whether a completion does anything here: a closed-loop client waits on it, or an open-loop
        session sends its next turn after it."""
        return self.w.arrivals is None or bool(self._successors)

    def on_finish(self, rids) -> None:
        """Completed requests: wake their clients, or send the session's next turn (open loop)."""
        for rid in rids:
            ev = self._completion.pop(rid, None)
            if ev is not None:
                ev.succeed()
            if self.w.arrivals is not None:
                for nxt in self._successors.get(rid, ()):
                    self.env.process(self._session_followup(nxt))
