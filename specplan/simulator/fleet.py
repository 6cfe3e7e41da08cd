"""A fleet: ``cluster.replicas`` engine replicas in one SimPy environment behind a router.

Every replica is exactly the single-replica executor (``specplan.simulator.engine.Executor``) with
its own KV cache, scheduler, SpeculationGate and acceptance oracle (drafter pools are per replica:
a replica's drafter only ever sees the requests routed to it). One frontend (arrivals, closed-loop
clients, sessions) drives the whole fleet; at each arrival the router (``specplan.simulator.router``)
reads the replicas' load at that instant and submits the request to one of them. Completions from
any replica come back to the one frontend, which sends sessions' next turns and frees clients.

Request ids are global; each replica holds the requests in flight on it in its own slots and
writes each request's times, once it finishes, at its id in the fleet's arrays, so the fleet's
tables hold every request's row from the replica it was routed to. Metrics come per replica and
for the fleet; the fleet's summary has the same keys as a single run's. Each replica has its own prefix cache when the engine has prefix
caching on, so session affinity keeps a session's prefix hits.

Speed: draft-free steps of all replicas run in one compiled loop (``specplan.simulator.fleet_loop``):
a replica whose span ends pending holds its step in the fleet's ``Stepper`` instead of a SimPy
timeout, and the stepper advances every held step in SimPy's order until one needs Python.
"""

from __future__ import annotations

from array import array
from typing import Optional

import numpy as np
import simpy

from specplan import memory
from specplan.config import SimConfig
from specplan.simulator import metrics
from specplan.simulator.emissions import Trace
from specplan.simulator.engine import Executor
from specplan.simulator.fleet_loop import Stepper
from specplan.simulator.inputs import Workload
from specplan.simulator.frontend import Frontend
from specplan.simulator.router import Load, make_router
from specplan.simulator.state import empty_results


def replica_configs(cfg: SimConfig) -> list[SimConfig]:
    """Each replica's config: the scenario with ``cost.tp`` set to that replica's degree."""
    tps = cfg.cluster.tp or [cfg.cost.tp] * cfg.cluster.replicas
    return [cfg if tp == cfg.cost.tp else cfg.model_copy(update={"cost": cfg.cost.model_copy(update={"tp": tp})})
            for tp in tps]


def gpus(cfg: SimConfig) -> int:
    """GPUs the fleet occupies: the sum of its replicas' tensor-parallel degrees."""
    return int(sum(cfg.cluster.tp or [cfg.cost.tp] * cfg.cluster.replicas))


class Fleet:
    """Replicas sharing one environment; the router places each request when it arrives."""

    def __init__(self, cfg: SimConfig, workload: Workload, requests: list, cost=None, drafter_cache=None) -> None:
        from specplan.acceptance import build_oracle
        from specplan.simulator.run import build_cost, build_prefix_cache, kv_num_blocks, resolve_engine

        self.cfg = cfg
        self.w = workload
        self.env = simpy.Environment()
        self.frontend = Frontend(self.env, workload, self._route)
        self.router = make_router(cfg.cluster.router, cfg.cluster.replicas)
        self.assigned = np.full(len(workload.prompt_lens), -1, dtype=np.int64)
        if drafter_cache is None and cfg.acceptance.mode == "drafter" and cfg.cluster.replicas > 1:
            from specplan.acceptance.drafters.cache import PrecomputeCache

            drafter_cache = PrecomputeCache()  # per-request drafter tables computed once for all replicas
        # Cost models only price steps (no run state), so replicas of one tp degree share one.
        costs: dict[int, object] = {cfg.cost.tp: cost} if cost is not None else {}
        self.replicas: list[Executor] = []
        self.results = empty_results(len(workload.prompt_lens))  # by request id, written by every replica
        shared = None
        for rcfg in replica_configs(cfg):
            if rcfg.cost.tp not in costs:
                costs[rcfg.cost.tp] = build_cost(rcfg)
            # An oracle whose state is all per request serves every replica (each request is touched
            # only by the replica it is routed to); one with pools is built per replica.
            oracle = shared or build_oracle(rcfg, requests, workload.prompt_lens, workload.output_lens, drafter_cache)
            shared = oracle if oracle.per_request_state else None
            self.replicas.append(Executor(
                resolve_engine(rcfg, kv_num_blocks(rcfg)), workload, oracle, costs[rcfg.cost.tp], cfg.max_sim_time_s,
                prefix_cache=build_prefix_cache(rcfg, requests), env=self.env, frontend=self.frontend,
                share=1.0 / cfg.cluster.replicas, results=self.results))
        self.costs = costs
        self.stepper = Stepper(self.env, self.replicas)
        for i, ex in enumerate(self.replicas):
            ex.stepper, ex.replica = self.stepper, i

    def load(self) -> Load:
        """The replicas' load now: outstanding requests and the fraction of KV blocks in use."""
        reps = self.replicas
        return Load(np.array([len(r.waiting) + r.num_active for r in reps]),
                    np.array([r.kv.used / r.kv.num_blocks for r in reps]), self.assigned, self.w.predecessor)

    def _route(self, rid: int) -> None:
        i = self.router.choose(rid, self.load() if self.router.reads_load else None)
        self.assigned[rid] = i
        self.replicas[i].submit(rid)

    def run(self) -> None:
        """Run every replica to completion (or ``max_sim_time``)."""
        self.frontend.start()
        loops = [ex.run_loop() for ex in self.replicas]  # each replica's loop (``Executor.start``), kept
        for loop in loops:
            self.env.process(loop)
        with memory.collector_spared():
            self.env.run()
        # The run is over: a replica idle at the end waits on a wake-up no request will fire, its
        # suspended loop holding it, and the stepper holds every replica. Both cycles are undone here,
        # so the finished run is freed by reference counting (``memory``: Cycles).
        for ex, loop in zip(self.replicas, loops):
            loop.close()
            ex.stepper = None
        memory.break_self_cycle(self.env)
        for ex in self.replicas:
            ex.collect(per_request=False)  # into the fleet's arrays, read by ``merged``

    def merged(self) -> Trace:
        """The fleet's trace for the metrics: each request's arrays from its replica, the acceptance
        histograms summed, the earliest gate trip, every replica's gate samples."""
        traces = [ex.trace for ex in self.replicas]
        t0 = traces[0]
        first, finish, generated = self.results  # each request's entries from the replica it was routed to
        tripped = [t for t in traces if t.gate_tripped_time is not None]
        earliest = min(tripped, key=lambda t: t.gate_tripped_time) if tripped else Trace()
        width = max(len(t.accepted_hist) for t in traces)
        return Trace(accepted_hist=sum(np.pad(t.accepted_hist, (0, width - len(t.accepted_hist))) for t in traces),
                     preemptions=sum(t.preemptions for t in traces),
                     gate_tripped_iteration=earliest.gate_tripped_iteration,
                     gate_tripped_time=earliest.gate_tripped_time,
                     gate_samples=sum((t.gate_samples for t in traces), array("d")),
                     n=t0.n, plen=t0.plen, olen=t0.olen, arrival=t0.arrival, first_token=first, finish=finish,
                     generated=generated)


