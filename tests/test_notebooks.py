"""Every notebook runs top to bottom, and its committed .ipynb matches its .py source."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
SOURCES = sorted(p for p in NOTEBOOKS.glob("[0-9]*.py"))


@pytest.mark.parametrize("source", SOURCES, ids=[p.stem for p in SOURCES])
def test_notebook_runs_and_is_in_sync(source: Path, tmp_path: Path) -> None:
    sys.path.insert(0, str(NOTEBOOKS))
    try:
        from make_notebook import cells_of
    finally:
        sys.path.pop(0)
    committed = json.loads(source.with_suffix(".ipynb").read_text())
    assert committed["cells"] == cells_of(source.read_text()), "run notebooks/make_notebook.py on it"
    code_cells = [c for c in committed["cells"] if c["cell_type"] == "code"]
    assert code_cells and all(c["outputs"] == [] and c["execution_count"] is None for c in code_cells), \
        "outputs are stripped in git"
    code = "\n\n".join("".join(c["source"]) for c in committed["cells"] if c["cell_type"] == "code")
    script = tmp_path / "notebook.py"
    script.write_text("import matplotlib\nmatplotlib.use('Agg')\n" + code + "\n")
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
