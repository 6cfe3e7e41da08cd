"""One simulation run: resolve a config into workload, oracle, cost model and engine settings, run
the executor, and collect the tables. ``simulate(config)`` is the Python entry point."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from specplan.config import SimConfig
from specplan.errors import ConfigError
from specplan.simulator import metrics
from specplan.simulator.engine import EngineSettings, Executor, Workload
from specplan.simulator.presets import resolve_speculation
from specplan.simulator.oracles import AcceptanceOracle, alpha_oracle, length_dist_oracle, per_position_oracle

# Verify width per drafter: the NGram path pads every generation row to 1 + max_draft_len
# (pad_draft_tokens_for_cuda_graph); one-model SA verifies the runtime K; vLLM drafts are unpadded.
DEFAULT_VERIFY_WIDTH = {"NGram": "static", "SA": "runtime", "vllm_ngram": "draft", "suffix": "draft", "pld": "draft"}


@dataclass
class SimResult:
    """Everything one run produced."""

    config: SimConfig
    summary: dict
    requests: pd.DataFrame
    iterations: pd.DataFrame
    emissions: pd.DataFrame
    description: dict = field(default_factory=dict)

    def save(self, out_dir: str | os.PathLike, formats: tuple[str, ...] = ("parquet", "csv")) -> Path:
        """Write tables and the summary; each file goes to a temporary name, then is renamed."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        for name in ("requests", "iterations", "emissions"):
            df = getattr(self, name)
            for fmt in formats:
                _atomic(out / f"{name}.{fmt}", lambda p, df=df, fmt=fmt: df.to_parquet(p, index=False)
                        if fmt == "parquet" else df.to_csv(p, index=False))
        _atomic(out / "summary.json", lambda p: Path(p).write_text(json.dumps(
            {"description": self.description, **self.summary}, indent=2, default=_json_default)))
        _atomic(out / "config.yaml", lambda p: Path(p).write_text(dump_config(self.config)))
        return out


def _json_default(obj):
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def _atomic(path: Path, write) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def dump_config(cfg: SimConfig) -> str:
    import yaml

    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)


# ----------------------------------------------------------------------------- resolution
def resolve_engine(cfg: SimConfig, kv_num_blocks: int) -> EngineSettings:
    """Engine settings from the config, with the per-engine defaults filled in."""
    e, sp = cfg.engine, cfg.speculation
    speculate = sp.decoding_type != "none" and (
        sp.max_draft_len > 0 or sp.draft_len_schedule is not None or sp.num_speculative_tokens_per_batch_size is not None
    )
    return EngineSettings(
        max_batch_size=e.max_batch_size,
        max_num_tokens=e.max_num_tokens,
        max_num_active_requests=e.max_num_active_requests or e.max_batch_size,
        kv_block_size=e.kv_block_size,
        kv_num_blocks=kv_num_blocks,
        policy=e.capacity_scheduler_policy,
        chunked_prefill=e.enable_chunked_prefill,
        overlap_scheduler=e.overlap_scheduler,
        speculate=speculate,
        max_draft_len=sp.max_draft_len,
        draft_len_schedule=dict(sp.draft_len_schedule) if sp.draft_len_schedule else None,
        vllm_ranges=tuple(tuple(r) for r in sp.num_speculative_tokens_per_batch_size)
        if sp.num_speculative_tokens_per_batch_size else None,
        schedule_lookup=sp.schedule_lookup,
        k_from=sp.k_from,
        max_concurrency=sp.max_concurrency,
        verify_width=sp.verify_width or DEFAULT_VERIFY_WIDTH.get(sp.decoding_type, "draft"),
        gate_window=sp.acceptance_rate_window_size,
        gate_threshold=sp.acceptance_rate_threshold,
        gate_denominator=sp.gate_denominator,
        legacy_gate_window=sp.acceptance_window,
        legacy_gate_threshold=sp.acceptance_length_threshold,
        drafter=sp.decoding_type,
    )


