"""An executor's drafter as its compiled spans read it (``specplan.simulator.draft_span``).

``drafter_for`` decides, once, whether an executor's drafting iterations can span, and builds its
``Drafter``: the K tables filled by the executor's own lookups, the oracle's per-request tables
(``TableOracle.stacked_tables``, or a ``SurvivalOracle``'s uniforms window, step counts and curve),
the drafting cost's tables (``DraftCost``), the gate's arrays (the
``_LatchingWindow``'s own, so Python and the spans feed one gate) and the buffers of the step in
flight. ``Drafter.values`` gives them as a ``DraftState``'s fields, the ``drafter`` field of the
executor's ``span_state.SpanState``; an executor whose spans never draft gets ``inert_values``.
"""

from __future__ import annotations

import numpy as np
from numba.core import types
from numba.experimental import structref

from specplan.acceptance.oracles import SurvivalOracle
from specplan.cost_models.draft import GPU_DRAFTERS, HOST_SPEEDUP, DraftCost
from specplan.cost_models.compiled import fixed_draft_seconds
from specplan.simulator.control import GATE_DENOMINATORS, update_draft_len
from specplan.simulator.paths import PATHS
from specplan.simulator.state import N_ACTIVE

# ``DraftState.ints``: vLLM's K for the next step, the last scheduled count, the step's K, whether
# it speculates and its drafting rows, whether the gate tripped, the samples logged.
K_NEXT, LAST_SCHEDULED, STEP_K, STEP_SPEC, NUM_DRAFTING, TRIPPED, SAMPLES = range(7)
# ``DraftState.floats``: the overlap scheduler's pending gate sample (-1: none), a sample out of [0, 1].
PENDING_SAMPLE, BAD_SAMPLE = range(2)
# ``PathRules.k_timing`` and ``.budget`` codes, and ``limit`` codes (the oracle's ``limit`` rule).
BEFORE_SCHEDULE, SAME_STEP, NEXT_STEP = range(3)
PLACEHOLDER, STATIC, DRAFT = range(3)
LIMIT_K, LIMIT_MODEL_LEN, LIMIT_HF = range(3)
_TIMINGS = {"before_schedule": BEFORE_SCHEDULE, "same_step": SAME_STEP, "next_step": NEXT_STEP}
_BUDGETS = {"placeholder": PLACEHOLDER, "static": STATIC, "draft": DRAFT}
_SAMPLE_LOG = 1 << 12

DRAFT_FIELDS = (
    "on", "k_timing", "k_from_scheduled", "batch_gate", "budget", "max_concurrency", "drafts_at_prefill",
    "proposed_before", "k_table", "bounds", "k_update", "off", "tables", "row_of", "o_plen", "o_olen",
    "limit", "limit_len", "max_new_tokens", "max_model_len", "ngram_skip", "num_spec_tokens", "sa_kernel",
    "log_pool", "draft_lens", "host_cols", "speedup", "sa", "sa_batch", "sa_seconds", "gate_ring", "gate_total",
    "gate_counts", "threshold", "feeds_gate", "overlap", "denominator", "drafting", "drafted", "accepted",
    "pending_accepted", "ints", "floats", "samples", "survival", "u", "u_base", "u_meta", "curve", "host_draft",
    "draft_fixed",
)


@structref.register
class DraftStateType(types.StructRef):
    def preprocess_fields(self, fields):
        return tuple((name, types.unliteral(typ)) for name, typ in fields)


class DraftState(structref.StructRefProxy):
    """``DRAFT_FIELDS`` of one executor, the ``drafter`` field of its ``span_state.SpanState``."""


structref.define_proxy(DraftState, DraftStateType, list(DRAFT_FIELDS))


