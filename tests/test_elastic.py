"""Elastic runs on real ranks (gloo, loopback): a killed rank, the job re-formed on the survivors, resumed from its
checkpoint with the loss running on, and the time it lost set beside the recovery simulator's prediction."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from flexcomm.costmodel.errors import InputError
from flexcomm.experiments.cli import main
from flexcomm.real_backend.elastic import launch_elastic, parse_elastic
from flexcomm.real_backend.elastic_report import measure
from flexcomm.real_backend.elastic_train import ElasticWorkerConfig, parse_fail, worker_main
from flexcomm.real_backend.launch import POLL_S
from flexcomm.real_backend.worker_config import to_argument


def worker(**options: object) -> list[str]:
    """The elastic worker's command line with these :class:`ElasticWorkerConfig` fields (its one JSON argument)."""
    return [sys.executable, "-m", "flexcomm.real_backend.elastic_train", to_argument(ElasticWorkerConfig(**options))]


def test_a_killed_rank_leaves_a_smaller_job_that_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    out, logs = tmp_path / "run", tmp_path / "logs"
    result = launch_elastic(worker(steps=30, checkpoint_every_steps=5, resume=True, out=str(out), fail="rank1@12",
                                   step_sleep_s=0.02), 2, 3, log_dir=logs, timeout_s=240, quiet=True)
    assert result.returncode == 0 and [r.world_size for r in result.rounds] == [3, 2]
    assert result.rounds[0].failed_rank == 1 and result.rounds[0].returncode == 137  # SIGKILL
    steps = pd.read_csv(out / "steps.csv")
    trained = steps[steps["event"].isna()]
    assert trained["step"].max() == 30 and set(trained["attempt"]) == {0, 1}
    resumed = steps[steps["event"] == "resumed"]
    assert list(resumed["step"]) == [10]  # the last checkpoint before step 12
    report = measure(logs, out)
    assert report["failure_step"] == 12 and report["last_checkpoint_step"] == 10 and report["loss_continuous"]
    assert report["measured_lost_s"] > report["measured_redo_s"] > 0
    assert report["predicted"]["lost_work"] == pytest.approx(2.5 * report["median_step_s"], rel=1e-6)
    assert report["predicted"]["detection"] == pytest.approx(POLL_S)  # peers on one host fail at once
    # start-up is CPU-bound: 2 ranks after 3 start in max(1, 2/C) / max(1, 3/C) of round 0's start-up
    cores = report["cores"]
    assert report["predicted"]["restart"] == pytest.approx(
        report["startup_s"] * max(1.0, 2 / cores) / max(1.0, 3 / cores), rel=1e-9)
    assert json.loads((out / "elastic_report.json").read_text())["failed_rank"] == 1
    assert (out / "elastic.png").exists()


def test_too_few_survivors_stop_the_job(tmp_path: Path) -> None:
    result = launch_elastic(worker(steps=20, out=str(tmp_path / "run"), fail="rank0@3"), 2, 2,
                            log_dir=tmp_path / "logs", timeout_s=120, quiet=True)
    assert result.returncode == 137 and len(result.rounds) == 1


@pytest.mark.parametrize("text", ["4:3", "0:2", "three", "2-4", ""])
def test_elastic_ranges_are_checked(text: str) -> None:
    with pytest.raises(InputError) as info:
        parse_elastic(text)
    assert info.value.field == "elastic"


def test_launch_refuses_an_elastic_max_other_than_nproc(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["launch", "--nproc", "2", "--elastic", "1:3", "--log-dir", str(tmp_path), "--", "true"]) == 2
    assert capsys.readouterr().err.strip().startswith("flexcomm: error: elastic:")


def test_resume_from_another_models_checkpoint_is_refused_before_the_rendezvous(tmp_path: Path) -> None:
    import torch

    torch.save({"workload": "resnet-synthetic", "numel": 5, "step": 3}, tmp_path / "checkpoint.pt")
    with pytest.raises(InputError) as info:
        worker_main(ElasticWorkerConfig(resume=True, out=str(tmp_path)))
    assert info.value.field == "resume"
    with pytest.raises(InputError):
        parse_fail("node2@30")


