"""``specplan report DIR``: PNG figures and a Markdown summary of a finished sweep.

Figures (each only when the sweep has what it needs), each with its data as ``NAME.csv`` beside it:

- ``speedup_vs_rate.png``: speedup against ``workload.rate`` (when it is an axis);
- ``speedup_vs_batch.png``: speedup against ``workload.concurrency`` or ``engine.max_batch_size``
  (the first that is an axis), else against the measured mean batch rows;
- ``throughput_vs_tpot.png``: throughput against p99 TPOT, the Pareto front marked, the baselines drawn;
- ``acceptance_length.png``: acceptance-length distribution per speculation/acceptance setting;
- ``gamma.png``: gamma(B, K) of every cost profile the sweep used, for every K it swept;
- ``gate.png``: when the SpeculationGate tripped, for every run that configured one.

Speedup is measured against the baseline runs the sweep makes (``baseline: true``, the default): the
same scenario with speculation off, drawn as the dashed line at 1.0. Lines are seed means, one colour
per value of the first swept ``speculation.*`` field (K, or the schedule), one row of panels per
combination of the other swept fields (``analysis.layout``); fields zipped with the x axis move with
it. Every point is numbered (``#``) the same way in the figures, the CSVs and the tables, and each
point slower than its baseline is explained by its largest cost term (``reports.explain``). Points
that failed (``failures.jsonl``) are listed first. Latencies in the tables are in ms. Goodput counts
only requests within the SLOs, and a point whose queue grows without bound (``sweeps.stability``) is
marked unstable and never ranked best. Every point's K per batch size is listed as bands.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from specplan.errors import SpecplanError
from specplan.reports import plots
from specplan.reports.explain import losing_section
from specplan.reports.analysis import (acceptance_length_distribution, label_rows, layout, md_table, ms_columns,
                                       pareto_front, seed_means, short_names)
from specplan.atomic import atomic_write_text
from specplan.sweeps.records import RecordStore
from specplan.sweeps.stability import UNSTABLE_GROWTH
from specplan.sweeps.sweep import FAILURES_FILE, RECORDS_DIR, open_sweep
from specplan.outputs import check_output_dir

REPORT_FILE = "report.md"
BATCH_AXES = ("workload.concurrency", "engine.max_batch_size")
HEADLINE = ("throughput_tok_s", "goodput_tok_s", "tpot_s.p99", "ttft_s.p99", "mean_acceptance_length", "speedup")


def _gamma_curves(configs) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    from specplan.cost_models.registry import make_cost_model

    costs = {json.dumps(c.cost.model_dump(mode="json"), sort_keys=True): c.cost for c in configs}
    ks = sorted({c.speculation.max_draft_len for c in configs if c.speculation.max_draft_len > 0}) or [1]
    b = np.unique(np.round(np.geomspace(1, max(c.engine.max_batch_size for c in configs), 24)).astype(int))
    curves = {}
    for i, cost_cfg in enumerate(costs.values()):
        model = make_cost_model(cost_cfg)
        name = model.describe().split(":")[0] + (f" #{i + 1}" if len(costs) > 1 else "")
        for k in ks:
            curves[f"{name}, K={k}"] = (b, np.array([model.gamma(int(x), k) for x in b]))
    return curves


def _with_records(table: pd.DataFrame, records_dir: Path) -> pd.DataFrame:
    """The table with what its records hold beside the summary: each run's cost terms
    (``cost_terms.*``, absent in records of an older specplan) and its baseline's p99 TPOT and
    throughput (``baseline.*``)."""
    store = RecordStore(records_dir)
    own = [store.read(k).get("cost_terms") for k in table["key"]]
    out = table
    if all(t is not None for t in own):
        out = out.assign(**{f"cost_terms.{name}": [t[name] for t in own] for name in own[0]})
    if "baseline_key" in table.columns:
        base = {k: store.read(k)["summary"] for k in dict.fromkeys(table["baseline_key"])}
        out = out.assign(**{
            "baseline.tpot_s.p99": [base[k]["tpot_s"]["p99"] for k in table["baseline_key"]],
            "baseline.throughput_tok_s": [base[k]["throughput_tok_s"] for k in table["baseline_key"]]})
    return out


def _baseline_points(means: pd.DataFrame, axes: list[str]) -> pd.DataFrame:
    """One row per baseline scenario (the non-speculation axes' values), its p99 TPOT and throughput."""
    if "baseline.tpot_s.p99" not in means.columns:
        return pd.DataFrame(columns=["tpot_s.p99", "throughput_tok_s"])
    scenario = [a for a in axes if not a.startswith("speculation.")]
    rows = means.drop_duplicates(scenario) if scenario else means.head(1)
    return rows[[*scenario, "baseline.tpot_s.p99", "baseline.throughput_tok_s"]].rename(
        columns={"baseline.tpot_s.p99": "tpot_s.p99", "baseline.throughput_tok_s": "throughput_tok_s"})


def _failures(sweep_dir: Path) -> list[str]:
    path = sweep_dir / FAILURES_FILE
    return [json.loads(line)["error"] for line in path.read_text().splitlines() if line] if path.is_file() else []


def _unstable(means: pd.DataFrame) -> pd.Series:
    """Points whose queue grows without bound in any seed (``sweeps.stability``); none in tables of an
    older specplan, which lack the column."""
    if "unstable" not in means.columns:
        return pd.Series(False, index=means.index)
    return means["unstable"].fillna(0).astype(float) > 0


def _goodput_note(points, means: pd.DataFrame, unstable: pd.Series) -> list[str]:
    """What goodput counts here, and which points are left out of the ranking as overloaded."""
    slo = {(p.config.slo_ttft_s, p.config.slo_tpot_s) for p in points}
    if slo == {(None, None)}:
        md = ["No SLO is set (`slo_ttft_s`, `slo_tpot_s`), so goodput counts every completed request; set them in "
              "the base to rank by requests served within them."]
    else:
        md = ["Goodput counts only the output tokens of requests within the SLOs (" + "; ".join(
            f"TTFT <= {'-' if t is None else f'{t * 1e3:g} ms'}, TPOT <= {'-' if p is None else f'{p * 1e3:g} ms'}"
            for t, p in sorted(slo, key=str)) + ")."]
    if unstable.any():
        md += [f"Unstable points (the queue grows without bound: over the second half of the arrivals more than "
               f"{UNSTABLE_GROWTH:.0%} of them are still waiting; `queue_growth`) are never ranked: "
               + ", ".join(f"#{n}" for n in means.loc[unstable, "#"]) + "."]
    return [" ".join(md), ""]


def _k_table(table: pd.DataFrame, means: pd.DataFrame, axes: list[str]) -> pd.DataFrame:
    """Per point: its number, its speculation axes, the K bands and the share of steps at each K."""
    first = table.drop_duplicates(list(axes)) if axes else table.head(1)
    spec_axes = [a for a in axes if a.startswith("speculation.")] or list(axes)
    out = pd.DataFrame({"#": means["#"].to_numpy(), **{a: first[a].to_numpy() for a in spec_axes}})
    for col, head in (("k_bands", "K per batch size"), ("k_shares", "steps at each K")):
        out[head] = first[col].to_numpy() if col in first.columns else None
    return out


def write_report(sweep_dir: str | Path, out_dir: Optional[str | Path] = None) -> Path:
    """Write the figures (each with its CSV) and ``report.md`` for the sweep in ``sweep_dir``;
    returns the Markdown path."""
    sweep_dir = Path(sweep_dir)
    spec, points, table = open_sweep(sweep_dir)
    out = check_output_dir(Path(out_dir) if out_dir is not None else Path(sweep_dir) / "report")
    axes = spec.axes
    failed = _failures(sweep_dir)
    md = [f"# Sweep report: {spec.source}", ""]
    if failed:
        md += [f"{len(failed)} point(s) failed and are not in this report (`failures.jsonl`):", "",
               *[f"- {e}" for e in failed], ""]
    if table.empty:
        md += ["No point ran, so there is nothing to plot."]
        return atomic_write_text(out / REPORT_FILE, "\n".join(md))
    means = seed_means(_with_records(table, sweep_dir / RECORDS_DIR), axes)
    means.insert(0, "#", np.arange(1, len(means) + 1))  # point numbers, as the figures label them
    names = short_names(axes)
    seeds = table["seed"].nunique()
    md += [f"{len(table)} runs: {len(means)} points x {seeds} seed(s). Axes: "
           + (", ".join(f"`{a}`" for a in axes) or "none") + ". Figures and tables use seed means; latencies "
           "in ms. Each figure's data is in the CSV of the same name beside it.", ""]

    cols = ["#", *axes, *[c for c in HEADLINE if c in means.columns]]
    unstable = _unstable(means)
    md += ["## Best points by goodput", "", *_goodput_note(points, means, unstable)]
    ranked = means[~unstable]
    if ranked.empty:
        md += ["Every point is unstable, so none is ranked.", ""]
    else:
        best = ranked.sort_values("goodput_tok_s", ascending=False)[cols].head(10)
        md += [md_table(ms_columns(best)), ""]
    if "workload.rate" in axes and not ranked.empty:
        best = ranked.loc[ranked.groupby("workload.rate", sort=False)["goodput_tok_s"].idxmax()]
        gone = [r for r in dict.fromkeys(means["workload.rate"]) if r not in set(ranked["workload.rate"])]
        md += ["### Best per arrival rate", "", md_table(ms_columns(best[cols])), ""]
        if gone:
            md += [f"No stable point at {', '.join(f'{r:g}' for r in gone)} req/s: every configuration there is "
                   "overloaded.", ""]
    md += ["## K per batch size", "", "The K each batch size gets on the run's engine path (the engine's own "
           "schedule lookup), and the share of steps run at each K (the first seed's run).", "",
           md_table(_k_table(table, means, axes)), ""]

    md += ["## Speedup", ""]
    if "speedup" not in means.columns:
        md += ["No baselines in this sweep (`baseline: false`), so no speedup figures.", ""]
    else:
        if "workload.rate" in axes:
            plots.speedup(means, layout(axes, list(spec.zip), "workload.rate"), "arrival rate (req/s)", axes,
                          out / "speedup_vs_rate.png")
            md += ["![speedup vs arrival rate](speedup_vs_rate.png)", ""]
        x = next((a for a in BATCH_AXES if a in axes), "mean_batch_rows")
        lay = layout(axes, list(spec.zip), x)
        plots.speedup(means, lay, names.get(x, "mean batch rows (measured)"), axes, out / "speedup_vs_batch.png")
        md += ["![speedup vs batch size](speedup_vs_batch.png)", "",
               f"One line per `{lay.colour}`" + (f", one row of panels per {', '.join(f'`{a}`' for a in lay.facets)}"
                                                 if lay.facets else "") + "; the dashed line is the baseline. "
               if lay.colour else "",
               "Left: output throughput over the baseline's (at a fixed arrival rate below saturation both "
               "follow the arrivals). Right: the baseline's mean TPOT over this run's.", ""]

        config_of = {tuple(row): p.config for row, p in zip(table[axes].itertuples(index=False, name=None), points)}
        md += ["### Why configurations lose", "", *losing_section(means, axes, config_of), ""]

    colour = layout(axes, list(spec.zip), "tpot_s.p99").colour
    front = pareto_front(means["tpot_s.p99"].to_numpy(), means["throughput_tok_s"].to_numpy())
    baselines = _baseline_points(means, axes)
    plots.throughput_vs_tpot(means, front, colour, axes, ms_columns(baselines), out / "throughput_vs_tpot.png")
    md += ["## Throughput against p99 TPOT", "", "![throughput vs p99 TPOT](throughput_vs_tpot.png)", ""]
    if len(baselines):
        md += [(f"Colour: `{colour}`. " if colour else "") + "Baselines (speculation off; the black crosses):", "",
               md_table(ms_columns(baselines)), ""]
    md += ["Pareto front (no other point has both lower p99 TPOT and higher throughput; `#` numbers the points, "
           "every point is in the table at the end):", "",
           md_table(ms_columns(means[front].sort_values("tpot_s.p99")[["#", *axes, "tpot_s.p99", "throughput_tok_s"]])),
           ""]

    group = [a for a in axes if a.startswith(("speculation.", "acceptance."))]
    labels = label_rows(table, group)
    dists = {lab: acceptance_length_distribution(table.loc[labels == lab, "accepted_histogram"])
             for lab in dict.fromkeys(labels)}
    dists = {k: v for k, v in dists.items() if len(v)}
    md += ["## Acceptance length", ""]
    if dists:
        # coloured as the other figures colour their points (by K), when that axis is in the grouping
        by = colour if colour in group else None
        keys = {lab: table.loc[labels == lab, by].iloc[0] for lab in dists} if by else None
        plots.acceptance_lengths(dists, out / "acceptance_length.png", keys)
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
        gate_table = pd.DataFrame({
            "run": run_ids,
            "setting": label_rows(rows, [*axes, "seed"]).to_numpy(),
            "tripped at iteration": rows["gate_tripped_iteration"].to_numpy(),
            "tripped at (s)": tripped,
            "makespan (s)": rows["makespan_s"].to_numpy(dtype=float),
            "share of makespan": tripped / rows["makespan_s"].to_numpy(dtype=float),
            # TensorRT-LLM still charges 1 + K a row once latched: budget prefill could have used
            "budget charged, off": rows.get("overcharged_tokens_spec_off", pd.Series(np.nan, rows.index)).to_numpy(),
            "while requests waited": rows.get("overcharged_tokens_queued", pd.Series(np.nan, rows.index)).to_numpy(),
        })
        plots.gate_trips(gate_table, out / "gate.png")
        n = int((~np.isnan(tripped)).sum())
        md += [f"The gate tripped in {n} of {len(gated)} gated runs ('-': never).", "", "![gate](gate.png)", "",
               md_table(gate_table), ""]

    every = means[cols].assign(unstable=np.where(unstable, "unstable", ""))
    md += ["## All points", "", md_table(ms_columns(every)), ""]
    return atomic_write_text(out / REPORT_FILE, "\n".join(md))
