"""Recommend a draft-length schedule and gate by simulation.

The search, for a scenario (config) and SLOs:

1. **Bands.** Batch sizes 1..max_batch_size are cut into bands at upper edges (default: powers of
   two, then max_batch_size). A schedule is written in the path's own keys
   (``specplan.simulator.paths``): band starts where keys are lower bounds (TensorRT-LLM's drafter
   path, ``Drafter.get_draft_len_for_batch_size``), band ends where they are upper bounds (the
   one-model path's ``update_draft_len``, and vLLM's ranges).
2. **Per-band probes.** The engines require the smallest schedule key to map to ``max_draft_len``,
   and the NGram verifier pads every row to ``1 + max_draft_len``, so the value of K in one band
   depends on the cap. For every cap ``C`` in 1..k_max and every band, closed-loop simulations run
   at the band's smallest and largest batch size (that many clients, no think time) for each
   K in 0..C, written exactly as the exported schedule would run them (``max_draft_len = C``,
   schedule ``{1: C, B: K}`` with upper-bound keys, ``{1: C, 2: K}`` with lower-bound keys); the band takes the K with the most goodput under the SLOs summed over
   its probes (throughput breaks ties, then the smaller K). The first band is fixed at ``C``.
3. **Assembled schedules.** Each cap gives one schedule (adjacent equal bands merged, bands up to
   max_batch_size, so TensorRT-LLM's implicit 0 and vLLM's carried K agree).
4. **Confirmation.** Every assembled schedule, every fixed K in 1..k_max and no speculation run
   open-loop at the requested arrival rates (or the config's own traffic); the recommendation is
   the candidate with the most goodput summed over the rates. Gains are quoted against no
   speculation and against the best fixed K.
5. **Gate** (TensorRT-LLM). The recommended setting runs under i.i.d. acceptance alpha = 0, 0.1,
   .., 0.9 at the same rates; the break-even alpha is the lowest at which it still has at least
   the goodput of no speculation, and ``acceptance_rate_threshold`` is the mean SpeculationGate
   sample measured there, counted as the path counts it (``gate_sample_mean``: accepted over the
   pre-padding draft length on the drafter path, over K per generation row on the one-model path). When speculation never
   loses on that grid no gate is recommended. The gated setting then runs on the workload itself: a
   gate that trips there and costs goodput is dropped (the note says where it tripped and what it
   cost); one that trips without costing goodput is kept and the trip reported.

All runs go through a runner (local pool or Ray) into a record store, so an interrupted
``recommend`` resumes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

from pydantic import ValidationError

from specplan.config import AcceptanceConfig, SimConfig, SpeculationConfig, build_config, format_validation_error
from specplan.errors import ConfigError
from specplan.simulator.paths import path_for
from specplan.simulator.run import resolve
from specplan.sweeps.records import RecordStore, config_key
from specplan.sweeps.runners import Runner, execute

CONTROL_FIELDS = ("draft_len_schedule", "num_speculative_tokens_per_batch_size", "max_concurrency",
                  "acceptance_rate_window_size", "acceptance_rate_threshold", "acceptance_window",
                  "acceptance_length_threshold")
GATE_ALPHAS = tuple(round(0.1 * i, 1) for i in range(10))


@dataclass(frozen=True)
class Band:
    """Batch sizes ``lo..hi`` inclusive; probed at both ends."""

    lo: int
    hi: int

    @property
    def probes(self) -> tuple[int, ...]:
        return (self.lo,) if self.lo == self.hi else (self.lo, self.hi)

    def __str__(self) -> str:
        return str(self.lo) if self.lo == self.hi else f"{self.lo}-{self.hi}"


def default_band_edges(max_batch_size: int) -> list[int]:
    """Powers of two below ``max_batch_size``, then ``max_batch_size``."""
    edges, b = [], 1
    while b < max_batch_size:
        edges.append(b)
        b *= 2
    return edges + [max_batch_size]


def bands_from_edges(edges: Sequence[int], max_batch_size: int) -> list[Band]:
    """Bands ending at each edge; the last edge must be ``max_batch_size``."""
    edges = sorted(set(int(e) for e in edges))
    if not edges or edges[0] < 1:
        raise ConfigError("--bands: batch-size edges must be integers >= 1")
    if edges[-1] != max_batch_size:
        raise ConfigError(f"--bands: the last edge must be engine.max_batch_size ({max_batch_size}), got {edges[-1]}")
    out, lo = [], 1
    for e in edges:
        out.append(Band(lo, e))
        lo = e + 1
    return out


def schedule_keys(cfg: SimConfig) -> str:
    """How the scenario's engine path reads ``draft_len_schedule`` keys: ``lower_bound`` or ``upper_bound``."""
    sp = cfg.speculation
    if cfg.engine.engine == "vllm":
        return "upper_bound"  # converted to inclusive ranges ending at each key
    return sp.schedule_lookup or path_for("trtllm", sp.decoding_type).schedule_lookup


