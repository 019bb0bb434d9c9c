"""``validate --published`` and ``validate --nccl-tests`` as engines returning data (issue 45, items 1-2): the
command and ``flexcomm.validate_*`` read one result, the command's lines are the ones it always printed, and
bad input is one line naming the field from the engine itself."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

import flexcomm
from flexcomm.costmodel.collective_libraries.log_check import check_nccl_tests, report_lines
from flexcomm.experiments.cli import main
from flexcomm.experiments.published import validate_published
from flexcomm.experiments.published_report import summary_lines

CORPUS = Path(__file__).resolve().parents[1] / "validation" / "nccl-tests"
RUN = "a100-40g-1n8g-allreduce-testfixture"
LOG, CLUSTER = CORPUS / f"{RUN}.txt", CORPUS / "clusters" / f"{RUN}.yaml"


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    folder = tmp_path / "corpus"
    (folder / "clusters").mkdir(parents=True)
    shutil.copy(LOG, folder)
    shutil.copy(CLUSTER, folder / "clusters")
    return folder


def test_the_log_engine_is_what_the_command_prints(capsys: pytest.CaptureFixture[str]) -> None:
    check = check_nccl_tests(LOG, CLUSTER)
    assert main(["validate", "--nccl-tests", str(LOG), "--cluster", str(CLUSTER)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed == report_lines(check)
    # the lines it printed before the engine was split out of the command
    assert printed[0] == f"{LOG}: allreduce, 8 ranks on {RUN}"
    assert printed[1] == "       bytes     measured    predicted    error  baseline  algorithm"
    assert printed[2] == "     1048576       78.8us         40us   -49.2%    -38.9%  ring/ll"
    assert printed[-2] == ("rows >= 1 MiB: median |error| 27.7%, worst 49.2% (11 rows); baseline (alpha-beta at "
                           "the datasheet rates) 38.9%")
    assert printed[-1] == (f"hint: this log can calibrate {RUN}'s NCCL model: flexcomm calibrate --cluster "
                           f"{CLUSTER} {LOG}")


def test_the_api_reads_the_log_engines_result(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    check = check_nccl_tests(LOG, CLUSTER, algorithm="ring")
    result = flexcomm.validate_nccl_tests(LOG, CLUSTER, out=tmp_path, algorithm="ring")
    pd.testing.assert_frame_equal(result.frame, check.table())
    assert result.report.splitlines() == report_lines(check)
    assert main(["validate", "--nccl-tests", str(LOG), "--cluster", str(CLUSTER), "--algorithm", "ring", "--json"]) == 0
    assert result.summaries["printed"] == json.loads(capsys.readouterr().out)
    assert result.figures == {RUN: tmp_path / f"{RUN}.png"} and result.figures[RUN].is_file()


def test_the_api_reads_the_corpus_engines_result(corpus: Path, tmp_path: Path) -> None:
    engine = validate_published(corpus, progress=False)
    result = flexcomm.validate_published(corpus, out=tmp_path / "out", no_progress=True)
    pd.testing.assert_frame_equal(result.frame, engine.table())
    written = pd.read_csv(tmp_path / "out" / "errors.csv")
    assert list(written.columns) == list(result.frame.columns)
    assert written["predicted_s"].tolist() == result.frame["predicted_s"].tolist()
    assert result.summaries["summary"] == engine.summary()
    assert result.report.splitlines()[:2] == summary_lines(engine)
    assert set(result.figures) == {RUN} and result.figures[RUN].is_file()
    unwritten = flexcomm.validate_published(corpus, out=None, no_progress=True)
    assert unwritten.figures == {} and len(unwritten.frame) == len(result.frame)


def test_bad_input_is_one_line_naming_the_field(corpus: Path, tmp_path: Path) -> None:
    with pytest.raises(flexcomm.InputError, match="algoritm.*a keyword of flexcomm.validate_nccl_tests"):
        flexcomm.validate_nccl_tests(LOG, CLUSTER, algoritm="ring")
    with pytest.raises(flexcomm.InputError, match="progress.*a keyword of flexcomm.validate_published"):
        flexcomm.validate_published(corpus, out=None, progress=False)
    with pytest.raises(flexcomm.InputError, match="no_progress.*True or False"):
        flexcomm.validate_published(corpus, out=None, no_progress="yes")
    with pytest.raises(flexcomm.InputError, match="^published: "):
        flexcomm.validate_published(tmp_path / "nothing", out=None)
    with pytest.raises(flexcomm.InputError, match="^cluster: got None"):
        check_nccl_tests(LOG, None)
    with pytest.raises(flexcomm.InputError, match="^cluster: .*8 ranks"):
        flexcomm.validate_nccl_tests(LOG, "dgx-a100-80g")
