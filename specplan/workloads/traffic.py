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

from specplan import memory
from specplan.config import WorkloadConfig
from specplan.errors import ConfigError, TraceError
from specplan.workloads.arrivals import gamma_arrivals, poisson_arrivals, think_times
from specplan.workloads.formats import load_workload
from specplan.workloads.request import Request
from specplan.workloads.synthetic import (LengthModel, SyntheticSpec, fit_lengths, is_synthetic, synthetic_lengths,
                                          synthetic_requests)


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

    requests = load_workload(cfg.trace, format=cfg.format, **workload_options(cfg.tokenizer, cfg.trace),
                             **(cfg.format_options or {}))
    if cfg.categories is not None:
        present = sorted({r.category for r in requests if r.category is not None})
        unknown = [c for c in cfg.categories if c not in present]
        if unknown:
            raise ConfigError(f"workload.categories: {', '.join(unknown)} not in trace {cfg.trace!r} (it has {', '.join(present)})")
        requests = [r for r in requests if r.category in cfg.categories]
    return requests


def _length_models(cfg: WorkloadConfig) -> tuple[SyntheticSpec, LengthModel, LengthModel]:
    """A synthetic trace's spec and its prompt and output length models."""
    spec = SyntheticSpec.parse(cfg.trace)
    if spec.lengths is not None:
        return (spec, *fit_lengths(load_workload(spec.lengths)))
    return spec, LengthModel.constant(spec.prompt_len or cfg.prompt_len), LengthModel.constant(spec.output_len or cfg.output_len)


def traffic(workload_cfg: WorkloadConfig, seed: int, think_time_dist: str = "constant",
            trace: Optional[list[Request]] = None, tokens: bool = True) -> Sequence[Request]:
    """:func:`build_requests`' requests as a sequence: a list, or for synthetic traffic (arrivals not
    from the trace) a :class:`SyntheticTraffic`, which makes them only when they are first read."""
    cfg = workload_cfg
    if is_synthetic(cfg.trace) and cfg.arrival != "trace":
        return SyntheticTraffic(cfg, seed, think_time_dist, tokens)
    s_sample, s_arrival, s_think, s_synth = np.random.SeedSequence(seed).spawn(4)
    if is_synthetic(cfg.trace):
        spec, plen, olen = _length_models(cfg)
        base = synthetic_requests(cfg.num_requests, spec.process, plen, olen, s_synth, tokens)
    else:
        base = trace if trace is not None else trace_requests(cfg)
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
    draws = _draws([len(u) for u in units], cfg.num_requests, cfg.sample_with_replacement,
                   np.random.default_rng(s_sample), str(cfg.trace))
    return _assigned(units, draws, cfg, s_arrival, s_think, think_time_dist)


def build_requests(workload_cfg: WorkloadConfig, seed: int, think_time_dist: str = "constant",
                   trace: Optional[list[Request]] = None, tokens: bool = True) -> list[Request]:
    """The requests of one run, with arrivals assigned (see the module docstring for the contract).

    Think times have mean ``workload.think_time_s``; ``think_time_dist`` is ``constant`` (what the
    engine assumes today) or ``exponential``. ``trace`` may hold ``trace_requests(workload_cfg)``
    already loaded (ignored for synthetic traffic, which is generated from ``seed``). With ``tokens``
    False synthetic traffic draws no token ids (``synthetic_requests``); a trace's are read anyway.
    """
    return list(traffic(workload_cfg, seed, think_time_dist, trace, tokens))


class SyntheticTraffic(Sequence[Request]):
    """Synthetic traffic (arrivals not from the trace): :func:`build_requests`' requests, made when
    first read, and before that :meth:`columns`, what the simulator reads of them. A run that reads
    no tokens and no request table never makes the objects (for 100k requests their build was
    0.8 CPU-s here, more than a draft-free fleet's replicas spend on half their steps).

    A synthetic request is a unit of one, so the sample's draws need only their number: the
    requests are made in the order the draws take them, and the build reads memory in order (read
    in a random order, 100k requests took about 1.45x the time of 8 x 12.5k: cache misses)."""

    def __init__(self, cfg: WorkloadConfig, seed: int, think_time_dist: str = "constant", tokens: bool = True) -> None:
        self._s_sample, self._s_arrival, self._s_think, self._s_synth = np.random.SeedSequence(seed).spawn(4)
        self._cfg, self._think_time_dist, self._tokens = cfg, think_time_dist, tokens
        self._spec, self._plen, self._olen = _length_models(cfg)
        self._made: Optional[list[Request]] = None

    @property
    def _units(self) -> np.ndarray:
        # :func:`_draws` of n units of one request, as an array (a list of n pairs is 100 bytes a
        # request): the same draws, one at a time or all at once, take the same words of the
        # generator. Drawn again when read (the lengths, the names, the objects), not held for the run.
        n = self._cfg.num_requests
        rng = np.random.default_rng(self._s_sample)
        return rng.integers(0, n, size=n) if self._cfg.sample_with_replacement else rng.permutation(n)

    @property
    def _draws(self) -> list[tuple[int, int]]:
        units = self._units
        return list(zip(units.tolist(), _copy_numbers(units).tolist()))

    def __len__(self) -> int:
        return self._cfg.num_requests

    def __getitem__(self, i):
        return self._requests()[i]

    def __iter__(self):
        return iter(self._requests())

    def columns(self) -> dict[str, Optional[np.ndarray]]:
        """:func:`workload_columns` of these requests, from the same draws, without making them."""
        cfg, n = self._cfg, self._cfg.num_requests
        drawn = self._units
        plens, olens = synthetic_lengths(n, self._plen, self._olen, np.random.default_rng(self._s_synth))
        think = think_times(n, cfg.think_time_s, np.random.default_rng(self._s_think), self._think_time_dist)
        closed = cfg.arrival == "closed_loop"  # think times go on every request then, on none otherwise
        return {"prompt_lens": plens[drawn], "output_lens": olens[drawn],
                "arrivals": None if closed else _arrival_times(n, cfg, self._s_arrival),  # every request heads a unit
                "predecessor": None, "think_time": think if closed and think.any() else None}

    def labels(self) -> dict[str, np.ndarray]:
        """:func:`request_labels` of these requests, from the draws, without making them."""
        n = self._cfg.num_requests
        ids = [_copy_name(f"synthetic-{i}", k) for i, k in self._draws]  # named as synthetic_requests does
        return {"request_id": np.array(ids, dtype=object), "category": np.full(n, "synthetic", dtype=object),
                "turn": np.zeros(n, dtype=np.int64)}

    def _requests(self) -> list[Request]:
        if self._made is None:
            cfg, n = self._cfg, self._cfg.num_requests
            with memory.collector_paused():
                draws = self._draws
                made = synthetic_requests(n, self._spec.process, self._plen, self._olen, self._s_synth, self._tokens,
                                          _first_seen(draws, n))
                self._made = _assigned([[r] for r in made], draws, cfg, self._s_arrival, self._s_think,
                                       self._think_time_dist)
        return self._made


