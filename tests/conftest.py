"""Shared test helpers: whether network namespaces can be made here, and a private testbed state dir."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import flexcomm  # noqa: F401 - first, so torch's CPU kernels are pinned before any test runs one


def _netns_unavailable() -> str | None:
    """Why the shaped-network testbed cannot run here, or None when it can."""
    if os.geteuid() != 0:
        return "needs root (network namespaces and tc need CAP_NET_ADMIN)"
    if shutil.which("ip") is None or shutil.which("tc") is None:
        return "needs iproute2's ip and tc"
    if subprocess.run(["ip", "netns", "list"], capture_output=True).returncode != 0:
        return "`ip netns` is unavailable here"
    return None


NETNS_UNAVAILABLE = _netns_unavailable()
needs_netns = pytest.mark.skipif(NETNS_UNAVAILABLE is not None, reason=NETNS_UNAVAILABLE or "")


@pytest.fixture
def private_testbed_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Testbed state files of this test only, so parallel runs never see each other's testbeds."""
    state = tmp_path / "state"
    monkeypatch.setenv("FLEXCOMM_TESTBED_DIR", str(state))
    return state


@pytest.fixture(autouse=True)
def every_saved_figure_reads_at_a_glance() -> Iterator[dict[str, list[str]]]:
    """Every figure any test makes is checked as it is saved (tests/figure_check.py): tick labels on every
    axis, every series visible and distinct, legend entries that name something. A test fails on the first
    figure that hides a series, whichever command drew it."""
    from figure_check import capture_figures

    with capture_figures() as found:
        yield found
    FIGURES_CHECKED.update(found)
    problems = {name: issues for name, issues in found.items() if issues}
    assert not problems, "figures that do not read at a glance:\n" + "\n".join(
        f"  {name}: {issue}" for name, issues in problems.items() for issue in issues)


#: Every figure file name any test saved (and so checked) in this session.
FIGURES_CHECKED: set[str] = set()


def _documented_figures() -> list[str]:
    """The figure files docs/figures.md lists, as glob patterns (``whatif_<model>.png`` -> ``whatif_*.png``)."""
    import re

    table = (Path(__file__).resolve().parents[1] / "docs" / "figures.md").read_text(encoding="utf-8")
    names = re.findall(r"`([\w<>.-]+\.png)`", table)
    return sorted({re.sub(r"<[^>]+>", "*", name) for name in names})


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """On a full run, every documented figure must have been drawn (and checked) by some test."""
    import fnmatch

    whole_suite = not session.config.option.keyword and not session.config.option.markexpr and all(
        Path(arg).resolve() == Path(__file__).resolve().parent for arg in session.config.args)
    if exitstatus != 0 or not whole_suite:
        return
    missing = [p for p in _documented_figures() if not fnmatch.filter(FIGURES_CHECKED, p)]
    if missing:
        session.config.get_terminal_writer().line(
            "figures in docs/figures.md that no test drew (so none was checked): " + ", ".join(missing), red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
