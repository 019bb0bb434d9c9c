"""The GPU check's steps and the kill/resume stress test: engines in ``real_backend`` that return data, entry
modules in ``experiments/commands`` that parse flags and print (issue 45); the same lines, files and exits."""

from __future__ import annotations

import ast
import json
import math
from pathlib import Path

import pytest

from flexcomm.costmodel.errors import InputError
from flexcomm.experiments.commands import gpu_compute as gpu_compute_cli
from flexcomm.experiments.commands import gpu_kit as gpu_kit_cli
from flexcomm.experiments.commands import gpu_topk as gpu_topk_cli
from flexcomm.experiments.commands import kill_resume as kill_resume_cli
from flexcomm.real_backend import gpu_compute, gpu_kit, gpu_topk, kill_resume
from flexcomm.real_backend.kill_resume import KillResult

ENGINES = (gpu_compute, gpu_kit, gpu_topk, kill_resume)


@pytest.mark.parametrize("engine", ENGINES, ids=lambda m: m.__name__)
def test_the_engine_parses_no_flags(engine: object) -> None:
    tree = ast.parse(Path(engine.__file__).read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert "argparse" not in imported and not hasattr(engine, "main")


def test_a_kill_is_printed_as_before() -> None:
    struck = KillResult(2, 17, 0.212, 1.5249, 16, 60, True, True)
    assert kill_resume_cli.kill_line(struck, 20) == ("kill 3/20 at 1.52 s (step 17 + 212 ms): resumed from step 16, "
                                                     "bitwise")
    missed = KillResult(0, 60, 0.05, math.nan, 60, 60, True, False)
    assert kill_resume_cli.kill_line(missed, 3) == "kill 1/3 after its end: resumed from step 60, DIFFERENT"
    table = kill_resume.results_table([struck, missed])
    assert list(table.columns)[-1] == "bitwise" and list(table["bitwise"]) == [True, False]


def test_zero_kills_is_one_line_naming_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(InputError) as error:
        kill_resume.kill_and_resume(tmp_path, kills=0)
    assert error.value.field == "kills"
    assert kill_resume_cli.main(["--kills", "0", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == "error: kills: got 0; expected an integer >= 1\n"
    assert not any(tmp_path.iterdir())  # refused before any run


def test_the_kit_prints_what_the_image_already_holds(capsys: pytest.CaptureFixture[str]) -> None:
    needs = gpu_kit.image_needs()
    assert set(needs) <= gpu_kit.image_packages() and not set(needs) & set(gpu_kit.missing())
    assert "numpy" in needs and "torch" not in needs
    assert gpu_kit_cli.main(["--print-image-needs"]) == 0
    assert capsys.readouterr().out == " ".join(f"{n}=={v}" for n, v in needs.items()) + "\n"


def test_gpu_topk_prints_the_rows_it_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "topk.json"
    assert gpu_topk_cli.main(["--device", "cpu", "--sizes", "20000", "--ratios", "0.01", "--repeats", "1",
                              "--numel", "4000", "--workers", "2", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    printed = capsys.readouterr().out.splitlines()
    assert printed == [f"# gpu_topk on cpu, torch {result['torch']}",
                       *map(gpu_topk_cli.selection_line, result["selection"]),
                       *map(gpu_topk_cli.exchange_line, result["exchanges"])]
    assert printed[1].startswith("n=     20,000 ratio=0.01   topk ") and printed[2].startswith("dense      exchange ")


@pytest.mark.parametrize(("flag", "field"), [("--repeats", "repeats"), ("--workers", "workers"),
                                             ("--numel", "numel"), ("--sizes", "sizes")])
def test_gpu_topk_refuses_a_count_below_one_naming_it(flag: str, field: str,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert gpu_topk_cli.main(["--device", "cpu", flag, "0"]) == 2
    assert capsys.readouterr().err == f"gpu_topk: {field}: got 0; expected an integer >= 1\n"
    with pytest.raises(InputError) as error:
        gpu_topk.measure(gpu_topk.cuda_device("cpu"), **{field: [0] if field == "sizes" else 0})
    assert error.value.field == field


def test_gpu_compute_refuses_an_unknown_section_or_no_repeats(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert gpu_compute.section_names("gemm, step,", 1) == ["gemm", "step"]
    with pytest.raises(InputError) as error:
        gpu_compute.section_names(["gemm", "flops"], 1)
    assert error.value.field == "sections"
    with pytest.raises(InputError) as error:
        gpu_compute.section_names("gemm", 0)
    assert error.value.field == "repeats"
    assert gpu_compute_cli.main(["--device", "cpu", "--sections", "gemm,flops", "--out", str(tmp_path / "x.csv")]) == 2
    assert capsys.readouterr().err == ("gpu_compute: sections: got 'flops'; expected some of gemm, layer, "
                                       "compression, step\n")
    assert not (tmp_path / "x.csv").exists()
