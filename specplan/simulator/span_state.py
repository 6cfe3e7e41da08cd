"""What a replica's compiled spans read (``span.run_span``): its ``SpanState``, built from the executor
(``state_of``) and kept until its arrays grow (``state_for``), with who sends its requests
(``arrivals_for``) and the placeholders a draft-free step charges (``span_charge``)."""

from __future__ import annotations

import operator
from typing import Optional

import numpy as np
from numba import njit
from numba.core import cgutils, types
from numba.core.imputils import impl_ret_borrowed
from numba.experimental import structref
from numba.extending import intrinsic
from numba.np.arrayobj import make_array

from specplan.simulator import closed_loop, draft_state, state
from specplan.simulator.closed_loop import CLOSED, ClosedLoop, owns_clients
from specplan.simulator.control import V1_BUDGET, placeholder_charge
from specplan.simulator.draft_state import DraftState
from specplan.simulator.open_loop import OPEN, OpenLoop, owns_arrivals
from specplan.simulator.open_loop import arrays as open_loop_arrays
from specplan.simulator.prefix_cache import arrays as prefix_cache_arrays

#: What a replica's spans read and write that stays the same object from call to call: the request
#: state, the step buffers, the logs and the settings. One ``SpanState`` passes them all: a call
#: that took them one by one spent 5 us in numba's argument checks, more than a fleet's spans,
#: which are mostly one step, spend on the step itself.
SPAN_FIELDS = (
    "act", "counters", "plen", "olen", "computed", "ctx_target", "generated", "started", "reserved", "held",
    "disabled", "pending", "emits", "first_token", "finish", "k_static", "k_charge", "budget_rule", "verify_width",
    "policy", "max_num_tokens", "max_batch_size", "chunked", "num_blocks", "block_size", "stamp", "pricing", "coefficients",
    "slowdown", "rows", "q_sched", "q", "ctx", "width", "resident", "terms", "no_drafting", "none", "accepted_hist",
    "em_request", "em_time", "em_tokens", "iteration_log", "record", "finished", "stats", "max_sim_time",
    "max_active", "out", "out_time", "rid", "pc_mode", "pc_off", "pc_ids", "pc_cached", "pc_hits", "pc_done",
    "equal_progress", "released", "quiet_finish", "recycle_at", "free", "owns_arrivals", "arrival_order",
    "arrival_times", "arrival_new", "arrival_ints", "following", "prompt_lens", "output_lens", "outside", "drafter",
)


_ARRIVAL_FIELDS = ("arrival_order", "arrival_times", "arrival_new", "arrival_ints", "following")


@structref.register
class SpanStateType(types.StructRef):
    def preprocess_fields(self, fields):
        return tuple((name, types.unliteral(typ)) for name, typ in fields)


class SpanState(structref.StructRefProxy):
    """``SPAN_FIELDS`` of one replica, for ``run_span`` (build it with ``span_state``)."""


structref.define_proxy(SpanState, SpanStateType, list(SPAN_FIELDS))


@intrinsic
def _borrowed(typingctx, values):
    # ``values`` (a tuple) with every array's reference to its memory left out (meminfo and parent
    # null): numba counts no references to such an array, and the code that reads it is unchanged.
    # The tuple is returned as a new reference, as numba expects: its other counted members (a
    # nested state) get theirs.
    def codegen(context, builder, sig, args):
        out = args[0]
        for i, typ in enumerate(values.types):
            if isinstance(typ, types.Array):
                ary = make_array(typ)(context, builder, builder.extract_value(out, i))
                ary.meminfo = cgutils.get_null_value(ary.meminfo.type)
                ary.parent = cgutils.get_null_value(ary.parent.type)
                out = builder.insert_value(out, ary._getvalue(), i)
        return impl_ret_borrowed(context, builder, sig.return_type, out)
    return values(values), codegen


@njit(cache=True)
def span_state(*fields):
    """A ``SpanState`` of ``SPAN_FIELDS``' values, in order, holding its arrays borrowed (compiled
    and cached: the proxy's own constructor compiles anew in every process).

    A reference-counted array read out of a struct costs numba an atomic increment and decrement,
    and each compiled callee it is passed to one pair more: about 140 atomic operations a step here,
    a third of a compiled step's time (the loop of ``benchmarks/bench_fleet.py --no-speculation``'s
    one-replica run: 2.97 -> 2.39 us an iteration, Python's share included). Borrowed, they count
    nothing; whoever builds the state keeps the arrays alive as long as it (``state_of``)."""
    return SpanState(*_borrowed(fields))


