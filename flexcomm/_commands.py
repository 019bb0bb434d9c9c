"""A CLI command as one Python call: the same parser, the same checks, a result object instead of files to find.

Why through the parser: ``flexcomm plan --batch-size 64`` and ``flexcomm.plan(batch_size=64)`` must mean the
same thing, with the same defaults, unit parsing and one-line errors. Re-declaring every option as a keyword
would be a second copy that drifts; so keywords become the command's own flags (``batch_size`` is
``--batch-size``), argparse parses them as it parses a shell's, and the command runs as it does from the shell.
What it wrote (CSV tables, PNG figures, JSON summaries) is collected into a :class:`CommandResult`, and what
it printed is kept as its ``report`` rather than printed.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flexcomm.costmodel.errors import InputError
from flexcomm.experiments.cli import _check_ratios, _refuse_empty_values, build_parser
from flexcomm.experiments.commands.job_options import with_job

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["CommandResult", "run_command"]


@dataclass(frozen=True)
class CommandResult:
    """What one command produced: its main table, every table and figure it wrote, and what it printed.

    ``frame`` is the table a reader looks at first (``plans.csv`` for ``plan``); ``tables`` and ``figures``
    map each written file's stem to its content or path, ``summaries`` each JSON file's stem to its data.
    ``exit_status`` is the CLI's (``validate`` answers 1 when a target is missed: a result, not an error).
    """

    command: str
    out: Path | None
    frame: pd.DataFrame
    tables: Mapping[str, pd.DataFrame] = field(default_factory=dict)
    figures: Mapping[str, Path] = field(default_factory=dict)
    summaries: Mapping[str, Any] = field(default_factory=dict)
    report: str = ""
    exit_status: int = 0

    def __str__(self) -> str:
        return self.report.rstrip("\n")

    def __repr__(self) -> str:
        figures = ", ".join(self.figures) or "none"
        return (f"<flexcomm {self.command}: {len(self.frame)} rows x {len(self.frame.columns)} columns; "
                f"figures: {figures}; out: {self.out}>")

    def show(self, name: str | None = None) -> Any:
        """Display a figure it drew (the first one by default) in a notebook; returns the IPython image."""
        if not self.figures:
            raise InputError("figure", name, f"a figure of this {self.command} run: it drew none")
        if name is None:
            name = next(iter(self.figures))
        if name not in self.figures:
            raise InputError("figure", name, "one of " + ", ".join(self.figures))
        from IPython.display import Image, display

        image = Image(filename=str(self.figures[name]))
        display(image)
        return image


def _action(parser: argparse.ArgumentParser, keyword: str) -> argparse.Action | None:
    flag = "--" + keyword.replace("_", "-")
    for action in parser._actions:
        if flag in action.option_strings or action.dest == keyword and action.option_strings:
            return action
    return None


def _flag_words(parser: argparse.ArgumentParser, command: str, options: Mapping[str, Any]) -> list[str]:
    """Keywords as the command's flags: True = a switch given, None/False = left out, lists joined by commas."""
    words: list[str] = []
    for keyword, value in options.items():
        action = _action(parser, keyword)
        if action is None:
            known = sorted(a.dest for a in parser._actions if a.option_strings and a.dest != "help")
            raise InputError(keyword, value, f"an option of `flexcomm {command}` as a keyword: " + ", ".join(known))
        flag = action.option_strings[-1] if action.option_strings[-1].startswith("--") else action.option_strings[0]
        switch = action.nargs == 0
        if value is None or (switch and value is False):
            continue
        if switch:
            if value is not True:
                raise InputError(keyword, value, "True or False")
            words.append(flag)
            continue
        if isinstance(value, bool):
            raise InputError(keyword, value, f"a value of {flag} (not a boolean)")
        if isinstance(action, argparse._AppendAction):
            for item in value if isinstance(value, (list, tuple)) else [value]:
                words += [flag, _word(item)]
            continue
        if isinstance(value, (list, tuple)):
            value = ",".join(_word(item) for item in value)
        words += [flag, _word(value)]
    return words


def _word(value: Any) -> str:
    if isinstance(value, float):
        return repr(value)  # round-trips exactly
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return str(value)


def _subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[command]
    raise KeyError(command)


def _written(out: Path | None, since_ns: int) -> list[Path]:
    """Files under ``out`` written by this run (older files in a reused folder are not this run's)."""
    if out is None or not out.is_dir():
        return []
    return sorted(p for p in out.rglob("*") if p.is_file() and p.stat().st_mtime_ns >= since_ns)


def run_command(command: str, positional: Sequence[str] = (), *, main_table: str | None = None,
                out_option: str = "out", name: str | None = None, **options: Any) -> CommandResult:
    """Run ``flexcomm COMMAND POSITIONAL --flag value ...`` in this process and collect what it wrote.

    ``main_table`` names the CSV (stem) that becomes ``frame``; without it the first CSV written, or the
    printed JSON object's ``rows`` when the command is asked for ``--json``. ``name`` is what the result
    calls itself (``scenario`` rather than ``simulate``).
    """
    import pandas as pd


    parser = build_parser()
    words = with_job([command, *map(_word, positional), *_flag_words(_subparser(parser, command), command, options)])
    try:
        args = parser.parse_args(words)
    except InputError as error:  # argparse's own complaint: name the call, not this process's sys.argv
        if error.field != "arguments":
            raise
        raise InputError("arguments", " ".join(words), str(error.expected)) from None
    _refuse_empty_values(parser, args)
    _check_ratios(parser, args)
    out_value = getattr(args, out_option, None)
    out = Path(out_value) if out_value else None
    started = time.time_ns() - 2_000_000  # file systems with coarse clocks stamp a new file a little early
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        status = int(args.handler(args) or 0)
    files = _written(out, started)
    tables = {p.stem: pd.read_csv(p) for p in files if p.suffix == ".csv"}
    summaries = {p.stem: json.loads(p.read_text()) for p in files if p.suffix == ".json"}
    figures = {p.stem: p for p in files if p.suffix == ".png"}
    report = printed.getvalue()
    if main_table is not None and main_table in tables:
        frame = tables[main_table]
    elif getattr(args, "json", False):
        printed_json = json.loads(report)
        frame = pd.DataFrame(printed_json.get("rows", []) if isinstance(printed_json, dict) else printed_json)
        summaries = {**summaries, "printed": printed_json}
    else:
        frame = next(iter(tables.values()), pd.DataFrame())
    return CommandResult(command=name or command, out=out, frame=frame, tables=tables, figures=figures,
                         summaries=summaries, report=report, exit_status=status)
