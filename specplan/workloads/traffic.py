"""From a ``WorkloadConfig`` to the list of requests the simulator serves.

:func:`build_requests` loads the trace (or generates synthetic traffic), keeps the asked-for
categories, samples ``num_requests`` requests (whole sessions, in a seeded random order, with or
without replacement) and assigns arrivals. What the simulator reads, besides the request fields:

- ``arrival_s``: the arrival time of every request the arrival process places (open loop); ``None``
  for closed loop and for later turns of a session.
- ``meta["predecessor"]``: for turn n+1 of a session, the id of turn n; the request arrives
  ``meta["think_time_s"]`` seconds after its predecessor completes (:func:`predecessor_indices`
  gives the same links as list indices).
- ``meta["think_time_s"]``: closed loop: every request's think time, the delay between its
  client's previous completion and sending it; open loop: only on later session turns.
- ``meta["source_id"]``: the id in the trace (sampling with replacement renames copies
  ``"{id}#{k}"``; recorded-acceptance oracles look logs up by this id).

Random streams are independent per purpose (sampling, arrival times, think times, synthetic tokens),
all spawned from ``seed``: changing the rate leaves the sampled requests unchanged.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional, Sequence

import numpy as np

from specplan.config import WorkloadConfig
from specplan.errors import ConfigError, TraceError
from specplan.workloads.arrivals import gamma_arrivals, poisson_arrivals, think_times
from specplan.workloads.formats import load_workload
from specplan.workloads.request import Request
from specplan.workloads.synthetic import LengthModel, SyntheticSpec, fit_lengths, is_synthetic, synthetic_requests


def session_units(requests: Sequence[Request]) -> list[list[Request]]:
    """Requests grouped into sessions (turns in order), in order of first appearance; a request
    without a session is a unit of its own. Sampling always takes whole units (or their prefixes)."""
    units: list[list[Request]] = []
    by_session: dict[str, list[Request]] = {}
    for req in requests:
        if req.session is None:
            units.append([req])
        elif req.session in by_session:
            by_session[req.session].append(req)
        else:
            by_session[req.session] = [req]
            units.append(by_session[req.session])
    for unit in by_session.values():
        unit.sort(key=lambda r: r.turn)
        turns = [r.turn for r in unit]
        if len(set(turns)) != len(turns):
            raise TraceError(f"session '{unit[0].session}' holds two requests of the same turn")
    return units


def source_id(req: Request) -> str:
    """The request's id in its trace (``meta["source_id"]``, else its own id)."""
    return req.meta.get("source_id", req.id)


def _draws(sizes: Sequence[int], n: int, replace_: bool, rng: np.random.Generator, trace: str) -> list[tuple[int, int]]:
    """The units a sample of ``n`` requests takes (by index; ``sizes`` are their requests), in order,
    each with its copy number: 0 the first time a unit is drawn, k for its (k+1)-th draw with
    replacement. Without replacement every unit once, in a random order; with it, units until they
    hold ``n`` requests. The sample is the first ``n`` requests of these units."""
    total = sum(sizes)
    if not replace_:
        if n > total:
            raise ConfigError(f"workload.num_requests: {n} exceeds the {total} requests of trace {trace!r}; lower it or set sample_with_replacement: true")
        return [(i, 0) for i in rng.permutation(len(sizes)).tolist()]
    out: list[tuple[int, int]] = []
    copies, held = np.zeros(len(sizes), dtype=np.int64), 0
    while held < n:
        i = int(rng.integers(0, len(sizes)))
        out.append((i, int(copies[i])))
        copies[i] += 1
        held += sizes[i]
    return out


def _first_seen(draws: list[tuple[int, int]], count: int) -> list[int]:
    """Unit indices ``0..count-1`` in the order the draws first take them, the undrawn after."""
    seen, order = bytearray(count), []
    for i, _ in draws:
        if not seen[i]:
            seen[i] = 1
            order.append(i)
    return order + [i for i in range(count) if not seen[i]]


def _copy_name(name: str | None, k: int) -> str | None:
    """A sampled copy's id or session: the original for the first copy, ``"{name}#{k}"`` after."""
    return name if name is None or k == 0 else f"{name}#{k}"


def _link_sessions(ids: list[str], sessions: list[str | None]) -> list[str | None]:
    last: dict[str, str] = {}
    preds: list[str | None] = []
    for rid, session in zip(ids, sessions):
        preds.append(last.get(session) if session is not None else None)
        if session is not None:
            last[session] = rid
    return preds


def predecessor_indices(requests: Sequence[Request]) -> np.ndarray:
    """For each request, the list index of its session predecessor (``meta["predecessor"]``), or -1."""
    index = {r.id: i for i, r in enumerate(requests)}
    return np.array([index[r.meta["predecessor"]] if r.meta.get("predecessor") else -1 for r in requests], dtype=np.int64)


def trace_requests(cfg: WorkloadConfig) -> list[Request]:
    """The requests of ``workload.trace`` (a bundled name or a file, read and tokenised), kept to
    ``workload.categories``, before any sampling: what a sweep's worker loads once per trace."""
    from specplan.workloads.model_folder import workload_options

    requests = load_workload(cfg.trace, format=cfg.format, **workload_options(cfg.tokenizer, cfg.trace))
    if cfg.categories is not None:
        present = sorted({r.category for r in requests if r.category is not None})
        unknown = [c for c in cfg.categories if c not in present]
        if unknown:
            raise ConfigError(f"workload.categories: {', '.join(unknown)} not in trace {cfg.trace!r} (it has {', '.join(present)})")
        requests = [r for r in requests if r.category in cfg.categories]
    return requests