def simulate_fleet(cfg: SimConfig, cost=None, requests: Optional[list] = None, drafter_cache=None):
    """Run a fleet scenario; returns a ``SimResult`` whose tables carry a ``replica`` column and whose
    description's ``cluster`` entry holds each replica's summary. The summaries come from numpy
    columns; the tables are built on first access, as a single run's are."""
    from specplan.simulator.run import SimResult, build_workload, resolve

    cfg = resolve(cfg)
    workload, requests = build_workload(cfg, requests)
    fleet = Fleet(cfg, workload, requests, cost, drafter_cache)
    fleet.run()
    view = fleet.merged()
    req = metrics.request_columns(view)
    traces = [ex.trace for ex in fleet.replicas]
    # The fleet's inter-token gaps are its replicas': each replica's in turn, taken over its slots
    # into one buffer that its summary reorders, and the fleet's figures from them after. A 100k-
    # request fleet has 20 M gaps: their own array was 160 MB of fresh pages, whose first touch
    # cost up to 0.3 CPU-s here, more than taking the gaps a second time.
    itl = metrics.UnionITL([t.emissions.columns()[:2] for t in traces])
    per_replica = []
    for i, (t, rcfg) in enumerate(zip(traces, replica_configs(cfg))):
        mine = fleet.assigned == i
        gaps = itl.gaps(i)
        per_replica.append(metrics.summarize(t, {k: v[mine] for k, v in req.items()}, t.iterations, gaps,
                                             cfg.slo_ttft_s, cfg.slo_tpot_s)
                           | {"requests": int(mine.sum()), "tp": rcfg.cost.tp})
        itl.seen(gaps)
    # The same summary keys, in the same order, as a single run (``run.simulate``), over every
    # replica's iteration log in turn.
    summary = metrics.summarize(view, req, [t.iterations for t in traces], itl.figures(), cfg.slo_ttft_s,
                                cfg.slo_tpot_s)
    summary["seed"] = cfg.seed
    caches = [ex.prefix_cache for ex in fleet.replicas if ex.prefix_cache is not None]
    if caches:
        summary["prefix_cache_hit_tokens"] = sum(c.hit_tokens for c in caches)
    samples = view.gate_samples
    summary["gate_sample_mean"] = float(np.mean(samples)) if samples else None
    summary.update({f"drafter_{k}": v for k, v in _drafter_metrics(fleet).items()})
    description = {"cost": fleet.replicas[0].cost.describe(),
                   "speculation": cfg.speculation.model_dump(exclude_defaults=True),
                   "cluster": {"replicas": cfg.cluster.replicas, "router": cfg.cluster.router, "gpus": gpus(cfg),
                               "per_replica": per_replica}}

    def request_columns():
        return {"replica": fleet.assigned, **metrics.request_table_columns(view, requests, req)}

    def iteration_columns():
        logs = [metrics.iteration_columns(t) for t in traces]
        replica = np.repeat(np.arange(len(logs)), [len(log["iteration"]) for log in logs])
        return {"replica": replica, **{k: np.concatenate([log[k] for log in logs]) for k in logs[0]}}

    def emission_columns():
        ems = [metrics.emission_columns(t) for t in traces]
        return {k: np.concatenate([e[k] for e in ems]) for k in ems[0]}

    return SimResult(cfg, summary, {"requests": request_columns, "iterations": iteration_columns,
                                    "emissions": emission_columns}, description)


def _drafter_metrics(fleet: Fleet) -> dict:
    """Drafter counters (integers) summed over replicas, each replica's oracle counting its own
    requests; rates do not add up, so with several replicas they stay in the per-replica summaries."""
    each = [o.metrics() for o in {id(ex.oracle): ex.oracle for ex in fleet.replicas}.values()]  # shared once
    if len(each) == 1:
        return each[0]
    return {k: sum(m[k] for m in each) for k, v in each[0].items()
            if isinstance(v, (int, np.integer)) and not isinstance(v, bool)}
