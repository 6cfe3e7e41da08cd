"""The executor timeline: one SimPy process replaying the engine's iteration loop.

Per iteration, in TensorRT-LLM's order (``py_executor._executor_loop``), with each step named by the
engine function that does it:

a. ``_fetch_new_requests``: arrived requests join the active set;
b. ``_setup_drafter``: K before scheduling and speculation on/off (``should_use_spec_decode``,
   the SpeculationGate latch);
c. ``_prepare_draft_requests``: each generation request's placeholder tokens (its token charge and
   KV growth);
d. capacity and micro-batch scheduling (``CapacityScheduler.schedule`` -> ``ScheduleDecision``);
   requests scheduled while speculation is off are stamped ``py_disable_speculative_decoding``;
e. ``update_draft_len``: the post-schedule K of the one-model path;
f. ``prepare_draft_tokens``: drafts (the oracle), padded to the path's verify width;
g. verify forward, priced by the cost model (plus drafting on the critical path);
h. ``_update_requests``: commit accepted + 1 tokens and ``rewind_kv_cache``;
i. SpeculationGate update (one iteration late with the overlap scheduler);
j. vLLM only: ``propose_draft_token_ids`` for the next step.

The rules of each engine path (``specplan.simulator.paths``) pick which of these do what.
Each iteration is one ``env.timeout(step_time)``; state is numpy arrays indexed by request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import simpy

from specplan.cost_models.base import CostModel, StepBatch
from specplan.errors import ConfigError
from specplan.simulator import control
from specplan.simulator.control import LegacySpeculationGate, SpeculationGate
from specplan.simulator.drafts import prepare_draft_tokens, propose_draft_token_ids
from specplan.simulator.frontend import Frontend
from specplan.simulator.emissions import EmissionLog
from specplan.simulator.kv import KVBlockPool
from specplan.acceptance.oracles import AcceptanceOracle
from specplan.simulator.paths import PATHS
from specplan.simulator.scheduler import CapacityScheduler, ScheduleDecision
from specplan.simulator.inputs import EngineSettings, Workload
from specplan.simulator.state import RequestState


@dataclass
class Trace:
    """What one run records; turned into DataFrames by ``specplan.simulator.metrics``.

    The per-request arrays (lengths, arrival, first token, finish, generated) are filled when the
    run ends."""

    iterations: list = field(default_factory=list)
    emissions: EmissionLog = field(default_factory=EmissionLog)  # one row per emitted chunk
    accepted_hist: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    batches: list = field(default_factory=list)  # (rows, query_tokens, resident, is_prefill) per iteration, if recorded
    gate_tripped_iteration: Optional[int] = None
    gate_tripped_time: Optional[float] = None
    preemptions: int = 0
    gate_samples: list = field(default_factory=list)  # every SpeculationGate sample as the path counts it
    n: int = 0
    plen: Optional[np.ndarray] = None
    olen: Optional[np.ndarray] = None
    arrival: Optional[np.ndarray] = None
    first_token: Optional[np.ndarray] = None
    finish: Optional[np.ndarray] = None
    generated: Optional[np.ndarray] = None


ITERATION_FIELDS = (
    "iteration", "start_s", "step_s", "num_active", "num_queued", "batch_rows", "gen_rows",
    "prefill_tokens", "k", "spec_on", "drafted", "accepted", "verified_tokens", "committed", "prefill_done",
    "kv_blocks_used",
)


class Executor:
    """One engine replica: the SimPy executor loop over a request frontend."""

    def __init__(self, settings: EngineSettings, workload: Workload, oracle: AcceptanceOracle,
                 cost: CostModel, max_sim_time: Optional[float] = None, record_batches: bool = False,
                 prefix_cache=None, env: Optional[simpy.Environment] = None, frontend=None) -> None:
        # A fleet (``specplan.simulator.fleet``) passes one shared environment and its own frontend,
        # which routes each arrival to a replica's ``submit`` and hears every replica's completions.
        self.s = settings
        self.rules = PATHS[settings.path]
        self.w = workload
        self.oracle = oracle
        self.cost = cost
        self.max_sim_time = max_sim_time
        self.record_batches = record_batches  # keep every step's composition (fidelity replay)
        self.prefix_cache = prefix_cache  # vLLM automatic prefix caching (specplan.simulator.prefix_cache)
        self.st = RequestState(workload.prompt_lens, workload.output_lens)
        self.n = self.st.n
        self.kv = KVBlockPool(settings.kv_num_blocks, settings.kv_block_size, self.n)
        self.k_static = settings.max_draft_len if settings.speculate else 0
        self.scheduler = CapacityScheduler(settings.policy, settings.max_num_tokens, settings.max_batch_size,
                                           settings.chunked_prefill, self.kv, self.st, self.k_static)
        self.gate = self.legacy_gate = None
        if settings.gate_window and settings.gate_threshold is not None:
            self.gate = SpeculationGate(settings.gate_window, settings.gate_threshold)
        elif settings.legacy_gate_window and settings.legacy_gate_threshold is not None:
            self.legacy_gate = LegacySpeculationGate(settings.legacy_gate_window, settings.legacy_gate_threshold)
        self.vllm_lookup = (
            control.vllm_dynamic_sd_lookup(settings.vllm_ranges, max(settings.max_batch_size,
                                                                     settings.max_num_active_requests),
                                           settings.max_draft_len)
            if settings.vllm_ranges is not None else None
        )
        self.trace = Trace(accepted_hist=np.zeros(self.k_static + 1, dtype=np.int64))
        self.env = env if env is not None else simpy.Environment()
        self.frontend = frontend if frontend is not None else Frontend(self.env, workload, self.submit)
        self.waiting: list[int] = []  # arrived, not yet active (FIFO)
        self.active: list[int] = []  # admission order
        self.done = 0
        self._wakeup: Optional[simpy.Event] = None
        self._pending_sample: Optional[float] = None  # overlap scheduler: last iteration's gate sample
        self._last_scheduled = 0
        self._k_next = self._lookup(0) if settings.speculate else 0  # vLLM: K of the drafts proposed last step
        self._check_fits()

    def _check_fits(self) -> None:
        """A request that can never be scheduled would wait forever: refuse the config up front."""
        st, s = self.st, self.s
        if not s.chunked_prefill and self.n and int(st.plen.max()) > s.max_num_tokens:
            worst = int(st.plen.argmax())
            raise ConfigError(
                f"engine.max_num_tokens: request {worst} has a {int(st.plen[worst])}-token prompt, over "
                f"max_num_tokens {s.max_num_tokens}; set engine.enable_chunked_prefill: true or raise it"
            )
        if s.max_model_len is not None and self.n and int((st.plen + st.olen).max()) > s.max_model_len:
            worst = int((st.plen + st.olen).argmax())
            raise ConfigError(f"engine.max_model_len: request {worst} holds {int(st.plen[worst] + st.olen[worst])} "
                              f"tokens, over max_model_len {s.max_model_len}; raise it or shorten the workload")
        need = self.kv.blocks_for(st.plen + st.olen + self.k_static)
        worst = int(need.argmax())
        if need[worst] > self.kv.num_blocks:
            raise ConfigError(
                f"engine.kv_num_blocks: request {worst} needs {int(need[worst])} KV blocks "
                f"({int(st.plen[worst] + st.olen[worst])} tokens) but the cache holds {self.kv.num_blocks}; "
                "raise kv_num_blocks / kv_budget_gb or shorten the workload"
            )

    # ----------------------------------------------------------------- requests in and out
    def submit(self, rid: int) -> None:
        """A request arrives at this replica: it joins the waiting queue and wakes an idle loop."""
        self.waiting.append(rid)
        if self._wakeup is not None and not self._wakeup.triggered:
            self._wakeup.succeed()

    def _fetch_new_requests(self) -> None:
        room = self.s.max_num_active_requests - len(self.active)
        if room > 0 and self.waiting:
            new = self.waiting[:room]
            del self.waiting[:room]
            if self.prefix_cache is not None:
                self.prefix_cache.admit(np.array(new), self.st)
            self.active.extend(new)

    def _on_finish(self, rids: np.ndarray, iteration: int) -> None:
        st = self.st
        if self.legacy_gate is not None:
            for rid in rids.tolist():
                if self.legacy_gate.record(int(st.generated[rid]), int(st.emits[rid])):
                    self._trip(iteration)
        st.finish[rids] = self.env.now
        self.kv.release(rids)
        st.reserved_total -= int(st.reserved[rids].sum())
        st.reserved[rids] = 0
        self.oracle.on_finish(rids)
        if self.prefix_cache is not None:
            self.prefix_cache.on_finish(rids)
        finished = set(rids.tolist())
        self.active = [r for r in self.active if r not in finished]
        self.done += len(rids)
        self.frontend.on_finish(rids.tolist())

    # ----------------------------------------------------------------- control plane
    def _lookup(self, size: int, context_len: int = 0) -> int:
        """K for a request count by the schedule this run has (vLLM table, TRT schedule, or fixed)."""
        s = self.s
        if self.vllm_lookup is not None:
            table, bounds = self.vllm_lookup
            return int(table[min(size, len(table) - 1), control.context_bucket(bounds, context_len)])
        if s.draft_len_schedule is not None:
            return control.draft_len_for_batch_size(s.draft_len_schedule, max(size, 1), s.schedule_lookup)
        return s.max_draft_len

    def _trip(self, iteration: int) -> None:
        self.trace.gate_tripped_iteration = iteration
        self.trace.gate_tripped_time = self.env.now

    def _setup_drafter(self) -> tuple[int, bool]:
        """K before scheduling and on/off (``_setup_drafter``): off without a drafter or once the gate latched."""
        s = self.s
        gate = self.gate or self.legacy_gate
        if not s.speculate or (gate is not None and gate.disabled):
            return 0, False
        return control.setup_drafter(self.rules, self._lookup, k_static=self.k_static, k_next=self._k_next,
                                     k_from=s.k_from, num_active=len(self.active), last_scheduled=self._last_scheduled,
                                     max_batch_size=s.max_batch_size, max_num_tokens=s.max_num_tokens,
                                     max_concurrency=s.max_concurrency)

    def _update_draft_len(self, decision: ScheduleDecision, k: int, spec: bool) -> tuple[int, bool]:
        """One-model path: K for this step from the scheduled batch (``update_draft_len``).

        On the drafter path it changes nothing: the drafts were sized before scheduling and are
        padded to K_static afterwards (``pad_draft_tokens_for_cuda_graph``)."""
        s = self.s
        if not (spec and self.rules.k_timing == "same_step" and s.k_from == "scheduled"):
            return k, spec
        k = control.update_draft_len(s.draft_len_schedule, len(decision.rows), s.max_draft_len, s.schedule_lookup)
        return k, k > 0

    # ----------------------------------------------------------------- drafts, verify, commit
    def _draft_time(self, num_rows: int, k: int, state_size: int) -> float:
        """Drafting on the critical path; the SA enhancer's side stream only counts past the neural loop."""
        t = self.cost.draft_time(self.s.drafter, num_rows, k, state_size)
        if self.s.sa_enhancer:
            t = max(t, self.cost.draft_time("SA", num_rows, k, state_size))
        return t

    def _update_requests(self, d: ScheduleDecision, chunk, drafting, accepted) -> np.ndarray:
        """Commit accepted + 1 per verify row (never past the output), then ``rewind_kv_cache``."""
        st, rows, ctx_rows = self.st, d.rows, d.is_prefill
        now = self.env.now
        generated = st.generated[rows]
        commit = np.ones(len(rows), dtype=np.int64)
        has_ctx = bool(ctx_rows.any())  # steady decode steps skip the prefill bookkeeping
        if has_ctx:
            ctx_idx = np.flatnonzero(ctx_rows)
            crow = rows[ctx_idx]
            st.computed[crow] += chunk[ctx_idx]
            commit[ctx_idx] = st.computed[crow] >= st.ctx_target[crow]
            st.first_token[crow[(commit[ctx_idx] > 0) & (generated[ctx_idx] == 0)]] = now
        commit[drafting] += accepted
        commit = np.minimum(commit, st.olen[rows] - generated)
        generated += commit
        st.generated[rows] = generated
        emitted = commit > 0
        st.emits[rows] += emitted
        self.rewind_kv_cache(rows, ctx_rows, emitted)
        self.trace.emissions.append(rows[emitted], now, commit[emitted])
        self.oracle.on_commit(rows[emitted], st.generated[rows[emitted]])
        return commit

    def rewind_kv_cache(self, rows, ctx_rows, emitted) -> None:
        """Rewind to the resident KV: rejected draft positions are freed; the newest committed
        token's KV is written by the next forward."""
        st = self.st
        resident = st.plen[rows] + st.generated[rows] - 1
        if ctx_rows.any():
            resident = np.where(ctx_rows & ~emitted, st.computed[rows], resident)
        self.kv.resize(rows, resident)

    # ----------------------------------------------------------------- the gate
    def _update_gate(self, it: int, spec: bool, k: int, d: ScheduleDecision, drafting, drafted, accepted, q) -> None:
        """Record this step's acceptance and feed the SpeculationGate (``_update_batch_acceptance_rate``)."""
        if not spec or not len(drafted):
            sample = None
        else:
            proposed = drafted > 0
            self.trace.accepted_hist += np.bincount(accepted[proposed], minlength=len(self.trace.accepted_hist))
            sample = control.gate_sample(self.s.gate_denominator, accepted, drafted, q[drafting] - 1, k,
                                         d.num_generation)
            if sample is not None:
                self.trace.gate_samples.append(sample)
        if self.gate is None:
            return
        if self.s.overlap_scheduler:
            sample, self._pending_sample = self._pending_sample, sample
        if sample is not None and self.gate.record(sample):
            self._trip(it)

    # ----------------------------------------------------------------- the loop
    def run_loop(self):
        s, st = self.s, self.st
        it = 0
        while True:
            self._fetch_new_requests()
            if not self.active:
                if self.done == self.n:
                    return
                self._wakeup = self.env.event()
                yield self._wakeup
                self._wakeup = None
                continue
            it += 1
            k, spec = self._setup_drafter()
            act = np.fromiter(self.active, dtype=np.int64, count=len(self.active))
            gen_cost, kv_width = control.prepare_draft_requests(self.rules, spec, k, self.k_static, s.verify_width,
                                                                st.disable_spec[act], st.pending_drafted[act])
            d = self.scheduler.schedule(self.active, act, gen_cost, kv_width)
            if len(d.rows) == 0:
                raise ConfigError("engine: nothing fits in one iteration (max_num_tokens below one request's need)")
            if self.rules.stamps_disable and s.speculate and not spec:
                st.disable_spec[d.rows] = True
            k, spec = self._update_draft_len(d, k, spec)
            self._last_scheduled = len(d.rows)
            rows, ctx_rows, chunk = d.rows, d.is_prefill, d.chunk
            if spec:
                drafting, drafted, accepted, q = prepare_draft_tokens(self.oracle, st, d, k, self.k_static, s.verify_width,
                                                                      self.rules.budget == "draft")
            else:
                # No drafts: a generation row computes one token whatever its placeholders charged.
                q = np.where(ctx_rows, d.query_tokens, 1)
                drafting, drafted, accepted = np.zeros(len(rows), bool), rows[:0], rows[:0]
            resident = st.resident(rows, ctx_rows)
            self.kv.resize(rows, resident + q)
            step = self.cost.step_time(StepBatch(q, resident, ctx_rows))
            if s.piecewise_graph_slowdown > 0:
                step /= 1.0 - s.piecewise_graph_slowdown
            if self.record_batches:
                self.trace.batches.append((rows.copy(), q.copy(), resident, ctx_rows))
            if spec and drafting.any():
                drows = rows[drafting]
                step += self._draft_time(len(drows), k, self.oracle.state_size(drows, st.generated[drows]))
            start = self.env.now
            yield self.env.timeout(step)
            commit = self._update_requests(d, chunk, drafting, accepted)
            if self.prefix_cache is not None and ctx_rows.any():
                self.prefix_cache.on_computed(rows[ctx_rows], st)
            self._update_gate(it, spec, k, d, drafting, drafted, accepted, q)
            n_ctx, prefill = int(ctx_rows.sum()), int(chunk.sum())
            self.trace.iterations.append((
                it, start, step, len(self.active), len(self.waiting), len(rows), len(rows) - n_ctx,
                prefill, k if spec else 0, spec, int(drafted.sum()), int(accepted.sum()), int(q.sum()) - prefill,
                int(commit.sum()), int((commit[ctx_rows] > 0).sum()) if n_ctx else 0, self.kv.used,
            ))
            if self.rules.k_timing == "next_step" and s.speculate:
                # vLLM picks K at the end of schedule() from this step's scheduled count (the 5-item
                # entries' context bucket: the longest sequence scheduled) for the drafts proposed now.
                self._k_next = self._lookup(len(rows), int((st.plen[rows] + st.generated[rows]).max()))
                gate = self.gate or self.legacy_gate
                if gate is None or not gate.disabled:
                    propose_draft_token_ids(self.oracle, st, rows, self._k_next, s.max_model_len,
                                            s.drafter == "vllm_ngram", int((resident + q).max()), s.max_draft_len)
            finished = rows[st.generated[rows] >= st.olen[rows]]
            if len(finished):
                self._on_finish(finished, it)
            if self.max_sim_time is not None and self.env.now >= self.max_sim_time:
                return

    def start(self) -> None:
        """Start the executor loop in the environment (the frontend is started by its owner)."""
        self.env.process(self.run_loop())

    def collect(self) -> Trace:
        """The recorded trace, once the environment has run, with the per-request arrays filled in."""
        st, t = self.st, self.trace
        t.preemptions = self.scheduler.preemptions
        t.n, t.plen, t.olen, t.arrival = st.n, st.plen, st.olen, self.frontend.arrival
        t.first_token, t.finish, t.generated = st.first_token, st.finish, st.generated
        return t

    def run(self) -> Trace:
        """Run to completion (or ``max_sim_time``) and return the recorded trace."""
        self.frontend.start()
        self.start()
        self.env.run()
        return self.collect()
