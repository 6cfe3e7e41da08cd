"""Host time of the NGram pool per request-step, by pool size and K (pure Python, no torch).

Times ``InHousePool``: TensorRT-LLM's ``NGramPoolManager`` hot path in the same Python style (public
pool, keep all, use oldest; a dict of pattern tuple -> list of match tuples), following SEMANTICS.md
§1. The engine pays this interpreter time on its critical path. The simulator's own pool
(``acceptance.drafters.ngram_pool``) reproduces the same drafts with Numba kernels over integer window
ids, built to replay acceptance fast; its speed says nothing about TensorRT-LLM's host cost, so it is
not what is timed here.

Method: fill a public pool to the target number of pattern keys with uniform random tokens over a
32K vocabulary, then run one request decode-style: each step appends 1 + accepted tokens (accepted
uniform in 0..K) and calls the pool once; ``time.perf_counter_ns`` around a block of calls gives the
mean time per call. The first call on a request (the full-prompt scan) is warm-up and is excluded
(COSTS.md §4; ANCHORS.md on Numba warm-up). The garbage collector is paused in the timed block:
its pauses depend on the whole process's allocations, not on the pool. Uniform tokens give each pattern few continuations, so
this prices the dict work at a given pool size; with ``is_keep_all`` a long-running public pool's
frequent patterns collect long match lists that cost more to rescan, so read the table as a lower
bound there.
"""

from __future__ import annotations

from typing import Optional

import argparse
import gc
import platform
import time
from datetime import datetime, timezone
from typing import Iterable

import numpy as np
import yaml

from specplan.cost_models.draft import DRAFT_COSTS_FORMAT, DraftCostSection, NGramHostTable, SAKernelCost
from specplan.atomic import atomic_write_text

VOCAB = 32000
PROMPT_LEN = 512
POOL_ENTRIES = (100, 1000, 10000, 100000)
DRAFT_LENS = (1, 2, 4, 8)


class InHousePool:
    """TensorRT-LLM's public NGram pool reduced to its per-step work (update window, then lookup)."""

    def __init__(self, max_draft_len: int, max_matching_ngram_size: int = 2) -> None:
        self.k = max_draft_len
        self.n = max_matching_ngram_size
        self.pool: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
        self.start_index: dict[int, int] = {}

    def get_draft_tokens(self, prefix: list[int], request_id: int) -> list[int]:
        """Update the pool with the tokens since the last call, then return the longest-key match."""
        length = len(prefix)
        pool, k = self.pool, self.k
        seq = prefix[self.start_index.setdefault(request_id, 0):]
        top = min(self.n, length - 1)
        for size in range(top, 0, -1):
            for left in range(len(seq) - size):
                pattern = tuple(seq[left:left + size])
                match = tuple(seq[left + size:min(left + size + k, len(seq))])
                stored = pool.get(pattern)
                if stored is None:
                    pool[pattern] = [match]
                elif match not in stored:
                    stored[:] = [m for m in stored if len(m) >= len(match)]
                    stored.append(match)
        draft: list[int] = []
        for size in range(top, 0, -1):
            stored = pool.get(tuple(prefix[-size:]))
            if stored is not None:
                draft = list(stored[0])
                break
        self.start_index[request_id] = max(0, length - (k + self.n - 1))
        return draft


def _tokens(rng: np.random.Generator, n: int) -> list[int]:
    return rng.integers(0, VOCAB, n).tolist()


def _filled_pool(entries: int, k: int, rng: np.random.Generator) -> InHousePool:
    pool = InHousePool(k)
    rid = -1
    while len(pool.pool) < entries:
        rid -= 1
        pool.get_draft_tokens(_tokens(rng, PROMPT_LEN), rid)
    return pool


def time_per_request_step(pool: InHousePool, k: int, calls: int, rng: np.random.Generator) -> float:
    """Mean seconds of one ``get_draft_tokens`` on a warmed request."""
    prefix = _tokens(rng, PROMPT_LEN)
    pool.get_draft_tokens(prefix, 0)  # warm-up: the full-prompt scan
    steps = [_tokens(rng, 1 + int(a)) for a in rng.integers(0, k + 1, calls)]
    gc.disable()
    try:
        start = time.perf_counter_ns()
        for new in steps:
            prefix.extend(new)
            pool.get_draft_tokens(prefix, 0)
        return (time.perf_counter_ns() - start) / calls * 1e-9
    finally:
        gc.enable()


