"""``validate --published-training``: published DDP throughput read from markdown and predicted from 1-GPU rows."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from flexcomm.experiments.cli import main
from flexcomm.experiments.published_training import read_tables, validate_training

SHIPPED = Path(__file__).resolve().parents[1] / "validation" / "training-throughput" / "training-throughput.md"


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_shipped_tables_read_as_published() -> None:
    rows = read_tables(SHIPPED)
    assert len(rows) == 36 and sum(r.gpus == 8 for r in rows) == 18
    bert = [r for r in rows if r.model == "bert-pretraining" and r.hardware == "DGX-1" and r.seq_len == 512]
    # DGX-1 prints the accumulated batch: 2048 over 512 (FP32) and 256 (FP16) accumulation steps
    assert {(r.precision, r.batch, r.accumulation) for r in bert} == {("fp32", 4, 512), ("mixed precision", 8, 256)}
    titled = {r.titled for r in rows if r.model == "resnet50" and r.hardware == "DGX-1"}
    assert len(titled) == 2  # DGX-1 16GB and 32GB are separate references


def test_predictions_come_from_their_own_reference_and_stay_physical() -> None:
    frame = validate_training(SHIPPED)
    assert len(frame) == 18
    assert (frame["predicted_scaling"] <= frame["gpus"] + 1e-9).all()  # no super-linear scaling from nothing
    assert (frame["exposed_comm_s"] >= 0).all()
    # weak scaling: the step's compute is the 1-GPU row's, so predicted throughput / 8 <= the reference's
    assert ((frame["predicted_throughput"] / frame["gpus"]) <= frame["reference_throughput"] * (1 + 1e-9)).all()
    squad = frame[(frame["model"] == "bert-squad") & (frame["hardware"] == "DGX-1")]
    bert = frame[(frame["model"] == "bert-pretraining") & (frame["hardware"] == "DGX-1")]
    # the exchange amortised over hundreds of micro-batches weighs less than one per step
    assert squad["exposed_comm_s"].div(squad["compute_step_s"]).min() > bert["exposed_comm_s"].div(
        bert["compute_step_s"]).max()


def test_cli_writes_the_report_and_the_figure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "validate", "--published-training", "--out", str(tmp_path))
    assert code == 0
    written = pd.read_csv(tmp_path / "training.csv")
    assert len(written) == 18 and "rel_err" in written
    assert (tmp_path / "training.png").exists() and (tmp_path / "training.md").exists()
    assert "met by" in out


def _table(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "t.md"
    path.write_text("## BERT pre-training\n### Pre-training NVIDIA DGX A100 (8x A100 80GB)\n\n"
                    "| GPUs | Batch size / GPU (TF32 and FP16) | Accumulation steps (TF32 and FP16) | Sequence length "
                    "| Throughput - TF32 (sequences/sec) | Throughput - mixed precision (sequences/sec) |\n"
                    "|---|---|---|---|---|---|\n" + body, encoding="utf-8")
    return path


def test_a_row_without_its_one_gpu_reference_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _table(tmp_path, "| 8 | 128 and 256 | 64 and 32 | 128 | 2505 | 4591 |\n")
    code, out, err = run_cli(capsys, "validate", "--published-training", str(path), "--out", str(tmp_path / "o"))
    assert code == 2 and out == "" and err.strip().count("\n") == 0
    assert "error: reference:" in err and "1-GPU row" in err
    assert not (tmp_path / "o").exists()


def test_zero_accumulation_steps_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _table(tmp_path, "| 1 | 128 and 256 | 0 and 32 | 128 | 317 | 580 |\n")
    code, _, err = run_cli(capsys, "validate", "--published-training", str(path), "--out", str(tmp_path / "o"))
    assert code == 2 and "accumulation steps" in err and err.strip().count("\n") == 0


def test_a_file_without_tables_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "empty.md"
    path.write_text("# nothing here\n", encoding="utf-8")
    code, _, err = run_cli(capsys, "validate", "--published-training", str(path))
    assert code == 2 and "published-training" in err
