"""Run records: one JSON file per (resolved config, seed), keyed by a hash of the config.

A record holds the resolved config (engine presets applied, every field explicit, the seed
included), the run's summary
and its description; nothing time- or host-dependent, so the same config gives the same bytes on
any backend. Files are written to a temporary name in the same folder and renamed into place, so a
kill at any moment leaves either the whole record or none (a stray temporary file at most, which is
ignored and swept away on the next run).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path


from specplan.atomic import TMP_SUFFIX, atomic_write
from specplan.config import SimConfig
from specplan.errors import SpecplanError
from specplan.simulator.metrics import plain

# Part of every key: bump it when the record layout or the simulator's results change meaning.
RECORD_FORMAT = 1


def config_json(cfg: SimConfig) -> dict:
    """The resolved config (engine presets applied, as ``simulate`` runs it) as plain JSON types,
    every field present and explicit: what a key is computed from and what a task is handed."""
    from specplan.simulator.run import resolve

    return resolve(cfg).model_dump(mode="json")


def config_key(cfg: SimConfig) -> str:
    """Hash of the canonical JSON of the resolved config (seed included) and the record format."""
    canonical = json.dumps({"format": RECORD_FORMAT, "config": config_json(cfg)}, sort_keys=True,
                           separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:24]


def make_record(cfg: SimConfig, summary: dict, description: dict) -> dict:
    """The record of one finished run."""
    return {
        "format": RECORD_FORMAT,
        "key": config_key(cfg),
        "config": config_json(cfg),
        "summary": plain(summary),
        "description": plain(description),
    }


def record_bytes(record: dict) -> bytes:
    """The exact file content of a record (stable: insertion order, strict JSON)."""
    return (json.dumps(record, indent=1, allow_nan=False) + "\n").encode()


class RecordStore:
    """A folder of records, ``<key>.json`` each."""

    def __init__(self, root: str | os.PathLike) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def path(self, key: str) -> Path:
        return self.root / f"{key}.json"

    def has(self, key: str) -> bool:
        return self.path(key).is_file()

    def read(self, key: str) -> dict:
        path = self.path(key)
        try:
            return json.loads(path.read_text())
        except FileNotFoundError:
            raise SpecplanError(f"{path}: no record (run the sweep first)") from None
        except json.JSONDecodeError as exc:
            raise SpecplanError(f"{path}: not a valid record ({exc.msg} at line {exc.lineno})") from None

    def write(self, record: dict) -> Path:
        """Write a record atomically; the file name is its key."""
        path = self.path(record["key"])
        data = record_bytes(record)
        atomic_write(path, lambda tmp: Path(tmp).write_bytes(data))
        return path

    def remove_stale_temporaries(self) -> int:
        """Delete temporary files a killed run left behind; returns how many."""
        stale = list(self.root.glob(".*" + TMP_SUFFIX))
        for p in stale:
            p.unlink(missing_ok=True)
        return len(stale)
