"""Registry of the traces shipped as package data under ``specplan/data/traces/``.

Each bundled trace is ``NAME.jsonl.gz`` with ``NAME.yaml`` beside it recording provenance, licence,
tokenizer, chat template and counts. ``kind`` is ``workload`` (a token trace of requests) or
``recorded_acceptance`` (per-step acceptance logs ``{"id", "accepted_per_step"}`` for acceptance
mode ``recorded``). They are built by ``scripts/build_traces.py``; nothing here reads the raw data.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

import yaml

from specplan.errors import ConfigError, TraceError
from specplan.workloads.synthetic import is_synthetic

KINDS = ("workload", "recorded_acceptance")


def traces_dir() -> Path:
    """The package-data folder holding the bundled traces."""
    return Path(str(resources.files("specplan") / "data" / "traces"))


@dataclass(frozen=True)
class BundledTrace:
    """One bundled trace: its name, kind, data file and the metadata recorded beside it."""

    name: str
    kind: str
    path: Path
    info: dict


@lru_cache(maxsize=1)
def _registry() -> dict[str, BundledTrace]:
    out: dict[str, BundledTrace] = {}
    folder = traces_dir()
    for meta_path in sorted(folder.glob("*.yaml")) if folder.is_dir() else []:
        try:
            info = yaml.safe_load(meta_path.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise TraceError(f"{meta_path}: invalid YAML ({exc})") from None
        name = meta_path.name[: -len(".yaml")]
        if not isinstance(info, dict) or info.get("kind") not in KINDS:
            raise TraceError(f"{meta_path}: field 'kind' must be one of {', '.join(KINDS)}")
        out[name] = BundledTrace(name, info["kind"], folder / f"{name}.jsonl.gz", info)
    return out


def bundled_traces(kind: str | None = None) -> dict[str, BundledTrace]:
    """All bundled traces by name, optionally only those of one ``kind``."""
    return {n: t for n, t in _registry().items() if kind is None or t.kind == kind}


def check_trace(spec: str | None) -> None:
    """Refuse, before any work, a ``workload.trace`` that is neither synthetic, a bundled trace's name
    nor a file (empty, missing, a folder): one TraceError line naming the field and the traces there are."""
    if is_synthetic(spec) or spec in bundled_traces("workload"):
        return
    names = ", ".join(bundled_traces("workload")) or "none"
    if not spec.strip():
        raise TraceError(f"workload.trace: empty; give a bundled trace ({names}), a trace file, or null for "
                         "synthetic lengths")
    path = Path(spec)
    if not path.exists():
        raise TraceError(f"workload.trace: {spec}: no bundled trace of that name and no such file (bundled: {names})")
    if not path.is_file():
        raise TraceError(f"workload.trace: {spec}: not a file; give a trace file or a bundled trace ({names})")


def get_bundled(name: str, kind: str = "workload") -> BundledTrace:
    """A bundled trace by name; a ConfigError lists the names there are."""
    traces = bundled_traces(kind)
    if name not in traces:
        raise ConfigError(f"no bundled {kind.replace('_', ' ')} trace named {name!r}; bundled: {', '.join(traces) or 'none'}")
    return traces[name]
