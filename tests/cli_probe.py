"""Run the CLI in a child process and measure it: exit status, stderr and the child's peak memory.

Why a child: a refusal must come back within a bound whatever the input (a FIFO, /dev/zero, a fabric of
10^14 cables), so a hang has to fail the test instead of hanging the suite, and memory is the child's own.
"""

from __future__ import annotations

import os
import subprocess
import sys

CLI = [sys.executable, "-m", "flexcomm.experiments.cli"]
#: Far above the one second a refusal should take: the bound that turns a hang into a failure.
HANG_GUARD_S = 60.0


def run_cli_measured(argv: list[str], env: dict[str, str] | None = None) -> tuple[int, str, int]:
    """(exit status, stderr, peak resident bytes) of ``flexcomm ARGV``."""
    code = ("import resource, subprocess, sys\n"
            "p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,"
            f" timeout={HANG_GUARD_S})\n"
            "sys.stderr.write(p.stderr)\n"
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024)\n"
            "sys.exit(p.returncode)")
    proc = subprocess.run([sys.executable, "-c", code, *CLI, *argv], capture_output=True, text=True,
                          timeout=HANG_GUARD_S + 30, env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})
    return proc.returncode, proc.stderr, int(proc.stdout.strip() or 0)
