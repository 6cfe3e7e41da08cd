"""``specplan report DIR``: PNG figures and a Markdown summary of a finished sweep.

Figures (each only when the sweep has what it needs):

- ``speedup_vs_rate.png``: speedup against ``workload.rate`` (when it is an axis);
- ``speedup_vs_batch.png``: speedup against ``workload.concurrency`` or ``engine.max_batch_size``
  (the first that is an axis), else against the measured mean batch rows;
- ``throughput_vs_tpot.png``: throughput against p99 TPOT, the Pareto front marked;
- ``acceptance_length.png``: acceptance-length distribution per speculation/acceptance setting;
- ``gamma.png``: gamma(B, K) of every cost profile the sweep used;
- ``gate.png``: when the SpeculationGate tripped, for every run that configured one.

Speedup is measured against the baseline runs the sweep makes (``baseline: true``, the default): the
same scenario with speculation off. Lines are seed means; each line is one combination of the
swept fields other than the x axis (so one line per K or schedule when that is all that varies).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from specplan.errors import SpecplanError
from specplan.reports import plots
from specplan.reports.analysis import (acceptance_length_distribution, label_rows, md_table, pareto_front,
                                       seed_means, short_names)
from specplan.atomic import atomic_write_text
from specplan.outputs import check_output_dir
from specplan.sweeps.sweep import open_sweep

REPORT_FILE = "report.md"
BATCH_AXES = ("workload.concurrency", "engine.max_batch_size")
HEADLINE = ("throughput_tok_s", "goodput_tok_s", "tpot_s.p99", "ttft_s.p99", "mean_acceptance_length", "speedup")


def _gamma_curves(configs) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    from specplan.cost_models.registry import make_cost_model

    costs = {json.dumps(c.cost.model_dump(mode="json"), sort_keys=True): c.cost for c in configs}
    ks = sorted({c.speculation.max_draft_len for c in configs if c.speculation.max_draft_len > 0})[:4] or [1]
    b = np.unique(np.round(np.geomspace(1, max(c.engine.max_batch_size for c in configs), 24)).astype(int))
    curves = {}
    for i, cost_cfg in enumerate(costs.values()):
        model = make_cost_model(cost_cfg)
        name = model.describe().split(":")[0] + (f" #{i + 1}" if len(costs) > 1 else "")
        for k in ks:
            curves[f"{name}, K={k}"] = (b, np.array([model.gamma(int(x), k) for x in b]))
    return curves


def write_report(sweep_dir: str | Path, out_dir: Optional[str | Path] = None) -> Path:
    """Write the figures and ``report.md`` for the sweep in ``sweep_dir``; returns the Markdown path."""
    spec, points, table = open_sweep(sweep_dir)
    out = check_output_dir(Path(out_dir) if out_dir is not None else Path(sweep_dir) / "report")
    axes = spec.axes
    means = seed_means(table, axes)
    means.insert(0, "#", np.arange(1, len(means) + 1))  # point numbers, as the figures label them
    names = short_names(axes)
    seeds = table["seed"].nunique()
    md = [f"# Sweep report: {spec.source}", "",
          f"{len(table)} runs: {len(means)} points x {seeds} seed(s). Axes: "
          + (", ".join(f"`{a}`" for a in axes) or "none") + ". Figures and tables use seed means.", ""]

    cols = ["#", *axes, *[c for c in HEADLINE if c in means.columns]]
    md += ["## Best points by goodput", "", md_table(means.sort_values("goodput_tok_s", ascending=False)[cols].head(10)), ""]
    if "workload.rate" in axes:
        best = means.loc[means.groupby("workload.rate", sort=False)["goodput_tok_s"].idxmax()]
        md += ["### Best per arrival rate", "", md_table(best[cols]), ""]

    md += ["## Speedup", ""]
    if "speedup" not in means.columns:
        md += ["No baselines in this sweep (`baseline: false`), so no speedup figures.", ""]
    else:
        if "workload.rate" in axes:
            others = [a for a in axes if a != "workload.rate"]
            plots.speedup(means, "workload.rate", "arrival rate (req/s)", label_rows(means, others), out / "speedup_vs_rate.png")
            md += ["![speedup vs arrival rate](speedup_vs_rate.png)", ""]
        x = next((a for a in BATCH_AXES if a in axes), "mean_batch_rows")
        others = [a for a in axes if a != x]
        plots.speedup(means, x, names.get(x, "mean batch rows (measured)"), label_rows(means, others),
                      out / "speedup_vs_batch.png")
        md += ["![speedup vs batch size](speedup_vs_batch.png)", "",
               "Left: output throughput over the baseline's (at a fixed arrival rate below saturation both "
               "follow the arrivals). Right: the baseline's mean TPOT over this run's.", ""]

    front = pareto_front(means["tpot_s.p99"].to_numpy(), means["throughput_tok_s"].to_numpy())
    plots.throughput_vs_tpot(means, front, "#" + means["#"].astype(str), out / "throughput_vs_tpot.png")
    md += ["## Throughput against p99 TPOT", "", "![throughput vs p99 TPOT](throughput_vs_tpot.png)", "",
           "Pareto front (no other point has both lower p99 TPOT and higher throughput; `#` numbers the points):", "",
           md_table(means[front].sort_values("tpot_s.p99")[["#", *axes, "tpot_s.p99", "throughput_tok_s"]]), ""]

    group = [a for a in axes if a.startswith(("speculation.", "acceptance."))]
    labels = label_rows(table, group)
    dists = {lab: acceptance_length_distribution(table.loc[labels == lab, "accepted_histogram"])
             for lab in dict.fromkeys(labels)}
    dists = {k: v for k, v in dists.items() if len(v)}
    md += ["## Acceptance length", ""]
    if dists:
        plots.acceptance_lengths(dists, out / "acceptance_length.png")
        mean_len = {k: float(np.dot(np.arange(1, len(v) + 1), v)) for k, v in dists.items()}
        md += ["![acceptance length](acceptance_length.png)", "",
               md_table(pd.DataFrame({"setting": list(mean_len), "mean acceptance length": list(mean_len.values())})), ""]
    else:
        md += ["No run drafted any tokens.", ""]

    configs = [p.config for p in points]
    md += ["## Cost profile: gamma(B)", ""]
    try:
        plots.gamma_curves(_gamma_curves(configs), out / "gamma.png")
        md += ["![gamma(B)](gamma.png)", "",
               "gamma(B, K) = (T(B, 1+K) - T(B, 1)) / (K T(B, 1)): the verify cost of one draft token relative to a "
               "plain decode step; speculation pays while the expected accepted length beats 1 + gamma K.", ""]
    except SpecplanError as exc:
        md += [f"Could not build the cost model: {exc}", ""]

    gated = [i for i, c in enumerate(configs) if c.speculation.decoding_type != "none" and (
        c.speculation.acceptance_rate_window_size or c.speculation.acceptance_window)]
    md += ["## SpeculationGate", ""]
    if not gated:
        md += ["No run configured a SpeculationGate.", ""]
    else:
        rows = table.iloc[gated]
        run_ids = [f"run {i + 1}" for i in gated]
        tripped = rows["gate_tripped_s"].to_numpy(dtype=float)
        plots.gate_trips(run_ids, rows["makespan_s"].to_numpy(dtype=float), tripped, out / "gate.png")
        gate_table = pd.DataFrame({
            "run": run_ids,
            "setting": label_rows(rows, [*axes, "seed"]).to_numpy(),
            "tripped at iteration": rows["gate_tripped_iteration"].to_numpy(),
            "tripped at (s)": tripped,
            "share of makespan": tripped / rows["makespan_s"].to_numpy(dtype=float),
        })
        n = int((~np.isnan(tripped)).sum())
        md += [f"The gate tripped in {n} of {len(gated)} gated runs ('-': never).", "", "![gate](gate.png)", "",
               md_table(gate_table), ""]

    path = out / REPORT_FILE
    text = "\n".join(md)
    atomic_write_text(path, text)
    return path