def state_of(ex) -> SpanState:
    """An executor's (``specplan.simulator.engine.Executor``) arrays and settings as ``run_span``
    takes them; valid until its request state or a log grows into new arrays. The executor holds
    the arrays the state borrows (``_lent``) until its next one."""
    s, st, log, its = ex.s, ex.st, ex.trace.emissions, ex.trace.iterations
    fields = {
        "act": st.act, "counters": st.counters, "plen": st.plen, "olen": st.olen, "computed": st.computed,
        "ctx_target": st.ctx_target, "generated": st.generated, "started": st.started, "reserved": st.reserved,
        "held": ex.kv.held, "disabled": st.disable_spec, "pending": st.pending_drafted, "emits": st.emits,
        "first_token": st.first_token, "finish": st.finish, "k_static": int(ex.k_static),
        "k_charge": 0 if ex._drafter else int(span_charge(ex)),  # (a drafter's spans charge per step)
        "budget_rule": int(ex._budget), "verify_width": int(ex._verify_width), "policy": int(ex._policy),
        "max_num_tokens": int(s.max_num_tokens), "max_batch_size": int(s.max_batch_size),
        "chunked": bool(s.chunked_prefill), "num_blocks": int(ex.kv.num_blocks), "block_size": int(ex.kv.block_size),
        "stamp": bool(ex._stamps), "pricing": ex._span_cost[0], "coefficients": ex._span_cost[1],
        "outside": ex._span_cost[2], "slowdown": float(s.piecewise_graph_slowdown),
        "rows": ex._rows, "q_sched": ex._q_sched, "q": ex._q, "ctx": ex._ctx, "width": ex._width,
        "resident": ex._resident, "terms": ex._terms, "no_drafting": ex._no_drafting, "none": ex._none,
        "accepted_hist": ex.trace.accepted_hist, "em_request": log.request, "em_time": log.time,
        "em_tokens": log.tokens, "iteration_log": its.rows, "record": ex._record, "finished": ex._finished,
        "stats": ex._stats, "max_sim_time": float(ex._max_time),
        "max_active": int(s.max_num_active_requests), "out": ex._span_out, "out_time": ex._span_time,
        "rid": st.rid, "pc_done": st.pc_done, "equal_progress": bool(ex._equal_progress),
        "released": st.released, "quiet_finish": bool(ex._quiet_finish), "recycle_at": int(state.RECYCLE_AT),
        "free": st.free, **arrival_fields(ex._arrivals),
        "prompt_lens": np.asarray(ex.w.prompt_lens, dtype=np.int64), "output_lens": np.asarray(ex.w.output_lens, dtype=np.int64),
        **dict(zip(("pc_mode", "pc_off", "pc_ids", "pc_cached", "pc_hits"), prefix_cache_arrays(ex.prefix_cache))),
    }
    drafter = ex._drafter.values(ex) if ex._drafter else draft_state.inert_values()
    fields["drafter"] = drafter_state(*drafter)
    values = [fields[name] for name in SPAN_FIELDS]  # by name: a field cannot land in another's place
    ex._lent = values + drafter  # the states borrow the arrays: they live as long as them, until the next state_of
    return span_state(*values)


def arrivals_for(ex):
    """What sends an executor's requests in its spans: an ``OpenLoop`` (``open_loop.owns_arrivals``), a
    ``ClosedLoop`` (``closed_loop.owns_clients``), or None where the frontend's processes send them."""
    if owns_arrivals(ex):
        return OpenLoop(ex.frontend)
    return ClosedLoop(ex.frontend) if owns_clients(ex) else None


def arrival_fields(arrivals) -> dict:
    """A ``SpanState``'s fields for who sends the requests, ``owns_arrivals`` (0: the frontend's
    processes; ``open_loop.OPEN``; ``closed_loop.CLOSED``), and the arrays its spans read of them."""
    if isinstance(arrivals, ClosedLoop):
        return {"owns_arrivals": CLOSED, **dict(zip(_ARRIVAL_FIELDS, closed_loop.arrays(arrivals)))}
    return {"owns_arrivals": 0 if arrivals is None else OPEN,
            **dict(zip(_ARRIVAL_FIELDS, (*open_loop_arrays(arrivals), closed_loop.NO_SESSIONS)))}


@njit(cache=True)
def drafter_state(*fields):
    """A ``draft_state.DraftState`` of ``DRAFT_FIELDS``' values, its arrays borrowed as in ``span_state``."""
    return DraftState(*_borrowed(fields))


def span_charge(ex) -> Optional[int]:
    """The placeholders an executor's draft-free step charges (``control.placeholder_charge`` with
    speculation off) when the same every step, else None: on the drafter path a schedule keeps
    resolving K on the active count after the gate latched, and the V1 scheduler charges it."""
    if ex.s.draft_len_schedule is not None and ex.rules.budget == "placeholder" and ex._budget == V1_BUDGET:
        return None
    return placeholder_charge(ex.rules.budget, ex.s.speculate, ex.k_static, 0, False, lambda: ex._lookup(0))


def state_for(ex) -> SpanState:
    """An executor's ``SpanState`` (kept on it), built again once its state or a log grew into new arrays
    (or its drafter's uniforms window was drawn again)."""
    arrays = ex.st.plen, ex.trace.emissions.request, ex.trace.iterations.rows, ex._drafter and ex._drafter.window
    if ex._of is None or any(map(operator.is_not, arrays, ex._of)):
        ex._span, ex._of = state_of(ex), arrays
    return ex._span
