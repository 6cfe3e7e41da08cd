"""GPU timing of the SA drafting kernels and of the host build + copy (``../shared/design/COSTS.md`` §4).

Method, per configuration (1-D sweeps around a base point, not a cross product):

- Every request's slot starts from the same host-built prompt automaton of ``ctx`` tokens (built once per
  ``ctx``, loaded into one slot, copied device-to-device into the rest); each request then appends its own
  synthetic continuation, ``accepted`` tokens per step.
- ``steps_per_graph`` consecutive steps (each a distinct slice of a staged input tensor, so the automata
  really grow step by step) are captured in one CUDA graph. Before each replay the next steps' tokens are
  copied into the staged tensor, outside the timed region; CUDA events around each replay give the GPU
  time of a block of steps: ``gpu_us_per_step`` is one row per replay (elapsed / steps_per_graph), with
  the automata warm in L2 from the previous step. ``gpu_us_per_step_cold_l2`` flushes L2 (a 256 MB
  write) before every step, as the model's forward does between two drafting steps in serving, and
  subtracts a flush-only graph timed in alternation.
- ``eager_host_us_per_step``: host wall time of the same launches without a graph, synchronised, which
  adds Triton's Python launch overhead (TRT launches from C++; use the graph number for the kernel).
- The automata grow by ``accepted`` tokens per step during the measurement (a few thousand tokens at
  most); slot capacity is sized for that.
- ``build`` sweep: ``build_s`` is this package's pure-Python host build (TRT's is C++, so this is an upper
  bound, one to two orders of magnitude slower), ``copy_s`` the synchronised host-to-device copy of the
  used arrays (TRT's relocate step is free here: indices are slot-relative), ``slot_bytes`` its size.

Synthetic text: Zipf-distributed fresh tokens mixed with copies of earlier spans (LZ-style), so suffix
matches of realistic length exist; continuations copy from the prompt as well as from themselves.

Output: a long-format table, one measurement per row (``sweep, mode, B, accepted, K, ctx, active_slots,
max_ngram, prompt_len, metric, rep, value``) plus device and library versions.

On a GPU machine: ``python -m specplan.calibration.sa_kernel.bench --out sa_kernel.csv --budget-s 420``.
"""

from __future__ import annotations

import argparse
import subprocess
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import triton

from specplan.calibration.sa_kernel import automaton as layout
from specplan.calibration.sa_kernel.slots import SAKernelPool

VOCAB = 32000
NGRAM_SIZE = 4  # max_matching_ngram_size for the n-gram mode rows
BATCHES = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256)
CONTEXTS = (1024, 4096, 16384, 65536, 262144)
ACCEPTED = (1, 2, 3, 5, 8)
DRAFT_LENS = (1, 2, 4, 8, 16)
MODES = ("extend", "ngram", "global")
ACTIVE_SLOTS = (64, 128, 256, 512, 1024)
BUILD_LENGTHS = (256, 1024, 4096, 16384, 65536, 262144)
HOST_BUILD_S_PER_TOKEN = 20e-6  # pessimistic, for budgeting only
L2_FLUSH_BYTES = 256 << 20  # well over the H200's 60 MB of L2, as triton.testing.do_bench flushes


@dataclass(frozen=True)
class Config:
    """One timed point. ``active_slots`` only matters in global mode (the pool searched per request)."""

    sweep: str
    mode: str = "extend"
    B: int = 64
    accepted: int = 3
    K: int = 4
    ctx: int = 4096
    active_slots: int = 64


BASE = Config(sweep="base")


def sweep_configs() -> list[Config]:
    """The grid in priority order: base point, then batch, context, accepted, K, mode, active slots.

    A step commits at most K + 1 tokens (TRT's accepted-token buffer is ``[B, K + 1]``), so the accepted
    sweep raises K where needed and the K sweep lowers the accepted count where needed.
    """
    configs = [BASE]
    configs += [replace(BASE, sweep="batch", B=b) for b in BATCHES]
    configs += [replace(BASE, sweep="ctx", ctx=c) for c in CONTEXTS]
    configs += [replace(BASE, sweep="accepted", accepted=a, K=max(BASE.K, a - 1)) for a in ACCEPTED]
    configs += [replace(BASE, sweep="draft_len", K=k, accepted=min(BASE.accepted, k + 1)) for k in DRAFT_LENS]
    configs += [replace(BASE, sweep="mode", mode=m) for m in MODES]
    configs += [replace(BASE, sweep="active_slots", mode="global", active_slots=s) for s in ACTIVE_SLOTS]
    return configs