def _arrival_times(cfg: SimConfig, n: int, rng: np.random.Generator) -> Optional[np.ndarray]:
    w = cfg.workload
    if w.arrival == "closed_loop":
        return None
    if w.arrival == "poisson":
        return np.cumsum(rng.exponential(1.0 / w.rate, n))
    if w.arrival == "gamma":
        shape = 1.0 / (w.cv ** 2)
        return np.cumsum(rng.gamma(shape, 1.0 / (w.rate * shape), n))
    raise ConfigError("workload.arrival: 'trace' needs a trace with arrival_s timestamps")


def build_workload(cfg: SimConfig) -> tuple[Workload, list]:
    """Lengths, arrivals and session order; returns the Request list too when a trace is used."""
    rng = np.random.default_rng([cfg.seed, 1])
    w = cfg.workload
    if w.trace is None:
        n = w.num_requests
        plen = np.full(n, w.prompt_len, dtype=np.int64)
        olen = np.full(n, w.output_len, dtype=np.int64)
        requests: list = []
        pred = np.full(n, -1, dtype=np.int64)
    else:
        raise ConfigError("workload.trace: trace workloads are not available yet")
    think = np.full(len(plen), w.think_time_s) if w.think_time_s > 0 else None
    return Workload(plen, olen, _arrival_times(cfg, len(plen), rng), pred, w.concurrency, think), requests


def build_oracle(cfg: SimConfig, workload: Workload, requests: list) -> AcceptanceOracle:
    a = cfg.acceptance
    args = (workload.prompt_lens, workload.output_lens)
    seed = int(np.random.default_rng([cfg.seed, 2]).integers(2**31))
    if a.mode == "alpha":
        return alpha_oracle(a.alpha, *args, seed=seed, max_k=max(cfg.speculation.max_draft_len, 1))
    if a.mode == "per_position":
        if not a.per_position:
            raise ConfigError("acceptance.per_position: give the conditional rates a_1..a_K")
        return per_position_oracle(a.per_position, *args, seed=seed)
    if a.mode == "length_dist":
        if not a.length_dist:
            raise ConfigError("acceptance.length_dist: give P(accepted = 0), P(accepted = 1), ...")
        return length_dist_oracle(a.length_dist, *args, seed=seed)
    raise ConfigError(f"acceptance.mode: '{a.mode}' is not available yet")


def build_cost(cfg: SimConfig):
    from specplan.cost_models.registry import make_cost_model

    return make_cost_model(cfg.cost)


def default_kv_blocks(cfg: SimConfig) -> int:
    if cfg.engine.kv_num_blocks is not None:
        return cfg.engine.kv_num_blocks
    return 1 << 20


def resolve(cfg: SimConfig) -> SimConfig:
    """The config as the engine would run it: AUTO expanded, engine-preset defaults applied."""
    return cfg.model_copy(update={"speculation": resolve_speculation(cfg.engine, cfg.speculation)})


def simulate(cfg: SimConfig, cost=None) -> SimResult:
    """Run one scenario to completion and return its tables and summary."""
    cfg = resolve(cfg)
    workload, requests = build_workload(cfg)
    settings = resolve_engine(cfg, default_kv_blocks(cfg))
    oracle = build_oracle(cfg, workload, requests)
    cost = cost if cost is not None else build_cost(cfg)
    ex = Executor(settings, workload, oracle, cost, cfg.max_sim_time_s)
    ex.run()
    ids = [r.id for r in requests] if requests else None
    req = metrics.request_table(ex, ids)
    its = metrics.iteration_table(ex)
    em = metrics.emission_table(ex)
    summary = metrics.summarize(ex, req, its, em, cfg.slo_ttft_s, cfg.slo_tpot_s)
    summary["seed"] = cfg.seed
    summary.update({f"drafter_{k}": v for k, v in oracle.metrics().items()})
    spec = cfg.speculation.model_dump(exclude_defaults=True)
    return SimResult(cfg, summary, req, its, em, {"cost": cost.describe(), "speculation": spec})


def baseline_config(cfg: SimConfig) -> SimConfig:
    """The same scenario with speculation off."""
    return cfg.model_copy(update={"speculation": cfg.speculation.model_copy(update={"decoding_type": "none"})})
