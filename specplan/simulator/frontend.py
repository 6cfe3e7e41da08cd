"""The request frontend: arrivals, closed-loop clients and multi-turn sessions.

It feeds the executor's waiting queue (``py_executor``'s request queue, vLLM's ``waiting``) and
learns about completions from it; it knows nothing about scheduling or speculation.
"""

from __future__ import annotations

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
        self._on_submit = on_submit
        self._successors: dict[int, list[int]] = {}
        for rid, pred in enumerate(workload.predecessor.tolist()):
            if pred >= 0:
                self._successors.setdefault(pred, []).append(rid)
        self._completion: dict[int, simpy.Event] = {}

    def _think(self, rid: int) -> float:
        return 0.0 if self.w.think_time is None else float(self.w.think_time[rid])

    def _submit(self, rid: int) -> None:
        self.arrival[rid] = self.env.now
        self._on_submit(rid)

    def _open_loop(self):
        roots = np.flatnonzero(self.w.predecessor < 0)
        order = roots[np.argsort(self.w.arrivals[roots], kind="stable")]
        for rid in order.tolist():
            delay = self.w.arrivals[rid] - self.env.now
            if delay > 0:
                yield self.env.timeout(delay)
            self._submit(rid)

    def _client(self, queue: list[int]):
        """A closed-loop client: send a request, wait for it, think, send the next."""
        while queue:
            rid = queue.pop(0)
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
        roots = np.flatnonzero(self.w.predecessor < 0).tolist()
        clients = max(1, self.w.concurrency)
        for c in range(clients):
            # Client c sends every clients-th root request; a session's turns follow their root.
            queue: list[int] = []
            for root in roots[c::clients]:
                queue.append(root)
                nxt: Optional[list[int]] = self._successors.get(root, [])
                while nxt:
                    queue.append(nxt[0])
                    nxt = self._successors.get(nxt[0], [])
            self.env.process(self._client(queue))

    def on_finish(self, rids) -> None:
        """Completed requests: wake their clients, or send the session's next turn (open loop)."""
        for rid in rids:
            ev = self._completion.pop(rid, None)
            if ev is not None:
                ev.succeed()
            if self.w.arrivals is not None:
                for nxt in self._successors.get(rid, ()):
                    self.env.process(self._session_followup(nxt))
