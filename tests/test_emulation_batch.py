"""Many emulated runs: a process pool gives the same frames as one process, and finished runs are kept and
reused (a long reproduction resumes), never reused when a setting changes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from flexcomm.costmodel.errors import InputError
from flexcomm.emulation import batch
from flexcomm.emulation.batch import config_key, run_configs
from flexcomm.emulation.config import EmulationConfig
from flexcomm.experiments.cli import main

BASE = EmulationConfig(workload="mlp-digits", workers=2, strategy="topk-ag", steps=6, eval_every=3)


def test_a_pool_gives_the_frames_one_process_gives_in_the_order_asked(tmp_path: Path) -> None:
    configs = [replace(BASE, seed=1), replace(BASE, strategy="dense"), replace(BASE, seed=2, strategy="topk-ar")]
    alone = run_configs(configs)
    pooled = run_configs(configs, jobs=2)
    for a, b in zip(alone, pooled, strict=True):
        pd.testing.assert_frame_equal(a, b)
    assert [f["strategy"].iloc[0] for f in pooled] == ["topk-ag", "dense", "topk-ar"]


def test_finished_runs_are_kept_and_reused_and_a_changed_setting_is_run_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = run_configs([BASE], cache_dir=tmp_path)
    assert (tmp_path / f"{config_key(BASE)}.csv").is_file()

    def refuse(config: EmulationConfig) -> pd.DataFrame:
        raise AssertionError(f"ran {config} again")

    monkeypatch.setattr(batch, "_run_one", refuse)
    again = run_configs([BASE], cache_dir=tmp_path)
    pd.testing.assert_frame_equal(first[0], again[0], check_dtype=False)
    changed = replace(BASE, ratio=0.02)
    assert config_key(changed) != config_key(BASE)
    with pytest.raises(AssertionError, match="again"):
        run_configs([changed], cache_dir=tmp_path)
    with pytest.raises(AssertionError, match="again"):  # reuse=False recomputes a kept run
        run_configs([BASE], cache_dir=tmp_path, reuse=False)


def test_bad_jobs_and_bad_configs_fail_before_any_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(InputError, match="jobs"):
        run_configs([BASE], jobs=0)
    with pytest.raises(InputError, match="steps"):
        run_configs([BASE, replace(BASE, steps=0)], cache_dir=tmp_path)
    assert not list(tmp_path.iterdir())  # the good run did not start either
    assert main(["reproduce", "adaptation", "--jobs", "0", "--out", str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err.strip().startswith("flexcomm: error: jobs")
