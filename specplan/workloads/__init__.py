"""Traffic: requests with real token histories, trace loaders, tokenizers, arrivals."""

from specplan.workloads.request import Request

__all__ = ["Request"]
