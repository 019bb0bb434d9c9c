"""The worker processes flexcomm starts (ranks, delay line, trace supervisor) take one JSON argument: a frozen
dataclass built and checked by the parent, read back and checked again by the child, with no argument parser."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from flexcomm.costmodel.errors import InputError
from flexcomm.real_backend import bench, ddp_train
from flexcomm.real_backend.bench import BenchWorkerConfig
from flexcomm.real_backend.ddp_train import DDPWorkerConfig, parse_strategies
from flexcomm.real_backend.delayline import DelayLineConfig
from flexcomm.real_backend.elastic_train import ElasticWorkerConfig
from flexcomm.real_backend.trace_control import SupervisorConfig
from flexcomm.real_backend.worker_config import config_from_argv, from_argument, to_argument

CONFIGS = [
    DDPWorkerConfig(strategy="dense,topk-ar@0.1", out="/tmp/run", ratio=0.01, latency_s=5e-5, bandwidth_Bps=1.25e8,
                    duration_s=2.5, overlap=False, torch_profile=True),
    BenchWorkerConfig(sizes_bytes=(1024, 4096), out="/tmp/m.csv", collectives=("allreduce",), op_timeout_s=3.0),
    ElasticWorkerConfig(out="/tmp/e", steps=30, checkpoint_every_steps=5, resume=True, fail="rank1@12",
                        step_sleep_s=0.02),
    DelayLineConfig(delay_s=0.0125, state_file="/run/x", owner_pid=42, control_file="/run/x.delay"),
    SupervisorConfig(testbed_id="t1", trace_csv="/run/t1.trace.csv", repeat=True),
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: type(c).__name__)
def test_a_config_crosses_the_process_boundary_unchanged(config: object) -> None:
    text = to_argument(config)
    assert set(json.loads(text)) == {field.name for field in dataclasses.fields(config)}
    assert from_argument(type(config), text) == config


@pytest.mark.parametrize(("text", "field"), [
    ("not json", "config"), ("[1, 2]", "config"), ('{"out": "/tmp/e", "checkpoint_every": 5}', "config"),
    ("{}", "config"), ('{"out": "/tmp/e", "steps": 0}', "steps"), ('{"out": "/tmp/e", "fail": "node1@3"}', "fail"),
])
def test_a_malformed_argument_is_one_input_error_naming_the_field(text: str, field: str) -> None:
    with pytest.raises(InputError) as info:
        from_argument(ElasticWorkerConfig, text)
    assert info.value.field == field and "\n" not in str(info.value)


def test_configs_check_their_values_where_they_are_built() -> None:
    with pytest.raises(InputError, match="^strategy"):
        DDPWorkerConfig(strategy="nope", out="/tmp/run")
    with pytest.raises(InputError, match="^iters"):
        BenchWorkerConfig(sizes_bytes=(1024,), out="/tmp/m.csv", iters=0)
    with pytest.raises(InputError, match="^delay"):
        DelayLineConfig(delay_s=-1.0)


def test_the_rank_commands_carry_one_json_argument(tmp_path: Path) -> None:
    specs = parse_strategies("dense,topk-ar", 0.05)
    cmd = ddp_train.worker_command("mlp-digits", specs, 4, tmp_path, ratio=0.05, latency_s=1e-4, overlap=False)
    assert cmd[1:3] == ["-m", "flexcomm.real_backend.ddp_train"] and len(cmd) == 4
    config = from_argument(DDPWorkerConfig, cmd[3])
    assert (config.strategy, config.steps, config.out, config.latency_s, config.overlap) == (
        "dense,topk-ar", 4, str(tmp_path.resolve()), 1e-4, False)
    cmd = bench.worker_command([1024, 2048], ["allreduce"], 1, 3, tmp_path / "m.csv", "inter", op_timeout_s=2)
    assert cmd[1:3] == ["-m", "flexcomm.real_backend.bench"] and len(cmd) == 4
    assert from_argument(BenchWorkerConfig, cmd[3]).sizes_bytes == (1024, 2048)


def test_a_worker_main_refuses_anything_but_one_argument_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        config_from_argv(ElasticWorkerConfig, "flexcomm elastic", ["--steps", "3"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("flexcomm elastic: error: argv:") and err.count("\n") == 1


def test_a_worker_started_with_a_malformed_argument_exits_2_with_one_line() -> None:
    proc = subprocess.run([sys.executable, "-m", "flexcomm.real_backend.bench", '{"out": "/tmp/m.csv"}'],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("flexcomm bench: error: config:") and proc.stderr.count("\n") == 1
