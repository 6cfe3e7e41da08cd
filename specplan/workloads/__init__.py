"""Traffic: requests with real token histories, trace loaders, tokenizers, arrivals.

- :func:`load_workload`: a bundled trace by name (``specplan workloads list``) or a trace file.
- :func:`build_requests`: the requests of one run from a ``WorkloadConfig`` (sampling, sessions,
  arrival times).
"""

from specplan.workloads.formats import load_workload
from specplan.workloads.request import Request
from specplan.workloads.traffic import build_requests

__all__ = ["Request", "build_requests", "load_workload"]
