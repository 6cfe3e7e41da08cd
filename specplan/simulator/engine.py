"""The executor timeline: one SimPy process replaying the engine's iteration loop.

Per iteration, in TensorRT-LLM's order (``py_executor._executor_loop``):

a. fetch arrived requests into the active set; K from the schedule;
b. speculation on/off: schedule K == 0, the gate latched, or ``should_use_spec_decode``;
c. placeholder drafts: generation requests cost 1 + K tokens and reserve KV for 1 + K;
d. capacity and micro-batch scheduling (token budget, batch size, paged KV);
e. draft (the oracle), padded to the verify width;
f. verify forward, priced by the cost model (plus drafting on the critical path);
g. accept and commit accepted + 1 tokens, rewind rejected KV;
h. SpeculationGate update (one iteration late with the overlap scheduler).

Each iteration is one ``env.timeout(step_time)``. State lives in numpy arrays indexed by request,
and per-iteration work is vectorised over the batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import simpy

from specplan.cost_models.base import CostModel, StepBatch
from specplan.errors import ConfigError
from specplan.simulator.control import (
    LegacySpeculationGate,
    SpeculationGate,
    draft_len_for_batch_size,
    should_use_spec_decode,
    vllm_schedule_table,
)
from specplan.simulator.emissions import EmissionLog
from specplan.simulator.kv import KVBlockPool
from specplan.simulator.oracles import AcceptanceOracle
from specplan.simulator.scheduler import fit_token_budget


@dataclass(frozen=True)
class EngineSettings:
    """Everything the loop needs, resolved from the config (see ``specplan.simulator.run``)."""

    max_batch_size: int
    max_num_tokens: int
    max_num_active_requests: int
    kv_block_size: int
    kv_num_blocks: int
    policy: str  # GUARANTEED_NO_EVICT | MAX_UTILIZATION
    chunked_prefill: bool
    overlap_scheduler: bool
    speculate: bool  # a drafter is configured at all
    max_draft_len: int
    draft_len_schedule: Optional[dict[int, int]] = None
    vllm_ranges: Optional[tuple] = None
    schedule_lookup: str = "upper_bound"
    k_from: str = "active"
    max_concurrency: Optional[int] = None
    verify_width: str = "static"  # static | runtime | draft
    gate_window: Optional[int] = None
    gate_threshold: Optional[float] = None
    gate_denominator: str = "drafted"
    legacy_gate_window: Optional[int] = None
    legacy_gate_threshold: Optional[float] = None
    drafter: str = "none"
    sa_enhancer: bool = False  # SA side stream overlapping a neural draft loop


@dataclass
class Workload:
    """Request lengths, arrivals and session order, as the loop sees them."""

    prompt_lens: np.ndarray
    output_lens: np.ndarray
    arrivals: Optional[np.ndarray]  # open loop; None for closed loop
    predecessor: np.ndarray  # index of the previous turn of the same session, -1 if none
    concurrency: int = 0  # closed-loop clients
    think_time: Optional[np.ndarray] = None  # per request: think time before it is sent (closed loop, sessions)


@dataclass
class Trace:
    """What one run records; turned into DataFrames by ``specplan.simulator.metrics``."""

    iterations: list = field(default_factory=list)
    emissions: EmissionLog = field(default_factory=EmissionLog)  # one row per emitted chunk
    accepted_hist: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    batches: list = field(default_factory=list)  # (rows, query_tokens, resident, is_prefill) per iteration, if recorded
    gate_tripped_iteration: Optional[int] = None
    gate_tripped_time: Optional[float] = None
    preemptions: int = 0


ITERATION_FIELDS = (
    "iteration", "start_s", "step_s", "num_active", "num_queued", "batch_rows", "gen_rows",
    "prefill_tokens", "k", "spec_on", "drafted", "accepted", "verified_tokens", "committed", "prefill_done",
    "kv_blocks_used",
)


class Executor:
    """One engine replica: the SimPy executor loop plus the request frontend."""

    def __init__(self, settings: EngineSettings, workload: Workload, oracle: AcceptanceOracle,
                 cost: CostModel, max_sim_time: Optional[float] = None, record_batches: bool = False) -> None:
        self.s = settings
        self.w = workload
        self.oracle = oracle
        self.cost = cost
        self.max_sim_time = max_sim_time
        self.record_batches = record_batches  # keep every step's composition (fidelity replay)
        n = len(workload.prompt_lens)
        self.n = n
        self.plen = workload.prompt_lens.astype(np.int64)
        self.olen = workload.output_lens.astype(np.int64)
        self.arrival = np.full(n, np.nan)
        self.first_token = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.computed = np.zeros(n, dtype=np.int64)  # context positions computed toward ctx_target
        self.ctx_target = self.plen.copy()
        self.generated = np.zeros(n, dtype=np.int64)
        self.started = np.zeros(n, dtype=bool)
        self.reserved = np.zeros(n, dtype=np.int64)  # GUARANTEED_NO_EVICT reservations, in blocks
        self.kv = KVBlockPool(settings.kv_num_blocks, settings.kv_block_size, n)
        self.k_static = settings.max_draft_len if settings.speculate else 0
        self.emits = np.zeros(n, dtype=np.int64)  # decoding iterations that committed tokens, per request
        self.gate = self.legacy_gate = None
        if settings.gate_window and settings.gate_threshold is not None:
            self.gate = SpeculationGate(settings.gate_window, settings.gate_threshold)
        elif settings.legacy_gate_window and settings.legacy_gate_threshold is not None:
            self.legacy_gate = LegacySpeculationGate(settings.legacy_gate_window, settings.legacy_gate_threshold)
        self.vllm_table = (
            vllm_schedule_table(settings.vllm_ranges, max(settings.max_batch_size, settings.max_num_active_requests),
                                settings.max_draft_len)
            if settings.vllm_ranges is not None else None
        )
        self.trace = Trace(accepted_hist=np.zeros(self.k_static + 1, dtype=np.int64))
        self.env = simpy.Environment()
        self.waiting: list[int] = []  # arrived, not yet active (FIFO)
        self.active: list[int] = []  # admission order
        self.done = 0
        self._wakeup: Optional[simpy.Event] = None
        self._pending_sample: Optional[float] = None  # overlap scheduler: last iteration's gate sample
        self._last_scheduled = 0
        self._successors: dict[int, list[int]] = {}
        for rid, pred in enumerate(workload.predecessor.tolist()):
            if pred >= 0:
                self._successors.setdefault(pred, []).append(rid)
        self._completion: dict[int, simpy.Event] = {}
        self._check_fits()

    def _check_fits(self) -> None:
        """A request that can never be scheduled would wait forever: refuse the config up front."""
        if not self.s.chunked_prefill and self.n and int(self.plen.max()) > self.s.max_num_tokens:
            worst = int(self.plen.argmax())
            raise ConfigError(
                f"engine.max_num_tokens: request {worst} has a {int(self.plen[worst])}-token prompt, over "
                f"max_num_tokens {self.s.max_num_tokens}; set engine.enable_chunked_prefill: true or raise it"
            )
        need = self.kv.blocks_for(self.plen + self.olen + self.k_static)
        worst = int(need.argmax())
        if need[worst] > self.kv.num_blocks:
            raise ConfigError(
                f"engine.kv_num_blocks: request {worst} needs {int(need[worst])} KV blocks "
                f"({int(self.plen[worst] + self.olen[worst])} tokens) but the cache holds {self.kv.num_blocks}; "
                "raise kv_num_blocks / kv_budget_gb or shorten the workload"
            )

    # ----------------------------------------------------------------- frontend
    def _submit(self, rid: int) -> None:
        self.arrival[rid] = self.env.now
        self.waiting.append(rid)
        if self._wakeup is not None and not self._wakeup.triggered:
            self._wakeup.succeed()

    def _open_loop(self):
        roots = np.flatnonzero(self.w.predecessor < 0)
        order = roots[np.argsort(self.w.arrivals[roots], kind="stable")]
        for rid in order.tolist():
            delay = self.w.arrivals[rid] - self.env.now
            if delay > 0:
                yield self.env.timeout(delay)
            self._submit(rid)

    def _client(self, queue: list[int]):
        """A closed-loop client: send a request, wait for it, think, send the next."""
        while queue:
            rid = queue.pop(0)
            think = 0.0 if self.w.think_time is None else float(self.w.think_time[rid])
            if think > 0:
                yield self.env.timeout(think)
            done = self.env.event()
            self._completion[rid] = done
            self._submit(rid)
            yield done

    def _session_followup(self, rid: int):
        think = 0.0 if self.w.think_time is None else float(self.w.think_time[rid])
        if think > 0:
            yield self.env.timeout(think)
        self._submit(rid)

    def _on_finish(self, rids: np.ndarray, iteration: int) -> None:
        now = self.env.now
        if self.legacy_gate is not None:
            for rid in rids.tolist():
                if self.legacy_gate.record(int(self.generated[rid]), int(self.emits[rid])):
                    self._trip(iteration)
        self.finish[rids] = now
        self.kv.release(rids)
        self.reserved[rids] = 0
        self.oracle.on_finish(rids)
        finished = set(rids.tolist())
        self.active = [r for r in self.active if r not in finished]
        self.done += len(rids)
        for rid in rids.tolist():
            ev = self._completion.pop(rid, None)
            if ev is not None:
                ev.succeed()
            for nxt in self._successors.get(rid, ()):
                if self.w.arrivals is not None:
                    self.env.process(self._session_followup(nxt))

    # ----------------------------------------------------------------- control plane
    def _draft_len(self) -> int:
        s = self.s
        if not s.speculate:
            return 0
        if self.vllm_table is not None:
            # vLLM picks K at the end of schedule() from the scheduled count; it applies to the next step.
            size = self._last_scheduled if s.k_from == "scheduled" else len(self.active)
            return int(self.vllm_table[min(size, len(self.vllm_table) - 1)])
        if s.draft_len_schedule is not None:
            size = self._last_scheduled if s.k_from == "scheduled" else len(self.active)
            return draft_len_for_batch_size(s.draft_len_schedule, max(size, 1), s.schedule_lookup)
        return s.max_draft_len

    def _trip(self, iteration: int) -> None:
        self.trace.gate_tripped_iteration = iteration
        self.trace.gate_tripped_time = self.env.now

    def _use_spec(self, k: int) -> bool:
        gate = self.gate or self.legacy_gate
        if k == 0 or (gate is not None and gate.disabled):
            return False
        return should_use_spec_decode(len(self.active), self.s.max_batch_size, self.s.max_num_tokens, k,
                                      self.s.max_concurrency)

    # ----------------------------------------------------------------- scheduling
    def _schedule(self, k: int, kv_k: int):
        s = self.s
        act = np.fromiter(self.active, dtype=np.int64, count=len(self.active))
        is_ctx = self.computed[act] < self.ctx_target[act]
        cost = np.where(is_ctx, self.ctx_target[act] - self.computed[act], 1 + k)
        n_full, partial = fit_token_budget(cost, is_ctx, s.max_num_tokens, s.max_batch_size, s.chunked_prefill)
        n_rows = n_full + (1 if partial else 0)
        rows, q, ctx_rows = act[:n_rows], cost[:n_rows].copy(), is_ctx[:n_rows]
        if partial:
            q[-1] = partial
        if s.policy == "GUARANTEED_NO_EVICT":
            rows, q, ctx_rows = self._admit_guaranteed(rows, q, ctx_rows)
        else:
            rows, q, ctx_rows = self._admit_max_utilization(rows, q, ctx_rows, kv_k)
        return rows, q, ctx_rows

    def _admit_guaranteed(self, rows, q, ctx_rows):
        """Start a request only when KV for its whole output (and drafts) can be guaranteed."""
        new = ~self.started[rows]
        if new.any():
            need = np.where(new, self.kv.blocks_for(self.plen[rows] + self.olen[rows] + self.k_static), 0)
            fits = np.cumsum(need) <= self.kv.num_blocks - int(self.reserved.sum())
            if not fits.all():
                cut = int(np.argmin(fits))
                rows, q, ctx_rows, new, need = rows[:cut], q[:cut], ctx_rows[:cut], new[:cut], need[:cut]
            self.reserved[rows[new]] = need[new]
            self.started[rows[new]] = True
        return rows, q, ctx_rows

    def _admit_max_utilization(self, rows, q, ctx_rows, kv_k: int):
        """Allocate as needed; when KV runs out, preempt the latest-started request (recompute).

        Terminates: every request fits the cache alone (checked at construction), so preempting
        from the tail leaves at least the head running.
        """
        resident = np.where(ctx_rows, self.computed[rows], self.plen[rows] + self.generated[rows] - 1)
        need = np.maximum(self.kv.blocks_for(resident + np.where(ctx_rows, q, 1 + kv_k)) - self.kv.held[rows], 0)
        running = self.started[rows]
        while int(need[running].sum()) > self.kv.free:
            victim = next(r for r in reversed(self.active) if self.started[r])
            self._preempt(victim)
            keep = rows != victim
            rows, q, ctx_rows, need, running = rows[keep], q[keep], ctx_rows[keep], need[keep], running[keep]
            running = running & self.started[rows]
        # New requests only start while blocks remain after the running ones (FCFS, break).
        budget = self.kv.free - int(need[running].sum())
        new_need = np.where(running, 0, need)
        fits = np.cumsum(new_need) <= budget
        if not fits.all():
            cut = int(np.argmin(fits))
            rows, q, ctx_rows = rows[:cut], q[:cut], ctx_rows[:cut]
        self.started[rows] = True
        return rows, q, ctx_rows

    def _preempt(self, rid: int) -> None:
        """Recompute preemption: drop the KV; the request re-prefills prompt + generated later."""
        self.kv.release(np.array([rid]))
        self.computed[rid] = 0
        self.ctx_target[rid] = self.plen[rid] + self.generated[rid]
        self.started[rid] = False
        self.active.remove(rid)
        self.active.append(rid)
        self.trace.preemptions += 1

    # ----------------------------------------------------------------- the loop
    def _fetch(self) -> None:
        room = self.s.max_num_active_requests - len(self.active)
        if room > 0 and self.waiting:
            self.active.extend(self.waiting[:room])
            del self.waiting[:room]

    def _draft(self, rows, q, ctx_rows, spec: bool, k: int):
        """e. Draft for the rows that verify a draft this step; set their verified widths in ``q``.

        Generation rows draft when speculation is on; a drafter that drafts at prefill (HF prompt
        lookup) also drafts on the chunk that completes a prompt. Returns the drafting mask (over
        rows), drafted and accepted per drafting row, and the static/runtime padding width.
        """
        drafting = ~ctx_rows if spec else np.zeros(len(rows), dtype=bool)
        if spec and self.oracle.drafts_at_prefill:
            drafting = drafting | (ctx_rows & (self.generated[rows] == 0)
                                   & (self.computed[rows] + q >= self.ctx_target[rows]))
        drows = rows[drafting]
        if not len(drows):
            empty = np.zeros(0, dtype=np.int64)
            return drafting, empty, empty, 0
        drafted, accepted = self.oracle.draft(drows, self.generated[drows], k)
        width = {"static": self.k_static, "runtime": k, "draft": 0}[self.s.verify_width]
        verify = drafted if self.s.verify_width == "draft" else width
        q[drafting] = np.where(ctx_rows[drafting], q[drafting], 1) + verify
        return drafting, drafted, accepted, width

    def _draft_time(self, num_rows: int, k: int, state_size: int) -> float:
        """Drafting on the critical path; the SA enhancer's side stream only counts past the neural loop."""
        t = self.cost.draft_time(self.s.drafter, num_rows, k, state_size)
        if self.s.sa_enhancer:
            t = max(t, self.cost.draft_time("SA", num_rows, k, state_size))
        return t

    def _accept(self, rows, chunk, ctx_rows, drafting, accepted) -> np.ndarray:
        """g. Commit accepted + 1 per verify row (never past the output); rewind rejected KV."""
        now = self.env.now
        generated = self.generated[rows]
        commit = np.ones(len(rows), dtype=np.int64)
        has_ctx = bool(ctx_rows.any())  # steady decode steps skip the prefill bookkeeping
        if has_ctx:
            ctx_idx = np.flatnonzero(ctx_rows)
            crow = rows[ctx_idx]
            self.computed[crow] += chunk[ctx_idx]
            commit[ctx_idx] = self.computed[crow] >= self.ctx_target[crow]
            self.first_token[crow[(commit[ctx_idx] > 0) & (generated[ctx_idx] == 0)]] = now
        commit[drafting] += accepted
        commit = np.minimum(commit, self.olen[rows] - generated)
        generated += commit
        self.generated[rows] = generated
        emitted = commit > 0
        self.emits[rows] += emitted
        # Rewind to the resident KV: the newest committed token is written by the next forward.
        resident = self.plen[rows] + generated - 1
        if has_ctx:
            resident = np.where(ctx_rows & ~emitted, self.computed[rows], resident)
        self.kv.resize(rows, resident)
        self.trace.emissions.append(rows[emitted], now, commit[emitted])
        self.oracle.on_commit(rows[emitted], self.generated[rows[emitted]])
        return commit

    def _gate_sample(self, spec, drafted, accepted, q, ctx_rows, drafting):
        """h. One SpeculationGate sample: sum accepted / sum drafted over the rows that drafted."""
        if not spec or not len(drafted):
            return None
        proposed = drafted > 0
        self.trace.accepted_hist += np.bincount(accepted[proposed], minlength=len(self.trace.accepted_hist))
        sum_d = int(drafted.sum())
        # "padded" counts the verified width (CUDA-graph zeros included) of every drafting row.
        denom = sum_d if self.s.gate_denominator == "drafted" else int((q[drafting] - 1).sum())
        return int(accepted.sum()) / denom if sum_d > 0 and denom > 0 else None

    def run_loop(self):
        s = self.s
        it = 0
        while True:
            self._fetch()
            if not self.active:
                if self.done == self.n:
                    return
                self._wakeup = self.env.event()
                yield self._wakeup
                self._wakeup = None
                continue
            it += 1
            k = self._draft_len()
            spec = self._use_spec(k)
            k_run = k if spec else 0
            # NGram-path padding grows KV to the static width; one-model paths use the runtime K.
            kv_k = self.k_static if (spec and s.verify_width == "static") else k_run
            rows, q, ctx_rows = self._schedule(k_run, kv_k)
            if len(rows) == 0:
                raise ConfigError("engine: nothing fits in one iteration (max_num_tokens below one request's need)")
            self._last_scheduled = len(rows)
            chunk = np.where(ctx_rows, q, 0)  # prefill positions computed this step
            drafting, drafted, accepted, width = self._draft(rows, q, ctx_rows, spec, k_run)
            resident = np.where(ctx_rows, self.computed[rows], self.plen[rows] + self.generated[rows] - 1)
            self.kv.resize(rows, resident + q)
            step = self.cost.step_time(StepBatch(q, resident, ctx_rows))
            if self.record_batches:
                self.trace.batches.append((rows.copy(), q.copy(), resident, ctx_rows))
            if spec and drafting.any():
                drows = rows[drafting]
                step += self._draft_time(len(drows), k_run, self.oracle.state_size(drows, self.generated[drows]))
            start = self.env.now
            yield self.env.timeout(step)
            commit = self._accept(rows, chunk, ctx_rows, drafting, accepted)

            sample = self._gate_sample(spec, drafted, accepted, q, ctx_rows, drafting)
            if self.gate is not None:
                if s.overlap_scheduler:
                    sample, self._pending_sample = self._pending_sample, sample
                if sample is not None and self.gate.record(sample):
                    self._trip(it)
            n_ctx, prefill = int(ctx_rows.sum()), int(chunk.sum())
            self.trace.iterations.append((
                it, start, step, len(self.active), len(self.waiting), len(rows), len(rows) - n_ctx,
                prefill, k_run, spec, int(drafted.sum()), int(accepted.sum()), int(q.sum()) - prefill,
                int(commit.sum()), int((commit[ctx_rows] > 0).sum()) if n_ctx else 0, self.kv.used,
            ))
            finished = rows[self.generated[rows] >= self.olen[rows]]
            if len(finished):
                self._on_finish(finished, it)
            if self.max_sim_time is not None and self.env.now >= self.max_sim_time:
                return

    def run(self) -> Trace:
        """Run to completion (or ``max_sim_time``) and return the recorded trace."""
        if self.w.arrivals is not None:
            self.env.process(self._open_loop())
        else:
            roots = np.flatnonzero(self.w.predecessor < 0).tolist()
            clients = max(1, self.w.concurrency)
            for c in range(clients):
                # Client c sends every clients-th root request; a session's turns follow their root.
                queue = []
                for root in roots[c::clients]:
                    queue.append(root)
                    nxt = self._successors.get(root, [])
                    while nxt:
                        queue.append(nxt[0])
                        nxt = self._successors.get(nxt[0], [])
                self.env.process(self._client(queue))
        self.env.process(self.run_loop())
        self.env.run()
        return self.trace
