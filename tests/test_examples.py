"""Every Python example in the README, docs/ and the package docstring runs as written.

Each runs in a fresh interpreter in an empty folder (with the repository's ``experiments/``, ``validation/``
and ``workloads/`` beside it, as in a clone). What an example says it assumes is declared just above its block,
``<!-- example-setup: ddp, nccl-tests-log -->``, and provided here: ``ddp`` is a one-rank gloo process
group with a small ``DistributedDataParallel`` model (``ddp``, ``ddp_model``), ``optimizer``, ``loader``
and ``dist``; ``nccl-tests-log`` is a pasted nccl-tests run (``all_reduce_perf.txt``), the cluster it ran on
(``my-cluster.yaml``) and its rows as a measurement CSV (``measurements.csv``); ``trace`` is a
``torch.profiler`` trace of DDP steps (``trace.json``).
"""

from __future__ import annotations

import ast
import gzip
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SETUP = re.compile(r"<!--\s*example-setup:\s*([\w\s,-]+?)\s*-->\s*\n```python\n", re.S)
LOG = ROOT / "validation" / "nccl-tests" / "a100-40g-1n8g-allreduce-testfixture.txt"
TRACE = ROOT / "validation" / "from-trace" / "mlp-3ranks-200mbit.trace.json.gz"

DDP_PRELUDE = """
import socket
import torch
import torch.distributed as dist
with socket.socket() as s:
    s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
torch.manual_seed(0)
ddp = ddp_model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(32, 10))
optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
loader = [(torch.randn(16, 32), torch.randint(0, 10, (16,))) for _ in range(6)]
"""


def _package_docstring_example() -> str:
    """The indented block after ``::`` in ``flexcomm/__init__.py``'s docstring."""
    doc = ast.get_docstring(ast.parse((ROOT / "flexcomm" / "__init__.py").read_text()))
    assert doc is not None
    after = doc.split("::", 1)[1].split("\n\n", 2)[1]  # the paragraph after the blank line
    return textwrap.dedent(after)


def _examples() -> list[tuple[str, str, frozenset[str]]]:
    found = []
    for path in DOCS:
        text = path.read_text()
        for index, match in enumerate(re.finditer(r"```python\n(.*?)```", text, re.S)):
            head = text[: match.start() + len("```python\n")]
            setup = SETUP.search(head[-200:]) if head else None
            names = frozenset(n.strip() for n in setup.group(1).split(",")) if setup else frozenset()
            found.append((f"{path.relative_to(ROOT)}#{index + 1}", match.group(1), names))
    found.append(("flexcomm/__init__.py docstring", _package_docstring_example(), frozenset({"ddp", "trace"})))
    return found


EXAMPLES = _examples()


def _prepare(folder: Path, setups: frozenset[str]) -> str:
    unknown = setups - {"ddp", "nccl-tests-log", "trace"}
    assert not unknown, f"example-setup names no setup this test provides: {sorted(unknown)}"
    for name in ("experiments", "validation", "workloads"):  # workloads/jobs/: the shipped job files
        (folder / name).symlink_to(ROOT / name)
    if "nccl-tests-log" in setups:
        from flexcomm.costmodel.collective_libraries.logs import read_nccl_tests, to_measurements

        shutil.copy(LOG, folder / "all_reduce_perf.txt")
        shutil.copy(LOG.parent / "clusters" / f"{LOG.stem}.yaml", folder / "my-cluster.yaml")
        to_measurements(read_nccl_tests(str(LOG))).to_csv(folder / "measurements.csv", index=False)
    if "trace" in setups:
        (folder / "trace.json").write_bytes(gzip.decompress(TRACE.read_bytes()))
    return DDP_PRELUDE if "ddp" in setups else ""


def test_every_example_is_found_and_declares_only_known_setups() -> None:
    names = [name for name, _, _ in EXAMPLES]
    assert "README.md#1" in names and "docs/python-api.md#2" in names, names
    assert len(EXAMPLES) >= 10


@pytest.mark.parametrize(("name", "code", "setups"), EXAMPLES, ids=[e[0] for e in EXAMPLES])
def test_the_example_runs_as_written(name: str, code: str, setups: frozenset[str], tmp_path: Path) -> None:
    script = _prepare(tmp_path, setups) + "\n" + code
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, f"{name} failed:\n{done.stderr[-3000:]}"
