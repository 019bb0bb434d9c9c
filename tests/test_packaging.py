"""One import root: every engine installs and imports as ``flexcomm.<package>``, imports run downward only."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import networkx as nx
import tomllib

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("costmodel", "sim", "emulation", "compression", "workloads", "real_backend", "planner", "placement",
            "controller", "experiments", "validation")
#: Engines: the layers below the experiments and the CLI, which must never import upward into them.
ENGINES = ("costmodel", "sim", "emulation", "compression", "workloads", "real_backend", "planner", "placement",
           "controller")


def _modules() -> dict[str, Path]:
    """flexcomm module name -> source file, for every .py under the mapped folders and flexcomm/."""
    found = {}
    for folder in ("flexcomm", *PACKAGES):
        for path in sorted((REPO / folder).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[0] != "flexcomm":
                parts.insert(0, "flexcomm")
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imports(path: Path) -> list[tuple[str, int]]:
    """Every module an import statement in ``path`` names (at any depth: lazy imports count too)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append((node.module, node.lineno))
            names += [(f"{node.module}.{alias.name}", node.lineno) for alias in node.names]
    return names


def test_every_package_folder_is_installed_under_flexcomm() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    folders = {name for name, path in _modules().items() if path.name == "__init__.py"}
    assert folders == listed, f"pyproject.toml packages differ from the folders: {sorted(folders ^ listed)}"
    assert config["package-dir"] == {"flexcomm": "flexcomm", **{f"flexcomm.{p}": p for p in PACKAGES}}


def test_no_module_imports_a_bare_top_level_name() -> None:
    bare = [f"{path.relative_to(REPO)}:{line} imports {name}"
            for path in [*_modules().values(), *(REPO / "tests").glob("*.py"), *(REPO / "benchmarks").glob("*.py"),
                         *(REPO / "notebooks").glob("*.py")]
            for name, line in _imports(path) if name.split(".")[0] in PACKAGES]
    assert not bare, "\n".join(bare)


def test_no_import_cycles_and_no_engine_imports_experiments() -> None:
    modules = _modules()
    graph = nx.DiGraph()
    upward = []
    for name, path in modules.items():
        graph.add_node(name)
        for target, line in _imports(path):
            if target in modules and target != name:
                graph.add_edge(name, target)
                layer = name.split(".")[1] if name.count(".") else ""
                if layer in ENGINES and (target.startswith("flexcomm.experiments") or _is_facade(target)):
                    upward.append(f"{path.relative_to(REPO)}:{line} imports {target}")
    # every edge kept, the root package's and a package __init__'s own included: importing a submodule runs its
    # package first, so a cycle through an __init__ is as real as any other
    cycles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert not cycles, f"import cycles: {cycles}"
    assert not upward, "engines importing experiments or the facade:\n" + "\n".join(upward)


def _is_facade(module: str) -> bool:
    """The public API (``flexcomm`` and its private ``flexcomm._*`` helpers) sits above every engine; only the
    lazy-attribute helper, which imports nothing of the package, is shared."""
    return module == "flexcomm" or module.startswith("flexcomm._") and module != "flexcomm._lazy"


def test_import_flexcomm_is_light_and_installs_no_generic_names(tmp_path: Path) -> None:
    code = ("import sys, flexcomm; print(flexcomm.cost('allreduce', 'ring', ranks=8, size='64MiB', latency='10us', "
            "bandwidth='10Gbit/s')); print(sorted(m for m in sys.modules if m.split('.')[0] in "
            f"{PACKAGES!r})); print('torch' in sys.modules)")
    # from a folder outside the checkout, so only the installed package can answer
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path)
    line, generic, torch = proc.stdout.splitlines()
    assert line.startswith("allreduce/ring over 8 ranks, 64MiB: 94.1ms")
    assert generic == "[]" and torch == "False"


def test_dir_of_the_package_shows_the_api_only() -> None:
    import flexcomm

    names = dir(flexcomm)
    assert {"cost", "simulate", "CostModel", "hooks", "InputError", "__version__"} <= set(names)
    assert not {"TYPE_CHECKING", "annotations", "lazy_getattr", "importlib"} & set(names)
    assert set(names) == set(flexcomm.__all__) | set(flexcomm._SUBMODULES)


def test_the_wheel_in_a_fresh_venv_reads_its_shipped_corpora_outside_the_checkout(tmp_path: Path) -> None:
    """The commands that read shipped data (the nccl-tests corpus, the published training table, Megatron's
    reference) from a wheel installed into a fresh virtual environment, run from a folder outside the checkout:
    a data path found through the checkout would fail here (it worked only in an editable install)."""
    import sysconfig
    import venv

    wheels, fresh, work = tmp_path / "wheels", tmp_path / "fresh", tmp_path / "work"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w",
                    str(wheels), str(REPO)], check=True, capture_output=True)
    (wheel,) = wheels.glob("flexcomm-*.whl")
    venv.EnvBuilder(with_pip=False).create(fresh)
    python = fresh / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--target",
                    str(site), str(wheel)], check=True, capture_output=True)
    # the dependencies (torch, numpy, ...) from this venv, as a plain path: its editable flexcomm finder is a .pth
    # hook that a path entry does not run, so only the wheel's flexcomm is importable
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}

    def flexcomm(*args: str) -> str:
        proc = subprocess.run([str(python), "-m", "flexcomm.experiments.cli", *args], cwd=work, env=env,
                              capture_output=True, text=True, timeout=240)
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc.stdout

    where = subprocess.run([str(python), "-c", "import flexcomm; print(flexcomm.__file__)"], cwd=work, env=env,
                           capture_output=True, text=True, check=True).stdout.strip()
    assert where.startswith(str(site)), where
    shipped = len(list((REPO / "validation" / "nccl-tests").glob("*.txt")))
    first = flexcomm("validate", "--published", "--out", "published", "--no-progress").splitlines()[0]
    assert first.startswith(f"{shipped} runs, "), first
    assert (work / "published" / "errors.csv").is_file()
    training = flexcomm("validate", "--published-training", "--out", "training")
    assert (work / "training" / "training.csv").is_file() and "met by" in training
    flexcomm("reproduce", "megatron", "--out", "megatron")
    assert (work / "megatron" / "megatron.csv").is_file()
