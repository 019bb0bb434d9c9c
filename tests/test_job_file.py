"""One job file, read by simulate, plan and whatif as the same job (issue 46, part 1).

A job file names the model, the cluster, the batch per device and the rest once; each command turns it into
its own flags and says which, first (on stderr with ``--json``, whose stdout is one JSON document). The
engines must then price the same job: the same batch, and the same compute within 2 %.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.job import JOB_KEYS, Job, job_from_mapping, load_job
from flexcomm.experiments.cli import main

RESNET_JOB = "model: resnet50\ncluster: dgx-a100-80g\nbatch_per_device: 128\nseed: 3\n"
GPT_JOB = ("model: gpt\ngpt: {layers: 4, hidden: 1024, heads: 16, seq_len: 2048}\ncluster: dgx-h100\n"
           "batch_per_device: 2\nprecision: bf16\ntp: 8\n")


def _job(tmp_path: Path, text: str, name: str = "job.yaml") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_simulate_and_plan_price_one_job_file_alike(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same file: the same batch per GPU in both, and the data-parallel plan's compute within 2 % of the
    simulated step's."""
    job = _job(tmp_path, RESNET_JOB)
    assert main(["simulate", "--job", job, "--iterations", "1", "--json"]) == 0
    captured = capsys.readouterr()
    assert f"job {job}: flexcomm simulate --workload resnet50 --cluster dgx-a100-80g --batch 128" in captured.err
    simulated = json.loads(captured.out)
    assert simulated["config"]["batch_per_rank"] == 128
    compute_s = simulated["summary"]["median_compute_s"]
    assert main(["plan", "--job", job, "--out", str(tmp_path / "plan"), "--no-progress", "--simulate-top", "0"]) == 0
    captured = capsys.readouterr()
    assert "--model resnet50 --batch-size 4096" in captured.out.splitlines()[0]  # 128 on each of 32 GPUs
    assert "batch 4,096 (128 a device)" in captured.out
    plans = pd.read_csv(tmp_path / "plan" / "plans.csv")
    pure = plans[(plans["dp"] == 32) & (plans["tp"] == 1) & (plans["pp"] == 1) & (plans["micro_batches"] == 1)]
    assert float(pure["compute_s"].iloc[0]) == pytest.approx(compute_s, rel=0.02)
    # and the whole step: DDP's buckets overlap the backward in both (they differed 2.4 %: the planner put the
    # whole exchange after the backward)
    assert float(pure["step_s"].iloc[0]) == pytest.approx(simulated["summary"]["median_time_s"], rel=0.01)


def test_whatif_ranks_the_job_file_at_its_batch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = _job(tmp_path, RESNET_JOB + "scheme: powersgd\n")
    assert main(["whatif", "--job", job, "--out", str(tmp_path / "w"), "--no-plots"]) == 0
    captured = capsys.readouterr()
    assert "not used by whatif: scheme (every scheme is ranked); seed (nothing random)" in captured.out
    assert "resnet50 (batch 128 per GPU)" in captured.out
    table = pd.read_csv(tmp_path / "w" / "whatif.csv")
    assert set(table["model"]) == {"resnet50"} and set(table["batch_per_gpu"]) == {128}


