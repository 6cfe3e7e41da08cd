"""Output paths checked before any work starts: a run that would end by failing to write its results
fails at once instead, with one line naming the option, the path and what to choose instead."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from specplan.errors import ConfigError


def _first_existing(path: Path) -> Path:
    """``path`` or its nearest existing ancestor (what a ``mkdir -p`` would have to write into)."""
    for candidate in (path, *path.parents):
        if candidate.exists() or candidate.is_symlink():
            return candidate
    return Path(".")


def _probe(directory: Path, option: str, target: Path) -> None:
    """Create and remove a temporary file in ``directory``: permission bits alone miss read-only mounts
    and lie for root."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=".specplan-probe.", dir=directory)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise ConfigError(f"{option} {target}: cannot write in {directory} ({exc.strerror or exc}); "
                          "choose a writable place") from None


def check_output_dir(path: str | os.PathLike, option: str = "--out") -> Path:
    """Make sure ``path`` is (or can become) a writable directory, creating it; returns it."""
    path = Path(path)
    anchor = _first_existing(path)
    if anchor.exists() and not anchor.is_dir():
        where = "is" if anchor == path else f"is under {anchor}, which is"
        raise ConfigError(f"{option} {path}: {where} not a directory; choose a directory path")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{option} {path}: cannot create the directory ({exc.strerror or exc}); "
                          "choose a writable place") from None
    _probe(path, option, path)
    return path


def check_output_file(path: str | os.PathLike, option: str = "--out") -> Path:
    """Make sure ``path`` can be written atomically: not a directory or a device, its folder writable."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"{option} {path}: is a directory; give a file name")
    if path.exists() and not path.is_file():
        raise ConfigError(f"{option} {path}: is not a regular file (a device or pipe cannot be replaced "
                          "atomically); give a file name")
    if path.name in ("", ".", ".."):
        raise ConfigError(f"{option} {path}: give a file name")
    check_output_dir(path.parent, option)
    return path
