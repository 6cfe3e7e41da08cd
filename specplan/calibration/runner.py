"""``specplan calibrate``: measure a device, write measurements, meta and a fitted profile.

Steps: build the decoder stack (``stack``) for the model's real shapes and layer count; time the
NGram host pool (``draft_bench``, optional); time every grid point (``grid``) in ``repeats``
interleaved passes, and more (up to ``MAX_PASSES``) while the budget lasts, in random order (the
first pass measures the knot sweeps ``tokens`` and ``lm_head`` first, so a short budget still yields
a fit); write ``measurements.csv``; hold out a fraction of the points, fit on the rest and report
the median error on them; fit on everything and write ``profile.yaml`` and ``meta.yaml``; print the
gamma(B) table. The budget covers the whole command: measurement stops at 90% of it, leaving the
rest for fitting and writing.
"""

from __future__ import annotations

import dataclasses
import platform
import random
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

import pandas as pd
import yaml

from specplan.calibration import draft_bench, experts, host_bench
from specplan.calibration.fit import (
    build_profile, eager_overhead, forward_model, heldout_error, lm_head_curve, reject_outliers,
)
from specplan.calibration.grid import CPU_GRID, CUDA_GRID, Point, build_points, cover
from specplan.cost_models.capacity import kv_bytes_per_token, weight_bytes
from specplan.cost_models.gamma import gamma_view, render_table
from specplan.cost_models.hardware import gpu_key_for_device
from specplan.cost_models.measurements import COLUMNS, forward_points, preferred_mode
from specplan.cost_models.models import get_model
from specplan.atomic import atomic_write_text
from specplan.cost_models.profile import HostTerms, ModelShape, ProfileFile, Provenance, write_profile
from specplan.errors import SpecplanError

MEASURE_SHARE = 0.9
SA_SHARE = 0.25  # of the budget for the SA kernel bench (CUDA only), after the forward sweeps
MAX_PASSES = 10
DRAFT_SHARE = 0.08
SMALL_BUDGET_S = 120.0
BLOCK_S = {"cuda": 0.02, "cpu": 0.01}
GAMMA_BATCHES = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256)  # printed where B(1+8) is within the grid
GAMMA_KS = (1, 2, 4, 8)
_SMI_FIELDS = "name,driver_version,clocks.sm,clocks.mem,power.draw,temperature.gpu"


@dataclass(frozen=True)
class CalibrationResult:
    """What a calibration run wrote and how well its profile predicts held-out points."""

    profile: ProfileFile
    profile_path: Path
    measurements_path: Path
    meta_path: Path
    heldout_median_abs_error: float
    heldout_points: int
    points_measured: int
    points_total: int


def _import_torch():
    try:
        import torch
    except ImportError:
        raise SpecplanError("calibrate needs torch: pip install 'specplan[calibrate]'") from None
    return torch


def gpu_state(index: int = 0) -> Optional[dict]:
    """Clocks, power and temperature from ``nvidia-smi`` (None when it is absent)."""
    if shutil.which("nvidia-smi") is None:
        return None
    out = {}
    for fields in (_SMI_FIELDS, "clocks_event_reasons.active", "clocks_throttle_reasons.active"):
        proc = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader", "-i", str(index)],
                              capture_output=True, text=True, timeout=30)
        if proc.returncode == 0:
            out.update(zip(fields.split(","), (v.strip() for v in proc.stdout.strip().split(","))))
            if fields != _SMI_FIELDS:
                break
    return out


