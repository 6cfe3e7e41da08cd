"""Run many configs: a local process pool or a Ray cluster, records written as runs complete.

Both backends call the same task, :func:`run_record`, on the same inputs, so a config gives the same
record whichever runs it. What runs share is built once and handed over rather than rebuilt per
task (``SHARED``): the cost model (keyed by the cost section; it may read a profile), the
workload's requests (keyed by the workload section and seed; the trace under them is read and
tokenised once per trace, whatever rate, sample size or seed a point takes) and the exact drafter's
precomputed tables (keyed by requests and drafter settings). A recorded acceptance log is parsed once
per process too (``acceptance.recorded.parsed_log``).
The local pool memoises them per worker process; the Ray runner builds each distinct one once on
the driver, puts it in the object store and passes the reference to every task that needs it.

Records are written by the driver only, each as soon as its run returns (see ``records``), so a
sweep killed at any point resumes where it stopped: :func:`execute` skips every key already on disk.
A run that raises yields a :class:`RunFailure` (its key and the error in one line) instead of a
record; the other runs go on, and a failed run has no record, so the next sweep retries it.
The local pool uses forkserver processes (``sweeps.workers``: they import this package whatever the
current folder, start with its compiled kernels loaded, and exit with the sweep), so a script that
starts a sweep needs the usual ``if __name__ == "__main__":`` guard.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
from abc import ABC, abstractmethod
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from functools import lru_cache
from multiprocessing import forkserver
from typing import Iterable, Iterator, Optional, Sequence

from specplan.config import CostConfig, SimConfig, WorkloadConfig
from specplan.errors import ConfigError, SpecplanError, one_line
from specplan.sweeps.records import RecordStore, config_json, config_key, make_record
from specplan.sweeps.workers import exit_with_sweep, this_package_first

BACKENDS = ("local", "ray")


def default_workers() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


# ----------------------------------------------------------------------------- the task
def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _cost_key(cfg: SimConfig) -> str:
    return _canonical(cfg.cost.model_dump(mode="json"))


def _requests_key(cfg: SimConfig) -> str:
    return _canonical({"workload": cfg.workload.model_dump(mode="json"), "seed": cfg.seed})


@lru_cache(maxsize=16)
def _build_cost(key: str):
    from specplan.cost_models.registry import make_cost_model

    return make_cost_model(CostConfig.model_validate_json(key))


@lru_cache(maxsize=16)
def _build_requests(key: str) -> list:
    from specplan.workloads.traffic import build_requests

    spec = json.loads(key)
    workload = WorkloadConfig.model_validate(spec["workload"])
    return build_requests(workload, spec["seed"], trace=_load_trace(_trace_key(workload)))


def _trace_key(workload: WorkloadConfig) -> str:
    """What a trace's parsed requests depend on ("" for synthetic traffic, generated per seed):
    configs differing in rate, sample size or seed share one parse."""
    from specplan.workloads.synthetic import is_synthetic

    fields = ("trace", "format", "format_options", "tokenizer", "categories")
    return "" if is_synthetic(workload.trace) else _canonical({f: getattr(workload, f) for f in fields})


@lru_cache(maxsize=4)
def _load_trace(key: str) -> Optional[list]:
    """The trace's requests before sampling, read once per process and key."""
    from specplan.workloads.traffic import trace_requests

    return trace_requests(WorkloadConfig.model_validate(json.loads(key))) if key else None


def _drafter_key(cfg: SimConfig) -> str:
    """The requests and the drafter settings that determine precomputed drafter tables ("" when the
    run replays no exact drafter); configs differing only in K or the schedule share one."""
    if cfg.acceptance.mode != "drafter" or cfg.speculation.decoding_type in ("none", "MTP", "Eagle3"):
        return ""
    from specplan.acceptance.drafters import DrafterSettings
    from specplan.simulator.run import resolve

    sp = resolve(cfg).speculation  # AUTO expanded, as the run will see it
    settings = DrafterSettings.from_spec(sp)
    return _canonical({"requests": _requests_key(cfg), "speculation": sp.model_dump(mode="json", exclude_unset=True),
                       "settings": settings.key(), "max_batch_size": cfg.engine.max_batch_size})


@lru_cache(maxsize=16)
def _build_drafter_cache(key: str):
    """A precompute cache holding the drafter's per-request tables, filled once by building the oracle."""
    if not key:
        return None
    from specplan.config import SpeculationConfig
    from specplan.acceptance.drafters import PrecomputeCache, make_drafter_oracle

    spec = json.loads(key)
    cache = PrecomputeCache()
    make_drafter_oracle(SpeculationConfig.model_validate(spec["speculation"]), _build_requests(spec["requests"]),
                        spec["max_batch_size"], cache)
    return cache


