"""``flexcomm constants``: every number the models use that no datasheet or library source gives, and why."""

from __future__ import annotations

import argparse

from flexcomm.costmodel.constants import table
from flexcomm.costmodel.errors import InputError
from flexcomm.experiments.commands.common import print_json


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("constants", help="every model number not read from a datasheet or a library's "
                            "source: value, unit, kind (cited, derived, design, fitted, borrowed), source, what it was "
                            "fitted on",
                            description="The register of costmodel/constants.py: each number's value and source are "
                            "read from the code that uses it. Fitted values name the rows they were fitted on; "
                            "reports leave those rows out of their prediction statistics.")
    parser.add_argument("--kind", help="only this kind (cited, derived, design, fitted, borrowed)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    rows = table()
    kinds = sorted({row["kind"].split()[0] for row in rows})
    if args.kind is not None:
        if args.kind not in kinds:
            raise InputError("kind", args.kind, "one of " + ", ".join(kinds))
        rows = [row for row in rows if row["kind"].split()[0] == args.kind]
    if args.json:
        print_json(rows)
        return 0
    width = max(len(row["name"]) for row in rows)
    for row in rows:
        fitted = f"; fitted on {row['fitted_on']}" if row["fitted_on"] else ""
        print(f"{row['name']:<{width}s}  {row['value']} {row['unit']}  [{row['kind']}{fitted}]  {row['source']}")
    counts = ", ".join(f"{sum(1 for r in rows if r['kind'].split()[0] == k)} {k}" for k in kinds
                       if any(r["kind"].split()[0] == k for r in rows))
    print(f"{len(rows)} number{'' if len(rows) == 1 else 's'}: {counts}")
    return 0
