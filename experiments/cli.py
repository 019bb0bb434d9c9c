"""``flexcomm`` command line: one sub-command per module in :mod:`experiments.commands`.

Every bad input ends the same way: one line ``flexcomm: error: <field>: <what was wrong>`` on
stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from flexcomm.costmodel.errors import InputError
from flexcomm.experiments.commands import COMMANDS

EXIT_BAD_INPUT = 2


class _OneLineParser(argparse.ArgumentParser):
    """argparse prints usage plus the error; we want the error alone on one line, exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise InputError("arguments", " ".join(sys.argv[1:]) or "(none)", message)


def build_parser() -> argparse.ArgumentParser:
    parser = _OneLineParser(
        prog="flexcomm",
        description="Workbench for communication-efficient distributed training: cost model, "
        "simulator, real backend.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_OneLineParser)
    sub.required = True
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        return int(args.handler(args) or 0)
    except InputError as error:
        if error.field == "arguments":
            print(f"flexcomm: error: {error.expected}", file=sys.stderr)
        else:
            print(f"flexcomm: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as error:  # an output or input path the user named cannot be used (not a directory, no space...)
        where = error.filename if error.filename is not None else "path"
        print(f"flexcomm: error: {where}: {error.strerror or error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("flexcomm: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
