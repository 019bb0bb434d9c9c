"""DDP communication hooks on 2 real gloo ranks: exactness at ratio 1.0, PowerSGD, casts, the adaptive hooks.

One ``flexcomm train-ddp`` launch (process start-up dominates) runs every strategy from the same weights and
data; the tests read what rank 0 logged. With 2 ranks every sum is exact whatever the order and dividing by 2
is exact, so a Top-k hook keeping every element (ratio 1.0) must give plain DDP's losses **bitwise**.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pandas as pd
import pytest
import torch

from flexcomm.costmodel.errors import InputError
from flexcomm.experiments.cli import main
from flexcomm.real_backend.ddp_train import parse_hidden, parse_strategies
from flexcomm.real_backend.hooks import EXCHANGE_COLUMNS, compression_hook, parse_records, timed_powersgd_hook

STEPS = 6
STRATEGIES = ["builtin", "dense", "topk-ag@1.0", "topk-ar@1.0", "topk-ar-var@1.0", "powersgd", "fp16",
              "flexible@0.1", "moo", "randomk"]  # randomk takes --ratio: the README's example passes it that way


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ddp")
    code = main(["train-ddp", "--nproc", "2", "--workload", "mlp-digits", "--strategy", ",".join(STRATEGIES),
                 "--steps", str(STEPS), "--ratio", "0.5", "--compute-steps", "2", "--out", str(out),
                 "--timeout", "120s",
                 "--op-timeout", "60s", "--latency", "200us", "--bandwidth", "1Gbit/s",
                 "--log-dir", str(out / "logs")])
    logs = "".join(p.read_text() for p in sorted((out / "logs").glob("rank*.log")))
    assert code == 0, logs
    return out


def steps(run: Path, label: str) -> pd.DataFrame:
    # read the losses as text: "exactly" means the same float repr, not approximately equal
    return pd.read_csv(run / label / "steps.csv", dtype={"loss": str})


def test_ratio_reaches_the_ranks_and_the_summary_reads_plainly(run: Path) -> None:
    assert set(steps(run, "randomk")["ratio"].astype(float)) == {0.5}  # --ratio, not a NAME@RATIO label
    log = (run / "logs" / "rank0.log").read_text()
    builtin = next(line for line in log.splitlines() if line.startswith("builtin "))
    assert "nan" not in builtin and "not timed" in builtin  # DDP's own allreduce has no hook to time


def test_hooks_carry_the_exact_return_annotation_ddp_requires() -> None:
    for hook in (compression_hook, timed_powersgd_hook):
        assert inspect.signature(hook).return_annotation == torch.futures.Future[torch.Tensor]


def test_topk_hooks_at_ratio_one_reproduce_plain_allreduce_losses_exactly(run: Path) -> None:
    reference = list(steps(run, "builtin")["loss"])
    assert len(reference) == STEPS
    for label in ("dense", "topk-ag@1.0", "topk-ar@1.0", "topk-ar-var@1.0"):
        assert list(steps(run, label)["loss"]) == reference, label
    # and they really sent values + indices (2x the dense bytes at ratio 1.0)
    dense = steps(run, "dense")["payload_bytes"].iloc[-1]
    assert steps(run, "topk-ag@1.0")["payload_bytes"].iloc[-1] == 2 * dense
    assert set(steps(run, "topk-ar@1.0")["scheme"]) == {"topk-ar"}


def test_powersgd_hook_is_torchs_and_trains(run: Path) -> None:
    frame = steps(run, "powersgd")
    losses = frame["loss"].astype(float)
    assert losses.iloc[-1] < losses.iloc[0]
    assert list(frame["scheme"][:2]) == ["powersgd-warmup-allreduce"] * 2  # start_powerSGD_iter = 2
    assert set(frame["scheme"][2:]) == {"powersgd"}
    dense = steps(run, "dense")["payload_bytes"].iloc[-1]
    assert (frame["payload_bytes"][2:] < dense / 10).all()
    records = parse_records(frame["records"].iloc[-1])
    assert [c for c, _, _ in records] == ["allreduce"] * 3  # uncompressed, P, Q


def test_fp16_hook_stays_close_to_plain_ddp(run: Path) -> None:
    fp16 = steps(run, "fp16")["loss"].astype(float)
    reference = steps(run, "builtin")["loss"].astype(float)
    assert (fp16 - reference).abs().max() < 2e-3
    assert steps(run, "fp16")["payload_bytes"].iloc[-1] == steps(run, "dense")["payload_bytes"].iloc[-1] // 2


def test_every_step_and_exchange_is_logged_with_predicted_and_measured_seconds(run: Path) -> None:
    for label in STRATEGIES[1:]:
        frame = steps(run, label)
        assert list(frame["step"]) == list(range(STEPS))
        assert (frame["step_s"] > 0).all() and (frame["predicted_comm_s"] > 0).all(), label
        exchanges = pd.read_csv(run / label / "exchanges.csv")
        assert tuple(exchanges.columns) == EXCHANGE_COLUMNS
        assert set(exchanges["step"]) == set(range(STEPS))
        assert (exchanges["measured_comm_s"] > 0).all() and (exchanges["predicted_comm_s"] > 0).all()
        summary = json.loads((run / label / "summary.json").read_text())
        assert summary["compute_only_s"] > 0 and summary["median_step_s"] > 0
    run_info = json.loads((run / "run.json").read_text())
    assert run_info["ranks"] == 2 and run_info["strategies"] == STRATEGIES


def test_flexible_hook_logs_its_decisions(run: Path) -> None:
    exchanges = pd.read_csv(run / "flexible@0.1" / "exchanges.csv")
    assert set(exchanges["scheme"]) <= {"topk-ag", "topk-ar"}
    for column in ("pred_topk-ag_s", "pred_topk-ar_s", "flex_pred_comm_s", "est_alpha_s", "est_beta_s_per_byte"):
        assert exchanges[column].notna().all() and (exchanges[column] > 0).all(), column
    chosen = exchanges.apply(lambda r: r["pred_topk-ag_s"] if r["scheme"] == "topk-ag" else r["pred_topk-ar_s"],
                             axis=1)
    assert (chosen == exchanges["flex_pred_comm_s"]).all()
    assert (exchanges["ratio"] == 0.1).all()
    summary = json.loads((run / "flexible@0.1" / "summary.json").read_text())
    assert summary["decisions"] == len(exchanges)


def test_moo_hook_chooses_a_ratio_online(run: Path) -> None:
    exchanges = pd.read_csv(run / "moo" / "exchanges.csv")
    events = exchanges["ratio_event"].dropna()
    assert events.iloc[0].startswith("initial->")
    assert exchanges["ratio"].iloc[0] == 0.1  # the largest candidate until the first front
    assert (exchanges["ratio"].between(0.001, 0.1)).all()
    summary = json.loads((run / "moo" / "summary.json").read_text())
    assert summary["moo_events"][0]["reason"] == "initial"
    assert steps(run, "moo")["loss"].astype(float).notna().all()


def test_strategy_lists_are_validated() -> None:
    specs = parse_strategies("dense, topk-ag@0.5,topk-ar", 0.01)
    assert [(s.label, s.strategy, s.ratio) for s in specs] == [
        ("dense", "dense", None), ("topk-ag@0.5", "topk-ag", 0.5), ("topk-ar", "topk-ar", 0.01)]
    for bad, ratio in [("nope", None), ("topk-ag", None), ("topk-ag@2", None), ("dense@0.1", None),
                       ("dense,dense", None), ("", None), ("topk-ag@x", None)]:
        with pytest.raises(InputError):
            parse_strategies(bad, ratio)
    assert parse_hidden("1024, 512") == (1024, 512)
    with pytest.raises(InputError):
        parse_hidden("0")


def test_bad_train_ddp_arguments_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--strategy", "topk-ag"], ["--strategy", "bogus"], ["--strategy", "dense", "--hidden", "x"],
                 ["--strategy", "dense", "--nproc", "0"], ["--strategy", "dense", "--bandwidth", "fast"]):
        assert main(["train-ddp", "--out", str(tmp_path / "x"), *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("flexcomm: error:") and "\n" not in err


def test_a_run_keeps_the_profile_it_priced_with_beside_its_run_json(tmp_path: Path) -> None:
    """Issue 41: ``run.json`` names the profile relative to the run folder, which holds a copy, so the folder
    replays on any machine (an absolute path of the machine it was made on worked only there)."""
    from flexcomm.costmodel.calibration import CalibrationProfile, FitResult

    made = tmp_path / "calibration" / "profile-fast.json"
    made.parent.mkdir()
    CalibrationProfile([FitResult("allreduce", "ring", "inter", 1e-4, 1e-9, 8, 0.99, 0.01, 0.02)]).save(made)
    out = tmp_path / "run"
    code = main(["train-ddp", "--nproc", "2", "--workload", "mlp-digits", "--strategy", "dense", "--steps", "1",
                 "--compute-steps", "1", "--out", str(out), "--timeout", "120s", "--op-timeout", "60s",
                 "--profile", str(made), "--log-dir", str(tmp_path / "logs")])
    assert code == 0
    run = json.loads((out / "run.json").read_text())
    assert run["profile"] == "profile.json"
    assert (out / "profile.json").read_text() == made.read_text()
