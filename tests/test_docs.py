"""The README and docs/ say only what exists: every link, repository path, command and flag they name.

Commands shown as ``console`` blocks (``$ flexcomm ...`` followed by what it prints) are run as written, in a
fresh folder, and must exit as documented (2 when the shown output is an error, else 0) and print the first
line shown. Commands in ``sh`` blocks and inline are templates (``ID``, ``FILE``, ``N``): their sub-command and
every ``--flag`` must exist for that sub-command.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from flexcomm.experiments.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: Top-level names a backticked path may start with to count as "in this repository".
REPO_ROOTS = ("costmodel/", "sim/", "emulation/", "compression/", "workloads/", "real_backend/", "planner/",
              "placement/", "controller/", "experiments/", "flexcomm/", "notebooks/", "benchmarks/", "tests/",
              "docs/", ".ci/", "validation/")
#: Wall-clock words in printed output ("in 0.02s", "took 3.1 s") differ run to run: such lines are not compared.
TIMING = re.compile(r"\d\s?(ms|s)\b(?!/)|\bin \d")


def _blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of every fenced block; ``console measured`` (a run on real processes, whose measured
    numbers vary run to run) is reported as the language ``console-measured``."""
    return [(m.group(1) + ("-measured" if "measured" in m.group(2) else ""), m.group(3))
            for m in re.finditer(r"```(\w*)([^\n]*)\n(.*?)```", text, re.S)]


def _commands(body: str, console: bool) -> list[tuple[list[str], list[str]]]:
    """(argv after ``flexcomm``, the output lines shown after it) per command of a block."""
    found: list[tuple[list[str], list[str]]] = []
    lines = body.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        text = line[2:] if console and line.startswith("$ ") else line if not console else ""
        while text.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            text = text.rstrip()[:-1] + " " + lines[i].strip()
        i += 1
        if not text.strip().startswith("flexcomm "):
            continue
        output = []
        while console and i < len(lines) and not lines[i].startswith("$ "):
            output.append(lines[i])
            i += 1
        argv = shlex.split(text, comments=True)[1:]
        found.append((argv, [o for o in output if o.strip()]))
    return found


def _all_commands() -> list[tuple[str, list[str], list[str], str]]:
    out = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for lang, body in _blocks(text):
            console = lang.startswith("console")
            for argv, shown in _commands(body, console=console):
                out.append((path.name, argv, shown, lang if console else ""))
        prose = re.sub(r"```.*?```", "", text, flags=re.S)
        for inline in re.findall(r"`(flexcomm [^`]+)`", prose):
            out.append((path.name, inline.split()[1:], [], ""))
    return out


COMMANDS = _all_commands()


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return {flag for action in parser._actions for flag in action.option_strings}


def test_docs_name_commands_and_flags_that_exist() -> None:
    commands = _subparsers(build_parser())
    problems = []
    for page, argv, _, _ in COMMANDS:
        if not argv or argv[0].startswith("-"):
            continue
        name = argv[0].split("|")[0]
        if name not in commands:
            problems.append(f"{page}: flexcomm {name}: no such command")
            continue
        parser = commands[name]
        nested = _subparsers(parser)
        rest = argv[1:]
        if nested and rest and rest[0].split("|")[0] in nested:
            parser, rest = nested[rest[0].split("|")[0]], rest[1:]
        known = _flags(parser) | {"--help", "-h"}
        for token in rest:
            if token == "--":
                break  # what follows is the launched program's own command line
            flag = token.split("=")[0]
            if flag.startswith("--") and flag not in known and flag != "--...":
                problems.append(f"{page}: flexcomm {' '.join(argv[:2])}: no flag {flag}")
    assert not problems, "\n".join(problems)


def test_docs_link_and_name_files_that_exist() -> None:
    problems = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if target.startswith(("http://", "https://", "#", "mailto:")):
                continue
            if not (path.parent / target.split("#")[0]).exists():
                problems.append(f"{path.name}: link to {target}")
        for token in re.findall(r"`([^`\s]+)`", text):
            if not token.startswith(REPO_ROOTS) or "<" in token or "{" in token:
                continue
            name = token.rstrip(".,:;)")
            matches = list(ROOT.glob(name)) if "*" in name else [ROOT / name] if (ROOT / name).exists() else []
            if not matches:
                problems.append(f"{path.name}: {name} does not exist")
    assert not problems, "\n".join(problems)


CONSOLE = [(page, argv, shown, console) for page, argv, shown, console in COMMANDS if console]


#: Wall-clock numbers in printed output ("in 0.02s", "1.21s", "59,361 plans/s") differ run to run: masked.
WALL_CLOCK = re.compile(r"\b\d[\d,.]*\s?(?:ms|us|s|min|h)\b(?!/)|\b\d[\d,.]*\s?(?:plans|points|steps|it|runs)/s\b")


#: Every number, for a ``console measured`` block (a real run: its measured times and what follows from them vary).
NUMBER = re.compile(r"[-+]?\d[\d,.]*")


