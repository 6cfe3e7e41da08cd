"""Sweep specs: a base config and axes, expanded into validated points.

A sweep YAML has these top-level keys (nothing else)::

    base: scenario.yaml          # a config path (relative to the sweep file) or an inline mapping;
                                 # omitted: the bundled default scenario
    grid:                        # dotted field -> list of values; Cartesian product, in this order
      speculation.max_draft_len: [0, 2, 4]
      workload.rate: [2.0, 4.0, 8.0]
    zip:                         # dotted field -> lists of one common length, varied together
      engine.max_batch_size: [8, 16, 32]
      workload.concurrency: [8, 16, 32]
    seeds: [0, 1]                # each point runs once per seed; omitted: the base config's seed
    baseline: true               # also run each point with speculation off (speedup); default true

Any config field can be an axis, a whole section too (``cost: [{...}, {...}]`` replaces the base's
section with each mapping). Points are the grid product, then each zip position, then each seed;
every point is validated with ``build_config`` (and the engine presets) before anything runs, and an
invalid one fails with one line naming the axis values and the field.
"""

from __future__ import annotations

import copy
import inspect
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel

from specplan.config import SimConfig, build_config, read_yaml
from specplan.config_overrides import set_dotted
from specplan.errors import ConfigError

SPEC_KEYS = ("base", "grid", "zip", "seeds", "baseline")
# Points a sweep may expand to unless --max-points raises it: validating a point takes about a
# millisecond and each run seconds, so a grid far past this is a typo, not a plan.
DEFAULT_MAX_POINTS = 10_000
DEFAULT_BASE = Path(__file__).resolve().parent.parent / "data" / "default.yaml"


@dataclass(frozen=True)
class SweepSpec:
    """A parsed sweep: the base mapping, the axes in declaration order, the seeds."""

    base: dict
    grid: dict[str, list] = field(default_factory=dict)
    zip: dict[str, list] = field(default_factory=dict)
    seeds: Optional[list[int]] = None
    baseline: bool = True
    source: str = "sweep"

    @property
    def axes(self) -> list[str]:
        """The swept fields: grid axes, then zip axes (``seed`` is reported separately)."""
        return [*self.grid, *self.zip]

    def to_dict(self) -> dict:
        """The spec with the base inlined, so a copy reproduces the sweep anywhere."""
        out: dict[str, Any] = {"base": self.base}
        if self.grid:
            out["grid"] = self.grid
        if self.zip:
            out["zip"] = self.zip
        if self.seeds is not None:
            out["seeds"] = self.seeds
        out["baseline"] = self.baseline
        return out


@dataclass(frozen=True)
class Point:
    """One run of a sweep: the axis values that made it and its validated config."""

    values: dict[str, Any]
    config: SimConfig


@dataclass(frozen=True)
class InvalidPoint:
    """A point whose config failed validation: its axis values (and seed) and the one-line error."""

    values: dict[str, Any]
    error: str


def check_field(dotted: str, where: str) -> None:
    """Fail with one line unless ``dotted`` names a field (or section) of ``SimConfig``."""
    model: Optional[type[BaseModel]] = SimConfig
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        if model is None:
            raise ConfigError(f"{where}: '{'.'.join(parts[:i])}' is not a section, so it has no field '{part}'")
        info = model.model_fields.get(part)
        if info is None:
            raise ConfigError(f"{where}: unknown field (check the spelling against the documented fields)")
        ann = info.annotation
        model = ann if inspect.isclass(ann) and issubclass(ann, BaseModel) else None


def _axes(raw: Any, kind: str, source: str) -> dict[str, list]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: {kind}: expected a mapping of dotted field to a list of values")
    out = {}
    for name, values in raw.items():
        where = f"{source}: {kind}.{name}"
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{source}: {kind}: axis names must be dotted field names, got {name!r}")
        if name == "seed":
            raise ConfigError(f"{where}: list seeds under the top-level 'seeds:' key, not as an axis")
        check_field(name, where)
        if not isinstance(values, list):
            raise ConfigError(f"{where}: expected a list of values, got {type(values).__name__}")
        if not values:
            raise ConfigError(f"{where}: empty axis (give at least one value)")
        out[name] = values
    return out