def drafter_for(ex):
    """An executor's ``Drafter`` when its drafting iterations can run in spans (beside
    ``span.spans``' own conditions), else None: one replica, a ``TableOracle`` whose ``limit`` rule
    ``draft_span.table_draft`` knows, or a ``SurvivalOracle`` (alpha, per-position and length
    distributions), no SA enhancer, a cost the spans price (``compiled.span_pricing``) with its
    drafting from ``DraftCost`` or a constant a step (``compiled.fixed_draft_seconds``) for a
    model-free drafter, and every K the schedule gives within the accepted histogram."""
    oracle, cost = ex.oracle, ex.cost
    if ex.stepper is not None or ex.s.sa_enhancer:
        return None
    if type(oracle) is not SurvivalOracle and (not getattr(oracle, "precomputed", False)
                                             or _limit_rule(oracle) is None):
        return None
    if ex._span_cost is None or not (fixed_draft_seconds(cost) is not None
                                     or type(getattr(cost, "draft", None)) is DraftCost):
        return None
    if ex.s.drafter not in GPU_DRAFTERS and ex.s.drafter not in HOST_SPEEDUP:
        return None
    k_tables = _k_tables(ex)
    if max(k_tables[0].max(), k_tables[2].max()) >= len(ex.trace.accepted_hist):
        return None
    return Drafter(ex, *k_tables)


def _k_tables(ex) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    # K by request count (and context bucket) as ``Executor._lookup`` gives it, the bucket bounds,
    # and K by scheduled count as ``update_draft_len`` gives it, for every count the loop can see.
    s = ex.s
    sizes = range(max(s.max_batch_size, s.max_num_active_requests) + 1)
    if ex.vllm_lookup is not None:
        table, bounds = ex.vllm_lookup
    else:
        table, bounds = np.array([[ex._lookup(size)] for size in sizes], dtype=np.int64), (0,)
    update = [update_draft_len(s.draft_len_schedule, size, s.max_draft_len, s.schedule_lookup) for size in sizes]
    return table, np.asarray(bounds, dtype=np.int64), np.array(update, dtype=np.int64)


def _draft_cost_fields(ex) -> dict:
    # What ``draft_span.draft_seconds`` reads: a constant a drafting step (``draft_fixed``,
    # ``compiled.fixed_draft_seconds``; NaN where another cost prices the drafting), a measured
    # profile's host drafting terms where ``ProfileCostModel.draft_time`` takes them (``host_draft``;
    # the roofline has no such method), and ``DraftCost``'s interpolation tables, built as it builds them.
    cost, drafter = ex.cost, ex.s.drafter
    fixed = fixed_draft_seconds(cost)
    if fixed is not None:
        return {**dict(zip(_COST_FIELDS, inert_values(_COST_FIELDS))), "draft_fixed": fixed}
    host, sa, draft = cost.draft.section.ngram_host, cost.draft.section.sa_kernel, cost.draft
    terms = getattr(cost, "host_draft_terms", lambda drafter: None)(drafter)
    return {
        "log_pool": np.log10(np.asarray(host.pool_entries, dtype=float)),
        "draft_lens": np.asarray(host.draft_len, dtype=float),
        "host_cols": np.ascontiguousarray(np.asarray(host.seconds_per_request, dtype=float).T),
        "speedup": float(HOST_SPEEDUP.get(drafter, 1.0)),
        "sa": np.array([sa.base_s, draft.sm_count, sa.size_doubling_factor, sa.reference_size], dtype=float),
        "sa_batch": np.asarray(sa.batch if sa.batch is not None else [], dtype=float),
        "sa_seconds": np.asarray(sa.seconds if sa.seconds is not None else [], dtype=float),
        "host_draft": np.zeros(0) if terms is None else np.array(terms, dtype=float), "draft_fixed": np.nan,
    }


_TABLE_FIELDS = ("off", "tables", "row_of", "limit_len", "max_new_tokens")  # a TableOracle's
_SURVIVAL_FIELDS = ("survival", "u_meta", "curve")  # a SurvivalOracle's (its window: ``Drafter.values``)
_COST_FIELDS = ("log_pool", "draft_lens", "host_cols", "speedup", "sa", "sa_batch", "sa_seconds", "host_draft")