def merge_schedule(bands: Sequence[Band], ks: Sequence[int], keys: str = "upper_bound") -> dict[int, int]:
    """The schedule with adjacent bands of equal K merged: ``{upper edge: K}``, or ``{lower edge: K}``
    when the path reads keys as lower bounds."""
    sched: dict[int, int] = {}
    for i, (band, k) in enumerate(zip(bands, ks)):
        if keys == "lower_bound":
            if i == 0 or ks[i - 1] != k:
                sched[band.lo] = k
        elif i + 1 == len(bands) or ks[i + 1] != k:
            sched[band.hi] = k
    return sched


@dataclass(frozen=True)
class Candidate:
    """A speculation setting under comparison."""

    name: str
    speculation: SpeculationConfig

    @property
    def schedule(self) -> Optional[dict[int, int]]:
        return self.speculation.draft_len_schedule


@dataclass
class Recommendation:
    """What ``recommend`` found; see the module docstring for how."""

    bands: list[Band]
    band_k: dict[int, list[int]]  # cap -> K per band
    band_goodput: dict[int, list[dict[int, float]]]  # cap -> per band {K: goodput summed over probes}
    scenarios: list[str]
    candidates: list[Candidate]
    results: dict[str, list[dict]]  # candidate name -> summary per scenario
    best: Candidate
    best_fixed: Candidate
    none: Candidate
    gate: Optional[tuple[int, float]] = None  # (window, threshold)
    gate_note: str = ""
    gated_results: list[dict] = field(default_factory=list)
    keys: str = "upper_bound"  # how the schedules' keys read (schedule_keys)

    def goodput(self, name: str) -> float:
        return sum(s["goodput_tok_s"] for s in self.results[name])

    def gain(self, name: str) -> Optional[float]:
        """Goodput of the recommendation over that of ``name``, minus one."""
        base = self.goodput(name)
        return self.goodput(self.best.name) / base - 1.0 if base > 0 else None

    @property
    def meets_slo(self) -> bool:
        """Whether any candidate has goodput at all (some request within the SLOs); if none does, there is
        nothing to recommend, whatever ranks first on throughput."""
        return self.goodput(self.best.name) > 0

    def closest(self) -> tuple[Candidate, dict]:
        """The candidate nearest the TPOT SLO (smallest worst p99 TPOT over the scenarios) and that summary."""
        def worst(name: str) -> tuple[float, dict]:
            rows = [r for r in self.results[name] if r["tpot_s"]["p99"] is not None]
            row = max(rows, key=lambda r: r["tpot_s"]["p99"]) if rows else self.results[name][0]
            return (row["tpot_s"]["p99"] if rows else float("inf")), row

        best = min(self.candidates, key=lambda c: worst(c.name)[0])
        return best, worst(best.name)[1]

    @property
    def speculates(self) -> bool:
        return self.meets_slo and self.best.name != self.none.name

    @property
    def recommended(self) -> SpeculationConfig:
        """The recommended speculation setting, gate included."""
        if self.gate is None:
            return self.best.speculation
        return self.best.speculation.model_copy(update={"acceptance_rate_window_size": self.gate[0],
                                                        "acceptance_rate_threshold": self.gate[1]})


def _with(cfg: SimConfig, **sections) -> SimConfig:
    data = cfg.model_dump(mode="json")
    for name, value in sections.items():
        data[name] = value.model_dump(mode="json") if hasattr(value, "model_dump") else value
    return build_config(data, "recommend")


def speculation(base: SpeculationConfig, cap: int, schedule: Optional[dict[int, int]] = None) -> SpeculationConfig:
    """``base``'s drafter with ``max_draft_len = cap``, this schedule, and no other control or gate."""
    data = base.model_dump()
    data.update({f: None for f in CONTROL_FIELDS})
    data.update(max_draft_len=cap, draft_len_schedule=schedule)
    try:
        return SpeculationConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, "recommend: speculation")) from None