# What runs share: ``simulate`` keyword -> (the key it depends on, how to build it from that key).
SHARED = {"cost": (_cost_key, _build_cost), "requests": (_requests_key, _build_requests),
          "drafter_cache": (_drafter_key, _build_drafter_cache)}


def run_record(cfg_json: dict, **shared) -> dict:
    """Simulate one config and return its record.

    ``shared`` are pre-built ``simulate`` inputs for this config (``cost``, ``requests``); any not
    given come from this process's memo (built at most once per key and process).
    """
    from specplan.simulator.run import simulate

    cfg = SimConfig.model_validate(cfg_json)
    for name, (key_of, build) in SHARED.items():
        if name not in shared:
            shared[name] = build(key_of(cfg))
    result = simulate(cfg, **shared)
    from specplan.simulator.cost_split import cost_terms
    from specplan.sweeps.stability import stability

    record = make_record(cfg, result.summary, result.description)
    # beside the summary: what the report needs to say why a configuration loses, from this run's iterations
    record["cost_terms"] = cost_terms(result.table_columns("iterations"), shared["cost"], cfg.engine.kv_block_size)
    record["k_shares"] = result.summary["k_shares"]
    requests = result.table_columns("requests")
    record["stability"] = stability(requests["arrival_s"], requests["finish_s"])
    return record


@dataclass(frozen=True)
class RunFailure:
    """A run that raised: its config's key, the error as one line, and the exception itself."""

    key: str
    error: str
    exception: BaseException

    @classmethod
    def of(cls, key: str, exc: BaseException) -> "RunFailure":
        # A user error is its own line; anything else is named by its type so a bug stays visible.
        text = str(exc) if isinstance(exc, SpecplanError) else f"{type(exc).__name__}: {exc}"
        return cls(key, " ".join(text.split()), exc)


# ----------------------------------------------------------------------------- backends
class Runner(ABC):
    """Runs configs and yields each record (or :class:`RunFailure`) as it completes (any order);
    a context manager."""

    workers: int

    @abstractmethod
    def run(self, configs: Sequence[SimConfig]) -> Iterator[dict | RunFailure]:
        """Yield the record of every config, or its failure, in completion order."""

    @abstractmethod
    def close(self) -> None:
        """Release the pool or the Ray session, if this runner started one."""

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class LocalRunner(Runner):
    """A process pool over ``workers`` cores (forkserver processes that exit with the sweep).

    The pool starts on the first ``run`` and lives until ``close``, so consecutive batches share it.
    """

    def __init__(self, workers: Optional[int] = None) -> None:
        self.workers = default_workers() if workers is None else workers
        if self.workers < 1:
            raise ConfigError("--workers: must be >= 1")
        self._pool: Optional[ProcessPoolExecutor] = None

    def _started(self) -> ProcessPoolExecutor:
        if self._pool is None:
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(["specplan.sweeps.warm_start", __name__])  # its collector pause first
            with this_package_first():
                forkserver.ensure_running()
            self._pool = ProcessPoolExecutor(self.workers, mp_context=ctx, initializer=exit_with_sweep,
                                             initargs=(os.getpid(),))
        return self._pool

    def run(self, configs: Sequence[SimConfig]) -> Iterator[dict | RunFailure]:
        # At most four tasks per worker in flight, topped up as they finish: results stream back in
        # completion order without every config being queued up front.
        todo = iter(configs)
        keys: dict = {}  # future -> config key, to name a failed run
        limit = 4 * self.workers
        while True:
            for cfg in todo:
                keys[self._started().submit(run_record, config_json(cfg))] = config_key(cfg)
                if len(keys) >= limit:
                    break
            if not keys:
                return
            done, _ = wait(keys, return_when=FIRST_COMPLETED)
            for fut in done:
                key = keys.pop(fut)
                exc = fut.exception()
                yield fut.result() if exc is None else RunFailure.of(key, exc)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


