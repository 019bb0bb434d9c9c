"""Argument helpers shared by sub-commands: a cluster/profile/link turned into a CostModel."""

from __future__ import annotations

import argparse
import errno
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

from flexcomm.costmodel.atomic import write_text_atomic
from flexcomm.costmodel.calibration import CalibrationProfile, calibrated_cluster
from flexcomm.costmodel.cluster import load_cluster
from flexcomm.costmodel.errors import InputError


def add_network_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("network (either --cluster, or --latency and --bandwidth)")
    group.add_argument("--cluster", help="embedded cluster name or a YAML/JSON cluster file")
    group.add_argument("--profile", help="calibration profile JSON (from `flexcomm calibrate`)")
    group.add_argument("--latency", help="per-message latency, e.g. 10us")
    group.add_argument("--bandwidth", help="link bandwidth, e.g. 10Gbit/s or 1.25GB/s")
    group.add_argument("--reduce-bandwidth", help="reduction throughput (gamma = 1/this), e.g. 20GB/s")
    group.add_argument("--ranks-per-node", type=int, help="ranks per node for hierarchical allreduce")


def json_safe(value: Any) -> Any:
    """``value`` with every infinite or NaN float as ``None``: ``Infinity`` and ``NaN`` are not JSON, and a
    reader in another language refuses them (an unbounded time, a ratio of nothing, becomes ``null``)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    return value


def print_json(payload: Any) -> None:
    """``--json`` output: always valid JSON (``allow_nan=False`` after :func:`json_safe`)."""
    json.dump(json_safe(payload), sys.stdout, indent=2, sort_keys=False, allow_nan=False)
    sys.stdout.write("\n")


def add_cluster_arguments(
    parser: argparse.ArgumentParser, *, required: bool = False, default: str | None = None
) -> None:
    """``--cluster`` and ``--profile``: every command that takes a cluster takes a calibration profile."""
    parser.add_argument("--cluster", required=required, default=default,
                        help="embedded cluster name or a YAML/JSON cluster file"
                        + (f" (default {default})" if default else ""))
    parser.add_argument("--profile", help="calibration profile JSON (`flexcomm calibrate`): its fitted latency "
                        "and bandwidth replace the cluster's links")


def cluster_from_args(args: argparse.Namespace):  # -> Cluster | None (costmodel.cluster imported lazily)
    """The cluster the arguments name, with the profile's fitted links when ``--profile`` is given."""
    if not args.cluster:
        if getattr(args, "profile", None):
            raise InputError("profile", args.profile, "--cluster NAME|FILE as well, whose links it calibrates")
        return None
    cluster = load_cluster(args.cluster)
    if getattr(args, "profile", None):

        cluster = calibrated_cluster(cluster, CalibrationProfile.load(args.profile))
    return cluster


def os_error_reason(error: OSError) -> str:
    """Why a path could not be used, in the user's terms: ``File exists`` from ``mkdir`` means a part of the
    path is a file where a folder must be."""
    if error.errno in (errno.EEXIST, errno.ENOTDIR) and error.filename:
        path = Path(error.filename)
        blocker = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()), path)
        return f"{blocker} is a file, not a folder"
    where = f"{error.filename}: " if error.filename else ""
    return f"{where}{error.strerror or error}"


def output_folder(path: str | Path, field: str = "out") -> Path:
    """Create the output folder ``path`` now, before any work, or refuse it naming the option.

    Why: a command used to compute for minutes and then fail with ``FILE: File exists`` naming none of its
    flags; called after the cheap option checks (a refused run creates nothing) and before the work.
    """
    folder = Path(path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise InputError(field, str(path), f"a folder flexcomm can create and write ({os_error_reason(error)})"
                         ) from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(field, str(path), "a folder flexcomm can write (permission denied)")
    return folder


def single_threaded_torch() -> None:
    """One intra-op thread: the emulated workloads are tiny, and on a shared or small machine torch's thread
    pool spins for longer than the kernels run (measured 7-10x slower emulated training under load)."""
    import torch

    torch.set_num_threads(1)


def print_written(out: str | Path, since: float) -> list[Path]:
    """Print ``wrote OUT/: a.csv, b.png, ...``: every file under ``out`` written since ``since`` (time.time()).

    Why read the folder instead of keeping a list: a hand-kept list drifts from what the code writes (files
    were written but never listed); the folder is the truth.
    """
    folder = Path(out)
    files = sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith(".")
                   and p.stat().st_mtime >= since - 1.0) if folder.is_dir() else []
    if files:
        print(f"wrote {folder}/: " + ", ".join(str(p.relative_to(folder)) for p in files))
    return files


def emit_report(args: argparse.Namespace, report: dict[str, Any], lines: Any) -> int:
    """``replay.json`` in ``--out``, then the report as JSON (``--json``) or as the lines ``lines`` makes."""
    if args.out:

        path = write_text_atomic(Path(args.out) / "replay.json", json.dumps(report, indent=2) + "\n")
        report["files"] = [str(path)]
    if args.json:
        print_json(report)
        return 0
    for line in lines(report):
        print(line)
    return 0
