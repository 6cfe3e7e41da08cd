"""The executor timeline: one SimPy process replaying the engine's iteration loop.

Per iteration, in TensorRT-LLM's order (``py_executor._executor_loop``), with each step named by the
engine function that does it:

a. ``_fetch_new_requests``: arrived requests join the active set;
b. ``_setup_drafter``: K before scheduling and speculation on/off (``should_use_spec_decode``,
   the SpeculationGate latch);
c. ``_prepare_draft_requests``: each generation request's placeholder tokens (its token charge and
   KV growth), and d. capacity and micro-batch scheduling (``scheduler.schedule_step``); requests
   scheduled while speculation is off are stamped ``py_disable_speculative_decoding``;
e. ``update_draft_len``: the post-schedule K of the one-model path;
f. ``prepare_draft_tokens``: drafts (the oracle), padded to the path's verify width;
g. verify forward, priced by the cost model from ``step.price_step``'s terms (plus drafting);
h. ``step.commit_step``: commit accepted + 1 tokens, ``rewind_kv_cache``, completions;
i. SpeculationGate update (one iteration late with the overlap scheduler);
j. vLLM only: ``propose_draft_token_ids`` for the next step.

The rules of each engine path (``specplan.simulator.paths``) pick which of these do what. State is
numpy arrays indexed by request; the per-row work of c-d, g and h is compiled (numba), so Python
touches each iteration a fixed number of times whatever the batch. Each iteration is one
``env.timeout(step_time)``, except that iterations ending strictly before the next queued event run
back to back in one compiled call (``specplan.simulator.span``): draft-free ones, and drafting ones
of a drafter answering from per-request tables or of a parametric oracle
(``specplan.simulator.draft_span``); and that a
fleet's replica holds a draft-free step in the fleet's loop instead (``specplan.simulator.fleet_loop``).
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import simpy

from specplan import memory
from specplan.acceptance.oracles import AcceptanceOracle
from specplan.cost_models.base import CostModel, StepBatch
from specplan.cost_models.compiled import span_pricing
from specplan.cost_models.terms import BatchTerms, TermsCostModel
from specplan.errors import ConfigError
from specplan.simulator import control, span, span_state, step
from specplan.simulator.control import LegacySpeculationGate, SpeculationGate
from specplan.simulator.drafts import SeqSlots, prepare_draft_tokens, propose_draft_token_ids
from specplan.simulator.emissions import EmissionLog, IterationLog, Trace
from specplan.simulator.frontend import Frontend
from specplan.simulator.inputs import EngineSettings, Workload
from specplan.simulator.kv import KVBlockPool
from specplan.simulator.paths import PATHS, TRT_DRAFTER
from specplan.simulator.prefix_cache import arrays as prefix_cache_arrays
from specplan.simulator.scheduler import NOTHING_FITS_MESSAGE, POLICIES, ScheduleDecision, check_fits, schedule_step
from specplan.simulator.state import DONE, N_ACTIVE, PREEMPTIONS, RequestState, empty_results


class Executor:
    """One engine replica: the SimPy executor loop over a request frontend."""

    def __init__(self, settings: EngineSettings, workload: Workload, oracle: AcceptanceOracle,
                 cost: CostModel, max_sim_time: Optional[float] = None, record_batches: bool = False,
                 prefix_cache=None, env: Optional[simpy.Environment] = None, frontend=None,
                 share: float = 1.0, results: Optional[tuple[np.ndarray, np.ndarray, np.ndarray]] = None) -> None:
        # A fleet (``specplan.simulator.fleet``) passes one shared environment and its own frontend,
        # which routes each arrival to a replica's ``submit`` and hears every replica's completions,
        # and the arrays every replica writes its requests' first-token times, finish times and
        # generated counts into (``results``, by request id; made here otherwise); ``share`` (the part
        # of the workload the replica expects) sizes its logs.
        self.s = settings
        self.rules = PATHS[settings.path]
        self.w = workload
        self.oracle = oracle
        self.cost = cost
        self.max_sim_time = max_sim_time
        self.record_batches = record_batches  # keep every step's composition (fidelity replay)
        self.prefix_cache = prefix_cache  # a prefix_cache.PrefixCache when the engine caches prefixes
        n = self.n = len(workload.prompt_lens)
        if results is None:
            results = empty_results(n)
        expected = share * n  # the requests this replica expects
        # Slots for the requests in flight (at most max_num_active_requests at once): a finished
        # request's slot is recycled for a later one (``RequestState.release``).
        self.st = RequestState(min(n, settings.max_num_active_requests), results)
        self.kv = KVBlockPool(settings.kv_num_blocks, settings.kv_block_size, self.st)
        self.k_static = settings.max_draft_len if settings.speculate else 0
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
        # The logs start at what the replica expects: its share of the output tokens (a row commits at
        # least one), and for the steps, a full batch's tokens a step plus a prefill step a request, twice.
        tokens = int(share * workload.output_lens.sum())
        self.trace = Trace(accepted_hist=np.zeros(self.k_static + 1, dtype=np.int64),
                           iterations=IterationLog(2 * (tokens // max(settings.max_batch_size, 1) + int(expected))),
                           emissions=EmissionLog(tokens + settings.max_batch_size))
        self.env = env if env is not None else simpy.Environment()
        self.frontend = frontend if frontend is not None else Frontend(self.env, workload, self.submit)
        self.waiting: list[int] = []  # ids of requests arrived, not yet active (FIFO)
        self._arrivals = None  # an OpenLoop or a ClosedLoop when the spans send the requests (``span_state.arrivals_for``)
        self._wakeup: Optional[simpy.Event] = None
        self._pending_sample: Optional[float] = None  # overlap scheduler: last iteration's gate sample
        self._last_scheduled = 0
        self._k_next = self._lookup(0) if settings.speculate else 0  # vLLM: K of the drafts proposed last step
        # The compiled step's buffers: one batch's rows, charges, verified widths and resident KV.
        rows = max(settings.max_batch_size, 1)
        self._rows, self._q_sched, self._q = (np.zeros(rows, dtype=np.int64) for _ in range(3))
        self._width, self._resident = np.zeros(rows, dtype=np.int64), np.zeros(rows, dtype=np.int64)
        self._ctx = np.zeros(rows, dtype=bool)
        self._no_drafting, self._none = np.zeros(rows, dtype=bool), np.zeros(0, dtype=np.int64)
        self._terms, self._stats = np.zeros(step.NUM_TERMS), np.zeros(step.NUM_STATS, dtype=np.int64)
        self._finished, self._record = np.zeros(rows, dtype=np.int64), np.zeros(8)
        self._span_out, self._span_time = np.zeros(5, dtype=np.int64), np.zeros(2)
        self._span = self._of = self._lent = None  # the span_state.SpanState, arrays it was built of, arrays it borrows
        self._drafter = None  # its draft_state.Drafter once its drafting steps span (False: they never do)
        self.stepper, self.replica = None, 0  # in a fleet: its ``fleet_loop.Stepper`` and this replica's index
        self._span_cost = span_pricing(cost)  # (spans price it compiled; others: Python every step)
        self._prices_terms = isinstance(cost, TermsCostModel)  # every built-in model; a custom one gets the rows
        self._hears_commits = type(oracle).on_commit is not AcceptanceOracle.on_commit
        # The path's rules as the compiled step takes them.
        self._budget = control.BUDGETS["draft" if self.rules.budget == "draft" else settings.kv_cache_scheduler]
        self._verify_width = control.VERIFY_WIDTHS[settings.verify_width]
        self._policy = POLICIES[settings.policy]
        self._equal_progress = settings.context_chunking_policy == "EQUAL_PROGRESS"
        self._stamps = self.rules.stamps_disable and settings.speculate  # py_disable_speculative_decoding
        self._slots = (SeqSlots(max(settings.max_batch_size, settings.max_num_active_requests))  # drafting order
                       if self.rules.name == TRT_DRAFTER and settings.speculate else None)
        self._quiet_finish = span.quiet_finish(self)  # (a span then releases finished slots itself)
        self._max_time = np.inf if max_sim_time is None else max_sim_time
        check_fits(settings, workload.prompt_lens, workload.output_lens, self.kv, self.k_static)

    @property
    def done(self) -> int:
        """Completed requests (read by progress bars from another thread)."""
        return int(self.st.counters[DONE])

    @property
    def num_active(self) -> int:
        return self.st.num_active

    # ----------------------------------------------------------------- requests in and out
    def submit(self, rid: int) -> None:
        """A request arrives at this replica: it joins the waiting queue and wakes an idle loop."""
        self.waiting.append(rid)
        if self.stepper is not None:
            self.stepper.queued(self.replica)
        if self._wakeup is not None and not self._wakeup.triggered:
            self._wakeup.succeed()

    def _fetch_new_requests(self) -> None:
        room = self.s.max_num_active_requests - self.st.num_active
        if room > 0 and self.waiting:
            new = self.waiting[:room]
            del self.waiting[:room]
            self.st.admit(self.st.add(new, self.w.prompt_lens, self.w.output_lens))

    def _on_finish(self, slots: np.ndarray, iteration: int) -> None:
        """What completion tells the gate, the drafter, the prefix cache and the frontend (the
        compiled step has already released the request's KV and removed it from the active set)."""
        st = self.st
        if self.legacy_gate is not None:
            for slot in slots.tolist():
                if self.legacy_gate.record(int(st.generated[slot]), int(st.emits[slot])):
                    self._trip(iteration)
        rids = st.rid[slots]
        if self._slots is not None:
            self._slots.remove(st, slots)
        self.oracle.on_finish(rids)
        if self.prefix_cache is not None:
            self.prefix_cache.on_finish(rids)
        self.frontend.on_finish(rids.tolist())
        st.release(slots)

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
        self.trace.gate_tripped_iteration, self.trace.gate_tripped_time = iteration, self.env.now

    def _setup_drafter(self) -> tuple[int, bool]:
        """K before scheduling and on/off (``_setup_drafter``): off without a drafter or once the gate latched."""
        s = self.s
        gate = self.gate or self.legacy_gate
        if not s.speculate or (gate is not None and gate.disabled):
            return 0, False
        return control.setup_drafter(self.rules, self._lookup, k_static=self.k_static, k_next=self._k_next,
                                     k_from=s.k_from, num_active=self.st.num_active, last_scheduled=self._last_scheduled,
                                     max_batch_size=s.max_batch_size, max_num_tokens=s.max_num_tokens,
                                     max_concurrency=s.max_concurrency)

    # ----------------------------------------------------------------- drafts, verify, commit
    def _draft_time(self, num_rows: int, k: int, state_size: int) -> float:
        """Drafting on the critical path; the SA enhancer's side stream only counts past the neural loop."""
        t = self.cost.draft_time(self.s.drafter, num_rows, k, state_size)
        if self.s.sa_enhancer:
            t = max(t, self.cost.draft_time("SA", num_rows, k, state_size))
        return t

    # ----------------------------------------------------------------- the gate
    def _update_gate(self, it: int, spec: bool, k: int, num_drafting: int, num_generation: int) -> None:
        """Feed this step's acceptance to the SpeculationGate (``_update_batch_acceptance_rate``)."""
        if not spec or not num_drafting:
            sample = None
        else:
            stats = self._stats
            sample = control.gate_sample(self.s.gate_denominator, int(stats[step.ACCEPTED]), int(stats[step.DRAFTED]),
                                         int(stats[step.VERIFIED]), k, self.k_static, num_generation)
            if sample is not None:
                self.trace.gate_samples.append(sample)
        if self.gate is None:
            return
        if self.s.overlap_scheduler:
            sample, self._pending_sample = self._pending_sample, sample
        if sample is not None and self.gate.record(sample):
            self._trip(it)

    # ----------------------------------------------------------------- the loop
    def _schedule(self, spec: bool, k: int) -> int:
        s, st = self.s, self.st
        charge = control.placeholder_charge(self.rules.budget, s.speculate, self.k_static, k, spec, lambda: self._lookup(
            self._last_scheduled if s.k_from == "scheduled" else st.num_active))  # max_total_draft_tokens
        n = schedule_step(st.act, st.counters, st.plen, st.olen, st.computed, st.ctx_target, st.generated,
                          st.started, st.reserved, self.kv.held, st.disable_spec, st.pending_drafted, spec,
                          self._stamps and not spec, k, self.k_static, charge, self._budget, self._verify_width,
                          self._policy, s.max_num_tokens, s.max_batch_size, s.chunked_prefill, self.kv.num_blocks,
                          self.kv.block_size, self._rows, self._q_sched, self._ctx, self._width, st.rid,
                          *prefix_cache_arrays(self.prefix_cache), st.pc_done, self._equal_progress)
        if n == 0:
            raise ConfigError(NOTHING_FITS_MESSAGE)
        return n

    def _price(self, n: int, q: np.ndarray, no_drafts: bool) -> float:
        """The forward's seconds: KV grown to the verified width, the batch terms, the cost model."""
        st = self.st
        self.kv.check(step.price_step(self._rows, self._q_sched, q, self._ctx, self._width, n, no_drafts, st.plen,
                                      st.generated, st.computed, self.kv.held, st.counters, self.kv.num_blocks,
                                      self.kv.block_size, self._resident, self._terms))
        if self._prices_terms:
            t = self._terms.tolist()
            terms = BatchTerms(int(t[0]), int(t[1]), int(t[2]), t[3], t[4], t[5], t[6], int(t[7]), int(t[8]), int(t[9]))
            return self.cost.step_time_terms(terms)
        return self.cost.step_time(StepBatch(q[:n].copy(), self._resident[:n].copy(), self._ctx[:n].copy()))

    def _commit(self, it: int, start: float, step_s: float, n: int, q, k: int, spec: bool, drafting, drafted,
                accepted) -> int:
        """Commit the step (compiled); returns how many requests completed."""
        st, log, its = self.st, self.trace.emissions, self.trace.iterations
        log.reserve(n)
        its.reserve()
        rec = self._record
        generated_before = st.generated[self._rows[:n]] if self._hears_commits else None
        rec[:] = (it, start, step_s, st.counters[N_ACTIVE], len(self.waiting), k if spec else 0, spec,
                  self._terms[step.KV_GROWN])
        self.kv.check(step.commit_step(
            self._rows, self._q_sched, q, self._ctx, n, drafting, drafted, accepted, self.trace.accepted_hist,
            self.env.now, st.plen, st.olen, st.computed, st.ctx_target, st.generated, st.emits, st.first_token,
            st.finish, self.kv.held, st.reserved, st.act, st.counters, self.kv.num_blocks, self.kv.block_size, st.rid,
            log.request, log.time, log.tokens, log.n, its.rows, its.n, rec, self._finished, self._stats))
        emitted = int(self._stats[step.EMITTED])
        if self._hears_commits and emitted:
            rows = self._rows[:n]
            slots = rows[st.generated[rows] > generated_before]  # the rows that emitted, in emission order
            self.oracle.on_commit(st.rid[slots], st.generated[slots])
        log.n += emitted
        its.n += 1
        return int(self._stats[step.FINISHED])

    def _after_commit(self, it: int, n: int, spec: bool, k: int, num_drafting: int, num_generation: int,
                      max_seq_len: int, finished: int) -> bool:
        """The Python side of a committed step, in the engine's order; True when the run must end."""
        s, st = self.s, self.st
        rows = self._rows[:n]
        self._update_gate(it, spec, k, num_drafting, num_generation)
        if self.rules.k_timing == "next_step" and s.speculate:
            # vLLM picks K at the end of schedule() from this step's scheduled count (the 5-item
            # entries' context bucket: the longest sequence scheduled) for the drafts proposed now.
            self._k_next = self._lookup(n, int(self._stats[step.MAX_LEN]))
            gate = self.gate or self.legacy_gate
            if gate is None or not gate.disabled:
                propose_draft_token_ids(self.oracle, st, rows, st.rid, self._k_next, s.max_model_len,
                                        s.drafter == "vllm_ngram", max_seq_len, s.max_draft_len)
        return self._completed(it, finished)

    def _completed(self, it: int, finished: int) -> bool:
        """The step's completions (``_on_finish``); True when the run must end."""
        if finished:
            self._on_finish(self._finished[:finished].copy(), it)
        return self.max_sim_time is not None and self.env.now >= self.max_sim_time

    def _spans(self) -> bool:
        """Whether steps run in compiled spans from now on (``span.spans``)."""
        return span.spans(self)

    def run_loop(self):
        s, st = self.s, self.st
        it, spanning = 0, False
        resume = None  # a span's pending step, once its timeout ends: the next span commits it first
        while True:
            if resume is None:  # (admission follows that commit, which may free room)
                self._fetch_new_requests()
                if not st.counters[N_ACTIVE]:
                    if st.counters[DONE] == self.n:
                        return
                    if self._arrivals is None:  # (the spans wait for their arrivals themselves)
                        self._wakeup = self.env.event()
                        yield self._wakeup
                        self._wakeup = None
                        continue
            if not spanning:  # once a replica spans, it always does (``_spans``; a drafter's is decided once)
                k, spec = self._setup_drafter()
                spanning = bool(self._drafter) if spec and self._drafter is not None else self._spans()
            if spanning:
                status, it, n, step_s = span.run(self, it, resume)
                resume = None
                if status == span.PENDING and self.stepper is not None:  # the fleet's loop commits it, spans on
                    status, it, n, step_s = yield self.stepper.hold(self, it, n, step_s)
                self._last_scheduled = n
                if status in (span.FULL, span.ADMIT, span.WINDOW):
                    continue
                if status == span.COMMITTED:  # (the span did the gate's and the drafter's part)
                    finished = 0 if self._quiet_finish else int(self._stats[step.FINISHED])  # (released there)
                    if self._completed(it, finished):
                        return
                    continue
                start = self.env.now
                yield self.env.timeout(step_s)
                resume = n, start, step_s
                continue
            it += 1
            drafting, drafted, accepted, q = self._no_drafting, self._none, self._none, self._q
            n = self._schedule(spec, k)
            rows, ctx_rows = self._rows[:n], self._ctx[:n]
            if spec and self.rules.k_timing == "same_step" and s.k_from == "scheduled":
                # one-model path: K for this step from the scheduled batch (``update_draft_len``)
                k = control.update_draft_len(s.draft_len_schedule, n, s.max_draft_len, s.schedule_lookup)
                spec = k > 0
            self._last_scheduled = n
            order = self._slots.order(st, rows, s.max_batch_size) if self._slots is not None else None
            if spec:
                d = ScheduleDecision(rows, self._q_sched[:n], ctx_rows)
                drafting, drafted, accepted, q = prepare_draft_tokens(
                    self.oracle, st, d, st.rid, k, self.k_static, self._verify_width, self.rules.budget == "draft", order)
                drafted = drafted.astype(np.int64, copy=False)
                accepted = accepted.astype(np.int64, copy=False)
            step_s = self._price(n, q, not spec)
            if s.piecewise_graph_slowdown > 0:
                step_s /= 1.0 - s.piecewise_graph_slowdown
            if self.record_batches:
                self.trace.batches.append((st.rid[rows], q[:n].copy(), self._resident[:n].copy(), ctx_rows.copy()))
            if spec and len(drafted):
                drows = rows[drafting]
                step_s += self._draft_time(len(drows), k, self.oracle.state_size(st.rid[drows], st.generated[drows]))
            start = self.env.now
            yield self.env.timeout(step_s)
            max_seq_len = int(self._terms[step.MAX_SEQ_LEN])
            num_generation = n - int(self._ctx[:n].sum()) if spec else 0
            finished = self._commit(it, start, step_s, n, q, k, spec, drafting, drafted, accepted)
            if self._after_commit(it, n, spec, k, len(drafted), num_generation, max_seq_len, finished):
                return

    def start(self) -> None:
        """Start the executor loop in the environment (the frontend is started by its owner)."""
        self.env.process(self.run_loop())

    def collect(self, per_request: bool = True) -> Trace:
        """The recorded trace once the environment has run; ``per_request``: each request's times too."""
        st, t, n = self.st, self.trace, self.n
        t.preemptions = int(st.counters[PREEMPTIONS])
        t.n, t.arrival = n, self.frontend.arrival
        t.plen, t.olen = (np.asarray(a, dtype=np.int64) for a in (self.w.prompt_lens, self.w.output_lens))
        st.scatter()  # the requests still in slots (those recycled wrote theirs then)
        span.warn_outside(self)  # (a fleet's last spans return to no result)
        if per_request:
            t.first_token, t.finish, t.generated = st.results
        return t

    def run(self) -> Trace:
        """Run to completion (or ``max_sim_time``) and return the recorded trace."""
        self._arrivals = span_state.arrivals_for(self)
        if self._arrivals is None:
            self.frontend.start()
        else:  # (the spans release the finished slots, cache their blocks and send the next requests)
            self.waiting, self._quiet_finish = self._arrivals, True
        self.start()
        with memory.collector_spared():
            self.env.run()
        memory.break_self_cycle(self.env)  # the run is over: freed by reference counting
        return self.collect()
