"""BurstGPT (HPMLL/BurstGPT): Azure OpenAI GPT-3.5 / GPT-4 traffic as a timestamped, length-only trace.

The CSV (``data/BurstGPT_{1,2}.csv`` and ``BurstGPT_without_fails_*.csv``) has the header
``Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type``: ``Timestamp`` in seconds from
the trace start, ``Model`` ``ChatGPT`` or ``GPT-4``, ``Log Type`` ``Conversation log`` or ``API log``.
Columns are found by name (later releases add ``Session ID`` and ``Elapsed time``; re-exported copies
reorder them). One prompt-only request per kept row, arriving at its ``Timestamp`` (the first kept row
at 0, run with ``workload.arrival: trace``).

Rows whose ``Response tokens`` is 0 are failed requests (the dataset's README; its
``without_fails`` files drop them) and are always skipped, as vLLM's ``BurstGPTDataset`` skips them.
Options (``workload.format_options``): ``model`` (a name or a list; vLLM's benchmark keeps ``GPT-4``
only, give ``model: GPT-4`` to match it) and ``log_type`` (``conversation`` or ``api``).
"""

from __future__ import annotations

import csv
import math
import os
import zlib
from pathlib import Path


from specplan.errors import ConfigError, TraceError
from specplan.workloads.datasets import _checked, prompt_only_request
from specplan.workloads.records import MAX_SEQUENCE_TOKENS, open_text, read_text
from specplan.workloads.request import Request
from specplan.workloads.timed import _sorted, placeholder_prompt

#: Columns every BurstGPT release has; ``Model`` and ``Log Type`` are needed only to filter on them.
BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")
LOG_TYPES = {"conversation": "Conversation log", "api": "API log"}


def csv_header(path: str | os.PathLike) -> list[str]:
    """The column names on a CSV file's first line (gzip-aware), read without loading the file."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"{path}: no such file")
    try:
        with open_text(path, "r") as fh:
            first = fh.readline()
    except (OSError, UnicodeDecodeError, EOFError, zlib.error):
        read_text(path)  # names why the file cannot be read
        raise
    return _names(next(csv.reader([first]), []))


def _names(row: list[str]) -> list[str]:
    return [c.strip().lstrip("\ufeff") for c in row]  # a spreadsheet's export may start with a BOM


def _option_names(value, option: str) -> set[str]:
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise ConfigError(f"workload.format_options.{option}: give a name or a list of names, got {value!r}")
    return set(names)


def _log_types(value) -> set[str]:
    out = set()
    for name in _option_names(value, "log_type"):
        key = name.strip().lower().removesuffix(" log")
        if key not in LOG_TYPES:
            raise ConfigError(f"workload.format_options.log_type: {name!r} is not a BurstGPT log type "
                              f"(give {', '.join(LOG_TYPES)})")
        out.add(LOG_TYPES[key])
    return out


def _number(text: str, column: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise TraceError(f"{where}: column '{column}' must be a number of seconds, got {text!r}")
    return value


def _count(text: str, column: str, where: str, minimum: int) -> int:
    try:
        value = float(text)  # a re-export may write 472.0
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value.is_integer() and minimum <= value <= MAX_SEQUENCE_TOKENS):
        raise TraceError(f"{where}: column '{column}' must be an integer from {minimum} to {MAX_SEQUENCE_TOKENS:,} "
                         f"(the longest context a served model takes), got {text!r}")
    return int(value)


def load_burstgpt(path: str | os.PathLike, *, model: str | list[str] | None = None,
                  log_type: str | list[str] | None = None) -> list[Request]:
    """A BurstGPT CSV: one prompt-only request per row kept, arrival from ``Timestamp``."""
    path = Path(path)
    rows = list(csv.reader(read_text(path).splitlines()))
    header = _names(rows[0]) if rows else []
    wanted = {"Model": model, "Log Type": log_type}
    for column in (*BURSTGPT_COLUMNS, *(c for c, v in wanted.items() if v is not None)):
        if column not in header:
            hint = "; give format: azure if this is the Azure trace" if "TIMESTAMP" in header else ""
            raise TraceError(f"{path}:1: missing column '{column}' of a BurstGPT trace (has {', '.join(header) or 'no header'}){hint}")
    col = {name: header.index(name) for name in (*BURSTGPT_COLUMNS, "Model", "Log Type") if name in header}
    models = _option_names(model, "model") if model is not None else None
    logs = _log_types(log_type) if log_type is not None else None
    seen_models: set[str] = set()
    out, failed, t0 = [], 0, None
    for line, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        where = f"{path}:{line}"
        if len(row) != len(header):
            raise TraceError(f"{where}: expected {len(header)} columns, got {len(row)}")
        t = _number(row[col["Timestamp"]], "Timestamp", where)
        prompt_len = _count(row[col["Request tokens"]], "Request tokens", where, 1)
        output_len = _count(row[col["Response tokens"]], "Response tokens", where, 0)
        if "Model" in col:
            seen_models.add(row[col["Model"]])
        if models is not None and row[col["Model"]] not in models:
            continue
        if logs is not None and row[col["Log Type"]] not in logs:
            continue
        if output_len == 0:  # a failed request: nothing was generated
            failed += 1
            continue
        t0 = t if t0 is None else t0
        out.append(prompt_only_request(f"burstgpt-{line - 1}", placeholder_prompt(prompt_len, line - 1), output_len,
                                       arrival_s=t - t0))
    if models is not None and not models <= seen_models:
        missing = sorted(models - seen_models)[0]
        raise ConfigError(f"workload.format_options.model: {missing!r} is not in {path} (models: {', '.join(sorted(seen_models))})")
    if not out:
        raise TraceError(f"{path}: no requests left ({failed} failed (Response tokens 0) skipped; "
                         "the model / log_type filters keep no other row)")
    return _sorted(_checked(out, path), path)
