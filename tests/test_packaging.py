"""One import root: every engine installs and imports as ``flexcomm.<package>``, imports run downward only."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import networkx as nx
import tomllib

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("costmodel", "sim", "emulation", "compression", "workloads", "real_backend", "planner", "placement",
            "controller", "experiments")
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
                if layer in ENGINES and target.startswith("flexcomm.experiments"):
                    upward.append(f"{path.relative_to(REPO)}:{line} imports {target}")
    # a package's __init__ re-exporting its own submodules is not a cycle between modules of one job
    graph.remove_edges_from([(a, b) for a, b in graph.edges if b.startswith(a + ".") or a.startswith(b + ".")
                             and _is_package(modules[b])])
    cycles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert not cycles, f"import cycles: {cycles}"
    assert not upward, "engines importing experiments:\n" + "\n".join(upward)


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


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
