"""A run's timeline as a Chrome trace event file (JSON Object Format), which Perfetto and
``chrome://tracing`` open.

Process 1, "executor", holds one complete event (``ph: "X"``) per executor iteration, from its start
to the end of its step (``ts``/``dur`` in microseconds of simulated time), its ``args`` the
iteration's record (batch rows, K, drafted, accepted, ...), plus counter tracks (``ph: "C"``) of the
batch rows and the queue. Process 2, "requests", holds two complete events per request: "queued +
prefill" (arrival to first token) and "decode" (first token to finish). Complete events on one
thread must nest, so requests are packed onto lanes (threads) where their spans do not overlap.
Names come from metadata events (``ph: "M"``: ``process_name``, ``thread_name``).
"""

from __future__ import annotations

import heapq
import json
import math
from pathlib import Path

import pandas as pd

from specplan.atomic import atomic_write_text
from specplan.simulator.metrics import plain

EXECUTOR_PID, REQUESTS_PID, ITERATION_TID = 1, 2, 1
US = 1e6  # trace timestamps are microseconds
COUNTERS = ("batch_rows", "num_queued")


def _meta(name: str, pid: int, value: str, tid: int = 0) -> dict:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": {"name": value}}


def _iteration_events(iterations: pd.DataFrame) -> list[dict]:
    events = []
    for it in iterations.to_dict("records"):
        args = plain({k: v for k, v in it.items() if k not in ("start_s", "step_s")})
        name = f"spec K={it['k']}" if it["spec_on"] else "decode" if it["prefill_tokens"] == 0 else "prefill + decode"
        ts = it["start_s"] * US
        events.append({"name": name, "cat": "iteration", "ph": "X", "ts": ts, "dur": it["step_s"] * US,
                       "pid": EXECUTOR_PID, "tid": ITERATION_TID, "args": args})
        events.append({"name": "batch", "cat": "counter", "ph": "C", "ts": ts, "pid": EXECUTOR_PID,
                       "args": {c: int(it[c]) for c in COUNTERS}})
    return events


def request_lanes(starts: list[float], ends: list[float]) -> list[int]:
    """A lane per span such that spans on one lane never overlap (greedy by start: reuse the lane
    that freed up earliest, else open a new one); lanes are numbered from 1."""
    lanes = [0] * len(starts)
    free: list[tuple[float, int]] = []  # (time the lane frees up, lane)
    opened = 0
    for i in sorted(range(len(starts)), key=lambda j: (starts[j], j)):
        if free and free[0][0] <= starts[i]:
            _, lane = heapq.heappop(free)
        else:
            opened += 1
            lane = opened
        lanes[i] = lane
        heapq.heappush(free, (ends[i], lane))
    return lanes


def _request_events(requests: pd.DataFrame) -> tuple[list[dict], int]:
    reqs = requests[requests["arrival_s"].notna()]
    rows = reqs.to_dict("records")
    # a request that never got its first token (or never finished) has a span only as far as it went
    ends = [r["finish_s"] if not math.isnan(r["finish_s"]) else r["first_token_s"] if not math.isnan(r["first_token_s"])
            else r["arrival_s"] for r in rows]
    lanes = request_lanes([r["arrival_s"] for r in rows], ends)
    events = []
    for r, lane in zip(rows, lanes):
        args = plain({"request_id": r["request_id"], "prompt_len": r["prompt_len"], "output_len": r["output_len"],
                      "ttft_ms": r["ttft_s"] * 1e3, "tpot_ms": r["tpot_s"] * 1e3})
        spans = (("queued + prefill", r["arrival_s"], r["first_token_s"]), ("decode", r["first_token_s"], r["finish_s"]))
        for name, start, end in spans:
            if not (math.isnan(start) or math.isnan(end)):
                events.append({"name": name, "cat": "request", "ph": "X", "ts": start * US, "dur": (end - start) * US,
                               "pid": REQUESTS_PID, "tid": lane, "args": args})
    return events, max(lanes, default=0)


def chrome_trace(iterations: pd.DataFrame, requests: pd.DataFrame, title: str = "specplan simulate") -> dict:
    """The trace as a JSON-ready dict (``traceEvents`` plus ``displayTimeUnit``)."""
    req_events, lanes = _request_events(requests)
    meta = [_meta("process_name", EXECUTOR_PID, "executor"), _meta("thread_name", EXECUTOR_PID, "iterations",
                                                                    ITERATION_TID),
            _meta("process_name", REQUESTS_PID, "requests"),
            *[_meta("thread_name", REQUESTS_PID, f"lane {lane}", lane) for lane in range(1, lanes + 1)]]
    return {"traceEvents": meta + _iteration_events(iterations) + req_events, "displayTimeUnit": "ms",
            "otherData": {"title": title, "time": "simulated"}}


def write_timeline(iterations: pd.DataFrame, requests: pd.DataFrame, path: str | Path, title: str = "specplan simulate") -> Path:
    """Write the Chrome trace event file for a run's tables, atomically."""
    return atomic_write_text(path, json.dumps(chrome_trace(iterations, requests, title), allow_nan=False))
