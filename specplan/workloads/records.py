"""The one parsing helper every text-trace loader shares.

It reads a JSON-lines file or a JSON array (gzip-compressed when the name ends in ``.gz``), yields
each record with the line it starts on, and checks fields so that every error is one line naming the
file, the line and the field. Loaders build their whole result before returning, so a malformed
record never leaves a half-loaded workload behind.
"""

from __future__ import annotations

import gzip
import io
import json
import math
import zlib
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from specplan.atomic import atomic_path
from specplan.errors import TraceError, one_line, read_checked, read_failure

def open_text(path: Path, mode: str):
    """Open text for reading or writing, through gzip when the name ends in ``.gz``."""
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, mode + "b"), encoding="utf-8")
    return open(path, mode, encoding="utf-8")


#: The latest arrival a trace may state, in seconds after its first: a year. Published production
#: traces span hours to weeks; a later time is a unit slip (ms or us read as s) or a corrupt field, and
#: would simulate an idle year (a run over 1e300 s reports 1e-300 tok/s).
MAX_ARRIVAL_S = 366 * 86400.0


def check_arrival(value, where: str, field: str, scale: float = 1.0) -> float:
    """An arrival time in seconds (``value * scale``), refused in one TraceError line naming ``where``
    and ``field`` unless finite, >= 0 and at most ``MAX_ARRIVAL_S``."""
    t = float(value) * scale
    if not math.isfinite(t) or t < 0 or t > MAX_ARRIVAL_S:
        raise TraceError(f"{where}: field '{field}' must be a time from 0 to {MAX_ARRIVAL_S:.0f} s (a year after "
                         f"the first arrival), got {value!r}; check its unit")
    return t


# The longest context any served model takes (Llama 4 Scout's 10M tokens): a trace row claiming more is
# a unit or column slip, and its placeholder tokens would be allocated before any other check.
MAX_SEQUENCE_TOKENS = 10_000_000


def check_length(value: int, where: str, field: str) -> int:
    """A token count from a trace, refused in one TraceError line unless 1 <= value <= ``MAX_SEQUENCE_TOKENS``."""
    if not 1 <= value <= MAX_SEQUENCE_TOKENS:
        raise TraceError(f"{where}: field '{field}' must be a token count from 1 to {MAX_SEQUENCE_TOKENS:,} (the "
                         f"longest context a served model takes), got {value}")
    return value


_TYPE_NAMES = {str: "a string", int: "an integer", list: "a list", dict: "an object", float: "a number"}


@dataclass(frozen=True)
class Where:
    """A position in a source file, used to build error messages."""

    path: Path
    line: int

    def error(self, message: str, field: str | None = None) -> TraceError:
        """A TraceError for this position, naming ``field`` when given."""
        if field is None:
            return TraceError(f"{self.path}:{self.line}: {message}")
        return TraceError(f"{self.path}:{self.line}: field '{field}' {message}")


#: The largest trace read whole (text, or text once decompressed): parsed, its records take several
#: times its size in memory; a bigger file is better split or sampled first.
MAX_TRACE_BYTES = 2 * 1024**3