def synthetic_text(rng: np.random.Generator, n: int, source: np.ndarray | None = None,
                   copy_prob: float = 0.35, mean_span: int = 12) -> np.ndarray:
    """``n`` tokens continuing ``source``: runs of Zipf tokens, and spans copied from earlier text."""
    prefix = 0 if source is None else len(source)
    buf = np.empty(prefix + n, dtype=np.int32)
    if prefix:
        buf[:prefix] = source
    pos = prefix
    while pos < prefix + n:
        span = int(min(rng.geometric(1.0 / mean_span), prefix + n - pos))
        if pos >= span and rng.random() < copy_prob:
            start = int(rng.integers(0, pos - span + 1))
            buf[pos:pos + span] = buf[start:start + span]
        else:
            buf[pos:pos + span] = (rng.zipf(1.2, span) - 1) % VOCAB
        pos += span
    return buf[prefix:]


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def _gpu_state() -> dict[str, float]:
    """SM/memory clocks, power and temperature from nvidia-smi (empty when it is unavailable)."""
    fields = ("clocks.sm", "clocks.mem", "power.draw", "temperature.gpu")
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10, check=True).stdout
        return {f: float(v) for f, v in zip(fields, out.splitlines()[0].split(","))}
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return {}


class StepInputs:
    """Every step's accepted tokens for a timed configuration, on the device, plus the block of
    ``block`` step buffers a captured graph reads (``accepted[i]`` ``[B, width]``, ``lens[i]`` ``[B]``).

    Request j's continuation is synthetic text that also copies from ``text`` (its prompt), cut into
    ``per_step`` tokens per step. Each buffer starts on a 16-byte boundary: Triton specialises pointer
    arguments on alignment, and a differently aligned step would recompile inside capture or a timing.
    :meth:`stage` copies the next ``n`` steps into the first ``n`` buffers (outside any timing).
    """

    def __init__(self, text: np.ndarray, batch: int, per_step: int, width: int, n_steps: int, seed: int,
                 block: int, device: torch.device):
        acc_elems, len_elems = _round_up(batch * width, 4), _round_up(batch, 4)
        table = np.zeros((n_steps, acc_elems + len_elems), dtype=np.int32)
        for j in range(batch):
            cont = synthetic_text(np.random.default_rng((seed, j)), n_steps * per_step, source=text)
            table[:, j * width:j * width + per_step] = cont.reshape(n_steps, per_step)
        table[:, acc_elems:acc_elems + batch] = per_step
        self.table = torch.from_numpy(table).to(device)
        self._buffers = torch.empty((block, acc_elems + len_elems), dtype=torch.int32, device=device)
        self.accepted = [self._buffers[i, :batch * width].view(batch, width) for i in range(block)]
        self.lens = [self._buffers[i, acc_elems:acc_elems + batch] for i in range(block)]
        self._cursor = 0

    def stage(self, n: int) -> None:
        """Load the next ``n`` steps into buffers ``0 .. n-1``."""
        self._buffers[:n].copy_(self.table[self._cursor:self._cursor + n])
        self._cursor += n


class _Templates:
    """Host-built prompt automata, one per context length (the build dominates setup time)."""

    def __init__(self, seed: int):
        self._seed = seed
        self._cache: dict[int, tuple[np.ndarray, layout.FlatAutomaton]] = {}

    def get(self, ctx: int) -> tuple[np.ndarray, layout.FlatAutomaton]:
        if ctx not in self._cache:
            text = synthetic_text(np.random.default_rng(self._seed), ctx)
            self._cache[ctx] = (text, layout.build_automaton(text.tolist(), ctx))
        return self._cache[ctx]


