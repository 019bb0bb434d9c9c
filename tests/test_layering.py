"""The shape of the code the refactoring issue asked for, held: small modules, short functions, and imports that
show the dependency graph (the package's own modules imported at module level, lazily only for a heavy library).

Why tests and not a style guide: each of these drifted before (a 1,460-line cluster module, 600 function-level
imports hiding a cycle); a limit that a test checks is one that stays.
"""

from __future__ import annotations

import ast
import importlib
from functools import cache
from pathlib import Path

from test_packaging import REPO, _modules

#: What "a heavy optional library" means for a lazy import: each takes a second or more to import, and the CLI's
#: start and ``import flexcomm`` must not pay for one they do not use.
HEAVY = frozenset({"torch", "torchvision", "matplotlib", "dask", "distributed", "sklearn", "IPython", "simgrid"})
MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 80


def _parsed() -> dict[str, tuple[Path, ast.Module]]:
    return {name: (path, ast.parse(path.read_text(encoding="utf-8"))) for name, path in _modules().items()}


@cache
def _lazy_names(package: str) -> dict[str, str]:
    """A package's lazily loaded attributes (its ``_LAZY``: name -> defining module)."""
    try:
        return dict(getattr(importlib.import_module(package), "_LAZY", {}) or {})
    except ImportError:
        return {}


def _loaded_by(node: ast.Import | ast.ImportFrom, modules: set[str]) -> tuple[set[str], set[str]]:
    """(the package's own modules, the third-party top-level packages) one import statement loads."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif node.level == 0 and node.module:
        lazy = _lazy_names(node.module) if node.module in modules else {}
        names = [node.module, *(f"{node.module}.{a.name}" for a in node.names),
                 *(lazy[a.name] for a in node.names if a.name in lazy)]
    else:
        names = []
    own, third = set(), set()
    for name in names:
        parts = name.split(".")
        if parts[0] != "flexcomm":
            third.add(parts[0])
            continue
        own.update(".".join(parts[:i]) for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in modules)
    return own, third


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"
            or isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _module_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    found = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        elif isinstance(node, (ast.If, ast.Try)) and not (isinstance(node, ast.If) and _is_type_checking(node)):
            found += [n for n in node.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    return found


def _heavy_libraries() -> dict[str, frozenset[str]]:
    """Module -> the heavy libraries importing it loads, through its own and its packages' module-level imports."""
    parsed = _parsed()
    modules = set(parsed)
    direct: dict[str, tuple[set[str], set[str]]] = {}
    for name, (_, tree) in parsed.items():
        own, heavy = set(), set()
        for node in _module_level_imports(tree):
            o, t = _loaded_by(node, modules)
            own |= o
            heavy |= t & HEAVY
        parts = name.split(".")
        own |= {".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in modules}
        direct[name] = (own - {name}, heavy)
    closed: dict[str, frozenset[str]] = {}

    def close(name: str, seen: frozenset[str]) -> frozenset[str]:
        if name in closed:
            return closed[name]
        own, heavy = direct[name]
        result = set(heavy)
        for other in own - seen:
            result |= close(other, seen | {name})
        closed[name] = frozenset(result)
        return closed[name]

    return {name: close(name, frozenset()) for name in parsed}


def test_own_modules_are_imported_inside_a_function_only_to_put_off_a_heavy_library() -> None:
    parsed = _parsed()
    heavy = _heavy_libraries()
    modules = set(parsed)
    needless = []
    for name, (path, tree) in parsed.items():
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if not isinstance(node, (ast.Import, ast.ImportFrom)):
                    continue
                own, third = _loaded_by(node, modules)
                if not own or third:
                    continue
                deferred = set().union(*(heavy[m] for m in own)) - heavy[name]
                if not deferred:
                    needless.append(f"{path.relative_to(REPO)}:{node.lineno} {ast.unparse(node)}")
    assert not needless, "imports of the package's own modules inside functions, deferring no heavy library " \
                         "(import them at module level):\n" + "\n".join(needless)


def test_no_module_is_over_800_lines() -> None:
    long = [f"{path.relative_to(REPO)}: {n} lines" for path in _modules().values()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES]
    assert not long, f"modules over {MAX_MODULE_LINES} lines (split them along their seams):\n" + "\n".join(long)


def test_no_function_is_over_80_lines() -> None:
    long = []
    for path, tree in _parsed().values():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name}: {lines} lines")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines (one job each):\n" + "\n".join(long)


#: The command-line layer: the only modules that parse argv. Everything else is an engine taking typed parameters.
CLI_LAYER = ("flexcomm.experiments.commands", "flexcomm.experiments.cli")


def _in_cli_layer(name: str) -> bool:
    return any(name == layer or name.startswith(layer + ".") for layer in CLI_LAYER)


def test_no_engine_parses_argv_or_takes_a_namespace() -> None:
    """An engine that reads ``argparse`` flags can only be driven by a command line; the API and other engines
    need its typed function. Only the CLI layer (and the API facade, which calls engines) may use argparse."""
    offenders = []
    for name, (path, tree) in _parsed().items():
        if _in_cli_layer(name) or name == "flexcomm" or name.startswith("flexcomm._"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                if any(n.split(".")[0] == "argparse" for n in names):  # a Namespace needs argparse too
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno} imports argparse")
    assert not offenders, "engines parsing argv (move the flags to experiments/commands):\n" + "\n".join(offenders)
