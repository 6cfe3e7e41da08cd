"""Nothing half written: every file specplan writes goes to a temporary name beside it, is flushed to
disk, and only then renamed into place, so a crash or ``kill -9`` leaves the old file or none."""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

TMP_SUFFIX = ".tmp"  # temporary files are ".NAME.<random>.tmp" beside their target


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path beside ``path`` to write to; renamed onto ``path`` when the block completes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TMP_SUFFIX, dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb+") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp_path, 0o644)  # mkstemp creates 0600; results are meant to be shared
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def atomic_write(path: str | os.PathLike, write: Callable[[Path], object]) -> Path:
    """Call ``write(tmp_path)``, then move the result onto ``path`` (see ``atomic_path``)."""
    with atomic_path(path) as tmp:
        write(tmp)
    return Path(path)


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write UTF-8 text atomically."""
    return atomic_write(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))