def test_train_ddp_checkpoints_resumes_and_reports_an_elastic_run(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    code = main(["train-ddp", "--strategy", "dense", "--elastic", "2:3", "--steps", "20", "--checkpoint-every", "5",
                 "--fail", "rank1@8", "--out", str(out), "--timeout", "4min"])
    assert code == 0
    text = capsys.readouterr().out
    assert "lost rank 1 at step 8 (3 -> 2 ranks, resumed from step 5)" in text
    assert json.loads((out / "elastic_report.json").read_text())["world_after"] == 2


@pytest.mark.parametrize("argv, field", [
    (["--strategy", "dense", "--checkpoint-every", "0"], "checkpoint-every"),
    (["--strategy", "moo", "--resume"], "strategy"),  # its ratio controller is not checkpointed
    (["--strategy", "powersgd", "--checkpoint-every", "5"], "strategy"),
    (["--strategy", "dense,topk-ag@0.01", "--resume"], "strategy"),  # one strategy per checkpointed run
    (["--strategy", "topk-ag", "--resume"], "ratio"),
    (["--strategy", "dense", "--elastic", "3:2"], "elastic"),
    (["--strategy", "dense", "--elastic", "2:3", "--fail", "node1@3"], "fail"),
])
def test_train_ddp_refuses_bad_checkpoint_options(argv: list[str], field: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train-ddp", *argv, "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.strip().startswith(f"flexcomm: error: {field}:")


def test_a_compressed_elastic_run_checkpoints_each_ranks_error_feedback(tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    code = main(["train-ddp", "--strategy", "topk-ar@0.05", "--elastic", "2:3", "--steps", "16", "--checkpoint-every",
                 "5", "--fail", "rank1@8", "--out", str(out), "--timeout", "4min"])
    assert code == 0
    assert "lost rank 1 at step 8 (3 -> 2 ranks, resumed from step 5)" in capsys.readouterr().out
    import torch

    # the survivors wrote step 15's memory, committed by the checkpoint of step 15; every older step's file (the
    # lost rank's of step 5 among them) went once that checkpoint was renamed into place
    assert sorted(p.name for p in out.glob("compressor-rank*.pt")) == ["compressor-rank0-step15.pt",
                                                                        "compressor-rank1-step15.pt"]
    assert sorted(p.name for p in out.glob("random-rank*.pt")) == ["random-rank0-step15.pt", "random-rank1-step15.pt"]
    states = [torch.load(out / f"compressor-rank{r}-step15.pt", weights_only=True) for r in range(2)]
    assert all(s["step"] == 15 and s["compressor"] == "topk-ar" and s["residuals"] for s in states)
    assert all(float(r.abs().sum()) > 0 for s in states for r in s["residuals"].values())  # real memory, not zeros
    steps = pd.read_csv(out / "steps.csv")
    events = steps["event"].fillna("").tolist()
    assert events[events.index("resumed") + 1] == "residuals 2/2"
    assert json.loads((out / "elastic_report.json").read_text())["loss_continuous"]


def test_a_resumed_run_is_bitwise_the_uninterrupted_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Same batches (the stream skips to the step, not reseeded), same generators, same residuals: the losses
    after the checkpoint equal the uninterrupted run's to the last bit."""
    common = ["train-ddp", "--strategy", "topk-ar", "--ratio", "0.05", "--nproc", "2", "--checkpoint-every", "4",
              "--timeout", "4min"]
    assert main([*common, "--steps", "8", "--out", str(tmp_path / "straight")]) == 0
    assert main([*common, "--steps", "4", "--out", str(tmp_path / "resumed")]) == 0
    assert main([*common, "--steps", "8", "--resume", "--out", str(tmp_path / "resumed")]) == 0
    capsys.readouterr()
    straight = pd.read_csv(tmp_path / "straight" / "steps.csv")
    resumed = pd.read_csv(tmp_path / "resumed" / "steps.csv")
    assert list(resumed.loc[resumed["event"] == "resumed", "step"]) == [4]

    def losses(frame: pd.DataFrame) -> list[float]:
        rows = frame[frame["event"].isna() & (frame["step"] > 4)]
        return rows.sort_values("step")["loss"].tolist()

    assert len(losses(straight)) == 4 and losses(resumed) == losses(straight)
