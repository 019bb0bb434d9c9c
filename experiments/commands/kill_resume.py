"""``python -m flexcomm.experiments.commands.kill_resume --kills 20 --out results/kill-resume``: kill a
checkpointed ``train-ddp`` run at random moments and check each resume ends bitwise as the run never killed.

Why an entry module and not a ``flexcomm`` sub-command: it is the project's own stress test of resume (minutes
of real runs), not a question a user asks of a cluster. The engine is
:func:`flexcomm.real_backend.kill_resume.kill_and_resume`; this module parses the flags, prints one line per
kill and the verdict, and writes ``kill_resume.csv``. Exit 0 when every kill resumed bitwise, 1 when one did
not, 2 for a bad input.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from flexcomm.costmodel.atomic import write_csv_atomic
from flexcomm.costmodel.errors import InputError
from flexcomm.real_backend import kill_resume
from flexcomm.real_backend.kill_resume import KillResult


def kill_line(result: KillResult, kills: int) -> str:
    """``kill 3/20 at 1.52 s (step 17 + 212 ms): resumed from step 16, bitwise``."""
    struck = (f"at {result.kill_at_s:.2f} s (step {result.after_step} + {1e3 * result.delay_s:.0f} ms)"
              if math.isfinite(result.kill_at_s) else "after its end")
    return (f"kill {result.kill + 1}/{kills} {struck}: resumed from step {result.resumed_from_step}, "
            f"{'bitwise' if result.bitwise else 'DIFFERENT'}")


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the flags, run the kills, print and write what they found."""
    parser = argparse.ArgumentParser(prog="python -m flexcomm.experiments.commands.kill_resume",
                                     description=kill_resume.__doc__)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="results/kill-resume")
    args = parser.parse_args(argv)
    try:
        results = kill_resume.kill_and_resume(args.out, args.kills, args.seed,
                                              on_kill=lambda r: print(kill_line(r, args.kills)))
    except InputError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    write_csv_atomic(kill_resume.results_table(results), Path(args.out) / "kill_resume.csv")
    bitwise = sum(r.bitwise for r in results)
    print(f"{bitwise} of {len(results)} killed runs resumed to the uninterrupted run's losses and model, bitwise")
    return 0 if bitwise == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