def probe_config(cfg: SimConfig, base: SpeculationConfig, batch: int, cap: int, k: int, per_client: int) -> SimConfig:
    """Closed loop at ``batch`` clients with K = ``k`` under cap ``cap`` (see the module docstring)."""
    # K = k at every request count from 2 up to the batch, however the path reads the keys.
    keys = schedule_keys(cfg)
    schedule = {1: cap, (2 if keys == "lower_bound" else batch): k} if batch > 1 and k != cap else None
    workload = cfg.workload.model_copy(update={"arrival": "closed_loop", "concurrency": batch, "think_time_s": 0.0,
                                               "num_requests": per_client * batch})
    return _with(cfg, speculation=speculation(base, cap, schedule), workload=workload)


def scenario_workloads(cfg: SimConfig, rates: Optional[Sequence[float]]) -> list[tuple[str, object]]:
    """``(label, workload)`` per requested rate (Poisson when the config is closed-loop or trace-timed)."""
    w = cfg.workload
    if not rates:
        label = f"{w.concurrency} clients" if w.arrival == "closed_loop" else f"{w.rate:g} req/s"
        return [(label, w)]
    arrival = w.arrival if w.arrival in ("poisson", "gamma") else "poisson"
    return [(f"{r:g} req/s", w.model_copy(update={"arrival": arrival, "rate": float(r)})) for r in rates]


def _best_k(goodput: dict[int, float], throughput: dict[int, float]) -> int:
    return max(goodput, key=lambda k: (goodput[k], throughput[k], -k))


def recommend(cfg: SimConfig, runner: Runner, store: RecordStore, *, slo_tpot_s: float,
              slo_ttft_s: Optional[float] = None, rates: Optional[Sequence[float]] = None,
              k_max: Optional[int] = None, band_edges: Optional[Sequence[int]] = None,
              probe_requests_per_client: int = 8, gate_window: int = 128, progress: bool = False) -> Recommendation:
    """Search per batch-size band for the K that maximises goodput under the SLOs (module docstring)."""
    # resolved first: engine-preset defaults must be explicit before a config is rewritten
    cfg = _with(resolve(cfg), slo_tpot_s=slo_tpot_s, slo_ttft_s=slo_ttft_s)
    base = cfg.speculation
    if base.decoding_type == "none":
        raise ConfigError("speculation.decoding_type: none; name the drafter to recommend settings for")
    k_max = k_max if k_max is not None else base.max_draft_len
    if k_max < 1:
        raise ConfigError("--max-draft-len: must be >= 1")
    if probe_requests_per_client < 1:
        raise ConfigError("--probe-requests: must be >= 1")
    if gate_window < 1:
        raise ConfigError("--gate-window: must be >= 1 (TensorRT-LLM reads acceptance_rate_window_size 0 as "
                          "no gate)")
    mbs = cfg.engine.max_batch_size
    bands = bands_from_edges(band_edges or default_band_edges(mbs), mbs)
    caps = range(1, k_max + 1)

    # 2. per-band probes
    def ks(cap: int, i: int) -> range:
        return range(cap, cap + 1) if i == 0 else range(0, cap + 1)

    probes = {(cap, i, b, k): probe_config(cfg, base, b, cap, k, probe_requests_per_client)
              for cap in caps for i, band in enumerate(bands) for b in band.probes for k in ks(cap, i)}
    recs = execute(probes.values(), runner, store, progress, "recommend: band probes")
    band_k: dict[int, list[int]] = {}
    band_goodput: dict[int, list[dict[int, float]]] = {}
    for cap in caps:
        band_k[cap], band_goodput[cap] = [], []
        for i, band in enumerate(bands):
            summaries = {k: [recs[config_key(probes[cap, i, b, k])]["summary"] for b in band.probes] for k in ks(cap, i)}
            good = {k: sum(s["goodput_tok_s"] for s in ss) for k, ss in summaries.items()}
            thru = {k: sum(s["throughput_tok_s"] for s in ss) for k, ss in summaries.items()}
            band_goodput[cap].append(good)
            band_k[cap].append(_best_k(good, thru))

    # 3-4. assembled schedules against fixed K and no speculation, at the requested traffic
    none = Candidate("no speculation", SpeculationConfig(decoding_type="none"))
    fixed = [Candidate(f"fixed K={k}", speculation(base, k)) for k in caps]
    scheduled = []
    for cap in caps:
        sched = merge_schedule(bands, band_k[cap], schedule_keys(cfg))
        if len(sched) > 1:
            scheduled.append(Candidate(f"schedule cap {cap}", speculation(base, cap, sched)))
    candidates = [none, *fixed, *scheduled]
    scenarios = scenario_workloads(cfg, rates)
    runs = {(c.name, j): _with(cfg, speculation=c.speculation, workload=w)
            for c in candidates for j, (_, w) in enumerate(scenarios)}
    recs = execute(runs.values(), runner, store, progress, "recommend: confirm at rates")
    results = {c.name: [recs[config_key(runs[c.name, j])]["summary"] for j in range(len(scenarios))] for c in candidates}

    def score(name: str) -> tuple[float, float]:
        return (sum(s["goodput_tok_s"] for s in results[name]), sum(s["throughput_tok_s"] for s in results[name]))

    best = max(candidates, key=lambda c: score(c.name))
    best_fixed = max(fixed, key=lambda c: score(c.name))
    rec = Recommendation(bands, band_k, band_goodput, [s for s, _ in scenarios], candidates, results,
                         best, best_fixed, none, keys=schedule_keys(cfg))
    if not rec.meets_slo:
        rec.gate_note = "no configuration meets the SLO, so no gate"
    elif not rec.speculates:
        rec.gate_note = "speculation does not pay here, so no gate"
    elif cfg.engine.engine != "trtllm":
        rec.gate_note = f"{cfg.engine.engine} has no SpeculationGate"
    else:
        _choose_gate(rec, cfg, scenarios, runner, store, gate_window, progress)
    return rec


