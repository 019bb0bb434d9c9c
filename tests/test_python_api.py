"""Every engine one call away in Python, meaning what its CLI command means (issue 31, item 1)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import flexcomm
from flexcomm.experiments.cli import main
from flexcomm.planner.llm.transformer_plan import plan_transformer

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "validation" / "nccl-tests"
RUN = "a100-40g-1n8g-allreduce-testfixture"


def test_plan_is_the_command_its_table_and_figure_in_one_object(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    result = flexcomm.plan("resnet18", "4x8-a100-ib", batch_size=256, out=tmp_path / "api", no_progress=True)
    assert main(["plan", "--model", "resnet18", "--cluster", "4x8-a100-ib", "--batch-size", "256",
                 "--out", str(tmp_path / "cli"), "--no-progress"]) == 0
    printed = capsys.readouterr().out
    # the same run: the first three lines (model, plans priced, best plan) agree but for the pricing rate
    assert result.report.splitlines()[0] == printed.splitlines()[0]
    assert result.report.splitlines()[2] == printed.splitlines()[2]
    # the engine's table in memory (tuples stay tuples), the command's read back from its CSV: the same plans
    cli_table = pd.read_csv(tmp_path / "cli" / "plans.csv")
    assert list(cli_table["plan"]) == list(result.frame["plan"])
    np.testing.assert_allclose(cli_table["step_s"], result.frame["step_s"], rtol=1e-12)
    assert result.figures["plans"] == tmp_path / "api" / "plans.png" and result.figures["plans"].is_file()
    assert result.summaries["best_plan"]["best"]["plan"] == result.frame["plan"].iloc[0]
    assert "plan" in repr(result) and "plans" in repr(result)


GPT_SMALL = {"layers": 4, "hidden": 256, "heads": 4, "seq_len": 128, "vocab": 1000}


def test_plan_gpt_is_the_engine_itself_and_reports_what_the_command_prints(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster = flexcomm.load_cluster("4x8-a100-ib")
    result = flexcomm.plan("gpt", cluster, batch_size=64, simulate_top=1, **GPT_SMALL)
    engine = plan_transformer(cluster, 64, simulate_top=1, **GPT_SMALL)
    # in memory: nothing written, the engine's own table and summary
    assert result.out is None and result.figures == {}
    pd.testing.assert_frame_equal(result.frame, engine.table())
    assert result.summaries["best_plan"]["best"] == engine.summary()["best"]
    assert result.summaries["best_plan"]["simulated_step_s"] == engine.simulated[engine.best.plan.label]
    # the command line prints the same report (but for the pricing rate) and writes the same table
    flags = [w for k, v in GPT_SMALL.items() for w in ("--" + k.replace("_", "-"), str(v))]
    assert main(["plan", "--model", "gpt", "--cluster", "4x8-a100-ib", "--batch-size", "64", *flags,
                 "--out", str(tmp_path / "cli")]) == 0
    printed = capsys.readouterr().out.splitlines()
    api = result.report.splitlines()
    assert [line for line in api if not line.startswith("priced ")] == \
        [line for line in printed if not line.startswith(("priced ", "wrote "))]
    cli_table = pd.read_csv(tmp_path / "cli" / "plans.csv")
    assert list(cli_table["plan"]) == list(result.frame["plan"])
    np.testing.assert_allclose(cli_table["step_s"], result.frame["step_s"], rtol=1e-12)
    # with out: the command's files, the figure among them
    written = flexcomm.plan("gpt", cluster, batch_size=64, simulate_top=0, out=tmp_path / "api", top=3, **GPT_SMALL)
    assert written.figures["plans"] == tmp_path / "api" / "plans.png" and written.figures["plans"].is_file()
    assert json.loads((tmp_path / "api" / "best_plan.json").read_text())["best"] == engine.summary()["best"]
    assert written.report.splitlines()[-1].startswith("wrote ")


def test_plan_gpt_names_a_wrong_keyword_and_a_wrong_value_in_one_line() -> None:
    with pytest.raises(flexcomm.InputError, match="batch_sise.*a keyword of flexcomm.plan\\('gpt'.*batch_size"):
        flexcomm.plan("gpt", batch_sise=64)
    with pytest.raises(flexcomm.InputError, match="tp: got 3.*a divisor of the 32 GPUs"):
        flexcomm.plan("gpt", "4x8-a100-ib", tp=3, **GPT_SMALL)
    with pytest.raises(flexcomm.InputError, match="seq-len: got 0"):
        flexcomm.plan("gpt", seq_len=0)
    with pytest.raises(flexcomm.InputError, match="top: got True"):
        flexcomm.plan("gpt", top=True)


def test_place_scenario_and_recovery_return_their_main_tables(tmp_path: Path) -> None:
    placed = flexcomm.place("inception", "4x8-a100-ib", method="dp-chain", devices=4, out=tmp_path / "place",
                            no_progress=True)
    assert {"single", "critical-path", "partition", "dp-chain"} <= set(placed.frame["method"])
    assert set(placed.tables) >= {"comparison", "placement", "curves"} and "timeline" in placed.figures

    jobs = flexcomm.scenario(ROOT / "experiments/studies/scenario-two-jobs.yaml", out=tmp_path / "scenario")
    assert jobs.command == "scenario" and (jobs.frame["slowdown"] >= 1.0).all()
    assert "link_utilization" in jobs.figures

    lost = flexcomm.recovery("gpt-1.7b", "4x4-a100-v100", mtbf="1d", horizon="2d", out=tmp_path / "recovery")
    assert list(lost.frame["policy"]) == ["restart", "shrink", "replan", "replan+grow"]
    assert "goodput" in lost.figures and lost.frame["failures"].min() > 0


def test_recovery_defaults_to_a_published_fleet_failure_rate(tmp_path: Path) -> None:
    from flexcomm.sim.recovery import FLEET_NODE_MTBF_S

    # Llama 3's snapshot: one unexpected interruption every ~3.1 h across 2,048 nodes
    assert FLEET_NODE_MTBF_S / 2048 / 3600 == pytest.approx(54 * 24 / 419)
    lost = flexcomm.recovery("gpt-1.7b", "4x4-a100-v100", horizon="2d", out=tmp_path)
    assert "node MTBF 264 d (Llama 3's fleet" in lost.report


def test_nccl_tests_validation_and_calibration_read_a_pasted_log(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    log, cluster = CORPUS / f"{RUN}.txt", CORPUS / "clusters" / f"{RUN}.yaml"
    result = flexcomm.validate_nccl_tests(log, cluster, out=tmp_path)
    assert main(["validate", "--nccl-tests", str(log), "--cluster", str(cluster), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert result.frame["predicted_s"].tolist() == [row["predicted_s"] for row in printed["rows"]]
    assert result.figures[RUN].is_file()

    profile = flexcomm.calibrate(log)
    assert main(["calibrate", str(log), "-o", str(tmp_path / "profile.json")]) == 0
    saved = json.loads((tmp_path / "profile.json").read_text())
    fitted = profile.fits[0].to_dict()
    assert saved["fits"][0]["alpha_s"] == fitted["alpha_s"] and saved["fits"][0]["beta_s_per_byte"] == \
        fitted["beta_s_per_byte"]


def test_validate_published_reads_any_folder_laid_out_like_the_corpus(tmp_path: Path) -> None:
    folder = tmp_path / "corpus"
    (folder / "clusters").mkdir(parents=True)
    shutil.copy(CORPUS / f"{RUN}.txt", folder)
    shutil.copy(CORPUS / "clusters" / f"{RUN}.yaml", folder / "clusters")
    result = flexcomm.validate_published(folder, out=tmp_path / "out", no_progress=True)
    assert set(result.frame["run"]) == {RUN} and RUN in result.figures


def test_keywords_are_the_commands_flags_and_wrong_ones_are_named(tmp_path: Path) -> None:
    with pytest.raises(flexcomm.InputError, match="batch_sise.*a keyword of flexcomm.plan\\('resnet18'.*batch_size"):
        flexcomm.plan("resnet18", batch_sise=64)
    with pytest.raises(flexcomm.InputError, match="no_progress.*True or False"):
        flexcomm.plan("resnet18", no_progress="yes")
    with pytest.raises(flexcomm.InputError, match="top: got True"):
        flexcomm.plan("resnet18", top=True)
    with pytest.raises(flexcomm.InputError, match="batch-size: got 'x'"):
        flexcomm.plan("resnet18", batch_size="x")  # the engine's own check, named as the command line names it
    with pytest.raises(flexcomm.InputError, match="model"):
        flexcomm.plan("resnet-eighteen", out=tmp_path)


def test_plan_of_a_preset_llm_is_the_layout_search_and_prints_what_the_command_prints(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from flexcomm.planner.llm.layout_plan import plan_layout_model

    options = {"gpus": 64, "batch_size": 128, "precision": "fp8"}
    result = flexcomm.plan("llama3-70b", "superpod-h100-16k", out=tmp_path / "api", **options)
    assert main(["plan", "--model", "llama3-70b", "--cluster", "superpod-h100-16k", "--gpus", "64", "--batch-size",
                 "128", "--precision", "fp8", "--out", str(tmp_path / "cli")]) == 0
    printed = capsys.readouterr().out.replace(str(tmp_path / "cli"), str(tmp_path / "api"))
    timing = re.compile(r"in [0-9.]+s;")  # how long pricing took differs run to run
    assert timing.sub("", result.report) == timing.sub("", printed)
    engine = plan_layout_model("llama3-70b", "superpod-h100-16k", **options)
    pd.testing.assert_frame_equal(result.frame, engine.table())
    assert result.summaries["best_layout"]["label"] == engine.best.layout.label
    assert (tmp_path / "api" / "layouts.csv").read_text() == (tmp_path / "cli" / "layouts.csv").read_text()
    assert result.figures["layouts"].is_file()
    with pytest.raises(flexcomm.InputError, match=r"layers.*a keyword of flexcomm.plan\('llama3-70b'"):
        flexcomm.plan("llama3-70b", "superpod-h100-16k", out=None, layers=3)
    with pytest.raises(flexcomm.InputError, match="^gpus: got 0"):
        flexcomm.plan("llama3-70b", "superpod-h100-16k", out=None, gpus=0)


def test_a_job_file_gives_plan_its_fields_and_a_keyword_given_as_well_wins(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("model: llama3-70b\ncluster: superpod-h100-16k\nbatch_per_device: 2\n")
    from_job = flexcomm.plan(job=job, out=None, gpus=64)
    assert from_job.summaries["best_layout"]["batch_size"] == 2 * 16_384  # 2 per GPU of the job's cluster
    result = flexcomm.plan(job=job, out=None, gpus=64, batch_size=128)
    assert result.summaries["best_layout"]["batch_size"] == 128
    assert result.summaries["best_layout"]["cluster"] == "superpod-h100-16k"
    with pytest.raises(flexcomm.InputError, match="^job: got"):
        flexcomm.plan(job=3)


def test_an_empty_string_is_refused_by_its_keyword_as_the_command_line_refuses_it(tmp_path: Path,
                                                                                  monkeypatch: pytest.MonkeyPatch
                                                                                  ) -> None:
    """``out=""`` would be the current folder: each call refuses it (and an empty value in any keyword) before
    it runs, writing nothing."""
    monkeypatch.chdir(tmp_path)
    calls = [lambda: flexcomm.plan("resnet18", out=""), lambda: flexcomm.plan("llama3-70b", out=""),
             lambda: flexcomm.place("inception", out=""),
             lambda: flexcomm.recovery("gpt-1.7b", "4x4-a100-v100", out=""),
             lambda: flexcomm.scenario("experiments/studies/scenario-two-jobs.yaml", out=""),
             lambda: flexcomm.validate_published(out=""), lambda: flexcomm.plan("resnet18", op_times="")]
    for call in calls:
        with pytest.raises(flexcomm.InputError, match=r"^(out|op_times): got ''; expected a non-empty value$"):
            call()
    assert not list(tmp_path.iterdir())


def test_recovery_takes_a_zero_as_a_value_and_refuses_no_policy(tmp_path: Path) -> None:
    from flexcomm.planner.llm.recovery_run import FailureModel, recovery_job

    job = recovery_job("gpt-1.7b", "4x4-a100-v100")
    config = FailureModel(repair_time=0, restart_cost=0).config("restart", job.cluster, job.parameters, job.nodes)
    assert (config.repair_s, config.restart_s) == (0.0, 0.0)  # not the 4 h and 2 min defaults
    for policies in ([], "", " , "):
        with pytest.raises(flexcomm.InputError, match="^recovery: got"):
            flexcomm.recovery("gpt-1.7b", "4x4-a100-v100", policies, out=None)


def test_a_job_s_fields_the_planner_does_not_price_are_left_out_as_the_command_does(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"  # a gpt shape with a seed: the transformer planner has nothing random
    job.write_text("model: gpt\ngpt: {layers: 4, hidden: 256, heads: 4, seq_len: 128, vocab: 1000}\n"
                   "cluster: 4x8-a100-ib\nbatch_per_device: 2\nseed: 3\n")
    result = flexcomm.plan(job=job, out=None)
    assert result.summaries["best_plan"]["batch_size"] == 2 * 32


def test_a_scalar_question_gets_plain_floats() -> None:
    model = flexcomm.CostModel.from_cluster(flexcomm.load_cluster("4x8-a100-ib"))
    assert type(model.collective("allreduce", "hierarchical", "256MiB", 32).total) is float
    assert type(flexcomm.predict("allreduce", "ring", 2**20, 8, latency="10us", bandwidth="10Gbit/s").latency) \
        is float
    many = flexcomm.predict("allreduce", "ring", [2**20, 2**26], 8, latency="10us", bandwidth="10Gbit/s").total
    assert isinstance(many, np.ndarray) and many.shape == (2,)
