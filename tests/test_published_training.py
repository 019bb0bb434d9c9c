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
    assert (amp["rel_error"] > 0.10).all()
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
    assert len(written) == 42 and {"rel_error", "baseline_rel_error", "description_rel_error"} <= set(written)
    assert "linear scaling" in out and "multi-node rows: model median" in out
    assert (tmp_path / "training.png").exists() and (tmp_path / "training.md").exists()
    assert "met by" in out


def _table(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "t.md"
    path.write_text("## BERT pre-training\n### Pre-training NVIDIA DGX A100 (8x A100 80GB)\n\n"
                    "| GPUs | Batch size / GPU (TF32 and FP16) | Accumulation steps (TF32 and FP16) | Sequence length "
                    "| Throughput - TF32 (sequences/sec) | Throughput - mixed precision (sequences/sec) |\n"
                    "|---|---|---|---|---|---|\n" + body, encoding="utf-8")
    return path


def test_a_row_without_a_reference_is_predicted_from_the_description(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """No row of the run on fewer GPUs: the micro-batch's compute comes from the device catalog, the exchange from
    the simulator; the baseline is that compute scaled linearly (issue 42: such tables crashed)."""
    path = _table(tmp_path, "| 8 | 128 and 256 | 64 and 32 | 128 | 2505 | 4591 |\n")
    code, out, err = run_cli(capsys, "validate", "--published-training", str(path), "--out", str(tmp_path / "o"))
    assert code == 0, err
    frame = pd.read_csv(tmp_path / "o" / "training.csv")
    assert len(frame) == 2 and frame["predicted_from"].str.startswith("the description").all()
    assert (frame["predicted_throughput"] == frame["description_throughput"]).all()
    assert (frame["baseline_throughput"] > frame["predicted_throughput"]).all()  # the exchange costs something
    assert "no 1-GPU rows" in out and (tmp_path / "o" / "training.png").exists()


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
    assert frame.loc["tf32", "published_scaling"] == pytest.approx(9100 / 2400)
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


MULTI_NODE_SHIPPED = SHIPPED.parent / "multi-node.md"


def test_nvidias_multi_node_layout_is_read_as_nodes_times_gpus_per_node() -> None:
    """Issue 42: ``Nodes`` and ``GPUs / node`` were read with GPUs / node as the total (every row 8 GPUs); the
    printed contradictions of the PyTorch BERT table are read the one way that makes a row's columns agree."""
    from flexcomm.experiments.published_training import read_corpus

    corpus = read_corpus(MULTI_NODE_SHIPPED)
    bert = [r for r in corpus.rows if r.model == "bert-pretraining"]
    assert sorted({r.gpus for r in bert}) == [8, 16, 32, 64, 128, 256]
    assert {r.nodes for r in bert} == {1, 2, 4, 8, 16, 32}
    tf32 = {(r.seq_len, r.gpus): r for r in bert if r.precision == "tf32"}
    assert tf32[(128, 8)].batch == 128 and "126 as printed" in tf32[(128, 8)].note
    mixed_4 = next(r for r in bert if r.precision == "mixed precision" and r.seq_len == 128 and r.nodes == 4)
    assert (mixed_4.batch, mixed_4.accumulation) == (256, 8) and "read from 2048 / 256" in mixed_4.note
    reasons = dict(corpus.skipped)
    assert any("tensorflow script's exchange is not modelled" in why for why in reasons.values())
    assert any("the model efficientnet" in why for why in reasons.values())


def test_multi_node_rows_carry_the_linear_baseline_and_the_reported_verdict() -> None:
    from flexcomm.experiments.published_training import class_summary, validate_training

    frame = validate_training([SHIPPED, MULTI_NODE_SHIPPED])
    multi = frame[frame["scale"] == "multi-node"]
    assert len(multi) == 20 and set(multi["reference_gpus"]) == {8}
    linear = multi["reference_throughput"] * multi["gpus"] / 8
    assert multi["baseline_throughput"].to_numpy() == pytest.approx(linear.to_numpy())
    # where communication is a visible share (TF32, sequence 512, 32 nodes) the model stays optimistic, and
    # linear scaling more so: the verdict is the comparison, not a flattering number
    worst = multi[(multi["precision"] == "tf32") & (multi["seq_len"] == 512) & (multi["gpus"] == 256)].iloc[0]
    assert 0 < worst["rel_error"] < worst["baseline_rel_error"]
    summary = class_summary(frame)
    assert set(summary["scale"]) == {"one node", "multi-node"}
    assert (summary["model_closer"] == (summary["model_median_abs_error"] < summary["baseline_median_abs_error"])).all()


def test_tables_that_cannot_be_read_safely_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import os

    fifo = tmp_path / "pipe.md"
    os.mkfifo(fifo)
    code, _, err = run_cli(capsys, "validate", "--published-training", str(fifo))
    assert code == 2 and "FIFO" in err and err.strip().count("\n") == 0
    huge = _table(tmp_path, "| 1000000000 | 128 and 256 | 64 and 32 | 128 | 317 | 580 |\n")
    code, _, err = run_cli(capsys, "validate", "--published-training", str(huge), "--out", str(tmp_path / "o"))
    assert code == 2 and "GPUs" in err and err.strip().count("\n") == 0


def test_the_command_prints_the_engine_s_answer_and_writes_its_files(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """`validate --published-training` is one engine call (its counts and verdicts computed there, reachable
    from Python) turned into lines and files."""
    from flexcomm.experiments.published_training_report import console_lines
    from flexcomm.experiments.published_training_validation import validate_published_training

    result = validate_published_training()
    assert main(["validate", "--published-training", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[:-1] == console_lines(result)
    assert printed[-1].startswith(f"wrote {tmp_path}/: training.csv")
    within, linear, met = result.within_target()
    assert f"model {within} of {len(result.frame)}, linear scaling {linear} of" in "\n".join(printed)
    assert met == int(result.frame["meets_target"].sum())
    assert (tmp_path / "compute.csv").is_file() and (tmp_path / "training.png").is_file()
