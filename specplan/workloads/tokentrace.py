"""Token traces: JSON lines of ``{"id", "prompt_ids", "output_ids"}`` plus optional
``"category"``, ``"session"``, ``"turn"``, ``"arrival_s"`` and ``"max_new_tokens"`` (the generation
limit the request ran with, at least the output's length). Gzip-compressed when the name ends in
``.gz``. The format every other loader can export to, and what the drafters replay."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

import numpy as np

from specplan.errors import TraceError
from specplan.workloads.records import check_arrival, iter_records, write_jsonl
from specplan.workloads.request import Request

MAX_TOKEN_ID = 2**31 - 1  # token ids are held as int32, the engines' dtype
_OPTIONAL = {"category": str, "session": str, "turn": int, "arrival_s": (int, float), "max_new_tokens": int}


def _token_list(value, path: Path, lineno: int, field: str, allow_empty: bool) -> np.ndarray:
    """The field's token ids as int32, the engines' dtype; a bad id raises TraceError naming the field."""
    # exactly int (in C, no Python step a token): JSON's true/false are bools, which isinstance takes as ints
    if not isinstance(value, list) or not set(map(type, value)) <= {int}:
        raise TraceError(f"{path}:{lineno}: field '{field}' must be a list of integer token ids")
    if not value:
        if not allow_empty:
            raise TraceError(f"{path}:{lineno}: field '{field}' is empty; every request needs at least one token")
        return np.zeros(0, dtype=np.int32)
    try:
        tokens = np.array(value, dtype=np.int64)
        low, high = int(tokens.min()), int(tokens.max())
    except OverflowError:  # beyond int64 either way
        low, high = min(value), max(value)
    if low < 0:
        raise TraceError(f"{path}:{lineno}: field '{field}' holds a negative token id")
    if high > MAX_TOKEN_ID:
        raise TraceError(f"{path}:{lineno}: field '{field}' holds a token id above {MAX_TOKEN_ID} (ids are int32, "
                         "as the engines store them)")
    return tokens.astype(np.int32)


def parse_token_record(obj, path: Path, lineno: int) -> Request:
    """Validate one decoded JSON object of a token trace and build the Request."""
    if not isinstance(obj, dict):
        raise TraceError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
    for required in ("id", "prompt_ids", "output_ids"):
        if required not in obj:
            raise TraceError(f"{path}:{lineno}: missing field '{required}'")
    kwargs = {}
    for name, typ in _OPTIONAL.items():
        if obj.get(name) is not None:
            if not isinstance(obj[name], typ) or isinstance(obj[name], bool):
                raise TraceError(f"{path}:{lineno}: field '{name}' has the wrong type ({type(obj[name]).__name__})")
            kwargs[name] = obj[name]
    if "arrival_s" in kwargs:
        check_arrival(kwargs["arrival_s"], f"{path}:{lineno}", "arrival_s")
    if "session" in kwargs:
        kwargs["session"] = str(kwargs["session"])
    output_ids = _token_list(obj["output_ids"], path, lineno, "output_ids", allow_empty=False)
    if kwargs.get("max_new_tokens", len(output_ids)) < len(output_ids):
        raise TraceError(f"{path}:{lineno}: field 'max_new_tokens' is {kwargs['max_new_tokens']}, below the "
                         f"{len(output_ids)} output tokens; state the limit the request ran with or drop the field")
    return Request(
        id=str(obj["id"]),
        prompt_ids=_token_list(obj["prompt_ids"], path, lineno, "prompt_ids", allow_empty=False),
        output_ids=output_ids,
        **kwargs,
    )


def read_token_trace(path: str | os.PathLike) -> list[Request]:
    """Load a whole token trace; any malformed line raises TraceError naming file, line and field."""
    path = Path(path)
    requests: list[Request] = []
    seen: set[str] = set()
    for where, obj in iter_records(path):
        req = parse_token_record(obj, path, where.line)
        if req.id in seen:
            raise TraceError(f"{path}:{where.line}: duplicate id '{req.id}'")
        seen.add(req.id)
        requests.append(req)
    if not requests:
        raise TraceError(f"{path}: the trace holds no requests")
    return requests


def request_to_record(req: Request) -> dict:
    rec = {"id": req.id, "prompt_ids": req.prompt_ids.tolist(), "output_ids": req.output_ids.tolist()}
    for name in ("category", "session", "arrival_s", "max_new_tokens"):
        if getattr(req, name) is not None:
            rec[name] = getattr(req, name)
    if req.turn:
        rec["turn"] = req.turn
    return rec


def write_token_trace(requests: Iterable[Request], path: str | os.PathLike) -> Path:
    """Write atomically and byte-reproducibly (see ``records.atomic_writer``)."""
    return write_jsonl((request_to_record(r) for r in requests), path)