def _capture(fn) -> torch.cuda.CUDAGraph:
    """A CUDA graph of the launches ``fn`` makes (their inputs must already be compiled for)."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def _time_config(cfg: Config, templates: _Templates, device: torch.device, steps_per_graph: int,
                 replays: int, warm_replays: int, seed: int) -> list[dict]:
    text, flat = templates.get(cfg.ctx)
    b, g = cfg.B, steps_per_graph
    n_slots = max(b, cfg.active_slots) if cfg.mode == "global" else b
    max_draft = max(cfg.K, cfg.accepted - 1)
    # 1 compile launch, one eager block, then warm-up and timed replays of the warm and cold graphs.
    n_steps = 1 + g + 2 * (warm_replays + replays) * g
    appended = n_steps * cfg.accepted
    pool = SAKernelPool(n_slots, cfg.ctx + appended, b, max_draft, device)
    pool.load(0, flat)
    for slot in range(1, n_slots):
        pool.copy_slot(0, slot)
    slots = list(range(b))
    pool.stage(slots, [[] for _ in slots])
    pool.reserve(slots, appended)

    width = max_draft + 1
    steps = StepInputs(text, b, cfg.accepted, width, n_steps, seed, g, device)
    max_ngram = NGRAM_SIZE if cfg.mode == "ngram" else -1

    def launch(i: int, pool: SAKernelPool = pool) -> None:
        if cfg.mode == "global":
            pool.launch_global(b, cfg.K, max_ngram, accepted=steps.accepted[i], accepted_lens=steps.lens[i])
        else:
            pool.launch_extend(b, cfg.K, max_ngram, accepted=steps.accepted[i], accepted_lens=steps.lens[i])

    steps.stage(1)
    launch(0)  # JIT compile outside capture and timing
    torch.cuda.synchronize(device)

    steps.stage(g)
    torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for i in range(g):
        launch(i)
    torch.cuda.synchronize(device)
    eager_us = (time.perf_counter() - t0) / g * 1e6

    # Warm: g steps back to back. Cold: an L2 flush before every step, as after a forward's GEMMs;
    # its time is the flush+step graph minus a flush-only graph, both timed in alternation.
    flush = torch.empty(L2_FLUSH_BYTES // 4, dtype=torch.int32, device=device)

    def warm_steps() -> None:
        for i in range(g):
            launch(i)

    def cold_steps() -> None:
        for i in range(g):
            flush.zero_()
            launch(i)

    def flushes() -> None:
        for _ in range(g):
            flush.zero_()

    warm, cold, flush_only = _capture(warm_steps), _capture(cold_steps), _capture(flushes)
    for _ in range(warm_replays):
        steps.stage(g)
        warm.replay()
        steps.stage(g)
        cold.replay()
        flush_only.replay()
    events: dict[str, list] = {"warm": [], "cold": [], "flush": []}
    for _ in range(replays):
        for name, graph in (("warm", warm), ("flush", flush_only), ("cold", cold)):
            if graph is not flush_only:
                steps.stage(g)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            events[name].append((start, end))
    torch.cuda.synchronize(device)
    match_mean = float(pool.match_len[:b].float().mean().item())
    ms = {name: [s.elapsed_time(e) for s, e in pairs] for name, pairs in events.items()}
    flush_ms = float(np.median(ms["flush"]))

    common = dict(sweep=cfg.sweep, mode=cfg.mode, B=b, accepted=cfg.accepted, K=cfg.K, ctx=cfg.ctx,
                  active_slots=n_slots if cfg.mode == "global" else np.nan,
                  max_ngram=max_ngram, prompt_len=np.nan)
    rows = [dict(common, metric="gpu_us_per_step", rep=r, value=t * 1e3 / g) for r, t in enumerate(ms["warm"])]
    rows += [dict(common, metric="gpu_us_per_step_cold_l2", rep=r, value=(t - flush_ms) * 1e3 / g)
             for r, t in enumerate(ms["cold"])]
    rows.append(dict(common, metric="eager_host_us_per_step", rep=0, value=eager_us))
    rows.append(dict(common, metric="match_len_mean", rep=0, value=match_mean))
    del warm, cold, flush_only, pool
    return rows


def _time_build(prompt_len: int, device: torch.device, seed: int, repeats: int) -> list[dict]:
    text = synthetic_text(np.random.default_rng(seed), prompt_len).tolist()
    pool = SAKernelPool(1, prompt_len, 1, 1, device)
    rows = []
    common = dict(sweep="build", mode="build", B=np.nan, accepted=np.nan, K=np.nan, ctx=np.nan,
                  active_slots=np.nan, max_ngram=np.nan, prompt_len=prompt_len)
    for rep in range(repeats):
        t0 = time.perf_counter()
        flat = layout.build_automaton(text, prompt_len)
        t1 = time.perf_counter()
        pool.load(0, flat)
        torch.cuda.synchronize(device)
        t2 = time.perf_counter()
        pool.free(0)
        nbytes = flat.nodes.nbytes + flat.tokens.nbytes + flat.arena.nbytes + flat.header.nbytes
        rows += [dict(common, metric="build_s", rep=rep, value=t1 - t0),
                 dict(common, metric="copy_s", rep=rep, value=t2 - t1),
                 dict(common, metric="slot_bytes", rep=rep, value=float(nbytes))]
    return rows


def bench_sa_kernel(device: str | torch.device = "cuda", budget_s: float = 300.0,
                    out_csv: str | Path | None = None, *, steps_per_graph: int = 50, replays: int = 10,
                    warm_replays: int = 2, seed: int = 0) -> pd.DataFrame:
    """Time the SA kernels over the sweep grid and the host build + copy over prompt lengths.

    Points run in priority order (:func:`sweep_configs`, then the build sweep) until ``budget_s`` seconds
    of wall time would be exceeded; a point that no longer fits is skipped. The table is rewritten to
    ``out_csv`` after every point, so a run cut short keeps what it measured. Needs a CUDA device.
    """
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        raise RuntimeError(f"bench_sa_kernel needs a CUDA device; got {device} "
                           f"(torch.cuda.is_available() = {torch.cuda.is_available()})")
    t_start = time.perf_counter()
    meta = dict(device_name=torch.cuda.get_device_name(device), torch=torch.__version__,
                triton=triton.__version__, graph=True, steps_per_graph=steps_per_graph)
    templates = _Templates(seed)
    rows: list[dict] = []
    env_common = dict(sweep="env", mode="env", B=np.nan, accepted=np.nan, K=np.nan, ctx=np.nan,
                      active_slots=np.nan, max_ngram=np.nan, prompt_len=np.nan)

    def record_env(rep: int) -> None:
        rows.extend(dict(env_common, metric=k, rep=rep, value=v) for k, v in _gpu_state().items())

    def flush() -> pd.DataFrame:
        df = pd.DataFrame(rows).assign(**meta)
        if out_csv is not None:
            Path(out_csv).parent.mkdir(parents=True, exist_ok=True)
            df.to_csv(out_csv, index=False)
        return df

    def fits(estimate_s: float) -> bool:
        return time.perf_counter() - t_start + estimate_s <= budget_s

    record_env(0)
    built: set[int] = set()
    for cfg in sweep_configs():
        estimate = 2.0 + (0.0 if cfg.ctx in built else cfg.ctx * HOST_BUILD_S_PER_TOKEN)
        if not fits(estimate):
            continue
        rows += _time_config(cfg, templates, device, steps_per_graph, replays, warm_replays, seed)
        built.add(cfg.ctx)
        flush()
    for n in BUILD_LENGTHS:
        repeats = 3 if n <= 16384 else 1
        if not fits(1.0 + repeats * n * HOST_BUILD_S_PER_TOKEN):
            continue
        rows += _time_build(n, device, seed, repeats)
        flush()
    record_env(1)
    return flush()


def fit_sa_kernel_cost(df: pd.DataFrame) -> dict:
    """The cost model's ``sa_kernel`` entry from a bench table: median cold-L2 time per step over
    the batch sweep (at the base context), and the growth per doubling of the history from the
    context sweep."""
    per_step = df[df["metric"] == "gpu_us_per_step_cold_l2"]
    by_b = per_step[per_step["sweep"].isin(["batch", "base"])].groupby("B")["value"].median().sort_index()
    if by_b.empty:
        raise ValueError("the SA kernel bench measured no batch-sweep point")
    by_ctx = per_step[per_step["sweep"].isin(["ctx", "base"])].groupby("ctx")["value"].median().sort_index()
    growth = 0.0
    if len(by_ctx) > 1:
        slope = np.polyfit(np.log2(by_ctx.index.to_numpy(dtype=float)), by_ctx.to_numpy() / by_ctx.iloc[0], 1)[0]
        growth = max(0.0, float(slope))
    return {"batch": [int(b) for b in by_b.index], "seconds": [float(v) * 1e-6 for v in by_b.to_numpy()],
            "reference_size": int(BASE.ctx), "size_doubling_factor": growth, "base_s": float(by_b.iloc[0]) * 1e-6,
            "measured": True}


def main(argv: list[str] | None = None) -> None:
    """``python -m specplan.calibration.sa_kernel.bench --out FILE [--budget-s S]`` on a GPU machine."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="long-format CSV to write")
    parser.add_argument("--budget-s", type=float, default=300.0, help="wall-time budget in seconds")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args(argv)
    df = bench_sa_kernel(args.device, args.budget_s, args.out)
    per_step = df[df.metric.isin(["gpu_us_per_step", "gpu_us_per_step_cold_l2", "eager_host_us_per_step"])]
    keys = ["sweep", "mode", "B", "accepted", "K", "ctx", "active_slots", "metric"]
    print(per_step.groupby(keys, dropna=False, sort=False)["value"].median().unstack("metric").round(2).to_string())
    build = df[df.sweep == "build"]
    if len(build):
        print(build.groupby(["prompt_len", "metric"])["value"].median().unstack("metric").to_string())


if __name__ == "__main__":
    main()