def test_a_flag_typed_as_well_wins_over_the_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = _job(tmp_path, RESNET_JOB)
    assert main(["simulate", "--job", job, "--batch", "64", "--iterations", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["batch_per_rank"] == 64


def test_a_gpt_job_plans_then_simulates_its_own_plan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = _job(tmp_path, GPT_JOB)
    assert main(["plan", "--job", job, "--out", str(tmp_path / "p"), "--no-progress", "--simulate-top", "0"]) == 0
    printed = capsys.readouterr().out
    assert "--model gpt --layers 4 --hidden 1024 --heads 16 --seq-len 2048 --batch-size 32" in printed
    best = json.loads((tmp_path / "p" / "best_plan.json").read_text())
    assert best["best"]["tp"] == 8 and best["batch_size"] == 32 and best["precision"] == "bf16"
    plan = str(tmp_path / "p" / "best_plan.json")
    assert main(["simulate", "--job", job, "--llm-plan", plan]) == 0
    assert "the plan file's, checked against the job" in capsys.readouterr().out
    # simulate alone cannot price a gpt shape: it says the way that can
    assert main(["simulate", "--job", job]) == 2
    assert "flexcomm plan --job FILE" in capsys.readouterr().err
    # a plan made for another job is refused by the field that differs
    other = _job(tmp_path, GPT_JOB.replace("batch_per_device: 2", "batch_per_device: 4"), "other.yaml")
    assert main(["simulate", "--job", other, "--llm-plan", plan]) == 2
    assert "job.batch_per_device: got 4; expected the plan's 2" in capsys.readouterr().err


def test_the_zoo_transformer_is_planned_as_the_gpt_of_its_shape(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    job = _job(tmp_path, "model: transformer-1.3b\ncluster: dgx-h100\nbatch_per_device: 8\ntp: 1\npp: 1\n")
    assert main(["plan", "--job", job, "--out", str(tmp_path / "p"), "--no-progress", "--simulate-top", "0"]) == 0
    assert "--model gpt --layers 24 --hidden 2048 --heads 16 --seq-len 2048 --vocab 50257" in capsys.readouterr().out


BAD_JOBS = [
    ("cluster: dgx-h100\n", "job.model"),
    ("model: resnet50\n", "job.cluster"),
    (RESNET_JOB.replace("batch_per_device: 128", "batch_per_device: 0"), "job.batch_per_device"),
    (RESNET_JOB + "batch_per_device: 4\n", "job"),  # a key twice: which one was meant?
    (RESNET_JOB.replace("batch_per_device: 128", "batch_per_device: 1.5"), "job.batch_per_device"),
    (RESNET_JOB + "bach: 3\n", "job.bach"),
    (RESNET_JOB + "scheme: zip\n", "job.scheme"),
    (RESNET_JOB + "ratio: 2\n", "job.ratio"),
    (RESNET_JOB + "precision: fp8\n", "job.precision"),
    (RESNET_JOB + "tp: yes\n", "job.tp"),
    (RESNET_JOB + "gpt: {layers: 2}\n", "job.gpt"),
    ("model: gpt\ncluster: dgx-h100\ngpt: {layers: 2}\n", "job.gpt.hidden"),
    ("- a list\n", "job"),
    ("!!python/object/apply:os.system ['touch PWNED']\n", "job"),
]


@pytest.mark.parametrize(("text", "field"), BAD_JOBS)
def test_a_bad_job_file_is_one_line_naming_the_field(text: str, field: str, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["simulate", "--job", _job(tmp_path, text), "--iterations", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"flexcomm: error: {field}: "), err
    assert not (tmp_path / "PWNED").exists()  # a job file is data: its tags run nothing


def test_job_is_refused_where_no_whole_job_is_priced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = _job(tmp_path, RESNET_JOB)
    assert main(["cost", "--job", job]) == 2
    assert "job: got" in capsys.readouterr().err
    assert main(["simulate", "--job", str(tmp_path / "missing.yaml")]) == 2
    assert "job: got" in capsys.readouterr().err


def test_the_python_api_reads_the_same_file(tmp_path: Path) -> None:
    import flexcomm

    path = _job(tmp_path, RESNET_JOB)
    job = flexcomm.load_job(path)
    assert job == Job(model="resnet50", cluster="dgx-a100-80g", batch_per_device=128, seed=3)
    result = flexcomm.plan(job=path, out=tmp_path / "p", no_progress=True, simulate_top=0)
    assert result.summaries["best_plan"]["batch_size"] == 128 * 32


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from([*JOB_KEYS, "typo"]),
                       st.one_of(st.none(), st.booleans(), st.integers(-3, 10**6), st.floats(allow_nan=True),
                                 st.text(max_size=12), st.lists(st.integers(), max_size=2)), max_size=6))
def test_any_mapping_is_a_job_or_an_input_error(data: dict) -> None:
    """Whatever a file holds, the reader answers with a checked Job or one InputError naming a job field."""
    try:
        job = job_from_mapping(data)
    except InputError as error:
        assert error.field.startswith("job")
        return
    assert job.model and job.cluster
    assert job.batch_per_device is None or (isinstance(job.batch_per_device, int) and job.batch_per_device >= 1)
    assert job.ratio is None or 0 < job.ratio <= 1


def test_load_job_reads_json_as_yaml(tmp_path: Path) -> None:
    path = tmp_path / "job.json"
    path.write_text(json.dumps({"model": "vgg16", "cluster": "dgx-h100", "ratio": 0.01, "scheme": "topk-ag"}))
    assert load_job(path) == Job(model="vgg16", cluster="dgx-h100", ratio=0.01, scheme="topk-ag")


def test_a_study_sweeps_around_the_job_file(tmp_path: Path) -> None:
    """``job: FILE`` in a study gives its workload, cluster, seed and batch; a key the study sets itself wins."""
    from flexcomm.experiments.study.spec import load_spec

    _job(tmp_path, RESNET_JOB)
    study = tmp_path / "study.yaml"
    study.write_text("name: around-a-job\njob: job.yaml\nstrategies: [dense, topk-ar]\nsweep:\n  ranks: [8, 32]\n")
    spec = load_spec(study)
    assert spec.workloads == ["resnet50"] and spec.cluster["name"] == "dgx-a100-80g" and spec.seed == 3
    assert {point.params["batch"] for point in spec.points} == {128}
    study.write_text("name: around-a-job\njob: job.yaml\nseed: 7\nstrategies: [dense]\nsweep:\n  batch: [64]\n")
    spec = load_spec(study)
    assert spec.seed == 7 and {point.params["batch"] for point in spec.points} == {64}
    study.write_text("name: around-a-job\njob: missing.yaml\nstrategies: [dense]\n")
    with pytest.raises(InputError, match="^job: "):
        load_spec(study)
