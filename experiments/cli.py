"""``flexcomm`` command line: one sub-command per module in :mod:`experiments.commands`.

Every bad input ends the same way: one line ``flexcomm: error: <field>: <what was wrong>`` on
stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from flexcomm.costmodel.atomic import output_folder_lock
from flexcomm.costmodel.errors import InputError, RunStoppedError
from flexcomm.costmodel.units import parse_ratio
from flexcomm.experiments.commands import COMMANDS
from flexcomm.experiments.commands.common import os_error_reason
from flexcomm.experiments.commands.job_options import with_job

EXIT_BAD_INPUT = 2


#: argparse's own messages, turned into ``<field>: got ...; expected ...`` like every other refusal.
_BAD_VALUE = re.compile(r"argument (?P<flags>[^:]+): invalid (?P<kind>\S+) value: (?P<got>.+)")
_BAD_CHOICE = re.compile(r"argument (?P<flags>[^:]+): invalid choice: (?P<got>.+?) \(choose from (?P<choices>.+)\)")
_NO_VALUE = re.compile(r"argument (?P<flags>[^:]+): expected (?P<count>.+) arguments?")
_REQUIRED = re.compile(r"the following arguments are required: (?P<flags>.+)")
_KIND_FORMS = {"int": "a whole number such as 8 (no decimal point or exponent)", "float": "a number such as 0.5"}


class _Nothing:
    """Stands for a missing value in messages: ``got nothing`` (as the cluster loader says it)."""

    def __repr__(self) -> str:
        return "nothing"


def _field(flags: str) -> str:
    """``-n/--nproc`` -> ``nproc``: the name every other message uses for the option."""
    return flags.split("/")[-1].strip().lstrip("-")


def _typed(text: str) -> object:
    """argparse quotes what was typed (``'1e12'``); the message quotes it once, as every refusal does."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _argparse_refusal(message: str) -> InputError:
    """argparse's refusal as an InputError naming the option (``batch-size: got '1e12'; expected ...``)."""
    if match := _BAD_VALUE.fullmatch(message):
        return InputError(_field(match["flags"]), _typed(match["got"]),
                          _KIND_FORMS.get(match["kind"], f"a valid {match['kind']}"))
    if match := _BAD_CHOICE.fullmatch(message):
        return InputError(_field(match["flags"]), _typed(match["got"]), f"one of {match['choices']}")
    if match := _NO_VALUE.fullmatch(message):
        return InputError(_field(match["flags"]), _Nothing(), f"{match['count']} value after the option")
    if match := _REQUIRED.fullmatch(message):
        flags = match["flags"].split(", ")
        return InputError(_field(flags[0]), _Nothing(), "a value (required: " + ", ".join(flags) + ")")
    return InputError("arguments", " ".join(sys.argv[1:]) or "(none)", message)


class _OneLineParser(argparse.ArgumentParser):
    """argparse prints usage plus the error; we want the error alone on one line, exit 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise _argparse_refusal(message)


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


def _check_ratios(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``--ratio`` means the fraction of elements kept in every command that has it: (0, 1], checked by one
    parser even where this run's strategy does not use it (``--ratio 0`` with dense is a typo, not a no-op)."""
    for chosen in _chosen_parsers(parser, getattr(args, "handler", None)):
        for action in chosen._actions:
            value = getattr(args, action.dest, None)
            if action.dest == "ratio" and action.option_strings and value is not None:
                parse_ratio(value, action.option_strings[-1].lstrip("-"))


#: Options whose value carries a unit, with an example of the form: a bare number there is read by different
#: people in different units (``--latency 10`` priced 10 seconds without a word), so the command line refuses
#: it; Python callers pass numbers in SI base units, as the API documents.
UNIT_OPTIONS = {
    "latency": "10us", "bandwidth": "10Gbit/s", "reduce_bandwidth": "20GB/s", "storage_bandwidth": "10GB/s",
    "optimizer_time": "5ms", "timeout": "30s", "restart_cost": "30s", "repair_time": "5min",
    "checkpoint_cost": "10s", "jitter_period": "1ms", "horizon": "2d", "mtbf": "1d", "rack_mtbf": "30d",
    "planning_time": "1min", "compute_time": "28ms",
}
_BARE_NUMBER = re.compile(r"^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$")


def _refuse_bare_numbers(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A number without its unit where a duration or a bandwidth is expected, as one line with the form."""
    for chosen in _chosen_parsers(parser, getattr(args, "handler", None)):
        for action in chosen._actions:
            value = getattr(args, action.dest, None)
            example = UNIT_OPTIONS.get(action.dest)
            if (example and action.option_strings and isinstance(value, str) and _BARE_NUMBER.match(value)
                    and float(value) != 0):
                raise InputError(action.option_strings[-1].lstrip("-"), value, f"a value with its unit, such as "
                                 f"{example} (a bare number is read in different units by different people)")


def _option_holding(parser: argparse.ArgumentParser, args: argparse.Namespace, filename: str) -> tuple[str, str] | None:
    """The option (``out``, ``trace``...) whose path is ``filename`` or a folder above it, with its value."""
    failed = Path(os.path.abspath(filename))
    for chosen in _chosen_parsers(parser, getattr(args, "handler", None)):
        for action in chosen._actions:
            value = getattr(args, action.dest, None)
            if not isinstance(value, str) or not value or action.dest in ("handler", "command"):
                continue
            named = Path(os.path.abspath(value))
            if failed == named or named in failed.parents:
                return (action.option_strings[-1].lstrip("-") if action.option_strings else action.dest), value
    return None


def _os_refusal(parser: argparse.ArgumentParser, args: argparse.Namespace | None, error: OSError) -> str:
    """One line for a path that cannot be used, naming the option it came from when there is one."""
    holder = _option_holding(parser, args, str(error.filename)) if args is not None and error.filename else None
    if holder is None:
        where = error.filename if error.filename is not None else "path"
        return f"{where}: {error.strerror or error}"
    field, value = holder
    return str(InputError(field, value, f"a path flexcomm can use ({os_error_reason(error)})"))


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


def _holding_output_folder(args: argparse.Namespace) -> contextlib.AbstractContextManager[None]:
    """Every command that writes into an output folder (``--out DIR``) holds it for the run: a second run on
    the same folder is one line, exit 2 (two `simulate` runs on one folder both exited 0, the second's files
    over the first's). An ``--out`` naming a file (a CSV, a JSON) is not a folder to hold."""
    out = getattr(args, "out", None)
    if isinstance(out, str) and out and not Path(out).suffix:
        return output_folder_lock(out)
    return contextlib.nullcontext()


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args: argparse.Namespace | None = None
    try:
        args = parser.parse_args(with_job(sys.argv[1:] if argv is None else argv))
        _refuse_empty_values(parser, args)
        _check_ratios(parser, args)
        _refuse_bare_numbers(parser, args)
        with _holding_output_folder(args):
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
        print(f"flexcomm: error: {_os_refusal(parser, args, error)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("flexcomm: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
