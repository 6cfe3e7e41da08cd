"""The scenario a command runs (``simulate``, ``recommend``, ``capacity``): the config with its layer
and ``--set`` overrides, and its trace checked before the command prints or runs anything."""

from __future__ import annotations


def load_scenario(path=None, overrides: list[str] | None = None, layer=None):
    """``config.load_config``'s ``SimConfig``, refused in one line when ``workload.trace`` names neither a
    bundled trace nor a file (``workloads.bundled.check_trace``)."""
    from specplan.config import load_config
    from specplan.workloads.bundled import check_trace

    cfg = load_config(path, overrides, layer)
    check_trace(cfg.workload.trace)
    return cfg