def parse_sweep(data: Any, source: str = "sweep", root: Optional[Path] = None) -> SweepSpec:
    """Validate the shape of a sweep mapping (not yet its points); ``root`` resolves a base path."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping with base, grid, zip, seeds")
    unknown = [k for k in data if k not in SPEC_KEYS]
    if unknown:
        raise ConfigError(f"{source}: {unknown[0]}: unknown key (a sweep has {', '.join(SPEC_KEYS)})")
    base = data.get("base")
    if base is None:
        base = read_yaml(DEFAULT_BASE)
    elif isinstance(base, str):
        path = Path(base) if root is None else Path(root) / base
        base = read_yaml(path)
    elif not isinstance(base, dict):
        raise ConfigError(f"{source}: base: expected a config path or an inline mapping")
    grid = _axes(data.get("grid"), "grid", source)
    zipped = _axes(data.get("zip"), "zip", source)
    both = [k for k in grid if k in zipped]
    if both:
        raise ConfigError(f"{source}: {both[0]}: appears under both grid and zip; give it once")
    lengths = {k: len(v) for k, v in zipped.items()}
    if len(set(lengths.values())) > 1:
        detail = ", ".join(f"{k} has {n}" for k, n in lengths.items())
        raise ConfigError(f"{source}: zip: axes of unequal length ({detail} values)")
    seeds = data.get("seeds")
    if seeds is not None:
        if not isinstance(seeds, list) or not seeds:
            raise ConfigError(f"{source}: seeds: expected a non-empty list of integers")
        if any(not isinstance(s, int) or isinstance(s, bool) for s in seeds):
            raise ConfigError(f"{source}: seeds: every seed must be an integer")
        if len(set(seeds)) != len(seeds):
            raise ConfigError(f"{source}: seeds: duplicate seed")
    baseline = data.get("baseline", True)
    if not isinstance(baseline, bool):
        raise ConfigError(f"{source}: baseline: expected true or false")
    return SweepSpec(base=base, grid=grid, zip=zipped, seeds=seeds, baseline=baseline, source=source)


def read_sweep(path: str | Path) -> SweepSpec:
    """Read and parse a sweep YAML file (a base path inside is relative to the file)."""
    path = Path(path)
    return parse_sweep(read_yaml(path), str(path), path.parent)


def count_points(spec: SweepSpec) -> int:
    """How many points ``expand`` would make, counted from the axis lengths without expanding."""
    n = 1
    for values in spec.grid.values():
        n *= len(values)
    if spec.zip:
        n *= len(next(iter(spec.zip.values())))
    return n * (len(spec.seeds) if spec.seeds is not None else 1)


def check_size(spec: SweepSpec, max_points: int = DEFAULT_MAX_POINTS) -> int:
    """The point count, or one line naming the axes' sizes when it exceeds ``max_points``."""
    n = count_points(spec)
    if n > max_points:
        sizes = [f"{k} {len(v)}" for k, v in spec.grid.items()]
        sizes += [f"zip {len(next(iter(spec.zip.values())))}"] if spec.zip else []
        sizes += [f"seeds {len(spec.seeds)}"] if spec.seeds is not None else []
        raise ConfigError(f"{spec.source}: {n:,} points ({' x '.join(sizes)}) exceed --max-points {max_points:,}; "
                          "shrink the grid or raise --max-points")
    return n


def expand(spec: SweepSpec, invalid: Optional[list[InvalidPoint]] = None) -> list[Point]:
    """Every point of the sweep, each validated (config rules and engine presets) before any runs.

    The first invalid point raises, unless ``invalid`` is given: then each one is appended there and
    the valid points are returned (a sweep runs those and reports the rest).
    """
    from specplan.simulator.run import resolve

    grid_items = list(itertools.product(*spec.grid.values()))
    zip_len = len(next(iter(spec.zip.values()))) if spec.zip else 1
    points = []
    for combo in grid_items:
        for j in range(zip_len):
            values = dict(zip(spec.grid, combo))
            values.update({k: v[j] for k, v in spec.zip.items()})
            seeds = spec.seeds if spec.seeds is not None else [None]
            for seed in seeds:
                data = copy.deepcopy(spec.base)
                for name, value in values.items():
                    set_dotted(data, name, copy.deepcopy(value))
                if seed is not None:
                    data["seed"] = seed
                parts = [f"{k}={v}" for k, v in values.items()] + ([f"seed={seed}"] if seed is not None else [])
                source = f"{spec.source}: point {', '.join(parts)}" if parts else spec.source
                try:
                    cfg = build_config(data, source)
                    try:
                        resolve(cfg)
                    except ConfigError as exc:
                        raise ConfigError(f"{source}: {exc}") from None
                except ConfigError as exc:
                    if invalid is None:
                        raise
                    invalid.append(InvalidPoint({**values, **({"seed": seed} if seed is not None else {})}, str(exc)))
                    continue
                points.append(Point(values, cfg))
    return points
