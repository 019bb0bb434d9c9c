"""``flexcomm validate --gpu-compute [DIR]``: the one-GPU compute measurements, against the engines' predictions.

The corpus is ``validation/gpu-compute/*.csv``, each file one run of ``real_backend/gpu_compute.py`` on a lent
GPU as the GPU check wrote it (``gpu_compute.csv``, renamed ``<device>-<date>.csv``): per row the section
(``gemm``, ``layer``, ``compression``, ``step``), the case, the shape, the measured and predicted seconds, the
device, its catalog name and the torch / CUDA versions. The predictions were made when it was measured; this
command re-predicts nothing and fits nothing: the GEMM model's achievable fraction is the catalog's MAMF, and
this corpus checks it (issue 30's targets: GEMMs within 10 % median and 25 % worst), never re-fits it.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from flexcomm.costmodel.errors import InputError
from flexcomm.validation import data_path

#: Column the corpus needs, with what a file must give.
REQUIRED = ("section", "case", "measured_s", "predicted_s", "device")
GEMM_MEDIAN_TARGET, GEMM_WORST_TARGET = 0.10, 0.25


def corpus_folder() -> Path:
    """The corpus shipped beside the package (as ``validation/nccl-tests`` is)."""
    return data_path("gpu-compute")


def read_corpus(folder: str | Path) -> pd.DataFrame:
    """Every CSV of ``folder``, one frame with a ``file`` column; a file without the columns is one error line."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError("gpu-compute", str(folder), "a folder of gpu_compute.csv files")
    frames = []
    for path in sorted(folder.glob("*.csv")):
        frame = pd.read_csv(path)
        missing = [c for c in REQUIRED if c not in frame.columns]
        if missing:
            raise InputError(f"{path.name}: columns", ", ".join(missing), "the columns gpu_compute.py writes: "
                             + ", ".join(REQUIRED))
        frames.append(frame.assign(file=path.name))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=[*REQUIRED, "file"])


def summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per file and section: rows, rows with a prediction, median and worst |predicted / measured - 1|."""
    if "file" not in frame.columns:
        frame = frame.assign(file="")
    rows = []
    for (file, section), group in frame.groupby(["file", "section"], sort=False):
        error = (group["predicted_s"] / group["measured_s"] - 1).abs().dropna()
        rows.append({"file": file, "device": group["device"].iloc[0], "section": section, "rows": len(group),
                     "predicted": len(error), "median_abs_error": error.median() if len(error) else None,
                     "worst_abs_error": error.max() if len(error) else None})
    return pd.DataFrame(rows)


def summary_lines(frame: pd.DataFrame) -> list[str]:
    """A markdown table of :func:`summary`, with the GEMM targets said where they are judged."""
    lines = ["| section | rows | predicted | median error | worst error |", "|---|---|---|---|---|"]
    for r in summary(frame).itertuples():
        median = "" if r.median_abs_error is None else f"{r.median_abs_error:.1%}"
        worst = "" if r.worst_abs_error is None else f"{r.worst_abs_error:.1%}"
        lines.append(f"| {r.section} | {r.rows} | {r.predicted} | {median} | {worst} |")
    gemm = summary(frame).query("section == 'gemm' and predicted > 0")
    for r in gemm.itertuples():
        met = r.median_abs_error <= GEMM_MEDIAN_TARGET and r.worst_abs_error <= GEMM_WORST_TARGET
        lines.append(f"GEMM targets (median {GEMM_MEDIAN_TARGET:.0%}, worst {GEMM_WORST_TARGET:.0%}) on {r.device}: "
                     f"{'met' if met else 'not met'}")
    return lines
