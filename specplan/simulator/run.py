"""One simulation run: resolve a config into workload, oracle, cost model and engine settings, run
the executor, and collect the tables. ``simulate(config)`` is the Python entry point."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from specplan import memory
from specplan.atomic import atomic_write
from specplan.config import SimConfig
from specplan.errors import ConfigError
from specplan.simulator import metrics, table_files
from specplan.simulator.engine import Executor
from specplan.simulator.inputs import EngineSettings, Workload
from specplan.simulator.itl_stream import itl_figures
from specplan.simulator.paths import VLLM, path_for
from specplan.simulator.prefix_cache import AFTER_STEP, SAME_STEP, PrefixCache
from specplan.simulator.presets import resolve_speculation
from specplan.acceptance import build_oracle
from specplan.run_reads import prefix_caching, reads_tokens

# vLLM runs dynamic SD with piecewise instead of full CUDA graphs: about 14% slower single-stream
# decoding (vllm-project/vllm#49548), applied as a step-time factor 1 / (1 - 0.14).
PIECEWISE_GRAPH_SLOWDOWN = 0.14


class _Table:
    """A ``SimResult`` table as a pandas DataFrame, made on first access (``SimResult.frame``)."""

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return obj.frame(self.name)


class SimResult:
    """Everything one run produced: the config, the summary, the description, and the tables
    (``requests``, ``iterations``, ``emissions``, and ``batches`` when recorded). Each table is its
    numpy columns (``table_columns``), built on first access so a run read only for its summary never
    pays for them, and a pandas DataFrame of those columns when read as ``result.requests``."""

    requests = _Table()
    iterations = _Table()
    emissions = _Table()
    batches = _Table()

    def __init__(self, config: SimConfig, summary: dict, columns: Mapping[str, object],
                 description: Optional[dict] = None, batches=None) -> None:
        """``columns`` maps each of ``table_files.TABLES`` to its columns (name -> array) or to a
        zero-argument builder of them; ``batches`` is a DataFrame, a builder of one, or None."""
        self.config, self.summary = config, summary
        self._columns = dict(columns)
        self._frames: dict = {"batches": batches}
        self.description = {} if description is None else description

    def table_columns(self, name: str) -> dict:
        """Table ``name``'s columns (name -> numpy array), in table order."""
        cols = self._columns[name]
        if callable(cols):
            cols = self._columns[name] = cols()
        return cols

    def frame(self, name: str):
        """Table ``name`` as a DataFrame (its columns shared, not copied); None for unrecorded batches."""
        frame = self._frames.get(name)
        if callable(frame):
            frame = self._frames[name] = frame()
        elif frame is None and name in self._columns:
            import pandas as pd

            frame = self._frames[name] = pd.DataFrame(self.table_columns(name), copy=False)
        return frame

    def __getstate__(self) -> dict:
        """Pickled (sent to another process) with every table's columns built: builders close over the trace."""
        return {**self.__dict__, "_columns": {name: self.table_columns(name) for name in self._columns},
                "_frames": {"batches": self.batches}}

    def save(self, out_dir: str | os.PathLike, csv: bool = False) -> Path:
        """Write the tables as Parquet (``table_files.write_table``; also as CSV with ``csv``), the summary
        and the config; each file goes to a temporary name, then is renamed."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        for name in table_files.TABLES:
            for fmt in table_files.FORMATS if csv else table_files.FORMATS[:1]:
                table_files.write_table(out / f"{name}.{fmt}", self.table_columns(name), fmt)
        atomic_write(out / "summary.json", lambda p: Path(p).write_text(json.dumps(
            metrics.plain({"description": self.description, **self.summary}), indent=2)))
        atomic_write(out / "config.yaml", lambda p: Path(p).write_text(dump_config(self.config)))
        return out


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
    rules = path_for(e.engine, sp.decoding_type)
    dynamic_sd = rules.name == VLLM and speculate and sp.num_speculative_tokens_per_batch_size is not None
    slowdown = cfg.cost.piecewise_cuda_graph_slowdown
    slowdown = (PIECEWISE_GRAPH_SLOWDOWN if slowdown is None else slowdown) if dynamic_sd and cfg.cost.cuda_graph_padding else 0.0
    return EngineSettings(
        max_batch_size=e.max_batch_size,
        max_num_tokens=e.max_num_tokens,
        max_num_active_requests=e.max_num_active_requests or e.max_batch_size,
        kv_block_size=e.kv_block_size,
        kv_num_blocks=kv_num_blocks,
        policy=e.capacity_scheduler_policy,
        chunked_prefill=e.enable_chunked_prefill or rules.name == VLLM,  # always on in vLLM V1
        overlap_scheduler=e.overlap_scheduler,
        speculate=speculate,
        max_draft_len=sp.max_draft_len,
        draft_len_schedule=dict(sp.draft_len_schedule) if sp.draft_len_schedule else None,
        vllm_ranges=tuple(tuple(r) for r in sp.num_speculative_tokens_per_batch_size)
        if sp.num_speculative_tokens_per_batch_size else None,
        schedule_lookup=sp.schedule_lookup or ("upper_bound" if rules.name == VLLM else rules.schedule_lookup),
        k_from=sp.k_from or rules.k_from,
        max_concurrency=sp.max_concurrency,
        verify_width=sp.verify_width or rules.verify_width,  # the path's: a drafter-path row with no proposal is padded
        gate_window=sp.acceptance_rate_window_size,
        gate_threshold=sp.acceptance_rate_threshold,
        gate_denominator=sp.gate_denominator or rules.gate_denominator,
        legacy_gate_window=sp.acceptance_window,
        legacy_gate_threshold=sp.acceptance_length_threshold,
        drafter=sp.decoding_type,
        sa_enhancer=sp.sa_config is not None,
        path=rules.name,
        max_model_len=e.max_model_len,
        piecewise_graph_slowdown=slowdown,
        kv_cache_scheduler=e.kv_cache_scheduler,
        context_chunking_policy=e.context_chunking_policy,
    )


def build_workload(cfg: SimConfig, requests: Optional[Sequence] = None) -> tuple[Workload, Sequence]:
    """Lengths, arrivals and session order for the loop, plus the requests they come from.

    ``requests`` may be given pre-built (sweeps share them between runs); otherwise they come from
    ``workloads.traffic``, with token ids only when the run reads them (``run_reads.reads_tokens``):
    synthetic traffic's request objects are made only if something reads them.
    """
    from specplan.workloads.traffic import traffic, workload_columns

    if requests is None:
        with memory.collector_paused():
            requests = traffic(cfg.workload, cfg.seed, tokens=reads_tokens(cfg))
    columns = workload_columns(requests, cfg.workload.arrival == "closed_loop")
    return Workload(**columns, concurrency=cfg.workload.concurrency), requests


def build_cost(cfg: SimConfig):
    from specplan.cost_models.registry import make_cost_model

    return make_cost_model(cfg.cost)


def kv_num_blocks(cfg: SimConfig) -> int:
    """``engine.kv_num_blocks``, else what the GPU holds after the model's weights."""
    from specplan.cost_models.capacity import kv_cache_blocks_for

    e, c = cfg.engine, cfg.cost
    if e.kv_num_blocks is not None:
        return e.kv_num_blocks
    return kv_cache_blocks_for(c, e.kv_block_size, e.kv_budget_gb, max_seqs=e.max_batch_size)


