"""The user's own model as a workload: ``module.path:factory`` or ``file.py:factory`` for simulate, plan, whatif."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from flexcomm.costmodel.errors import InputError
from flexcomm.experiments.cli import main
from flexcomm.sim.workload import get_training_workload
from flexcomm.workloads.user_model import build_user_model

MODELS = '''
import torch
from torch import nn


def mlp():
    return nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))


def cnn():
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(16, 10)), (3, 32, 32)


def tokens():
    return nn.Sequential(nn.Embedding(1000, 64), nn.Flatten(), nn.Linear(64 * 128, 10))


def with_batch():
    return nn.Linear(8, 4), torch.randn(5, 8)


def broken():
    raise ValueError("no weights file")


def number():
    return 42


def odd_example():
    return nn.Linear(8, 4), "a tensor"


class Branchy(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        return self.fc(x) if x.sum() > 0 else x


def branchy():
    return Branchy(), (16,)


def exits():
    import sys
    sys.exit(3)


def interrupted():
    raise KeyboardInterrupt


def verbose_failure():
    raise ValueError("x" * 2_000_000)


def chatty():
    print("loading weights...")
    return nn.Linear(8, 4)


class Raising(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        raise RuntimeError("forward broke")


def raising_forward():
    return Raising()


def wrong_example():
    return nn.Linear(8, 4), torch.randn(3, 5)


class Block(nn.Module):
    def __init__(self, d=64):
        super().__init__()
        self.attn = nn.MultiheadAttention(d, 4, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        x = x + self.attn(x, x, x, need_weights=False)[0]
        return x + self.mlp(x)


def gpt():
    return nn.Sequential(nn.Embedding(500, 64), Block(), Block(), nn.Linear(64, 500))


def gpt_with_shape():
    return gpt(), (32,)
'''


@pytest.fixture
def models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "mymodels.py"
    path.write_text(MODELS)
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "nets.py").write_text(MODELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return path


def test_a_file_or_module_factory_is_counted_as_the_zoo_is(models: Path) -> None:
    for reference in (f"{models}:mlp", "pkg.nets:mlp"):
        workload = get_training_workload(reference)
        assert workload.name == "mlp" and workload.model.params == 512 * 1024 + 1024 + 1024 * 1024 + 1024 + 10250
        assert workload.model.forward_flops == pytest.approx(2 * (512 * 1024 + 1024 * 1024 + 1024 * 10))
        assert workload.batch_per_rank == 8  # the inferred example batch
    assert get_training_workload(f"{models}:mlp", 64).batch_per_rank == 64


@pytest.mark.parametrize(("factory", "shape"), [("cnn", (8, 3, 32, 32)), ("tokens", (8, 128)), ("mlp", (8, 512)),
                                                ("with_batch", (5, 8))])
def test_the_example_input_is_given_or_read_off_the_first_layer(models: Path, factory: str, shape: tuple) -> None:
    user = build_user_model(f"{models}:{factory}")
    assert tuple(user.example.shape) == shape and user.batch_size == shape[0]


@pytest.mark.parametrize(("reference", "words"), [
    ("{file}:broken", "it raised ValueError: no weights file"),
    ("{file}:number", "it returned int"),
    ("{file}:odd_example", "an example input"),
    ("{file}:absent", "a callable 'absent'"),
    ("nowhere.py:mlp", "does not exist"),
    ("no_such_package.nets:mlp", "a module path that imports"),
])
def test_a_bad_factory_is_one_line_naming_it(models: Path, reference: str, words: str) -> None:
    reference = reference.format(file=models)
    with pytest.raises(InputError) as err:
        build_user_model(reference)
    message = str(err.value)
    assert message.startswith("model:") and reference in message and words in message and "\n" not in message


def test_simulate_exchanges_ddps_buckets_with_its_1_mib_first_bucket(models: Path, tmp_path: Path) -> None:
    assert main(["simulate", "--cluster", "dgx-a100-80g", "--workload", f"{models}:mlp", "--ranks", "8",
                 "--iterations", "2", "--out", str(tmp_path / "sim")]) == 0
    buckets = pd.read_csv(tmp_path / "sim" / "buckets.csv")
    sizes = buckets[buckets["step"] == 0].sort_values("bucket")["bytes"].tolist()
    # reverse registration order: the last Linear (41 KB) is under DDP's 1 MiB first cap, the middle one (4.2 MB)
    # closes the first bucket; the first Linear (2.1 MB) fills the second (under the 25 MiB cap). Without the first
    # cap, all three would be one bucket.
    assert sizes == [(1024 * 10 + 10 + 1024 * 1024 + 1024) * 4, (512 * 1024 + 1024) * 4]


def test_plan_and_whatif_take_a_factory_and_refuse_an_untraceable_one(models: Path, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--model", f"{models}:cnn", "--cluster", "4x4-a100-v100", "--batch-size", "64",
                 "--out", str(tmp_path / "plan"), "--no-progress"]) == 0
    best = json.loads((tmp_path / "plan" / "best_plan.json").read_text())["best"]
    assert best["step_s"] > 0
    assert main(["whatif", "--model", f"{models}:mlp,resnet50", "--out", str(tmp_path / "w"), "--no-plots"]) == 0
    table = pd.read_csv(tmp_path / "w" / "whatif.csv")
    assert set(table["model"]) == {"mlp", "resnet50"}
    capsys.readouterr()
    assert main(["plan", "--model", f"{models}:branchy", "--cluster", "4x4-a100-v100",
                 "--out", str(tmp_path / "p2"), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "torch.fx" in err and "--op-times" in err
    assert main(["whatif", "--model", "resnet51", "--out", str(tmp_path / "w2")]) == 2
    assert "module.path:factory" in capsys.readouterr().err


def test_a_study_names_a_factory_as_its_workload(models: Path, tmp_path: Path) -> None:
    spec = tmp_path / "study.yaml"
    spec.write_text(f"name: mine\nengine: model\ncluster: 8x1-10gbe\nworkload: {models}:mlp\n"
                    "strategies: [dense, topk-ag]\nsweep:\n  bandwidth: [1Gbit/s, 10Gbit/s]\n  ratio: [0.01]\n"
                    "seed: 0\nmetrics: [step_time_s]\n")
    assert main(["study", str(spec), "--out", str(tmp_path / "st"), "--workers", "0", "--no-progress"]) == 0
    table = pd.read_parquet(tmp_path / "st" / "results.parquet")
    assert len(table) == 4 and (table["step_time_s"] > 0).all()
    spec.write_text(spec.read_text().replace(":mlp", ":broken"))
    with pytest.raises(InputError, match="no weights file"):
        from flexcomm.experiments.study.spec import load_spec

        load_spec(spec)


@pytest.mark.parametrize(("factory", "words"), [
    ("exits", "a factory that runs (it called sys.exit(3))"),
    ("interrupted", "a factory that runs (it raised KeyboardInterrupt)"),
    ("verbose_failure", "(2,000,000 characters)"),
    ("raising_forward", "a model whose forward runs on its example input (it raised RuntimeError: forward broke)"),
    ("wrong_example", "a model whose forward runs on its example input (it raised RuntimeError: mat1 and mat2"),
])
def test_the_users_code_runs_fenced_in_simulate(models: Path, capsys: pytest.CaptureFixture[str], factory: str,
                                                words: str) -> None:
    """SystemExit, KeyboardInterrupt, a 2 MB message, a raising forward, a bad example: each is one readable line
    and exit 2 (SystemExit used to end flexcomm with exit 0 and nothing written; a forward's error was a traceback)."""
    code = main(["simulate", "--cluster", "8x1-10gbe", "--workload", f"{models}:{factory}", "--iterations", "1"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"flexcomm: error: model: got '{models}:{factory}'") and words in err and len(err) < 400


def test_sys_exit_named_as_the_factory_is_refused_too(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--cluster", "8x1-10gbe", "--workload", "sys:exit", "--iterations", "1"]) == 2
    assert "expected a factory that runs (it called sys.exit(None))" in capsys.readouterr().err


def test_what_a_factory_prints_stays_out_of_json(models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--cluster", "8x1-10gbe", "--workload", f"{models}:chatty", "--iterations", "1",
                 "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["config"]["workload"] == "chatty"  # the whole of stdout is the JSON answer
    assert "loading weights" not in out and "printed 1 line(s) to stdout; left out of flexcomm's output" in err


def test_attention_and_token_shapes_are_counted_and_the_input_is_said(models: Path, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The graph planner counted none of nn.MultiheadAttention's parameters (its (output, None) was read as
    shape arithmetic); a sample shape for a model that starts with an embedding was fed floats; and the input
    a price assumed was never printed."""
    import torch

    from flexcomm.planner.graphs import build_graph

    module = build_user_model("mymodels.py:gpt").module
    total = sum(p.numel() for p in module.parameters())
    assert build_graph("mymodels.py:gpt", batch_size=1).graph["parameters"] == total
    user = build_user_model("mymodels.py:gpt_with_shape")
    assert user.example.dtype == torch.int64 and tuple(user.example.shape) == (8, 32)
    assert main(["simulate", "--cluster", "dgx-h100", "--workload", "mymodels.py:gpt", "--iterations", "1"]) == 0
    out = capsys.readouterr().out
    assert "your model: mymodels.py:gpt, input 8 x 128 int64 (assumed from its first layer (Embedding)" in out
    assert main(["plan", "--cluster", "dgx-h100", "--model", "mymodels.py:gpt_with_shape", "--out",
                 str(tmp_path / "plan"), "--no-progress", "--simulate-top", "0"]) == 0
    out = capsys.readouterr().out
    assert f"({total:,} parameters" in out
    assert "your model: mymodels.py:gpt_with_shape, input 8 x 32 int64 (a batch of 8 of the factory's sample" in out


def test_plan_and_simulate_price_the_same_jobs_compute(models: Path, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """One job, one answer: a user's model counted by its FLOPs is priced by plan's pure data-parallel plan and
    by simulate at the same batch per GPU to within 2 % (both at the device's measured matmul rate; plan's flat
    0.65 of peak made them differ by a third)."""
    (tmp_path / "wide.py").write_text(
        "from torch import nn\n\n\ndef wide():\n    layers = []\n    for _ in range(4):\n"
        "        layers += [nn.Linear(4096, 4096), nn.ReLU()]\n    return nn.Sequential(*layers), (4096,)\n")
    reference = f"{tmp_path / 'wide.py'}:wide"
    # a batch large enough that every layer outlasts a kernel launch (simulate's floor per layer)
    assert main(["simulate", "--cluster", "dgx-h100", "--workload", reference, "--batch", "512", "--iterations", "1",
                 "--json"]) == 0
    simulated = json.loads(capsys.readouterr().out)["summary"]["median_compute_s"]
    assert main(["plan", "--cluster", "dgx-h100", "--model", reference, "--batch-size", str(512 * 16), "--out",
                 str(tmp_path / "plan"), "--no-progress", "--simulate-top", "0"]) == 0
    plans = pd.read_csv(tmp_path / "plan" / "plans.csv")
    pure = plans[(plans["dp"] == 16) & (plans["tp"] == 1) & (plans["pp"] == 1) & (plans["micro_batches"] == 1)]
    assert float(pure["compute_s"].iloc[0]) == pytest.approx(simulated, rel=0.02)
