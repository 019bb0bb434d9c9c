"""Build a .ipynb from a plain Python file whose cells are separated by ``# %%`` (markdown: ``# %% [md]``).

Notebooks are kept as reviewable ``.py`` sources and generated, so diffs stay readable:
``python notebooks/make_notebook.py notebooks/01_whatif_cluster_study.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def cells_of(source: str) -> list[dict]:
    cells: list[dict] = []
    for chunk in source.split("# %%")[1:]:
        header, _, body = chunk.partition("\n")
        body = body.strip("\n")
        if header.strip() == "[md]":
            text = "\n".join(line[2:] if line.startswith("# ") else line.lstrip("#") for line in body.splitlines())
            cells.append({"cell_type": "markdown", "metadata": {}, "source": text.splitlines(keepends=True)})
        else:
            cells.append({"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
                          "source": body.splitlines(keepends=True)})
    return cells


def build(path: Path) -> Path:
    notebook = {
        "cells": cells_of(path.read_text()),
        "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                     "language_info": {"name": "python"}},
        "nbformat": 4, "nbformat_minor": 5,
    }
    target = path.with_suffix(".ipynb")
    target.write_text(json.dumps(notebook, indent=1) + "\n")
    return target


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(build(Path(arg)))