def read_text(path: str | Path) -> str:
    """The whole file as text (gzip-aware); a missing, unreadable, oversized or non-UTF-8 file is a
    one-line TraceError (``errors.read_checked``, with the trace limit)."""
    path = Path(path)
    if path.suffix != ".gz":
        return read_checked(path, error=TraceError, max_bytes=MAX_TRACE_BYTES)
    if not path.is_file():
        raise TraceError(f"{path}: no such file")
    try:
        with open_text(path, "r") as fh:
            text = fh.read(MAX_TRACE_BYTES + 1)  # characters: a decompression bomb stops here
        if len(text) > MAX_TRACE_BYTES:
            raise TraceError(f"{path}: more than {MAX_TRACE_BYTES} characters once decompressed; split or sample it")
        return text
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path}: {read_failure(exc)}") from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:  # a .gz that is not gzip, or cut short
        raise TraceError(f"{path}: not a complete gzip file ({one_line(exc) or type(exc).__name__}); "
                         "re-download or re-export it, or drop the .gz suffix if it is plain text") from None
    except OSError as exc:
        raise TraceError(f"{path}: cannot read ({read_failure(exc)})") from None


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _iter_array(text: str, path: Path) -> Iterator[tuple[Where, Any]]:
    decoder = json.JSONDecoder()
    pos = text.index("[") + 1
    n = len(text)

    def skip_ws(i: int) -> int:
        while i < n and text[i] in " \t\r\n":
            i += 1
        return i

    pos = skip_ws(pos)
    if pos < n and text[pos] == "]":
        return
    while True:
        try:
            obj, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg} at column {exc.colno})") from None
        yield Where(path, _line_of(text, pos)), obj
        pos = skip_ws(end)
        if pos < n and text[pos] == ",":
            pos = skip_ws(pos + 1)
            continue
        if pos < n and text[pos] == "]":
            if text[pos + 1 :].strip():
                raise TraceError(f"{path}:{_line_of(text, pos + 1)}: invalid JSON (extra data after the array)")
            return
        raise TraceError(f"{path}:{_line_of(text, pos)}: invalid JSON (expected ',' or ']' between records)")


def iter_records(path: str | Path) -> Iterator[tuple[Where, Any]]:
    """Yield ``(where, record)`` for every record of a JSON-lines file or a JSON array file.

    A file whose first non-blank character is ``[`` is one JSON array; anything else is JSON lines
    (blank lines skipped). Invalid JSON raises TraceError with the file and line.
    """
    path = Path(path)
    text = read_text(path)
    if text.lstrip().startswith("["):
        yield from _iter_array(text, path)
        return
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TraceError(f"{path}:{lineno}: invalid JSON ({exc.msg} at column {exc.colno})") from None
        yield Where(path, lineno), obj


def first_record(path: str | Path) -> Any:
    """The first record of a JSON / JSON-lines file (for format sniffing); TraceError if there is none."""
    for _, obj in iter_records(path):
        return obj
    raise TraceError(f"{path}: the file holds no records")


def get_field(obj: Any, name: str, kind: type | tuple[type, ...], where: Where, *, nonempty: bool = False, label: str | None = None) -> Any:
    """``obj[name]`` checked for presence, type (bools are not integers) and, optionally, non-emptiness.

    ``label`` is the field's name in messages when it differs from ``name`` (e.g. ``choices[0].turns``).
    """
    label = label or name
    if not isinstance(obj, dict):
        raise where.error(f"expected a JSON object, got {type(obj).__name__}")
    if name not in obj or obj[name] is None:
        raise where.error(f"missing field '{label}'")
    return check_value(obj[name], kind, where, label, nonempty=nonempty)


def check_value(value: Any, kind: type | tuple[type, ...], where: Where, label: str, *, nonempty: bool = False) -> Any:
    """Type-check one value already taken out of a record (see :func:`get_field`)."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) or not isinstance(value, kinds):
        wanted = " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)
        raise where.error(f"must be {wanted}, got {type(value).__name__}", label)
    if nonempty and (not value or (isinstance(value, str) and not value.strip())):
        raise where.error("is empty", label)
    return value


@contextmanager
def atomic_writer(path: str | Path, binary: bool = False):
    """A handle (text, or bytes with ``binary``) on a temporary file in the target folder, renamed
    onto ``path`` only when the block completes; gzip when the name ends in ``.gz``, with a fixed
    header so output is byte-reproducible. On error the target is left untouched."""
    with atomic_path(path) as tmp, open(tmp, "wb") as raw:
        stream = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) if Path(path).suffix == ".gz" else raw
        with stream if binary else io.TextIOWrapper(stream, encoding="utf-8", newline="\n") as fh:
            yield fh


def write_jsonl(records: Iterable[dict], path: str | Path) -> Path:
    """Write one compact JSON object per line, atomically (see :func:`atomic_writer`)."""
    with atomic_writer(path) as fh:
        for rec in records:
            fh.write(json.dumps(rec, separators=(",", ":")) + "\n")
    return Path(path)
