"""The notebooks run in a real Jupyter kernel, and the committed ones are the executed pair of their sources.

Each ``notebooks/NN_*.py`` (jupytext py:percent, the reviewable source) is paired with ``NN_*.ipynb`` (what
people open: executed, figures included). ``make notebooks`` syncs the pair with jupytext and re-executes
the notebook with nbclient; here each source is executed again in a fresh kernel with a time limit, and
the committed notebook is checked to be in sync, fully executed, error-free and small.
"""

from __future__ import annotations

from pathlib import Path

import pytest

jupytext = pytest.importorskip("jupytext", reason="the notebook tests need the dev extra: pip install -e '.[dev]'")
nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
SOURCES = sorted(NOTEBOOKS.glob("[0-9]*.py"))
#: Wall-clock limit of one notebook in the kernel (the slowest takes ~40 s on a 2-core machine).
PER_NOTEBOOK_S = 300
#: A committed notebook stays small enough to review and clone (72-dpi figures: ~30-60 KB each).
MAX_NOTEBOOK_BYTES = 768 * 1024


def _cells(notebook: nbformat.NotebookNode) -> list[tuple[str, str]]:
    return [(cell.cell_type, cell.source) for cell in notebook.cells]


def _code_cells(notebook: nbformat.NotebookNode) -> list[nbformat.NotebookNode]:
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


def _images(cell: nbformat.NotebookNode) -> int:
    return sum("image/png" in output.get("data", {}) for output in cell.outputs)


def _check_executed(notebook: nbformat.NotebookNode, name: str) -> None:
    code = _code_cells(notebook)
    assert code, f"{name}: no code cells"
    assert [cell.execution_count for cell in code] == list(range(1, len(code) + 1)), \
        f"{name}: every code cell ran, in order, in one kernel (run make notebooks)"
    errors = [output.get("ename") for cell in code for output in cell.outputs if output.output_type == "error"]
    assert not errors, f"{name}: cells raised {errors}"
    drawing = [cell for cell in code if "plt.subplots(" in cell.source]
    assert drawing, f"{name}: draws no figure"
    blank = [cell.source.splitlines()[0] for cell in drawing if _images(cell) == 0]
    assert not blank, f"{name}: cells that draw but show no figure: {blank}"


@pytest.mark.parametrize("source", SOURCES, ids=[p.stem for p in SOURCES])
def test_committed_notebook_is_the_executed_pair_of_its_source(source: Path) -> None:
    committed_path = source.with_suffix(".ipynb")
    committed = nbformat.read(committed_path, as_version=4)
    assert _cells(committed) == _cells(jupytext.read(source)), f"{committed_path.name}: run make notebooks"
    assert committed.metadata["jupytext"]["formats"] == "ipynb,py:percent"
    _check_executed(committed, committed_path.name)
    size = committed_path.stat().st_size
    assert size < MAX_NOTEBOOK_BYTES, f"{committed_path.name}: {size / 1024:.0f} KiB"


@pytest.mark.timeout(PER_NOTEBOOK_S + 60)
@pytest.mark.parametrize("source", SOURCES, ids=[p.stem for p in SOURCES])
def test_notebook_runs_in_a_kernel(source: Path, tmp_path: Path) -> None:
    notebook = jupytext.read(source)
    client = nbclient.NotebookClient(notebook, timeout=PER_NOTEBOOK_S, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # a failing cell raises CellExecutionError with its traceback
    _check_executed(notebook, source.name)
