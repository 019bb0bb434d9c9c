"""``validate --published-training``'s whole answer as data: every published DDP throughput row predicted beside
linear scaling of its reference, per class, the tables that could not be predicted, and the one-GPU rows from
the device catalog alone.

Why one function: the command and any other caller (a notebook, a test) need the same rows, counts and verdicts;
computed in the command, they could be reached only by reading its printed lines back.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from flexcomm.experiments import published_compute
from flexcomm.experiments.published_training import (
    TARGET_THROUGHPUT,
    class_summary,
    read_corpus,
    validate_corpus,
)
from flexcomm.validation import data_path

__all__ = ["TrainingValidation", "default_corpus", "validate_published_training"]


@dataclass(frozen=True)
class TrainingValidation:
    """The rows predicted (``training.csv``), their per-class medians, the tables skipped (where, why) and the
    one-GPU catalog check (``compute.csv``; empty when the corpus holds no one-GPU row)."""

    frame: pd.DataFrame
    classes: pd.DataFrame
    skipped: list[tuple[str, str]]
    compute: pd.DataFrame

    def within_target(self) -> tuple[int, int, int]:
        """Rows whose throughput is within the target, for the model and for linear scaling, and rows meeting
        both targets (throughput and scaling)."""
        frame = self.frame
        return (int((frame["rel_error"].abs() <= TARGET_THROUGHPUT).sum()),
                int((frame["baseline_rel_error"].abs() <= TARGET_THROUGHPUT).sum()),
                int(frame["meets_target"].sum()))

    def multi_node_medians(self) -> tuple[float, float] | None:
        """Median |error| of the model and of linear scaling over the multi-node rows (None: there are none)."""
        multi = self.frame[self.frame["scale"] == "multi-node"]
        if not len(multi):
            return None
        return float(multi["rel_error"].abs().median()), float(multi["baseline_rel_error"].abs().median())


def default_corpus() -> list[Path]:
    """The published tables shipped with flexcomm: one node, and several."""
    return [data_path("training-throughput", name) for name in ("training-throughput.md", "multi-node.md")]


def validate_published_training(file: str | Path | None = None) -> TrainingValidation:
    """Every multi-GPU row of ``file`` (default: :func:`default_corpus`) predicted, and its one-GPU rows
    checked against the catalog's compute."""
    corpus = read_corpus([Path(file)] if file else default_corpus())
    frame = validate_corpus(corpus)
    return TrainingValidation(frame, class_summary(frame), list(corpus.skipped),
                              published_compute.validate_compute(corpus.rows))