class RayRunner(Runner):
    """The same tasks on a Ray cluster (``address``), or on a local Ray instance when none is given.

    Connects on the first ``run``: joins an already initialised Ray session as it is, otherwise starts
    one (``workers`` CPUs for a local instance) and shuts it down on ``close``.
    """

    def __init__(self, workers: Optional[int] = None, address: Optional[str] = None) -> None:
        try:
            import ray
        except ImportError:
            raise ConfigError("--backend ray: Ray is not installed (pip install 'specplan[ray]')") from None
        self._ray = ray
        self.workers = default_workers() if workers is None else workers
        if self.workers < 1:
            raise ConfigError("--workers: must be >= 1")
        self.address = address
        self._owns = False
        self._task = None
        self._refs: dict[tuple[str, str], object] = {}

    def _connect(self):
        ray = self._ray
        if self._task is None:
            if not ray.is_initialized():
                where = {"address": self.address} if self.address else {"num_cpus": self.workers}
                try:
                    ray.init(**where, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
                except Exception as exc:  # Ray raises ConnectionError, RuntimeError, ValueError, TimeoutError...
                    why = f"{type(exc).__name__}: {one_line(exc)}"[:300]
                    raise ConfigError(
                        f"--address {self.address}: Ray did not connect ({why}); check the address and that the "
                        "cluster is up (ray status), or drop --address" if self.address else
                        f"--backend ray: a local Ray instance did not start ({why}); check that `ray start --head` "
                        "works here (free memory and /tmp space), or use --backend local") from None
                self._owns = True
            self._task = ray.remote(num_cpus=1)(run_record)
        return self._task

    @property
    def shared_keys(self) -> set[tuple[str, str]]:
        """``(simulate keyword, key)`` of every shared input this runner has put in the object store."""
        return set(self._refs)

    def _shared_refs(self, cfg: SimConfig) -> dict:
        """Object-store references to this config's shared inputs, each put once per key."""
        refs = {}
        for name, (key_of, build) in SHARED.items():
            key = (name, key_of(cfg))
            if not key[1]:
                continue  # nothing to share (e.g. no exact drafter): the task builds None itself
            if key not in self._refs:
                self._refs[key] = self._ray.put(build(key[1]))
            refs[name] = self._refs[key]
        return refs

    def run(self, configs: Sequence[SimConfig]) -> Iterator[dict | RunFailure]:
        if not configs:
            return
        task = self._connect()
        keys = {task.remote(config_json(c), **self._shared_refs(c)): config_key(c) for c in configs}
        pending = list(keys)
        while pending:
            done, pending = self._ray.wait(pending, num_returns=1)
            try:
                yield self._ray.get(done[0])
            except self._ray.exceptions.RayTaskError as exc:
                # the task's own exception (a user error's one line), not Ray's wrapped traceback
                yield RunFailure.of(keys[done[0]], exc.cause if exc.cause is not None else exc)

    def close(self) -> None:
        self._refs.clear()
        self._task = None
        if self._owns:
            self._ray.shutdown()
            self._owns = False


def make_runner(backend: str = "local", workers: Optional[int] = None, address: Optional[str] = None) -> Runner:
    """A runner for ``--backend``; ``--address`` only applies to Ray."""
    if backend == "local":
        if address:
            raise ConfigError("--address: only applies to --backend ray")
        return LocalRunner(workers)
    if backend == "ray":
        return RayRunner(workers, address)
    raise ConfigError(f"--backend: unknown backend {backend!r} (choose {' or '.join(BACKENDS)})")


# ----------------------------------------------------------------------------- driving
def unique_configs(configs: Iterable[SimConfig]) -> dict[str, SimConfig]:
    """``{key: config}``, each distinct resolved config once, first occurrence kept."""
    unique: dict[str, SimConfig] = {}
    for cfg in configs:
        unique.setdefault(config_key(cfg), cfg)
    return unique


def execute(configs: Iterable[SimConfig], runner: Runner, store: RecordStore, progress: bool = False,
            description: str = "simulating", failures: Optional[dict[str, RunFailure]] = None) -> dict[str, dict]:
    """Run every config whose record is missing, writing each record as it completes.

    Returns ``{key: record}`` for the configs that have one (read back from the store for those
    already done). Duplicate configs run once. ``progress`` shows a bar with an ETA on stderr.
    A run that fails re-raises its error once the others are done, unless ``failures`` is given:
    then it is stored there by key and left out of the result.
    """
    unique = unique_configs(configs)
    store.remove_stale_temporaries()
    todo = [cfg for key, cfg in unique.items() if not store.has(key)]
    failed: dict[str, RunFailure] = {} if failures is None else failures
    for rec in _with_progress(runner.run(todo), len(todo), progress, description, len(unique) - len(todo)):
        if isinstance(rec, RunFailure):
            failed[rec.key] = rec
        else:
            store.write(rec)
    if failures is None and failed:
        raise next(iter(failed.values())).exception
    return {key: store.read(key) for key in unique if key not in failed}


def _with_progress(records: Iterator[dict], total: int, show: bool, description: str, skipped: int) -> Iterator[dict]:
    if not show:
        yield from records
        return
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)

    console = Console(stderr=True)
    if skipped:
        console.print(f"{skipped} run(s) already recorded; skipping them.")
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn("elapsed"),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())
    with Progress(*columns, console=console) as bar:
        task = bar.add_task(description, total=total)
        for rec in records:
            yield rec
            bar.advance(task)
