"""A fleet: ``cluster.replicas`` engine replicas in one SimPy environment behind a router.

Every replica is exactly the single-replica executor (``specplan.simulator.engine.Executor``) with
its own KV cache, scheduler, SpeculationGate and acceptance oracle (drafter pools are per replica:
a replica's drafter only ever sees the requests routed to it). One frontend (arrivals, closed-loop
clients, sessions) drives the whole fleet; at each arrival the router (``specplan.simulator.router``)
reads the replicas' load at that instant and submits the request to one of them. Completions from
any replica come back to the one frontend, which sends sessions' next turns and frees clients.

Request ids are global: every replica's per-request arrays span the whole workload, and the fleet's
tables take each request's row from the replica it was routed to. Metrics come per replica and for
the fleet; the fleet's summary has the same keys as a single run's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np
import pandas as pd
import simpy

from specplan.config import SimConfig
from specplan.simulator import metrics
from specplan.simulator.engine import Executor, Trace, Workload
from specplan.simulator.frontend import Frontend
from specplan.simulator.router import Load, make_router


def replica_configs(cfg: SimConfig) -> list[SimConfig]:
    """Each replica's config: the scenario with ``cost.tp`` set to that replica's degree."""
    tps = cfg.cluster.tp or [cfg.cost.tp] * cfg.cluster.replicas
    return [cfg if tp == cfg.cost.tp else cfg.model_copy(update={"cost": cfg.cost.model_copy(update={"tp": tp})})
            for tp in tps]


def gpus(cfg: SimConfig) -> int:
    """GPUs the fleet occupies: the sum of its replicas' tensor-parallel degrees."""
    return int(sum(cfg.cluster.tp or [cfg.cost.tp] * cfg.cluster.replicas))


@dataclass
class _Merged:
    """The fleet seen as one executor by ``specplan.simulator.metrics``: each request's arrays from
    its replica, the acceptance histogram summed, the earliest gate trip."""

    n: int
    plen: np.ndarray
    olen: np.ndarray
    generated: np.ndarray
    first_token: np.ndarray
    finish: np.ndarray
    arrival: np.ndarray
    trace: Trace


class Fleet:
    """Replicas sharing one environment; the router places each request when it arrives."""

    def __init__(self, cfg: SimConfig, workload: Workload, requests: list, cost=None, drafter_cache=None) -> None:
        from specplan.simulator.run import build_cost, build_oracle, kv_num_blocks, resolve_engine

        self.cfg = cfg
        self.w = workload
        self.env = simpy.Environment()
        self.frontend = Frontend(self.env, workload, self._route)
        self.router = make_router(cfg.cluster.router, cfg.cluster.replicas)
        self.assigned = np.full(len(workload.prompt_lens), -1, dtype=np.int64)
        if drafter_cache is None and cfg.acceptance.mode == "drafter" and cfg.cluster.replicas > 1:
            from specplan.simulator.drafters.cache import PrecomputeCache

            drafter_cache = PrecomputeCache()  # per-request drafter tables computed once for all replicas
        # Cost models only price steps (no run state), so replicas of one tp degree share one.
        costs: dict[int, object] = {cfg.cost.tp: cost} if cost is not None else {}
        self.replicas: list[Executor] = []
        for rcfg in replica_configs(cfg):
            if rcfg.cost.tp not in costs:
                costs[rcfg.cost.tp] = build_cost(rcfg)
            self.replicas.append(Executor(
                resolve_engine(rcfg, kv_num_blocks(rcfg)), workload, build_oracle(rcfg, workload, requests, drafter_cache),
                costs[rcfg.cost.tp], cfg.max_sim_time_s, env=self.env, frontend=self.frontend))
        self.costs = costs

    def load(self) -> Load:
        """The replicas' load now: outstanding requests and the fraction of KV blocks in use."""
        reps = self.replicas
        return Load(np.array([len(r.waiting) + len(r.active) for r in reps]),
                    np.array([r.kv.used / r.kv.num_blocks for r in reps]), self.assigned, self.w.predecessor)

    def _route(self, rid: int) -> None:
        i = self.router.choose(rid, self.load())
        self.assigned[rid] = i
        self.replicas[i].submit(rid)

    def run(self) -> None:
        """Run every replica to completion (or ``max_sim_time``)."""
        self.frontend.start()
        for ex in self.replicas:
            ex.start()
        self.env.run()
        for ex in self.replicas:
            ex.collect()

    def merged(self) -> _Merged:
        """The fleet as one executor for the metrics (each request from its replica)."""
        who = np.maximum(self.assigned, 0)  # never routed (max_sim_time): replica 0's untouched row
        idx = np.arange(len(who))

        def pick(name: str) -> np.ndarray:
            return np.stack([getattr(ex.st, name) for ex in self.replicas])[who, idx]

        traces = [ex.trace for ex in self.replicas]
        tripped = [i for i, t in enumerate(traces) if t.gate_tripped_time is not None]
        first = min(tripped, key=lambda i: traces[i].gate_tripped_time) if tripped else None
        width = max(len(t.accepted_hist) for t in traces)
        hist = sum(np.pad(t.accepted_hist, (0, width - len(t.accepted_hist))) for t in traces)
        trace = Trace(accepted_hist=hist, preemptions=sum(t.preemptions for t in traces),
                      gate_tripped_iteration=None if first is None else traces[first].gate_tripped_iteration,
                      gate_tripped_time=None if first is None else traces[first].gate_tripped_time)
        ex0 = self.replicas[0]
        return _Merged(ex0.n, ex0.plen, ex0.olen, pick("generated"), pick("first_token"), pick("finish"),
                       self.frontend.arrival, trace)


