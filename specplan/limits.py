"""Sizes a run cannot hold, refused before any work: an estimate of the memory that replicas,
closed-loop clients and requests take, against this machine's physical memory.

The per-unit figures were measured on a small run of the bundled simulator (synthetic 16-token
prompts, 8-token outputs, alpha acceptance, 64 requests) under ``tracemalloc`` (peak bytes
allocated, numpy's buffers included) and the process's peak RSS:

- a replica (``cluster.replicas``, ``capacity --max-replicas``): 2 -> 256 replicas raised the peak
  by 155 MB (611 KB each; RSS, which counts only the pages touched: 147 KB each), the same at 64
  and at 1024 requests, so it is per replica, not per request; 647 KB once a replica kept its
  sequence slots as TensorRT-LLM does. ``REPLICA_BYTES`` takes the allocated figure with a margin:
  a longer run touches what it allocated.
- a closed-loop client (``workload.concurrency``, one SimPy process each; only as many clients start
  as there are requests): 1 000 -> 5 000 clients of 5 000 requests raised the peak by 3.8 MB (about
  960-1 020 B each; 880 B at 20 000 requests); ``CLIENT_BYTES`` takes it with a
  margin.
- a request: about 5 KB with its tokens and drafter tables (a trace's requests, or synthetic ones
  whose run reads tokens), from ``benchmarks/bench_memory.py``'s 100,000-request modes; a synthetic
  request whose run reads lengths only (``run_reads.lengths_only``) holds a few numbers by request
  id (lengths, arrival, results, the acceptance stream's place), the engine a slot only while it is
  in flight: LENGTHS_REQUEST_BYTES, from ``bench_memory.py --scale`` (peak RSS at ten million
  requests less a small run's, over the requests).

The machine's memory is the physical total (``SC_PHYS_PAGES * SC_PAGE_SIZE``, else ``/proc/meminfo``):
a run estimated above it cannot finish, whatever else is running; one below it may still be slow.
"""

from __future__ import annotations

import os
from typing import Optional

REPLICA_BYTES = 800_000
CLIENT_BYTES = 1_200
REQUEST_BYTES = 5_000
LENGTHS_REQUEST_BYTES = 200


def machine_memory_bytes() -> Optional[int]:
    """This machine's physical memory in bytes, or None where the system does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        pass
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _size(n: float) -> str:
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n / 1e3:.3g} KB"


def memory_refusal(parts: dict[str, tuple[int, int, str]]) -> Optional[tuple[str, str]]:
    """``(field, message)`` when the parts cannot fit this machine, else None.

    ``parts`` maps the setting that sizes each part (a config field or an option) to ``(count,
    bytes each, what is counted)``; the setting named is the one whose part is largest, with the
    estimate, the machine's memory and the fix."""
    memory = machine_memory_bytes()
    total = sum(count * each for count, each, _ in parts.values())
    if memory is None or total <= memory:
        return None
    field, (count, each, noun) = max(parts.items(), key=lambda kv: kv[1][0] * kv[1][1])
    rest = total - count * each
    others = f" plus {_size(rest)} for the rest of the run" if rest else ""
    room = max(1, (memory - rest) // each)
    return field, (f"{count:,} {noun} need about {_size(count * each)} of memory ({_size(each)} each{others}) but "
                   f"this machine has {_size(memory)}; lower {field} (at most about {room:,} fit)")


def run_parts(replicas: int, clients: int, requests: int, replicas_setting: str = "cluster.replicas",
              request_bytes: int = REQUEST_BYTES) -> dict[str, tuple[int, int, str]]:
    """The parts of one run's memory, keyed by the setting that sizes each (the replicas' is an option
    where a command chooses them, ``capacity --max-replicas``)."""
    return {replicas_setting: (replicas, REPLICA_BYTES, "replicas"),
            "workload.concurrency": (clients, CLIENT_BYTES, "closed-loop clients"),
            "workload.num_requests": (requests, request_bytes, "requests")}


def fleet_refusal(cfg, replicas: int, setting: str = "cluster.replicas") -> Optional[tuple[str, str]]:
    """``(setting, message)`` when a fleet of ``replicas`` copies of ``cfg``'s engine serving its workload
    cannot fit this machine, else None; ``setting`` is what chose the fleet size (``cluster.replicas``, or
    a command's option such as ``capacity --max-replicas``)."""
    from specplan.run_reads import lengths_only

    w = cfg.workload
    clients = min(w.concurrency, w.num_requests) if w.arrival == "closed_loop" else 0  # the clients that start
    each = LENGTHS_REQUEST_BYTES if lengths_only(cfg) else REQUEST_BYTES
    return memory_refusal(run_parts(replicas, clients, w.num_requests, setting, each))