def _limit_rule(oracle):
    # The exact classes whose ``limit`` and ``draft`` ``draft_span.table_draft`` reproduces (a
    # subclass may change either), imported here: they are loaded once such an oracle exists.
    from specplan.acceptance.drafters.pld import PLDOracle
    from specplan.acceptance.drafters.suffix_automaton import SAOracle
    from specplan.acceptance.drafters.vllm_ngram import VllmNgramOracle

    kind = type(oracle)
    if kind is SAOracle or (kind is VllmNgramOracle and oracle.settings.max_model_len is None):
        return LIMIT_K
    if kind is VllmNgramOracle:
        return LIMIT_MODEL_LEN
    if kind is PLDOracle:
        return LIMIT_HF if oracle.settings.pld_variant == "hf" else LIMIT_K
    return None


class Drafter:
    """An executor's drafter as its spans read it: the K tables, the oracle's tables, the drafting
    cost, the gate's arrays and the buffers of the step in flight, kept for the executor's life
    (its ``SpanState`` is rebuilt when its arrays grow; this is not)."""

    def __init__(self, ex, k_table: np.ndarray, bounds: np.ndarray, k_update: np.ndarray) -> None:
        s, oracle, rules = ex.s, ex.oracle, PATHS[ex.s.path]
        self.uniforms = oracle._uniforms if type(oracle) is SurvivalOracle else None
        rows = max(s.max_batch_size, 1)
        gate = ex.gate or ex.legacy_gate
        ring, total, counts = (gate.ring, gate.total, gate.counts) if gate is not None else (
            np.zeros(1), np.zeros(1), np.zeros(2, dtype=np.int64))
        self.fields = {
            "on": True, "k_timing": _TIMINGS[rules.k_timing], "k_from_scheduled": s.k_from == "scheduled",
            "batch_gate": rules.batch_gate, "budget": _BUDGETS[rules.budget],
            "max_concurrency": -1 if s.max_concurrency is None else int(s.max_concurrency),
            "drafts_at_prefill": bool(oracle.drafts_at_prefill), "proposed_before": rules.budget == "draft",
            "k_table": k_table, "bounds": bounds, "k_update": k_update,
            **self._oracle_fields(oracle, [*k_table.ravel().tolist(), *k_update.tolist()]),
            "o_plen": oracle.prompt_lens, "o_olen": oracle.output_lens,
            "max_model_len": -1 if s.max_model_len is None else int(s.max_model_len),
            "ngram_skip": s.max_model_len is not None and s.drafter == "vllm_ngram",
            "num_spec_tokens": int(s.max_draft_len), "sa_kernel": s.drafter in GPU_DRAFTERS,
            **_draft_cost_fields(ex),
            "gate_ring": ring, "gate_total": total, "gate_counts": counts,
            "threshold": float(ex.gate.threshold) if ex.gate is not None else 0.0, "feeds_gate": ex.gate is not None,
            "overlap": bool(s.overlap_scheduler), "denominator": GATE_DENOMINATORS[s.gate_denominator],
            "drafting": np.zeros(rows, dtype=bool), "drafted": np.zeros(rows, dtype=np.int64),
            "accepted": np.zeros(rows, dtype=np.int64), "pending_accepted": None,
            "ints": np.array([ex._k_next, ex._last_scheduled, 0, 0, 0, 0, 0], dtype=np.int64),
            "floats": np.array([-1.0 if ex._pending_sample is None else ex._pending_sample, 0.0]),
            "samples": np.zeros(_SAMPLE_LOG),
        }

    def _oracle_fields(self, oracle, ks: list) -> dict:
        # What ``draft_span.oracle_draft`` reads of the oracle: a ``TableOracle``'s stacked tables and
        # ``limit`` rule, or a ``SurvivalOracle``'s curve and step counts (its window, which moves,
        # is read in ``values``); the other kind's fields unused.
        if self.uniforms is not None:
            unused = dict(zip(_TABLE_FIELDS, inert_values(_TABLE_FIELDS)))
            return {**unused, "limit": LIMIT_K, "survival": True, "u_meta": self.uniforms._meta,
                    "curve": oracle.survival}
        off, tables, row_of = oracle.stacked_tables(ks)
        return {"off": off, "tables": tables, "row_of": row_of, "limit": _limit_rule(oracle),
                "limit_len": int(oracle.settings.max_model_len or 0), "max_new_tokens": oracle.max_new_tokens,
                **dict(zip(_SURVIVAL_FIELDS, inert_values(_SURVIVAL_FIELDS)))}

    @property
    def window(self):
        """The ``SurvivalOracle``'s uniforms window the spans read (a new array each time it is drawn
        again), else None."""
        return None if self.uniforms is None else self.uniforms._u

    def cover(self, ex) -> None:
        """Before a span: a ``SurvivalOracle``'s window drawn again where it misses a uniform of an
        active request (``draft_span.window_covers``, checked at each loop top, ends a span there)."""
        if self.uniforms is not None:
            st = ex.st
            self.uniforms.cover(st.rid[st.act[:st.counters[N_ACTIVE]]])

    def values(self, ex) -> list:
        """``DRAFT_FIELDS``' values for the executor's request state (and the uniforms window) as it is now."""
        now = {"pending_accepted": ex.st.pending_accepted}
        if self.uniforms is not None:
            now.update(u=self.uniforms._u, u_base=int(self.uniforms._base))
        else:
            now.update(u=np.zeros(1, dtype=np.float32), u_base=0)
        return [now[name] if name in now else self.fields[name] for name in DRAFT_FIELDS]

    def after_span(self, ex, it: int) -> None:
        """The Python side of a span: its gate samples into the trace, a trip recorded at the
        iteration it happened, a sample out of [0, 1] refused as the gate refuses it."""
        ints, floats = self.fields["ints"], self.fields["floats"]
        if ints[SAMPLES]:
            ex.trace.gate_samples.frombytes(self.fields["samples"][:ints[SAMPLES]].tobytes())
            ints[SAMPLES] = 0
        if ints[TRIPPED]:
            ints[TRIPPED] = 0
            ex._trip(it)
        if floats[BAD_SAMPLE]:
            ex.gate.record(float(floats[BAD_SAMPLE]))


