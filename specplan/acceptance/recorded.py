"""Recorded acceptance: replay what a real engine accepted, as acceptance mode ``recorded``.

Two log formats, JSON lines (gzip when ``.gz``), one record per request id:

- per step, ``{"id", "accepted_per_step": [c_1, c_2, ...]}``: the tokens a request committed at
  each target forward pass as the engine logged them, bonus token included (so ``c_i >= 1``; the
  Spec-Bench EAGLE and SPS ``accept_lengths``). Replayed in order: the request's i-th speculative
  step accepts ``min(c_i - 1, drafted)`` with ``drafted = min(K, output_len - committed - 1)``. A log
  shorter than the simulated request (a capped K takes more steps; the logged run's answer can be
  longer than the trace's) starts over from its first entry; ``metrics()`` counts such steps.
- per position, ``{"id", "prompt_ids", "output_ids", "run_length_per_position": [r_0, r_1, ...]}``:
  ``r_c`` is how many tokens a verify step emits when it starts with ``c`` output tokens committed
  (bonus included). A step at any K emits ``min(r_c, K + 1)``, so K may change from step to step.
  ``r_c = 0`` means "no proposal": the drafter had nothing at that position (an n-gram lookup
  that found no match, as SpecDecode-Bench's n-gram traces record it), so the row drafts 0 tokens
  and verifies only its own, emitting 1; it adds nothing to the drafted count.
  The log's tokens must equal the request's.

Requests are matched to log records by ``meta["source_id"]`` (set by ``build_requests``; copies
made by sampling with replacement share their original's log) or else by ``id``.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Sequence

import numpy as np

from specplan.errors import TraceError
from specplan.acceptance.oracles import AcceptanceOracle
from specplan.workloads.bundled import bundled_traces, get_bundled
from specplan.workloads.records import Where, check_value, first_record, get_field, iter_records
from specplan.workloads.request import Request
from specplan.workloads.traffic import source_id

STEP_FIELD = "accepted_per_step"
POSITION_FIELD = "run_length_per_position"


def resolve_log(name_or_path: str | os.PathLike) -> Path:
    """A bundled recorded-acceptance trace by name, or a path."""
    spec = str(name_or_path)
    if spec in bundled_traces("recorded_acceptance"):
        return get_bundled(spec, "recorded_acceptance").path
    path = Path(spec)
    if not path.is_file():
        names = ", ".join(bundled_traces("recorded_acceptance")) or "none"
        raise TraceError(f"acceptance.recorded_path: {spec}: no such file and no bundled log of that name (bundled: {names})")
    return path


def _counts(value, where: Where, field: str, low: int = 1) -> np.ndarray:
    check_value(value, list, where, field, nonempty=True)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= low for v in value):
        what = "tokens per verify step, bonus included" + ("; 0 = no proposal" if low == 0 else "")
        raise where.error(f"must hold integers >= {low} ({what})", field)
    return np.asarray(value, dtype=np.int64)


def _read_log(path: Path, field: str, extra: tuple[str, ...] = ()) -> dict[str, tuple[Where, dict]]:
    out: dict[str, tuple[Where, dict]] = {}
    for where, rec in iter_records(path):
        rid = str(get_field(rec, "id", (str, int), where))
        if rid in out:
            raise where.error(f"duplicate id '{rid}'", "id")
        for name in (field, *extra):
            get_field(rec, name, list, where)
        out[rid] = (where, rec)
    if not out:
        raise TraceError(f"{path}: the log holds no records")
    return out


@lru_cache(maxsize=8)
def _parsed_log(path: str, stamp: tuple[int, int], field: str, extra: tuple[str, ...]) -> dict:
    return _read_log(Path(path), field, extra)


def parsed_log(path: Path, field: str, extra: tuple[str, ...] = ()) -> dict[str, tuple[Where, dict]]:
    """``_read_log`` memoised by the file's path, modification time and size: the runs of one process
    (a sweep's worker runs many configs over one log) parse a log once. The records are shared
    between runs and only read."""
    st = path.stat()
    return _parsed_log(str(path.resolve()), (st.st_mtime_ns, st.st_size), field, extra)


class _RecordedOracle(AcceptanceOracle):
    """Shared layout: one integer sequence per request, flattened for one vectorised gather per step."""

    field: str
    _extra_fields: tuple[str, ...] = ()

    def __init__(self, log: str | os.PathLike, requests: Sequence[Request]) -> None:
        super().__init__([r.prompt_len for r in requests], [r.output_len for r in requests])
        self.path = resolve_log(log)
        records = parsed_log(self.path, self.field, self._extra_fields)
        # one sequence per distinct request: copies sampled with replacement share their original's
        # record and token arrays, so they share its checked sequence too
        seqs: list[np.ndarray] = []
        index: dict[tuple[str, int, int], int] = {}
        seq_of = np.empty(len(requests), dtype=np.int64)
        for i, req in enumerate(requests):
            sid = source_id(req)
            key = (sid, id(req.prompt_ids), id(req.output_ids))
            if key not in index:
                if sid not in records:
                    raise TraceError(f"{self.path}: no record for request id '{sid}' (the log covers {len(records)} ids)")
                where, rec = records[sid]
                index[key] = len(seqs)
                seqs.append(self._sequence(req, rec, where))
            seq_of[i] = index[key]
        sizes = np.array([len(s) for s in seqs], dtype=np.int64)
        self._sizes = sizes[seq_of]
        self._offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)[seq_of]
        self._values = np.concatenate(seqs) if seqs else np.zeros(0, dtype=np.int64)

    def _sequence(self, req: Request, rec: dict, where: Where) -> np.ndarray:
        return _counts(rec[self.field], where, self.field)


class RecordedStepOracle(_RecordedOracle):
    """Per-step logs (``accepted_per_step``) replayed in order, one entry per speculative step."""

    field = STEP_FIELD

    def __init__(self, log: str | os.PathLike, requests: Sequence[Request]) -> None:
        super().__init__(log, requests)
        self._steps = np.zeros(len(requests), dtype=np.int64)
        self._wrapped = 0

    def draft(self, rids, committed, k):
        rids = np.asarray(rids, dtype=np.int64)
        drafted = self.remaining_draft_budget(rids, np.asarray(committed), k)
        if k <= 0 or len(rids) == 0:
            return drafted, np.zeros_like(drafted)
        steps = self._steps[rids]
        self._steps[rids] = steps + 1
        self._wrapped += int(np.count_nonzero(steps >= self._sizes[rids]))
        entry = self._values[self._offsets[rids] + steps % self._sizes[rids]]
        return drafted, np.minimum(entry - 1, drafted)

    def metrics(self) -> dict:
        return {"recorded_steps": int(self._steps.sum()), "recorded_steps_wrapped": self._wrapped}


class RecordedPositionOracle(_RecordedOracle):
    """Per-position logs (``run_length_per_position``): a step starting at output position c with
    draft length K emits ``min(r_c, K + 1)`` tokens, within the drafted budget; ``r_c = 0`` drafts
    nothing and emits 1."""

    field = POSITION_FIELD
    _extra_fields = ("prompt_ids", "output_ids")

    def _sequence(self, req: Request, rec: dict, where: Where) -> np.ndarray:
        runs = _counts(rec[self.field], where, self.field, low=0)
        if rec["prompt_ids"] != req.prompt_ids.tolist() or rec["output_ids"] != req.output_ids.tolist():
            raise where.error(f"the tokens logged for '{source_id(req)}' differ from the workload's request", "output_ids")
        if len(runs) != req.output_len:
            raise where.error(f"has {len(runs)} entries for {req.output_len} output tokens", POSITION_FIELD)
        return runs

    def draft(self, rids, committed, k):
        rids = np.asarray(rids, dtype=np.int64)
        committed = np.asarray(committed, dtype=np.int64)
        drafted = self.remaining_draft_budget(rids, committed, k)
        if k <= 0 or len(rids) == 0:
            return drafted, np.zeros_like(drafted)
        entry = self._values[self._offsets[rids] + np.minimum(committed, self._sizes[rids] - 1)]
        proposed = entry > 0
        drafted = np.where(proposed, drafted, 0)
        return drafted, np.where(proposed, np.minimum(entry - 1, drafted), 0)


def recorded_oracle(log: str | os.PathLike, requests: Sequence[Request]) -> AcceptanceOracle:
    """The recorded oracle for a log (bundled name or path), by the log's format."""
    path = resolve_log(log)
    rec = first_record(path)
    if isinstance(rec, dict) and STEP_FIELD in rec:
        return RecordedStepOracle(path, requests)
    if isinstance(rec, dict) and POSITION_FIELD in rec:
        return RecordedPositionOracle(path, requests)
    raise TraceError(f"{path}:1: missing field '{STEP_FIELD}' or '{POSITION_FIELD}'")
