"""``flexcomm`` command line: one sub-command per module in :mod:`experiments.commands`.

Every bad input ends the same way: one line ``flexcomm: error: <field>: <what was wrong>`` on
stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence

from flexcomm.costmodel.errors import InputError, RunStoppedError
from flexcomm.experiments.commands import COMMANDS

EXIT_BAD_INPUT = 2


class _OneLineParser(argparse.ArgumentParser):
    """argparse prints usage plus the error; we want the error alone on one line, exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise InputError("arguments", " ".join(sys.argv[1:]) or "(none)", message)


def _chosen_parsers(parser: argparse.ArgumentParser, handler: object) -> list[argparse.ArgumentParser]:
    """The parsers from ``parser`` down to the (sub-)command whose handler runs (``controller train``...)."""
    if parser.get_default("handler") is handler:
        return [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                path = _chosen_parsers(child, handler)
                if path:
                    return [parser, *path]
    return []


def _refuse_empty_values(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``--out ''`` (an unset shell variable) must not mean "the current folder" or "no cluster"."""
    for chosen in _chosen_parsers(parser, getattr(args, "handler", None)):
        for action in chosen._actions:
            value = getattr(args, action.dest, None)
            if value == action.const:  # `--congestion` alone: the option's own empty value means "defaults"
                continue
            if action.option_strings and (value == "" or (isinstance(value, list) and "" in value)):
                raise InputError(action.option_strings[-1].lstrip("-"), "", "a non-empty value")


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
        _refuse_empty_values(parser, args)
        return int(args.handler(args) or 0)
    except InputError as error:
        if error.field == "arguments":
            print(f"flexcomm: error: {error.expected}", file=sys.stderr)
        else:
            print(f"flexcomm: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except RunStoppedError as error:
        print(f"flexcomm: error: {error}", file=sys.stderr)
        return error.exit_status
    except BrokenPipeError:  # `flexcomm clusters | head`: the reader left; not an error of ours
        with contextlib.suppress(OSError):
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115  (so the interpreter's final flush is silent)
        return 0
    except OSError as error:  # an output or input path the user named cannot be used (not a directory, no space...)
        where = error.filename if error.filename is not None else "path"
        print(f"flexcomm: error: {where}: {error.strerror or error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("flexcomm: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
