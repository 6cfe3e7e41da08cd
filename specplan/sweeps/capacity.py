"""Capacity search: the fewest replicas that meet a TTFT and a TPOT SLO at each request rate, with
speculation off and with each candidate speculative config.

A fleet of N replicas meets the SLO when every request completes and the fleet's TTFT and TPOT at
the stated percentile are within the targets. Adding a replica can only take load off the others,
so "meets" is expected to be monotone in N; the search bisects on N in ``[1, max_replicas]``
(``lo`` fails, ``hi`` meets; 0 replicas fails by definition) and then checks monotonicity against
every point it evaluated, plus ``N* + 1``: a point below ``N*`` that meets, or one at or above it
that fails, marks the answer ``monotone: False`` rather than silently trusting the bisection.

Every search advances one step per round, and a round's points (one per open search) run together
on a sweep backend (``specplan.sweeps.runners``: a local pool or Ray), recorded in ``DIR/records``
so an interrupted search resumes where it stopped.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import pandas as pd

from specplan.config import SimConfig, SpeculationConfig
from specplan.errors import ConfigError
from specplan.simulator.metrics import PERCENTILES
from specplan.sweeps.records import RecordStore, config_key
from specplan.sweeps.runners import Runner, execute

BASELINE = "no speculation"
HOURS_PER_DAY = 24.0


@dataclass(frozen=True)
class SLO:
    """Targets at one percentile of the fleet's requests (a percentile the summary reports)."""

    ttft_s: float
    tpot_s: float
    percentile: int = 99

    def __post_init__(self) -> None:
        if self.percentile not in PERCENTILES:
            raise ConfigError(f"--percentile: choose one of {', '.join(map(str, PERCENTILES))}")
        if self.ttft_s <= 0 or self.tpot_s <= 0:
            raise ConfigError("--slo-ttft-ms / --slo-tpot-ms: targets must be positive")

    def met_by(self, summary: dict, num_requests: int) -> bool:
        """Whether one run's summary meets the SLO (every request completed, both percentiles within)."""
        p = f"p{self.percentile}"
        ttft, tpot = summary["ttft_s"][p], summary["tpot_s"][p]
        return (summary["completed_requests"] == num_requests and ttft is not None and ttft <= self.ttft_s
                and (tpot is None or tpot <= self.tpot_s))  # None: every output is one token long


@dataclass
class Search:
    """Bisection for one (rate, config): ``met[N]`` holds every evaluated point."""

    rate: float
    label: str
    max_replicas: int
    met: dict[int, bool] = field(default_factory=dict)
    lo: int = 0
    hi: Optional[int] = None

    def next_point(self) -> Optional[int]:
        """The N to evaluate next, or None when the search is over."""
        if self.max_replicas not in self.met:
            return self.max_replicas
        if self.hi is None:
            return None  # not even the largest fleet meets the SLO
        if self.hi - self.lo > 1:
            return (self.lo + self.hi) // 2
        above = self.hi + 1  # the monotonicity check one past the answer
        return above if above <= self.max_replicas and above not in self.met else None

    def record(self, n: int, ok: bool) -> None:
        """Whether a fleet of ``n`` replicas met the SLO; narrows the bracket ``(lo, hi]``."""
        self.met[n] = ok
        if n == self.max_replicas and ok and self.hi is None:
            self.hi = n  # the bracket opens once the largest fleet is known to meet the SLO
        elif self.hi is not None and self.lo < n < self.hi:
            if ok:
                self.hi = n
            else:
                self.lo = n

    @property
    def answer(self) -> Optional[int]:
        """The fewest replicas meeting the SLO; None if ``max_replicas`` does not."""
        return self.hi if self.met.get(self.max_replicas) else None

    @property
    def monotone(self) -> bool:
        """Every evaluated point below the answer fails and every one at or above it meets."""
        n_star = self.answer if self.answer is not None else self.max_replicas + 1
        return all(ok == (n >= n_star) for n, ok in self.met.items())


def fleet_config(base: SimConfig, speculation: SpeculationConfig, rate: float, replicas: int) -> SimConfig:
    """The scenario at ``rate`` requests/s on ``replicas`` replicas with ``speculation``."""
    return base.model_copy(update={
        "speculation": speculation,
        "workload": base.workload.model_copy(update={"rate": rate}),
        "cluster": base.cluster.model_copy(update={"replicas": replicas}),
    })