def _choose_gate(rec: Recommendation, cfg: SimConfig, scenarios, runner: Runner, store: RecordStore,
                 window: int, progress: bool) -> None:
    """Step 5 of the module docstring: the break-even acceptance rate as the gate threshold."""
    runs = {(a, j): _with(cfg, speculation=rec.best.speculation, workload=w,
                          acceptance=AcceptanceConfig(mode="alpha", alpha=a))
            for a in GATE_ALPHAS for j, (_, w) in enumerate(scenarios)}
    recs = execute(runs.values(), runner, store, progress, "recommend: gate break-even")
    baseline = rec.goodput(rec.none.name)
    for a in GATE_ALPHAS:
        summaries = [recs[config_key(runs[a, j])]["summary"] for j in range(len(scenarios))]
        if sum(s["goodput_tok_s"] for s in summaries) >= baseline:
            if a == GATE_ALPHAS[0]:
                rec.gate_note = "speculation keeps at least the baseline goodput even at zero acceptance: no gate needed"
                return
            measured = [s["gate_sample_mean"] for s in summaries if s.get("gate_sample_mean") is not None]
            threshold = round(sum(measured) / len(measured), 3)
            rec.gate = (window, threshold)
            rec.gate_note = (f"break-even at i.i.d. acceptance alpha = {a:g} (measured gate sample mean "
                             f"{threshold:g}); below it speculation loses goodput")
            break
    else:
        rec.gate_note = "speculation loses goodput at every i.i.d. acceptance up to 0.9: no break-even found, no gate"
        return
    gated = _with(cfg, speculation=rec.recommended)
    runs = [_with(gated, workload=w) for _, w in scenarios]
    recs = execute(runs, runner, store, progress, "recommend: gated check")
    rec.gated_results = [recs[config_key(c)]["summary"] for c in runs]
    tripped = [(label, r["gate_tripped_iteration"], r["iterations"])
               for label, r in zip(rec.scenarios, rec.gated_results) if r["gate_tripped_iteration"] is not None]
    if not tripped:
        return
    gated = sum(r["goodput_tok_s"] for r in rec.gated_results)
    ungated = rec.goodput(rec.best.name)
    where = "; ".join(f"at {label}, iteration {it} of {n}" for label, it, n in tripped)
    trip = (f"the gate (window {rec.gate[0]}, threshold {rec.gate[1]:g}) trips on this workload ({where}): "
            f"goodput {gated:.0f} tok/s gated against {ungated:.0f} ungated")
    if gated < ungated:  # the workload's own acceptance sits below the i.i.d. break-even yet speculation pays
        rec.gate, rec.gated_results = None, []
        rec.gate_note = f"{trip}, so no gate is exported"
    else:
        rec.gate_note += f"; {trip}"