def _masked(line: str, measured: bool = False) -> str:
    line = WALL_CLOCK.sub("<time>", line.rstrip())
    return NUMBER.sub("<n>", line) if measured else line


def compare_whole(shown: list[str], printed: list[str], measured: bool = False) -> str:
    """'' when every shown line is printed, in order and back to back, its wall-clock numbers masked (every number,
    for a ``measured`` block); a line of ``...`` in the docs stands for lines left out. Otherwise what differs
    first."""
    wanted = [_masked(line, measured) for line in shown]
    got = [_masked(line, measured) for line in printed if line.strip()]
    position = 0
    gap = False
    for line in wanted:
        if line.strip() in ("...", "…"):
            gap = True
            continue
        if gap:
            try:
                position = got.index(line, position) + 1
            except ValueError:
                return f"not printed (after a ...): {line!r}"
            gap = False
            continue
        if position >= len(got) or got[position] != line:
            found = got[position] if position < len(got) else "<nothing>"
            return f"shown {line!r}\nprinted {found!r}"
        position += 1
    return ""


def _writers_of_inputs(page: str, argv: list[str]) -> list[list[str]]:
    """The page's earlier console commands whose ``--out`` folder holds a file this command reads (a page
    shows `plan --out results/p`, then a command reading ``results/p/best_plan.json``), as they run."""
    reads = [Path(a) for i, a in enumerate(argv) if a.startswith("results/") and (i == 0 or argv[i - 1] != "--out")]
    writers = []
    for other_page, other, _, _ in CONSOLE:
        if other_page == page and other == argv:
            break  # only what the page ran before this command
        if other_page != page:
            continue
        out = other[other.index("--out") + 1] if "--out" in other[:-1] else None
        if out and any(Path(out) in path.parents for path in reads):
            writers.append([str(ROOT / a) if a.startswith(REPO_ROOTS) and (ROOT / a).exists() else a for a in other])
    return writers


@pytest.mark.parametrize(("page", "argv", "shown", "console"), CONSOLE,
                         ids=[f"{page}: {' '.join(argv)[:60]}" for page, argv, _, _ in CONSOLE])
def test_console_examples_run_as_written(page: str, argv: list[str], shown: list[str], console: str,
                                         tmp_path: Path) -> None:
    """Issue 42: the docs' output is compared whole, line by line, not by its first line."""
    # paths into this repository stay paths into it; everything the command writes lands in a fresh folder
    args = [str(ROOT / a) if a.startswith(REPO_ROOTS) and (ROOT / a).exists() else a for a in argv]
    for earlier in _writers_of_inputs(page, argv):  # `simulate --llm-plan results/p/best_plan.json` after `plan`
        subprocess.run([sys.executable, "-m", "flexcomm.experiments.cli", *earlier], cwd=tmp_path, check=True,
                       capture_output=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    proc = subprocess.run([sys.executable, "-m", "flexcomm.experiments.cli", *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    expected_error = bool(shown) and shown[0].startswith("flexcomm: error:")
    assert proc.returncode == (2 if expected_error else 0), proc.stderr[-2000:]
    printed = (proc.stdout + proc.stderr).replace(str(ROOT) + "/", "").splitlines()
    problem = compare_whole(shown, printed, measured=console == "console-measured")
    assert not problem, f"{page}: flexcomm {' '.join(argv)[:80]}\n{problem}"


def test_the_whole_output_comparison_catches_a_changed_number_under_the_first_line() -> None:
    printed = ["first line", "took 0.5 s here", "the answer is 42", "last"]
    assert compare_whole(["first line", "took 0.7 s here", "the answer is 42", "last"], printed) == ""
    assert compare_whole(["first line", "...", "last"], printed) == ""
    assert "43" in compare_whole(["first line", "took 0.5 s here", "the answer is 43"], printed)
    assert compare_whole(["first line", "took 0.5 s here", "the answer is 43", "last"], printed, measured=True) == ""


def test_the_development_picture_has_exactly_the_import_graph_s_arrows_between_engines() -> None:
    """docs/development.md opens with the engines and what flows between them; an arrow that is not an import, or
    an import between engines the picture leaves out, makes the picture lie."""
    from test_packaging import ENGINES, _imports, _modules

    text = (ROOT / "docs" / "development.md").read_text(encoding="utf-8")
    block = re.search(r"```mermaid\n(.*?)```", text, re.S)
    assert block, "docs/development.md has no mermaid picture"
    drawn = set(re.findall(r"^\s*(\w+) -->\|[^|]+\| (\w+)\s*$", block.group(1), re.M))
    engines = {*ENGINES, "validation"}
    imported = set()
    for name, path in _modules().items():
        source = name.split(".")[1] if name.count(".") else ""
        for target, _ in _imports(path):
            parts = target.split(".")
            if source in engines and len(parts) > 1 and parts[0] == "flexcomm" and parts[1] in engines \
                    and parts[1] != source:
                imported.add((source, parts[1]))
    assert drawn == imported, (f"drawn, not imported: {sorted(drawn - imported)}; "
                               f"imported, not drawn: {sorted(imported - drawn)}")
