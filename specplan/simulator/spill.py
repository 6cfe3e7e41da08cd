"""Where a large run's logs go once they outgrow a chunk: ``.npy`` files in a folder of the system's
temporary directory (``$TMPDIR``), removed when the log that wrote them is freed (or the process
exits).

**The setting.** ``CHUNK_ROWS`` is the one definition of "large": a log holds at most that many
rows in memory; when it is full, the rows go to disk as one chunk and the log starts again from
the same arrays. A run that never fills a chunk never touches the disk and runs as it always did;
one that does keeps its resident memory bounded whatever its length, and its summary is computed
from the chunks exactly as from the whole log (``specplan.simulator.itl_stream``).
"""

from __future__ import annotations

import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Iterator

import numpy as np

#: Emission rows held in memory before a chunk goes to disk (16 bytes a row: 32 MiB).
CHUNK_ROWS = 1 << 21


class Spill:
    """Numbered chunks of named columns on disk, read back in the order written."""

    def __init__(self, prefix: str) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix=f"specplan-{prefix}-"))
        self.sizes: list[int] = []  # rows per chunk
        self._remove = weakref.finalize(self, shutil.rmtree, self.folder, True)

    def write(self, columns: dict[str, np.ndarray]) -> None:
        """One chunk: each column to its own file (equal lengths)."""
        k = len(self.sizes)
        for name, values in columns.items():
            np.save(self.folder / f"{k}-{name}.npy", values, allow_pickle=False)
        self.sizes.append(len(next(iter(columns.values()))))

    @property
    def rows(self) -> int:
        return sum(self.sizes)

    def read(self, names: tuple[str, ...]) -> Iterator[tuple[np.ndarray, ...]]:
        """Each chunk's ``names`` columns, in order (read into memory, one chunk at a time: a mapped
        file's pages would count in the resident set as they are read)."""
        for k in range(len(self.sizes)):
            yield tuple(np.load(self.folder / f"{k}-{name}.npy") for name in names)
