"""A run's tables as files: each table's numpy columns handed to Arrow in bulk and written as Parquet
(and as CSV when asked), through ``specplan.atomic`` so a file is whole or absent.

No pandas and no Python per row: a numeric column's Arrow array is built on the numpy array's own
buffer (``pa.Array.from_buffers``; ``pa.array`` would import pandas, 0.4 CPU-s, to ask whether the
input is one of its types), a boolean one on its packed bits, and a string column (request ids and
categories: one entry a request) on its UTF-8 bytes and offsets. A 10,000-request run's tables
(2.56 M emission rows) cost 4.6 CPU-s through pandas as Parquet and CSV; here, as Parquet, about
0.15, pyarrow's import included (``benchmarks/bench_outputs.py``). Parquet columns are written plain (no dictionary pages: times and counters rarely repeat enough to pay for
them) and zstd-compressed, the smallest and among the fastest of the options measured.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from specplan.atomic import atomic_write

if TYPE_CHECKING:  # imported when a table is written: the command line names TABLES before numpy loads
    import numpy as np

#: The tables a run writes, in order (``SimResult.table_columns``).
TABLES = ("requests", "iterations", "emissions")
#: The formats a table may be written in; Parquet always, CSV when asked.
FORMATS = ("parquet", "csv")


def arrow_array(values: np.ndarray):
    """One column as a ``pyarrow.Array`` holding the same values: numbers on the array's own buffer
    (NaN kept as NaN), booleans packed, strings (an object or unicode array; None is null) encoded."""
    import numpy as np
    import pyarrow as pa

    values = np.asarray(values)
    n = len(values)
    if values.dtype.kind in "OU":
        items = values.tolist()
        valid = np.fromiter((v is not None for v in items), dtype=bool, count=n)
        encoded = [b"" if v is None else str(v).encode() for v in items]
        offsets = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(np.fromiter(map(len, encoded), dtype=np.int32, count=n), out=offsets[1:])
        validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
        return pa.Array.from_buffers(pa.string(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))])
    if values.dtype == bool:
        return pa.Array.from_buffers(pa.bool_(), n, [None, pa.py_buffer(np.packbits(values, bitorder="little"))])
    values = np.ascontiguousarray(values, dtype=values.dtype.newbyteorder("<"))
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), n, [None, pa.py_buffer(values)])


def arrow_table(columns: Mapping[str, np.ndarray]):
    """The columns as one ``pyarrow.Table``, in their order (:func:`arrow_array` each)."""
    import pyarrow as pa

    return pa.Table.from_arrays([arrow_array(v) for v in columns.values()], names=list(columns))


def write_table(path: str | os.PathLike, columns: Mapping[str, np.ndarray], fmt: str = "parquet") -> Path:
    """Write ``columns`` to ``path`` as ``fmt`` (``parquet`` or ``csv``), atomically."""
    table = arrow_table(columns)
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return atomic_write(path, lambda tmp: pq.write_table(table, tmp, compression="zstd", use_dictionary=False))
    if fmt == "csv":
        import pyarrow.csv as pcsv

        options = pcsv.WriteOptions(quoting_style="needed")  # quotes only where a value needs them
        return atomic_write(path, lambda tmp: pcsv.write_csv(table, tmp, options))
    raise ValueError(f"write_table: format {fmt!r} is not one of {FORMATS}")