def _kv_capacity(torch, points: list[Point], model, tp: int, device: str, dtype_bytes: int) -> int:
    """KV tokens the cache can hold: free GPU memory after weights and a working reserve; on CPU, the grid's need."""
    need = max(p.kv_tokens for p in points)
    if device != "cuda":
        return need
    free, _total = torch.cuda.mem_get_info()
    max_n = max(p.num_tokens for p in points)
    reserve = 4e9 + 8 * max_n * max(model.intermediate // tp, model.vocab // tp) * dtype_bytes
    room = free * 0.9 - weight_bytes(model, tp, dtype_bytes) - reserve
    per_token = kv_bytes_per_token(model, tp, dtype_bytes)
    if room <= per_token:
        raise SpecplanError(f"calibrate: {model.name} TP{tp} does not fit in this device's free memory")
    return min(need, int(room // per_token))


def _row(point: Point, rep: int, mode: str, seconds: float, replays: int) -> dict:
    return {"kind": point.kind, "sweep": point.sweep, "point": point.key, "pass": rep, "mode": mode,
            "batch": point.batch, "query_len": point.query_len, "context": point.context,
            "is_prefill": point.is_prefill, "num_tokens": point.num_tokens, "logit_tokens": point.logit_tokens,
            "replays": replays, "seconds": seconds}


def _pass_order(points: list[Point], rep: int, rng: random.Random) -> list[Point]:
    knots = [p for p in points if p.sweep in ("tokens", "lm_head")]
    rest = [p for p in points if p.sweep not in ("tokens", "lm_head")]
    if rep > 0:
        order = points[:]
        rng.shuffle(order)
        return order
    rng.shuffle(knots)
    rng.shuffle(rest)
    return knots + rest


def _measure_points(stack, timer, points: list[Point], repeats: int, block_s: float, deadline: float,
                    rng: random.Random, progress, max_passes: int = MAX_PASSES) -> tuple[list[dict], set[str]]:
    """Time every point in at least ``repeats`` passes, and in more (up to ``max_passes``) while the
    budget lasts; stops at ``deadline``. Returns the rows and the keys measured at least once."""
    rows: list[dict] = []
    spent: dict[str, float] = {}
    task = progress.add_task("measuring", total=repeats * len(points))
    for rep in range(max(repeats, max_passes)):
        if rep == repeats:
            progress.update(task, description="extra passes")
        for point in _pass_order(points, rep, rng):
            estimate = spent.get(point.key, sum(spent.values()) / len(spent) if spent else 0.0)
            if time.monotonic() + estimate > deadline:
                return rows, set(spent)
            start = time.monotonic()
            for mode, (seconds, replays) in timer(stack.step(point), block_s).items():
                rows.append(_row(point, rep, mode, seconds, replays))
            spent[point.key] = time.monotonic() - start
            if rep < repeats:
                progress.advance(task)
    return rows, set(spent)


def run_calibration(model: str, out: str | Path, *, tp: int = 1, device: str = "cuda", budget_s: float = 480.0,
                    layers: Optional[int] = None, name: Optional[str] = None, seed: int = 0, repeats: int = 3,
                    heldout_fraction: float = 0.25, threads: Optional[int] = None, draft_bench_on: bool = True,
                    sa_kernel_on: bool = True, passes: Optional[int] = None, max_tokens: Optional[int] = None,
                    max_context: Optional[int] = None, host_bench_on: bool = False, engine_gemm: bool = False,
                    console=None) -> CalibrationResult:
    """Run the whole calibration (see the module docstring) and return what it wrote.

    ``passes``: measure every point (and every NGram host cell) exactly that many times, with no
    deadline, so what is measured depends on the count and never on the machine's speed or load
    (tests and notebooks use it); ``budget_s`` then bounds only the SA kernel bench on CUDA.
    ``max_tokens`` / ``max_context``: extend the grid to the steps the scenario runs (``grid.cover``).
    ``host_bench_on``: also time vLLM's scheduler per step beside the stack's forward (``host_bench``;
    needs vLLM): the profile's ``host`` terms. ``engine_gemm`` (the CLI's choice on the CPU where vLLM is
    installed): the stack's GEMMs are the CPU engine's own (``cpu_gemm``; meta.yaml's ``gemm`` says which ran).
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    t0 = time.monotonic()
    console = console or Console(stderr=True)
    torch = _import_torch()
    from specplan.calibration.cpu_gemm import gemm_for
    from specplan.calibration.stack import DecoderStack, with_layers
    from specplan.calibration.timing import time_cpu, time_cuda

    if device not in ("cuda", "cpu"):
        raise SpecplanError(f"--device: {device!r} is not cuda or cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise SpecplanError("--device cuda: no CUDA device here; use --device cpu (with --model tiny)")
    spec = get_model(model)
    if layers is not None:
        spec = with_layers(spec, layers)  # MoE and windowed layers in the model's proportion
    if device == "cpu":
        torch.set_num_threads(threads or 1)
    torch_dtype, dtype_name, dtype_bytes = (torch.bfloat16, "bf16", 2) if device == "cuda" else (torch.float32, "fp32", 4)
    grid = cover(CUDA_GRID if device == "cuda" else CPU_GRID, max_tokens, max_context)
    if passes is not None:
        repeats = passes

    def deadline_for(share: float) -> float:
        return float("inf") if passes is not None else t0 + share * budget_s
    points = build_points(grid)
    capacity = _kv_capacity(torch, points, spec, tp, device, dtype_bytes)
    kept = [p for p in points if p.kv_tokens <= capacity]
    device_name = torch.cuda.get_device_name(0) if device == "cuda" else draft_bench.host_description()
    run = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "device": device,
           "device_name": device_name, "gpu_state_before": gpu_state() if device == "cuda" else None}

    console.print(f"[bold]calibrate[/] {spec.name} TP{tp} ({spec.num_layers} layers) on {device_name}, "
                  + (f"{len(kept)} points x {passes} passes (fixed)" if passes is not None
                     else f"budget {budget_s:g} s, {len(kept)} points x {repeats} passes"))
    draft_rows, draft_what = [], None
    if draft_bench_on:
        small = budget_s < SMALL_BUDGET_S if passes is None else device == "cpu"
        pools = draft_bench.POOL_ENTRIES[:3] if small else draft_bench.POOL_ENTRIES
        draft_rows, draft_what = draft_bench.measure(pools, draft_bench.DRAFT_LENS, passes=repeats, calls=200,
                                                     seed=seed, deadline=deadline_for(DRAFT_SHARE))

    forward_share = MEASURE_SHARE - (SA_SHARE if device == "cuda" and sa_kernel_on else 0.0)
    gemm, gemm_name = gemm_for(device, engine_gemm)
    stack = DecoderStack(spec, tp, device, torch_dtype, max(p.kv_tokens for p in kept), seed, gemm)
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                        console=console, transient=False)
    with progress, torch.inference_mode():
        fwd_rows, measured = _measure_points(stack, time_cuda if device == "cuda" else time_cpu, kept, repeats,
                                             BLOCK_S[device], deadline_for(forward_share), random.Random(seed),
                                             progress, MAX_PASSES if passes is None else passes)
        expert_df = (experts.measure(stack, time_cuda if device == "cuda" else time_cpu, device, grid, BLOCK_S[device],
                                     repeats, deadline_for(MEASURE_SHARE), random.Random(seed)) if spec.moe else None)
        host_rows = (host_bench.measure(_forward_for(stack, torch, device), block_size=16 if device == "cuda" else 128,
                                        device=device) if host_bench_on else [])
    run.update({"attention_backend": stack.attention_backend(), "gpu_state_after": gpu_state() if device == "cuda" else None,
                "cuda": torch.version.cuda, "torch": str(torch.__version__), "threads": torch.get_num_threads(),
                "points": {"total": len(points), "measured": len(measured),
                           "skipped_for_memory": [p.key for p in points if p.kv_tokens > capacity],
                           "not_reached": [p.key for p in kept if p.key not in measured]}})
    del stack
    sa_fit = None
    if device == "cuda" and sa_kernel_on:
        # The project's Triton SA kernel, timed on the same GPU, prices SA drafting in this profile.
        from specplan.calibration.sa_kernel.bench import bench_sa_kernel, fit_sa_kernel_cost

        sa_df = bench_sa_kernel("cuda", SA_SHARE * budget_s, Path(out) / "sa_kernel.csv")
        sa_fit = fit_sa_kernel_cost(sa_df)

    out = Path(out)
    df = pd.DataFrame(draft_rows + fwd_rows, columns=list(COLUMNS))
    atomic_write_text(out / "measurements.csv", df.to_csv(index=False))
    gpu_key = gpu_key_for_device(device_name) if device == "cuda" else None
    prefix = gpu_key or ("cpu" if device == "cpu" else "-".join(device_name.lower().split()))
    name = name or f"{prefix}/{spec.name}" + (f"/tp{tp}" if tp > 1 else "")
    mode = preferred_mode(df)
    profile, err, n_test = _fit(df, mode, spec, name, gpu_key, tp, dtype_name,
                                heldout_fraction, seed, draft_rows, draft_what, run, sa_fit)
    host = {"measured": False, "why": "without --host-bench the profile takes cost.host_overhead_s and "
                                      "cost.host_overhead_per_seq_s"}
    if host_rows:
        step_s, per_seq_s = host_bench.fit_host(host_rows)
        profile = profile.model_copy(update={"host": HostTerms(step_s=step_s, per_seq_s=per_seq_s)})
        host = {"measured": True, "on": "vLLM's scheduler beside the forward", "rows": host_rows,
                "step_s": step_s, "per_seq_s": per_seq_s}
    write_profile(profile, out / "profile.yaml")
    meta = {**run, "command": " ".join(sys.argv), "driver": (run["gpu_state_before"] or {}).get("driver_version"),
            "python": platform.python_version(), "host_cpu": draft_bench.host_description(), "dtype": dtype_name,
            "cuda_graphs": device == "cuda", "gemm": gemm_name, "model": dataclasses.asdict(spec), "tp": tp, "seed": seed,
            "budget_s": budget_s if passes is None else None, "passes": passes, "elapsed_s": round(time.monotonic() - t0, 1), "repeats": repeats,
            "grid": grid.as_dict(), "ngram_host": draft_what,
            "heldout": {"fraction": heldout_fraction, "median_abs_error": err, "points": n_test},
            "fitted_mode": mode, "spread": _spread(df, mode), "host": host}
    if expert_df is not None:  # MoE: step time against distinct experts touched (experts.csv)
        meta["experts"] = experts.write(expert_df, out, mode, spec, gpu_key, tp)
    atomic_write_text(out / "meta.yaml", yaml.safe_dump(meta, sort_keys=False, allow_unicode=True))

    in_range = [b for b in GAMMA_BATCHES if b * (1 + max(GAMMA_KS)) <= profile.measured_range.tokens[1]]
    view = gamma_view(forward_model(profile, str(out / "profile.yaml")), grid.base_context, in_range, GAMMA_KS)
    console.print(render_table(view, f"{name}: forward T(B,1) and γ(B,K) at context {grid.base_context}"))
    console.print(f"held-out median error {err:.1%} on {n_test} points; wrote profile.yaml, measurements.csv, "
                  f"meta.yaml to {out}")
    return CalibrationResult(profile, out / "profile.yaml", out / "measurements.csv", out / "meta.yaml", err, n_test,
                             len(measured), len(points))


def _fit(df: pd.DataFrame, mode: str, spec, name: str, gpu_key: Optional[str], tp: int, dtype: str,
         heldout_fraction: float, seed: int, draft_rows: list[dict], draft_what: Optional[str],
         run: dict, sa_fit: Optional[dict] = None) -> tuple[ProfileFile, float, int]:
    """Held-out check, then the profile fitted on every point (outlying repeats rejected), with its provenance."""
    df = reject_outliers(df)
    pts = forward_points(df, mode)
    lm = lm_head_curve(df, mode)
    kwargs = dict(name=name, gpu=gpu_key, tp=tp, dtype=dtype,
                  model_shape=ModelShape(name=spec.name, num_layers=spec.num_layers, hidden=spec.hidden, vocab=spec.vocab))
    err, n_test = heldout_error(pts, lm, heldout_fraction, seed,
                                provenance=Provenance(kind="measured", source="held-out fit"), **kwargs)
    provenance = Provenance(
        kind="measured", device=run["device_name"], date=run["date"], heldout_median_abs_error=round(err, 5),
        heldout_points=n_test,
        source=f"specplan calibrate --model {spec.name} --tp {tp} --device {run['device']} "
               f"({spec.num_layers} layers, {dtype})",
        notes=("per-GPU shard measured on one GPU; TP all-reduces analytic" if tp > 1 else None),
    )
    draft = (draft_bench.draft_section(draft_rows, draft_what, draft_bench.host_description(), run["date"][:10],
                                       sa_fit, run["device_name"]) if draft_rows else None)
    profile = build_profile(pts, lm, provenance=provenance, draft=draft, eager_overhead_s=eager_overhead(df),
                            cuda_graph_padding=False if run["device"] == "cpu" else None, **kwargs)
    return profile, err, n_test


def _forward_for(stack, torch, device: str):
    """``(batch, query_len) -> closure`` of the stack's decode step at the host bench's context; on CUDA
    it waits for the GPU, as the engine does when it reads the sampled tokens back."""
    def make(batch: int, query_len: int):
        step = stack.step(Point("host", batch, query_len, host_bench.PROMPT_TOKENS))
        if device != "cuda":
            return step
        return lambda: (step(), torch.cuda.synchronize())
    return make


def _spread(df: pd.DataFrame, mode: str) -> dict:
    pts = forward_points(df, mode)
    return {"median_p10_p90_relative": float(((pts["p90"] - pts["p10"]) / pts["seconds"]).median()),
            "median_repeats": float(pts["repeats"].median())}