def inert_values(names=DRAFT_FIELDS) -> list:
    """``names`` (by default ``DRAFT_FIELDS``) of an executor whose spans never draft (``on`` False),
    typed as a drafter's."""
    i, f, b = np.zeros(SAMPLES + 1, dtype=np.int64), np.zeros(2), np.zeros(1, dtype=bool)
    values = {name: 0 for name in DRAFT_FIELDS}
    values.update({name: False for name in ("on", "k_from_scheduled", "batch_gate", "drafts_at_prefill",
                                            "proposed_before", "ngram_skip", "sa_kernel", "feeds_gate", "overlap")})
    values.update({name: i for name in ("bounds", "k_update", "off", "row_of", "o_plen", "o_olen", "max_new_tokens",
                                        "drafted", "accepted", "pending_accepted", "gate_counts", "ints")})
    values.update({name: f for name in ("log_pool", "draft_lens", "sa", "sa_batch", "sa_seconds", "gate_ring",
                                        "gate_total", "floats", "samples")})
    values.update({"k_table": np.zeros((1, 1), dtype=np.int64), "host_cols": np.zeros((1, 1)), "drafting": b,
                   "speedup": 1.0, "threshold": 0.0, "draft_fixed": np.nan, "tables": np.zeros((1, 1, 3), dtype=np.int32),
                   "survival": False, "u": np.zeros(1, dtype=np.float32), "u_meta": np.zeros((1, 2), dtype=np.int64),
                   "curve": f, "host_draft": np.zeros(0)})
    return [values[name] for name in names]