def resolve(cfg: SimConfig) -> SimConfig:
    """The config as the engine would run it: AUTO expanded, engine-preset defaults applied."""
    return cfg.model_copy(update={"speculation": resolve_speculation(cfg.engine, cfg.speculation)})


def build_prefix_cache(cfg: SimConfig, requests: list) -> Optional[PrefixCache]:
    """Prefix caching when the engine has it on, with the engine's rule: vLLM caches blocks as they
    are allocated (same step), TensorRT-LLM's block reuse once computed (from the next step)."""
    if not prefix_caching(cfg):
        return None
    return PrefixCache(requests, cfg.engine.kv_block_size, SAME_STEP if cfg.engine.engine == "vllm" else AFTER_STEP)


def simulate(cfg: SimConfig, cost=None, requests: Optional[list] = None, record_batches: bool = False,
             drafter_cache=None, observe=None) -> SimResult:
    """Run one scenario to completion and return its tables and summary.

    ``cost``, ``requests`` and ``drafter_cache`` (a ``drafters.PrecomputeCache`` of precomputed
    drafter tables) may be passed pre-built to share them across runs. With
    ``record_batches`` the result's ``batches`` table holds every step's rows (request, query
    tokens, resident context, prefill flag), for replaying the schedule on a device. ``observe``
    is called with the executor before it runs.
    """
    if cfg.cluster.replicas > 1:
        from specplan.simulator.fleet import simulate_fleet

        return simulate_fleet(cfg, cost, requests, drafter_cache)
    cfg = resolve(cfg)
    workload, requests = build_workload(cfg, requests)
    if cfg.speculation.decoding_type != "none":
        from specplan.workloads.datasets import check_acceptance_source

        check_acceptance_source(requests, cfg.acceptance.mode)
    settings = resolve_engine(cfg, kv_num_blocks(cfg))
    oracle = build_oracle(cfg, requests, workload.prompt_lens, workload.output_lens, drafter_cache)
    cost = cost if cost is not None else build_cost(cfg)
    prefix_cache = build_prefix_cache(cfg, requests)
    ex = Executor(settings, workload, oracle, cost, cfg.max_sim_time_s, record_batches, prefix_cache)
    if observe is not None:  # e.g. a progress bar reading the executor's counters from another thread
        observe(ex)
    trace = ex.run()
    req = metrics.request_columns(trace)
    if cfg.max_sim_time_s is not None and np.isnan(req["finish_s"]).all():
        raise ConfigError(f"max_sim_time_s: {cfg.max_sim_time_s:g} s of simulated time ended the run before any "
                          "request completed; raise it or remove it")
    itl = (itl_figures(trace.emissions) if trace.emissions.spill  # the log went to disk in chunks
           else metrics.inter_token_latencies(metrics.emission_columns(trace)))
    summary = metrics.summarize(trace, req, trace.iterations, itl, cfg.slo_ttft_s, cfg.slo_tpot_s)
    summary["seed"] = cfg.seed
    if prefix_cache is not None:
        summary["prefix_cache_hit_tokens"] = prefix_cache.hit_tokens
    samples = trace.gate_samples
    summary["gate_sample_mean"] = float(np.mean(samples)) if samples else None  # what a SpeculationGate averages
    summary.update({f"drafter_{k}": v for k, v in oracle.metrics().items()})
    spec = cfg.speculation.model_dump(exclude_defaults=True)
    return SimResult(cfg, summary, {"requests": lambda: metrics.request_table_columns(trace, requests, req),
                                    "iterations": lambda: metrics.iteration_columns(trace),
                                    "emissions": lambda: metrics.emission_columns(trace)},
                     {"cost": cost.describe(), "speculation": spec},
                     (lambda: metrics.batch_table(trace)) if record_batches else None)


def baseline_config(cfg: SimConfig) -> SimConfig:
    """The same scenario with speculation off."""
    return cfg.model_copy(update={"speculation": cfg.speculation.model_copy(update={"decoding_type": "none"})})
