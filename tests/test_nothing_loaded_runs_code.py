"""Nothing a user is handed runs code (issue 44, item 1): a crafted checkpoint or YAML file is refused in one
line with exit 2, and the command it was meant to run never runs. Checkpoints load with torch's weights-only
unpickler (tensors and plain values); YAML with the safe loader, duplicate keys refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from flexcomm.costmodel.documents import parse_document
from flexcomm.costmodel.errors import InputError
from flexcomm.experiments.cli import main
from flexcomm.real_backend.checkpoints import load_state, random_state, restore_random_state


class _Payload:
    """Unpickling this calls os.system: what a crafted checkpoint carries."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.marker}",))


def _refusal(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err.strip()


def _resume(out: Path, steps: int = 4) -> list[str]:
    return ["train-ddp", "--strategy", "dense", "--nproc", "2", "--steps", str(steps), "--checkpoint-every", "2",
            "--resume", "--out", str(out), "--timeout", "60s"]


def test_a_crafted_checkpoint_is_refused_by_the_launcher_and_runs_nothing(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    marker = tmp_path / "pwned"
    out = tmp_path / "run"
    out.mkdir()
    torch.save({"model": _Payload(marker), "optimizer": {}, "step": 2, "workload": "mlp-digits", "numel": 1},
               out / "checkpoint.pt")
    line = _refusal(capsys, _resume(out))
    assert line.startswith("flexcomm: error: resume:") and "posix.system" in line and len(line) < 300
    assert not marker.exists()
    assert not (out / "logs").exists()  # refused before any rank started


def test_crafted_residuals_and_random_state_files_run_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    for name in ("compressor-rank0-step2.pt", "random-rank0-step2.pt"):
        torch.save({"step": 2, "residuals": _Payload(marker)}, tmp_path / name)
        with pytest.raises(InputError, match="weights-only"):
            load_state(tmp_path / name)
    assert not marker.exists()


@pytest.mark.parametrize("damage", ["truncated", "not-a-dict", "text", "fifo", "past-the-end", "other-model"])
def test_a_damaged_or_foreign_checkpoint_is_one_line_from_the_launcher(damage: str, tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str],
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # a run folder as people name it (the line's length counts the path)
    out = Path("run")
    out.mkdir()
    checkpoint = out / "checkpoint.pt"
    good = {"model": {}, "optimizer": {}, "step": 2, "workload": "mlp-digits", "numel": 1}
    if damage == "truncated":
        torch.save(good, checkpoint)
        checkpoint.write_bytes(checkpoint.read_bytes()[:200])
    elif damage == "not-a-dict":
        torch.save([1, 2, 3], checkpoint)
    elif damage == "text":
        checkpoint.write_text("model: none\n")
    elif damage == "fifo":
        os.mkfifo(checkpoint)
    elif damage == "past-the-end":
        from flexcomm.workloads import get_workload

        numel = sum(p.numel() for p in get_workload("mlp-digits").build_model(0).parameters())
        torch.save({**good, "numel": numel, "step": 4}, checkpoint)
    else:
        torch.save({**good, "workload": "resnet-synthetic"}, checkpoint)
    line = _refusal(capsys, _resume(out))
    assert line.startswith("flexcomm: error: resume:") and len(line) < 300, line
    if damage == "past-the-end":
        assert "step 4" in line and "--steps" in line


def test_the_generators_state_round_trips_through_a_weights_only_load(tmp_path: Path) -> None:
    import random

    import numpy as np

    torch.manual_seed(3)
    np.random.seed(4)
    random.seed(5)
    np.random.standard_normal()  # a cached gaussian in numpy's state
    torch.save(random_state(7), tmp_path / "random.pt")
    expected = (torch.rand(3), np.random.standard_normal(3), random.random())
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    state = load_state(tmp_path / "random.pt")
    assert state["step"] == 7
    restore_random_state(state)
    again = (torch.rand(3), np.random.standard_normal(3), random.random())
    assert torch.equal(expected[0], again[0]) and np.array_equal(expected[1], again[1]) and expected[2] == again[2]


def test_a_crafted_yaml_file_runs_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    marker = tmp_path / "pwned"
    crafted = tmp_path / "cluster.yaml"
    crafted.write_text(f'name: !!python/object/apply:os.system ["touch {marker}"]\nnodes: 2\n')
    line = _refusal(capsys, ["cost", "--cluster", str(crafted), "--collective", "allreduce", "--size", "1MiB",
                             "--ranks", "8"])
    assert line.startswith("flexcomm: error: cluster") and not marker.exists()
    study = tmp_path / "study.yaml"
    study.write_text(f'name: !!python/object/new:os.system ["touch {marker}"]\n')
    _refusal(capsys, ["study", str(study), "--out", str(tmp_path / "out")])
    assert not marker.exists()


@pytest.mark.parametrize("text, where", [("nodes: 2\nname: a\nnodes: 4\n", "'nodes' at line 1 and line 3"),
                                         ("gpu_fabric: {nics: 8, nics: 4}\n", "'nics' at line 1 and line 1")])
def test_a_key_written_twice_is_refused_not_silently_the_last(text: str, where: str) -> None:
    with pytest.raises(InputError, match="duplicate keys") as error:
        parse_document(text, "yaml", "c.yaml", "cluster")
    assert where in str(error.value)
    with pytest.raises(InputError, match="duplicate keys"):
        parse_document('{"fits": [], "fits": []}', "json", "p.json", "profile")
    assert parse_document("a: &x {k: 1}\nb:\n  <<: *x\n  k: 2\n", "yaml", "m.yaml", "f") == {"a": {"k": 1},
                                                                                            "b": {"k": 2}}
