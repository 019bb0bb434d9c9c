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
    assert len(frame) == 18 and (frame["reference_gpus"] == 1).all()
    resnet = frame[frame["model"] == "resnet50"].set_index(["titled", "precision"])["reference_throughput"]
    assert resnet["NVIDIA DGX-1 32GB (8x V100 32GB)", "FP32"] == 356  # its own table's 1-GPU row, not 16GB's 367
    assert resnet["NVIDIA DGX A100 (8x A100 80GB)", "mixed precision (AMP)"] == 2470
    # the documented misses: AMP ResNet-50's published scaling is far below what the exchange explains
    amp = frame[(frame["model"] == "resnet50") & frame["precision"].str.contains("AMP")]
    assert (amp["rel_err"] > 0.10).all()
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
    assert "error: reference:" in err and "on fewer GPUs" in err
    assert not (tmp_path / "o").exists()


def test_zero_accumulation_steps_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _table(tmp_path, "| 1 | 128 and 256 | 0 and 32 | 128 | 317 | 580 |\n")
    code, _, err = run_cli(capsys, "validate", "--published-training", str(path), "--out", str(tmp_path / "o"))
    assert code == 2 and "accumulation steps" in err and err.strip().count("\n") == 0


HEADER = ("| Num Nodes | Batch size per GPU (TF32 and FP16) | Accumulated Batch size per GPU (TF32 and FP16) "
          "| Accumulation steps (TF32 and FP16) | Sequence length | Mixed Precision Throughput "
          "| Mixed Precision Strong Scaling | TF32 Throughput | TF32 Strong Scaling "
          "| Speedup (Mixed Precision to TF32) |")
MULTI_NODE = f"""## BERT pre-training
### Pre-training NVIDIA DGX A100 (8x A100 80GB) Multi-node Scaling

{HEADER}
|---|---|---|---|---|---|---|---|---|---|
| 1 | 128 and 256 | 8192 and 8192 | 64 and 32 | 128 | 4000 | 1 | 2400 | 1 | 1.7 |
| 4 | 128 and 256 | 2048 and 2048 | 16 and 8 | 128 | 15000 | 3.75 | 9100 | 3.79 | 1.6 |
"""


def test_a_multi_node_table_in_nvidias_layout(tmp_path: Path) -> None:
    """Nodes instead of GPUs, precision before "Throughput", pairs in the header's order, no 1-GPU row: the
    1-node row is the reference, less the exchange the simulator prices for it (invented numbers)."""
    path = tmp_path / "multi.md"
    path.write_text(MULTI_NODE, encoding="utf-8")
    rows = read_tables(path)
    assert {(r.gpus, r.precision, r.batch, r.accumulation) for r in rows} == {
        (8, "mixed precision", 256, 32), (8, "tf32", 128, 64), (32, "mixed precision", 256, 8),
        (32, "tf32", 128, 16)}
    frame = validate_training(path).set_index("precision")
    assert set(frame["reference_gpus"]) == {8} and set(frame["gpus"]) == {32}
    assert frame.loc["tf32", "published_scaling"] == pytest.approx(3.79)
    # strong scaling: fewer micro-batches per step, the exchange no longer amortised: below linear
    assert (frame["predicted_scaling"] < 4).all() and (frame["predicted_scaling"] > 3).all()


def test_zero_throughput_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _table(tmp_path, "| 1 | 128 and 256 | 64 and 32 | 128 | 0 | 580 |\n")
    code, _, err = run_cli(capsys, "validate", "--published-training", str(path), "--out", str(tmp_path / "o"))
    assert code == 2 and "throughput" in err and err.strip().count("\n") == 0


def test_a_file_without_tables_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "empty.md"
    path.write_text("# nothing here\n", encoding="utf-8")
    code, _, err = run_cli(capsys, "validate", "--published-training", str(path))
    assert code == 2 and "published-training" in err
