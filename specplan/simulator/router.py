"""Routing policies of a fleet: which replica gets a request, decided when it arrives.

Each policy is a small pure object: ``choose(rid, load)`` reads a :class:`Load` snapshot of the
replicas at that instant and returns a replica index; nothing else is consulted, so a policy can be
tested on hand-built snapshots. Ties go to the lowest replica index (deterministic). A policy whose
``reads_load`` is False is handed no snapshot (``None``).

- ``round_robin``: replicas in turn, whatever their load.
- ``least_outstanding``: the replica with the fewest requests waiting or running (the "least
  requests" / join-the-shortest-queue balancers of serving gateways).
- ``least_kv``: the replica with the smallest fraction of its KV cache in use, then the fewest
  outstanding requests (KV-utilisation-aware routing; a replica's queued requests hold no KV yet).
- ``session_affinity``: a session's later turns go where its first turn went, so the replica that
  holds the conversation's prefix serves it (prefix-cache-aware routing); first turns go to the
  least-outstanding replica.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from specplan.errors import ConfigError


@dataclass(frozen=True)
class Load:
    """The replicas as the router sees them at one arrival.

    ``outstanding[i]``: requests submitted to replica ``i`` and not yet finished; ``kv_used[i]``:
    the fraction of its KV blocks in use; ``assigned[rid]``: the replica each earlier request went
    to (-1 if not yet routed); ``predecessor[rid]``: the previous turn of the request's session (-1
    for a first turn; None when no request has one).
    """

    outstanding: np.ndarray
    kv_used: np.ndarray
    assigned: np.ndarray
    predecessor: Optional[np.ndarray]


class RoundRobin:
    """Replica ``j mod N`` for the ``j``-th routed request."""

    reads_load = False  # the fleet need not take a snapshot for it

    def __init__(self, replicas: int) -> None:
        self.replicas = replicas
        self._next = 0

    def choose(self, rid: int, load: Load) -> int:
        i = self._next
        self._next = (i + 1) % self.replicas
        return i


class LeastOutstanding:
    """The replica with the fewest outstanding requests."""

    reads_load = True

    def __init__(self, replicas: int) -> None:
        self.replicas = replicas

    def choose(self, rid: int, load: Load) -> int:
        return int(np.argmin(load.outstanding))  # argmin returns the first minimum: lowest index


class LeastKV:
    """The replica with the least KV cache in use, then the fewest outstanding requests."""

    reads_load = True

    def __init__(self, replicas: int) -> None:
        self.replicas = replicas

    def choose(self, rid: int, load: Load) -> int:
        return int(np.lexsort((np.arange(self.replicas), load.outstanding, load.kv_used))[0])


class SessionAffinity:
    """A later turn goes to its predecessor's replica; a first turn to the least outstanding one."""

    reads_load = True

    def __init__(self, replicas: int) -> None:
        self.replicas = replicas
        self._first = LeastOutstanding(replicas)

    def choose(self, rid: int, load: Load) -> int:
        pred = -1 if load.predecessor is None else int(load.predecessor[rid])
        if pred >= 0 and load.assigned[pred] >= 0:
            return int(load.assigned[pred])
        return self._first.choose(rid, load)


ROUTERS = {"round_robin": RoundRobin, "least_outstanding": LeastOutstanding, "least_kv": LeastKV,
           "session_affinity": SessionAffinity}


def make_router(name: str, replicas: int):
    """The policy ``cluster.router`` names, for ``replicas`` replicas."""
    if name not in ROUTERS:
        raise ConfigError(f"cluster.router: unknown router {name!r} (choose {', '.join(ROUTERS)})")
    return ROUTERS[name](replicas)