def check_scenario(base: SimConfig) -> None:
    """The search varies ``workload.rate`` and ``cluster.replicas``: the scenario must allow both."""
    if base.workload.arrival not in ("poisson", "gamma"):
        raise ConfigError(f"workload.arrival: capacity search sets the request rate, so it needs poisson or "
                          f"gamma arrivals (the scenario has {base.workload.arrival})")
    if base.cluster.tp is not None:
        raise ConfigError("cluster.tp: capacity search varies the replica count; give one degree as cost.tp")


def search_capacity(base: SimConfig, rates: Sequence[float], slo: SLO, candidates: dict[str, SpeculationConfig],
                    runner: Runner, out_dir: str | Path, max_replicas: int = 16, progress: bool = False) -> pd.DataFrame:
    """For every rate and config (speculation off first, then ``candidates`` by label), the fewest
    replicas that meet ``slo``; one row each, with the GPUs and GPU-hours saved against no speculation.
    ``progress`` shows a bar per round (one point per open search) on stderr."""
    check_scenario(base)
    if max_replicas < 1:
        raise ConfigError("--max-replicas: must be >= 1")
    configs = {BASELINE: base.speculation.model_copy(update={"decoding_type": "none"}), **candidates}
    searches = [Search(float(r), label, max_replicas) for r in rates for label in configs]
    store = RecordStore(Path(out_dir) / "records")
    n_req = base.workload.num_requests
    for round_no in itertools.count(1):
        todo = [(s, n) for s in searches if (n := s.next_point()) is not None]
        if not todo:
            break
        cfgs = [fleet_config(base, configs[s.label], s.rate, n) for s, n in todo]
        records = execute(cfgs, runner, store, progress,
                          f"capacity round {round_no}: {len(todo)} of {len(searches)} searches open")
        for (s, n), cfg in zip(todo, cfgs):
            s.record(n, slo.met_by(records[config_key(cfg)]["summary"], n_req))
    return capacity_table(searches, base.cost.tp)


def read_candidates(path: str | Path, base_data: dict) -> dict[str, SpeculationConfig]:
    """Candidate speculative configs from a sweep YAML whose axes are ``speculation.*`` fields (K,
    schedule, gate...), applied to the scenario; labelled by their axis values."""
    from specplan.config import read_yaml
    from specplan.sweeps.spec import expand, parse_sweep

    data = read_yaml(path)
    extra = [k for k in data if k not in ("grid", "zip")]
    if extra:
        raise ConfigError(f"{path}: {extra[0]}: a candidates file has only grid and zip (the scenario is the base)")
    spec = parse_sweep({**data, "base": base_data, "baseline": False}, str(path))
    wrong = [a for a in spec.axes if not a.startswith("speculation.")]
    if wrong:
        raise ConfigError(f"{path}: {wrong[0]}: candidates vary speculation.* fields only")
    out = {}
    for point in expand(spec):
        if point.config.speculation.decoding_type == "none":
            raise ConfigError(f"{path}: a candidate with decoding_type none is the baseline, already searched")
        out[", ".join(f"{k.removeprefix('speculation.')}={v}" for k, v in point.values.items())] = point.config.speculation
    return out


def capacity_table(searches: list[Search], tp: int) -> pd.DataFrame:
    """One row per (rate, config): replicas and GPUs needed, and what speculation saves."""
    rows = []
    for s in searches:
        rows.append({"rate": s.rate, "config": s.label, "replicas": s.answer,
                     "gpus": None if s.answer is None else s.answer * tp, "monotone": s.monotone,
                     "evaluated": " ".join(f"{n}{'+' if ok else '-'}" for n, ok in sorted(s.met.items()))})
    table = pd.DataFrame(rows)
    base = table[table.config == BASELINE].set_index("rate")["replicas"]
    saved = table.rate.map(base) - table.replicas
    table["replicas_saved"] = saved.where(table.config != BASELINE)
    table["gpu_hours_saved_per_day"] = table["replicas_saved"] * tp * HOURS_PER_DAY
    return table.astype({"replicas": "Int64", "gpus": "Int64", "replicas_saved": "Int64"})
