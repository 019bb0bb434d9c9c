"""Committed documents carry no path of the machine they were made on.

A committed run (``validation/**``), a docs page or a shipped file is read on other machines: a path such as
``/work/<checkout>/results/...`` works only where it was written (a CI run there stays green while every other
machine is red, issue 41). Verbatim copies of published logs (a ``# source: http...`` header) keep their
authors' paths: those name someone else's machine and nothing reads them.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[1]
#: Where a machine's own files live: work trees, homes, temporary folders (macOS's too).
MACHINE_ROOTS = ("/work/", "/home/", "/root/", "/tmp/", "/var/tmp/", "/Users/", "/private/var/folders/")
#: Tracked documents read off this checkout (package data is added from pyproject.toml).
DOCUMENTS = ("validation", "docs", "notebooks", "README.md")


def _roots() -> tuple[str, ...]:
    here = (str(REPO) + "/", str(Path.home()) + "/", tempfile.gettempdir().rstrip("/") + "/")
    return tuple(sorted({*MACHINE_ROOTS, *here}, key=len, reverse=True))


def machine_paths(text: str) -> list[str]:
    """Every absolute path in ``text`` that starts at a machine root (not inside a longer path or a URL)."""
    alternatives = "|".join(re.escape(root) for root in _roots())
    pattern = re.compile(rf"(?<![\w.:/~-])(?:{alternatives})[^\s\"'`),]*")
    return pattern.findall(text)


def _package_data() -> list[str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    globs = []
    for package, patterns in config["package-data"].items():
        folder = config["package-dir"][package]
        globs += [f"{folder}/{pattern}" for pattern in patterns]
    return globs


def _tracked(specs: list[str]) -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z", "--", *specs], cwd=REPO, capture_output=True, text=True,
                            check=True).stdout
    return [REPO / name for name in listed.split("\0") if name]


def _verbatim_copy(text: str) -> bool:
    """A published log copied unchanged: its header names where it came from (``source:``, ``# source:``)."""
    return any(re.match(r"#?\s*source:", line) for line in text.splitlines()[:5])


def test_no_committed_document_names_a_path_of_the_machine_it_was_made_on() -> None:
    found = []
    for path in _tracked([*DOCUMENTS, *_package_data()]):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary (a figure, a gzipped trace)
        if _verbatim_copy(text):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            found += [f"{path.relative_to(REPO)}:{number}: {hit}" for hit in machine_paths(line)]
    assert not found, "machine paths in committed documents:\n" + "\n".join(found[:20])


def test_the_check_finds_the_paths_that_broke_ci_and_leaves_other_text() -> None:
    old_run = '  "profile": "/work/main/results/validate-trace-c1/profile-fast.json",'
    assert machine_paths(old_run) == ["/work/main/results/validate-trace-c1/profile-fast.json"]
    assert machine_paths(f"wrote {tempfile.gettempdir()}/pt/: training.csv") == [f"{tempfile.gettempdir()}/pt/:"]
    assert machine_paths(f"log at {REPO}/results/x.json") == [f"{REPO}/results/x.json"]
    for harmless in ("results/validate-trace-c1/profile.json", "https://example.org/home/user/run.out",
                     "--container-mounts /mnt/home/user_name", "benchmarks/H100/results/20260305/all_reduce.out",
                     "~/tmp/x", "s3://bucket/tmp/x"):
        assert machine_paths(harmless) == [], harmless