def workload_columns(requests: Sequence[Request], closed_loop: bool) -> dict[str, Optional[np.ndarray]]:
    """What the simulator reads of a run's requests, by request: ``prompt_lens``, ``output_lens``,
    ``arrivals`` (NaN where the arrival process places none; None for a closed loop), ``predecessor``
    (:func:`predecessor_indices`; None when no request has one) and ``think_time`` (None when all are 0)."""
    if isinstance(requests, SyntheticTraffic):
        return requests.columns()
    n = len(requests)
    think = np.array([r.meta.get("think_time_s", 0.0) for r in requests])
    preds = predecessor_indices(requests)
    return {"prompt_lens": np.fromiter((r.prompt_len for r in requests), dtype=np.int64, count=n),
            "output_lens": np.fromiter((r.output_len for r in requests), dtype=np.int64, count=n),
            "arrivals": None if closed_loop else np.array([np.nan if r.arrival_s is None else r.arrival_s for r in requests]),
            "predecessor": preds if (preds >= 0).any() else None, "think_time": think if think.any() else None}


def request_labels(requests: Sequence[Request]) -> dict[str, np.ndarray]:
    """Each request's ``request_id``, ``category`` and ``turn``, as columns (a request table's first)."""
    if isinstance(requests, SyntheticTraffic):
        return requests.labels()
    return {"request_id": np.array([r.id for r in requests], dtype=object),
            "category": np.array([r.category for r in requests], dtype=object),
            "turn": np.fromiter((r.turn for r in requests), dtype=np.int64, count=len(requests))}


def _assigned(units: list[list[Request]], draws: list[tuple[int, int]], cfg: WorkloadConfig,
              s_arrival: np.random.SeedSequence, s_think: np.random.SeedSequence, think_time_dist: str) -> list[Request]:
    """The sample's requests (the drawn units' first ``num_requests``), renamed by copy, linked into
    sessions, with think times and arrivals."""
    picked = [(r, k) for i, k in draws for r in units[i]][: cfg.num_requests]
    ids = [_copy_name(r.id, k) for r, k in picked]
    sessions = [_copy_name(r.session, k) for r, k in picked]
    preds = _link_sessions(ids, sessions)
    think, times = _timing(preds, cfg, s_arrival, s_think, think_time_dist)
    out = []
    for (req, _), rid, session, pred, t, th in zip(picked, ids, sessions, preds, times, think.tolist()):
        meta = {**req.meta, "source_id": source_id(req)}
        if pred is not None:
            meta["predecessor"] = pred
        if pred is not None or cfg.arrival == "closed_loop":
            meta["think_time_s"] = th
        out.append(req.replaced(id=rid, session=session, arrival_s=t, meta=meta))
    return out


def _timing(preds: Sequence[Optional[str]], cfg: WorkloadConfig, s_arrival: np.random.SeedSequence,
            s_think: np.random.SeedSequence, think_time_dist: str) -> tuple[np.ndarray, list[Optional[float]]]:
    """The sample's think times, and its arrival times: the arrival process's, one per session head
    (a request without a predecessor), open loop only; None for the others."""
    think = think_times(len(preds), cfg.think_time_s, np.random.default_rng(s_think), think_time_dist)
    times: list[Optional[float]] = [None] * len(preds)
    if cfg.arrival != "closed_loop":
        heads = [i for i, p in enumerate(preds) if p is None]
        for i, t in zip(heads, _arrival_times(len(heads), cfg, s_arrival).tolist()):
            times[i] = t
    return think, times


def _arrival_times(count: int, cfg: WorkloadConfig, s_arrival: np.random.SeedSequence) -> np.ndarray:
    """The open-loop arrival process's first ``count`` times (one per session head)."""
    rng = np.random.default_rng(s_arrival)
    return poisson_arrivals(count, cfg.rate, rng) if cfg.arrival == "poisson" else gamma_arrivals(count, cfg.rate, cfg.cv, rng)


def _copy_numbers(units: np.ndarray) -> np.ndarray:
    """Each draw's copy number (:func:`_draws`): how many earlier draws took the same unit."""
    order = np.argsort(units, kind="stable")
    ranked = units[order]
    starts = np.flatnonzero(np.r_[True, ranked[1:] != ranked[:-1]])
    copies = np.empty(len(units), dtype=np.int64)
    copies[order] = np.arange(len(units)) - np.repeat(starts, np.diff(np.r_[starts, len(units)]))
    return copies