def _synthetic_requests(cfg: WorkloadConfig, stream: np.random.SeedSequence, tokens: bool,
                        made: Optional[Sequence[int]] = None) -> list[Request]:
    spec = SyntheticSpec.parse(cfg.trace)
    if spec.lengths is not None:
        plen, olen = fit_lengths(load_workload(spec.lengths))
    else:
        plen, olen = LengthModel.constant(spec.prompt_len or cfg.prompt_len), LengthModel.constant(spec.output_len or cfg.output_len)
    return synthetic_requests(cfg.num_requests, spec.process, plen, olen, stream, tokens, made)


def build_requests(workload_cfg: WorkloadConfig, seed: int, think_time_dist: str = "constant",
                   trace: Optional[list[Request]] = None, tokens: bool = True) -> list[Request]:
    """The requests of one run, with arrivals assigned (see the module docstring for the contract).

    Think times have mean ``workload.think_time_s``; ``think_time_dist`` is ``constant`` (what the
    engine assumes today) or ``exponential``. ``trace`` may hold ``trace_requests(workload_cfg)``
    already loaded (ignored for synthetic traffic, which is generated from ``seed``). With ``tokens``
    False synthetic traffic draws no token ids (``synthetic_requests``); a trace's are read anyway.
    """
    cfg = workload_cfg
    s_sample, s_arrival, s_think, s_synth = np.random.SeedSequence(seed).spawn(4)
    rng_sample = np.random.default_rng(s_sample)
    if is_synthetic(cfg.trace) and cfg.arrival != "trace":
        # Synthetic requests are units of one, so the draws need only their number: the requests are
        # made in the order the draws take them, and the build below reads memory in order (read in
        # a random order, 100k requests took about 1.45x the time of 8 x 12.5k: cache misses).
        n = cfg.num_requests
        draws = _draws([1] * n, n, cfg.sample_with_replacement, rng_sample, str(cfg.trace))
        units = [[r] for r in _synthetic_requests(cfg, s_synth, tokens, _first_seen(draws, n))]
        return _assigned(units, draws, cfg, s_arrival, s_think, think_time_dist)
    base = _synthetic_requests(cfg, s_synth, tokens) if is_synthetic(cfg.trace) else (
        trace if trace is not None else trace_requests(cfg))
    if cfg.arrival == "trace":
        if cfg.sample_with_replacement:
            raise ConfigError("workload.sample_with_replacement: arrival 'trace' replays the trace's own timestamps; sampling does not apply")
        missing = [r.id for r in base if r.arrival_s is None]
        if missing:
            raise ConfigError(f"workload.arrival: 'trace' needs arrival_s on every request; trace {cfg.trace!r} lacks it (first: {missing[0]})")
        if cfg.num_requests > len(base):
            raise ConfigError(f"workload.num_requests: {cfg.num_requests} exceeds the {len(base)} requests of trace {cfg.trace!r}")
        ordered = sorted(base, key=lambda r: r.arrival_s)[: cfg.num_requests]
        return [replace(r, meta={**r.meta, "source_id": source_id(r)}) for r in ordered]
    units = session_units(base)
    draws = _draws([len(u) for u in units], cfg.num_requests, cfg.sample_with_replacement, rng_sample, str(cfg.trace))
    return _assigned(units, draws, cfg, s_arrival, s_think, think_time_dist)


def _assigned(units: list[list[Request]], draws: list[tuple[int, int]], cfg: WorkloadConfig,
              s_arrival: np.random.SeedSequence, s_think: np.random.SeedSequence, think_time_dist: str) -> list[Request]:
    """The sample's requests (the drawn units' first ``num_requests``), renamed by copy, linked into
    sessions, with think times and arrivals."""
    picked = [(r, k) for i, k in draws for r in units[i]][: cfg.num_requests]
    ids = [_copy_name(r.id, k) for r, k in picked]
    sessions = [_copy_name(r.session, k) for r, k in picked]
    preds = _link_sessions(ids, sessions)
    think = think_times(len(picked), cfg.think_time_s, np.random.default_rng(s_think), think_time_dist)
    times = [None] * len(picked)
    if cfg.arrival != "closed_loop":
        heads = [i for i, p in enumerate(preds) if p is None]
        rng = np.random.default_rng(s_arrival)
        at = poisson_arrivals(len(heads), cfg.rate, rng) if cfg.arrival == "poisson" else gamma_arrivals(len(heads), cfg.rate, cfg.cv, rng)
        for i, t in zip(heads, at.tolist()):
            times[i] = t
    out = []
    for (req, _), rid, session, pred, t, th in zip(picked, ids, sessions, preds, times, think.tolist()):
        meta = {**req.meta, "source_id": source_id(req)}
        if pred is not None:
            meta["predecessor"] = pred
        if pred is not None or cfg.arrival == "closed_loop":
            meta["think_time_s"] = th
        out.append(req.replaced(id=rid, session=session, arrival_s=t, meta=meta))
    return out
