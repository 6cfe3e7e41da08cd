"""The operator notebooks (``notebooks/*.ipynb``) run top to bottom, headless, and are committed clean.

Each notebook is executed with nbclient on the ``python3`` kernel from its own folder; any cell error
fails the test (a notebook's last cell asserts the claims of its conclusion, so a conclusion that
stopped being true fails too). The ``.ipynb`` files are the source people edit; they are committed
with outputs and execution counts stripped (``jupyter nbconvert --clear-output --inplace`` or the
notebook's own "Clear all outputs" before committing).
"""

from __future__ import annotations

import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
CELL_TIMEOUT_S = 300


def test_notebooks_exist():
    names = [p.name for p in NOTEBOOKS]
    for prefix in ("01_", "02_", "03_", "04_", "05_", "06_"):
        assert any(n.startswith(prefix) for n in names), f"no notebook {prefix}*.ipynb in {names}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_committed_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.cells and nb.cells[0].cell_type == "markdown", "the first cell says what the notebook shows"
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, f"cell {i} has outputs: strip them"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_executes(path, tmp_path):
    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=CELL_TIMEOUT_S, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    client.execute()  # raises CellExecutionError, naming the cell, on the first error
    elapsed = time.perf_counter() - start
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.get("output_type") == "error"]
    assert not errors
    print(f"{path.name}: {elapsed:.1f} s")