def measure(pool_entries: Iterable[int], draft_lens: Iterable[int], passes: int, calls: int, seed: int = 0,
            deadline: float = float("inf")) -> tuple[list[dict], str]:
    """Measurement rows (``measurements`` schema, kind ``ngram_host``) and what was timed.

    Cells run in ``passes`` interleaved passes, stopping early at ``time.monotonic() >= deadline``.
    """
    what = "in-house pool (calibration.draft_bench.InHousePool)"
    rng = np.random.default_rng(seed)
    rows = []
    cells = [(p, k) for p in pool_entries for k in draft_lens]
    for rep in range(passes):
        for p, k in cells:
            if time.monotonic() >= deadline:
                return rows, what
            pool = _filled_pool(p, k, rng)
            seconds = time_per_request_step(pool, k, calls, rng)
            rows.append({"kind": "ngram_host", "sweep": "ngram_host", "point": f"pool{p}-k{k}", "pass": rep,
                         "mode": "wall", "pool_entries": p, "draft_len": k, "replays": calls, "seconds": seconds})
    return rows, what


def table_from_rows(rows: list[dict]) -> NGramHostTable:
    """Median per (pool size, K) cell; cells never measured are filled from the nearest K of the row."""
    pools = sorted({r["pool_entries"] for r in rows})
    ks = sorted({r["draft_len"] for r in rows})
    grid = []
    for p in pools:
        row = []
        for k in ks:
            vals = [r["seconds"] for r in rows if r["pool_entries"] == p and r["draft_len"] == k]
            row.append(float(f"{np.median(vals):.4g}") if vals else None)
        known = [(k, v) for k, v in zip(ks, row) if v is not None]
        if not known:
            raise ValueError(f"no NGram measurement at pool size {p}")
        grid.append([v if v is not None else float(np.interp(k, *zip(*known))) for k, v in zip(ks, row)])
    return NGramHostTable(pool_entries=pools, draft_len=ks, seconds_per_request=grid)


def draft_section(rows: list[dict], what: str, host: str, date: str, sa_fit: Optional[dict] = None,
                  gpu: Optional[str] = None) -> DraftCostSection:
    """The ``draft`` section of a profile (or a draft-costs file body) from measurement rows; with
    ``sa_fit`` (``sa_kernel.bench.fit_sa_kernel_cost``) the SA kernel cost is the measured one."""
    sa_note = (f"measured: specplan's Triton SA kernel, CUDA-graph replay, cold L2, on {gpu}, {date}" if sa_fit
               else "default estimate (COSTS.md §4: us-scale, flat in B up to the SM count); not measured")
    return DraftCostSection(
        ngram_host=table_from_rows(rows),
        sa_kernel=SAKernelCost(**sa_fit) if sa_fit else SAKernelCost(),
        provenance={
            "ngram_host": f"measured: {what}, Python {platform.python_version()} on {host}, {date}",
            "sa_kernel": sa_note,
        },
    )


def main(argv: list[str] | None = None) -> None:
    """``python -m specplan.calibration.draft_bench --out FILE``: write a draft-costs file for this host."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--out", required=True)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args(argv)
    rows, what = measure(POOL_ENTRIES, DRAFT_LENS, args.passes, args.calls)
    section = draft_section(rows, what, host_description(), datetime.now(timezone.utc).date().isoformat())
    body = {"format": DRAFT_COSTS_FORMAT, **section.model_dump(mode="json")}
    atomic_write_text(args.out, yaml.safe_dump(body, sort_keys=False, default_flow_style=None, width=120, allow_unicode=True))


def host_description() -> str:
    """CPU model name (Linux ``/proc/cpuinfo``, else ``platform.processor()``)."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


if __name__ == "__main__":
    main()