def simulate_fleet(cfg: SimConfig, cost=None, requests: Optional[list] = None, drafter_cache=None):
    """Run a fleet scenario; returns a ``SimResult`` whose tables carry a ``replica`` column and whose
    description's ``cluster`` entry holds each replica's summary."""
    from specplan.simulator.run import SimResult, build_workload, resolve

    cfg = resolve(cfg)
    workload, requests = build_workload(cfg, requests)
    fleet = Fleet(cfg, workload, requests, cost, drafter_cache)
    fleet.run()
    view = fleet.merged()
    req = metrics.request_table(view, requests)
    its = [metrics.iteration_table(ex) for ex in fleet.replicas]
    ems = [metrics.emission_table(ex) for ex in fleet.replicas]
    iterations = pd.concat([t.assign(replica=i) for i, t in enumerate(its)], ignore_index=True)
    emissions = pd.concat(ems, ignore_index=True)
    summary = metrics.summarize(view, req, iterations, emissions, cfg.slo_ttft_s, cfg.slo_tpot_s)
    summary["seed"] = cfg.seed
    summary.update({f"drafter_{k}": v for k, v in _drafter_metrics(fleet).items()})
    per_replica = []
    for i, (ex, rcfg) in enumerate(zip(fleet.replicas, replica_configs(cfg))):
        mine = req[fleet.assigned == i]
        per_replica.append(metrics.summarize(ex, mine, its[i], ems[i], cfg.slo_ttft_s, cfg.slo_tpot_s)
                           | {"requests": int(len(mine)), "tp": rcfg.cost.tp})
    req.insert(0, "replica", fleet.assigned)
    iterations.insert(0, "replica", iterations.pop("replica"))
    description = {"cost": fleet.replicas[0].cost.describe(),
                   "speculation": cfg.speculation.model_dump(exclude_defaults=True),
                   "cluster": {"replicas": cfg.cluster.replicas, "router": cfg.cluster.router, "gpus": gpus(cfg),
                               "per_replica": per_replica}}
    return SimResult(cfg, summary, req, iterations, emissions, description)


def _drafter_metrics(fleet: Fleet) -> dict:
    """Drafter counters (integers) summed over replicas, each replica's oracle counting its own
    requests; rates do not add up, so with several replicas they stay in the per-replica summaries."""
    each = [ex.oracle.metrics() for ex in fleet.replicas]
    if len(each) == 1:
        return each[0]
    return {k: sum(m[k] for m in each) for k, v in each[0].items()
            if isinstance(v, (int, np.integer)) and not isinstance(v, bool)}
