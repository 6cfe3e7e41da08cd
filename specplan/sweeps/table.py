"""The combined result table: one row per sweep run, swept fields and every summary metric as columns.

Columns, in order: ``key``, ``seed``, each swept field (dotted name; mappings and lists as compact
JSON text), every summary metric (nested dicts flattened to ``tpot_s.p99``; the per-position
acceptance and the accepted-token histogram stay list columns), ``k_bands`` (the K each batch size
gets on the run's engine path, ``specplan.simulator.k_bands``) and ``k_shares`` (the share of steps
run at each K), ``queue_growth`` and ``unstable`` (whether the queue grows without bound,
``specplan.sweeps.stability``), then, when the sweep ran baselines,
``baseline_key`` and the ratios against the same scenario without speculation:

- ``speedup``: output throughput, speculative / baseline (what ``specplan simulate --baseline`` prints);
- ``tpot_speedup``: mean TPOT, baseline / speculative (the latency view; at a fixed arrival rate
  below saturation throughput only follows the arrivals, so this is the number that moves);
- ``goodput_gain``: goodput (tokens/s of requests within the SLOs), speculative / baseline.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional, Sequence

import pandas as pd

from specplan.config import SimConfig, SpeculationConfig
from specplan.atomic import atomic_write
from specplan.simulator.k_bands import describe_bands, format_shares
from specplan.simulator.run import resolve
from specplan.sweeps.records import config_key
from specplan.sweeps.spec import Point

RATIO_COLUMNS = ("speedup", "tpot_speedup", "goodput_gain")
STABILITY_COLUMNS = ("queue_growth", "unstable")  # specplan.sweeps.stability


def baseline_of(cfg: SimConfig) -> SimConfig:
    """The scenario with speculation off and every other speculation field at its default, so the
    points that differ only in speculation share one baseline run."""
    return cfg.model_copy(update={"speculation": SpeculationConfig(decoding_type="none")})


def field_value(cfg_json: dict, dotted: str) -> Any:
    """The value at a dotted path of a config dump."""
    node: Any = cfg_json
    for part in dotted.split("."):
        node = node[part]
    return node


def cell(value: Any) -> Any:
    """A table cell: scalars as they are, mappings and lists as compact JSON text."""
    return json.dumps(value, separators=(",", ":")) if isinstance(value, (dict, list)) else value


def flatten(summary: dict, prefix: str = "") -> dict:
    """``{"tpot_s": {"p99": x}}`` -> ``{"tpot_s.p99": x}``; lists and scalars unchanged."""
    out = {}
    for k, v in summary.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _ratio(num: Optional[float], den: Optional[float]) -> Optional[float]:
    return num / den if num is not None and den else None


def results_table(points: Sequence[Point], axes: Sequence[str], records: dict[str, dict],
                  baselines: bool) -> pd.DataFrame:
    """One row per point, in sweep order (see the module docstring for the columns)."""
    rows = []
    for point in points:
        key = config_key(point.config)
        rec = records[key]
        row: dict[str, Any] = {"key": key, "seed": point.config.seed}
        written = point.config.model_dump(mode="json")  # as the sweep wrote it, before engine presets
        row.update({a: cell(field_value(written, a)) for a in axes})
        summary = rec["summary"]
        row.update({k: v for k, v in flatten(summary).items() if k != "seed"})
        row["k_bands"] = describe_bands(resolve(point.config))
        row["k_shares"] = format_shares(rec["k_shares"]) if "k_shares" in rec else None
        row.update({f: rec["stability"][f] if "stability" in rec else None for f in STABILITY_COLUMNS})
        if baselines:
            bkey = config_key(baseline_of(point.config))
            base = records[bkey]["summary"]
            row["baseline_key"] = bkey
            row["speedup"] = _ratio(summary["throughput_tok_s"], base["throughput_tok_s"])
            row["tpot_speedup"] = _ratio(base["tpot_s"]["mean"], summary["tpot_s"]["mean"])
            row["goodput_gain"] = _ratio(summary["goodput_tok_s"], base["goodput_tok_s"])
        rows.append(row)
    return pd.DataFrame(rows)


def write_table(df: pd.DataFrame, path: Path) -> Path:
    """Write the table as Parquet, atomically."""
    atomic_write(path, lambda tmp: df.to_parquet(tmp, index=False))
    return path
