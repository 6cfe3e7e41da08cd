"""Timestamped production traces as arrivals: when each request came, how long its prompt and
answer were. Length-only, so the requests are prompt-only (see ``specplan.workloads.datasets``);
run them with ``workload.arrival: trace`` to replay the timestamps (first arrival at 0).

- ``azure``: the Azure LLM inference trace CSV (Azure/AzurePublicDataset,
  ``AzureLLMInferenceTrace_{code,conv}.csv``), columns ``TIMESTAMP`` (``2023-11-16 18:15:46.6805900``:
  date, time, up to 7 fractional digits), ``ContextTokens``, ``GeneratedTokens``.
- ``mooncake``: Mooncake's trace JSON lines (kvcache-ai/Mooncake ``mooncake_trace.jsonl``):
  ``timestamp`` (ms), ``input_length``, ``output_length`` and ``hash_ids``, one id per 512-token
  prompt block; requests sharing a block id share that block's tokens. The prompt tokens are made
  from the ids (block id b gives the same 512 tokens wherever it appears), so shared prefixes are
  shared here too; the last block is cut to ``input_length``.

Prompt tokens of Azure requests are placeholders as well (the trace has no content).
"""

from __future__ import annotations

import csv
import math
import os
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from specplan.errors import TraceError
from specplan.workloads.datasets import _checked, _positive, prompt_only_request
from specplan.workloads.records import MAX_ARRIVAL_S, check_arrival, check_length, get_field, iter_records, read_text
from specplan.workloads.request import Request

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
MOONCAKE_BLOCK = 512
#: Vocabulary the Mooncake block tokens are drawn from (any size well above the block count works).
BLOCK_VOCAB = 32000


def _azure_time(text: str, where: str) -> float:
    date, _, frac = text.strip().partition(".")
    try:
        t = datetime.strptime(date, "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc).timestamp()
    except ValueError:
        raise TraceError(f"{where}: TIMESTAMP {text!r} is not 'YYYY-MM-DD HH:MM:SS[.fraction]'") from None
    if frac and not frac.isdigit():
        raise TraceError(f"{where}: TIMESTAMP {text!r} has a bad fraction of a second")
    return t + (int(frac) / 10 ** len(frac) if frac else 0.0)


def placeholder_prompt(length: int, row: int) -> np.ndarray:
    """``length`` placeholder tokens whose first two encode ``row``: the trace has no content, and
    prompts that differ in their first block never share a KV block with another request's (vLLM's
    ``BurstGPTDataset`` likewise gives each request its own synthetic tokens)."""
    prompt = np.zeros(length, dtype=np.int32)
    head = divmod(row, BLOCK_VOCAB)
    prompt[:2] = head[:length]
    return prompt


def load_azure(path: str | os.PathLike) -> list[Request]:
    """The Azure LLM inference trace: one prompt-only request per row, arrival from TIMESTAMP."""
    path = Path(path)
    rows = list(csv.reader(read_text(path).splitlines()))
    if not rows or tuple(c.strip() for c in rows[0][:3]) != AZURE_COLUMNS:
        raise TraceError(f"{path}:1: expected the header {','.join(AZURE_COLUMNS)}")
    out, t0 = [], None
    for line, row in enumerate(rows[1:], start=2):
        if not row:
            continue
        where = f"{path}:{line}"
        if len(row) < 3:
            raise TraceError(f"{where}: expected {len(AZURE_COLUMNS)} columns, got {len(row)}")
        t = _azure_time(row[0], where)
        try:
            ctx, gen = int(row[1]), int(row[2])
        except ValueError:
            raise TraceError(f"{where}: ContextTokens and GeneratedTokens must be integers") from None
        check_length(ctx, where, "ContextTokens"), check_length(gen, where, "GeneratedTokens")
        t0 = t if t0 is None else t0
        out.append(prompt_only_request(f"azure-{line - 1}", placeholder_prompt(ctx, line - 1), gen, arrival_s=t - t0))
    return _sorted(_checked(out, path), path)


def block_tokens(block_id: int) -> np.ndarray:
    """The 512 tokens of a Mooncake block id, the same wherever the id appears."""
    return np.random.default_rng([block_id, 512]).integers(0, BLOCK_VOCAB, MOONCAKE_BLOCK, dtype=np.int32)


def load_mooncake(path: str | os.PathLike) -> list[Request]:
    """Mooncake's trace: prompt tokens from ``hash_ids`` blocks, arrival ``timestamp`` (ms)."""
    path = Path(path)
    out, t0 = [], None
    for where, rec in iter_records(path):
        if not isinstance(rec, dict):
            raise where.error("expected an object with timestamp, input_length, output_length, hash_ids")
        t = get_field(rec, "timestamp", (int, float), where)
        if not math.isfinite(t):  # JSON's NaN / Infinity, or a number past float range
            raise where.error(f"must be a finite time in ms, got {t}", "timestamp")
        ilen, olen = _positive(rec, "input_length", where), _positive(rec, "output_length", where)
        ids = get_field(rec, "hash_ids", list, where)
        if not all(isinstance(b, int) and not isinstance(b, bool) for b in ids):
            raise where.error("must be a list of integer block ids", "hash_ids")
        if len(ids) != -(-ilen // MOONCAKE_BLOCK):
            raise where.error(f"has {len(ids)} blocks for {ilen} tokens (blocks of {MOONCAKE_BLOCK})", "hash_ids")
        prompt = np.concatenate([block_tokens(b) for b in ids])[:ilen]
        t0 = t if t0 is None else t0
        out.append(prompt_only_request(f"mooncake-{where.line}", prompt, olen, arrival_s=(t - t0) / 1e3))
    return _sorted(_checked(out, path), path)


def _sorted(requests: list[Request], path: Path) -> list[Request]:
    """In arrival order from time 0 (rows may be out of order), the span checked (``MAX_ARRIVAL_S``)."""
    first = min(r.arrival_s for r in requests)
    if first < 0:  # rows out of order: time 0 is the earliest arrival
        from dataclasses import replace

        requests = [replace(r, arrival_s=r.arrival_s - first) for r in requests]
    last = max(requests, key=lambda r: r.arrival_s)
    if last.arrival_s > MAX_ARRIVAL_S:
        check_arrival(last.arrival_s, f"{path}: request {last.id}", "arrival (from the timestamps)")
    return sorted(requests, key=lambda r: r.arrival_s)
