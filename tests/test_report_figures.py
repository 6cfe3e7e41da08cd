"""Report figures that hide nothing: every series drawn and in the CSV beside it, one colour per K,
labels in the sweep's own types, the baselines marked."""

import numpy as np
import pandas as pd
import pytest
from matplotlib.image import imread

from specplan.reports.analysis import label_rows, layout, ms_columns
from specplan.reports.plots import colours
from specplan.reports.summary import write_report
from specplan.sweeps.runners import LocalRunner
from specplan.sweeps.spec import parse_sweep
from specplan.sweeps.sweep import run_sweep

KS = list(range(1, 13))
CONCURRENCY = [2, 4, 8]


@pytest.fixture(scope="module")
def k12(tmp_path_factory):
    out = tmp_path_factory.mktemp("k12")
    spec = parse_sweep({
        "base": {
            "seed": 0,
            "engine": {"max_batch_size": 8, "kv_num_blocks": 100000},
            "speculation": {"decoding_type": "NGram", "max_draft_len": 2},
            "acceptance": {"mode": "alpha", "alpha": 0.6},
            "workload": {"trace": None, "arrival": "closed_loop", "concurrency": 2, "num_requests": 8,
                         "prompt_len": 8, "output_len": 12},
            "cost": {"model": "linear_gamma", "t_base_s": 0.01, "gamma": {1: 0.05, 8: 0.4}},
        },
        "grid": {"speculation.max_draft_len": KS, "workload.concurrency": CONCURRENCY},
    }, "k12")
    with LocalRunner(2) as runner:
        table = run_sweep(spec, out, runner)
    return out, table, write_report(out)


def test_speedup_vs_batch_keeps_all_36_points_in_12_series(k12):
    out, table, md = k12
    data = pd.read_csv(md.parent / "speedup_vs_batch.csv")
    assert len(data) == 36 and sorted(data["series"].unique()) == KS
    assert data.groupby("series")["workload.concurrency"].apply(sorted).tolist() == [CONCURRENCY] * 12
    # the CSV's numbers are the table's (one seed: a point is a run)
    merged = data.merge(table, on=["speculation.max_draft_len", "workload.concurrency"], suffixes=("", "_run"))
    np.testing.assert_allclose(merged["speedup"], merged["speedup_run"])


def test_the_png_draws_every_series_in_its_own_colour(k12):
    _, _, md = k12
    img = imread(md.parent / "speedup_vs_batch.png")[..., :3]
    panels = img[:, : int(img.shape[1] * 0.78)]  # left of the legend: only what the panels draw
    pixels = (panels * 255).round().astype(int).reshape(-1, 3)
    found = {tuple(p) for p in np.unique(pixels, axis=0)}
    for k, rgba in colours(KS).items():
        want = tuple(int(round(c * 255)) for c in rgba[:3])
        assert want in found, f"max_draft_len={k} not drawn"


def test_pareto_csv_lists_every_point_and_each_baseline(k12):
    _, table, md = k12
    data = pd.read_csv(md.parent / "throughput_vs_tpot.csv")
    points, base = data[data["kind"] == "point"], data[data["kind"] == "baseline"]
    assert sorted(points["#"].astype(int)) == list(range(1, 37))
    np.testing.assert_allclose(points["tpot p99 (ms)"], table["tpot_s.p99"] * 1e3)
    assert sorted(base["workload.concurrency"]) == CONCURRENCY
    text = md.read_text()
    assert "max_draft_len=1.0" not in text and "| 12 | 8 |" in text  # the sweep's ints, as written


def test_layout_colours_by_k_and_keeps_zipped_axes_on_one_line():
    k, conc, mbs, rate = "speculation.max_draft_len", "workload.concurrency", "engine.max_batch_size", "workload.rate"
    zipped = layout([k, conc, mbs], [conc, mbs], conc)
    assert (zipped.colour, zipped.facets) == (k, ())  # max_batch_size moves with concurrency
    measured = layout([rate, k, "acceptance.alpha"], [], "mean_batch_rows")
    assert (measured.colour, measured.facets, measured.along) == (k, ("acceptance.alpha",), (rate,))


def test_labels_keep_ints_and_latencies_read_in_ms():
    df = pd.DataFrame({"speculation.max_draft_len": [1, 2], "workload.rate": [0.5, 2.0]})
    assert label_rows(df, list(df.columns)).tolist() == ["max_draft_len=1, rate=0.5", "max_draft_len=2, rate=2.0"]
    ms = ms_columns(pd.DataFrame({"tpot_s.p99": [0.0125], "makespan_s": [3.0]}))
    assert list(ms.columns) == ["tpot p99 (ms)", "makespan_s"] and ms.iloc[0, 0] == pytest.approx(12.5)
