"""Sweep workers import the installed package whatever folder the sweep is started from.

Run from the folder that holds a clone (a directory named ``specplan``), the forkserver's
``python -c`` put that directory first on ``sys.path`` and the workers imported it as a namespace
package: every point failed with ``MultiplexedPath.joinpath()`` once a run read packaged data.
"""

import subprocess
import sys

import yaml

SWEEP = {
    "base": {
        "seed": 0,
        "engine": {"max_batch_size": 4, "kv_num_blocks": 20000},
        "speculation": {"decoding_type": "NGram", "max_draft_len": 2},
        "acceptance": {"mode": "alpha", "alpha": 0.7},
        "workload": {"trace": None, "arrival": "poisson", "rate": 4.0, "num_requests": 6, "prompt_len": 8,
                     "output_len": 8},
        # the roofline reads the packaged GPU and model catalogues (importlib.resources)
        "cost": {"model": "roofline", "gpu": "h200", "model_name": "llama-3.1-8b"},
    },
    "grid": {"speculation.max_draft_len": [1, 2]},
}

# The console script's interpreter: its sys.path starts with the script's folder, not the current one.
ENTRY = "import sys; sys.path.remove(''); from specplan.cli import main; main()"


def test_sweep_from_a_folder_holding_a_specplan_directory(tmp_path):
    (tmp_path / "specplan" / "examples").mkdir(parents=True)  # a clone's folder, named like the package
    sweep = tmp_path / "specplan" / "examples" / "s.yaml"
    sweep.write_text(yaml.safe_dump(SWEEP))
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-c", ENTRY, "sweep", "specplan/examples/s.yaml", "--out", str(out),
                           "--workers", "1", "--no-progress"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert not (out / "failures.jsonl").exists()
    import pandas as pd

    table = pd.read_parquet(out / "results.parquet")
    assert sorted(table["speculation.max_draft_len"]) == [1, 2] and table["speedup"].notna().all()
