"""Reading a cluster document: ``extends`` chains merged over their base, ``calibration: FILE`` read beside the
document, and the names of the clusters shipped in ``costmodel/clusters``.

Why apart from the schema: these rules work on plain mappings before any model is built, so they need nothing of
:class:`costmodel.cluster.Cluster` and the schema needs nothing of files.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from flexcomm.costmodel.documents import parse_document, read_document
from flexcomm.costmodel.errors import InputError


def cluster_names() -> list[str]:
    """Names of the clusters shipped in ``costmodel/clusters/*.yaml``."""
    folder = resources.files("flexcomm.costmodel").joinpath("clusters")
    return sorted(entry.name[: -len(".yaml")] for entry in folder.iterdir() if entry.name.endswith(".yaml"))




_MAX_EXTENDS = 8


def _another_device(base: dict[str, Any], child: dict[str, Any]) -> dict[str, Any]:
    """The base's ``device`` as an ``extends`` child may build on: nothing of it when the child names another
    device (an H100's 989 TFLOP/s must not become a V100's), and not its ``peak_flops`` when the child changes
    only the precision (bf16's rate is not fp8's); the catalog fills what the child leaves out, as it does for
    a file written out whole."""
    mine, theirs = child.get("device"), base.get("device")
    if not (isinstance(mine, dict) and isinstance(theirs, dict)):
        return base
    if "name" in mine and str(mine["name"]) != str(theirs.get("name")):
        return {**base, "device": {}}
    if "precision" in mine and "peak_flops" not in mine and mine["precision"] != theirs.get("precision", "bf16"):
        return {**base, "device": {k: v for k, v in theirs.items() if k != "peak_flops"}}
    return base


def _deep_merge(base: dict[str, Any], child: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in child.items():
        merged[key] = (_deep_merge(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict)
                       else value)
    return merged


def _load_calibration(data: Any, folder: Path) -> Any:
    """``calibration: FILE`` read from the folder of the document that names it (as ``extends`` paths are)."""
    if not isinstance(data, dict) or not isinstance(data.get("calibration"), str):
        return data
    path = folder / data["calibration"]
    document = read_document(path, "cluster.calibration", "calibration file")
    return {**data, "calibration": document}


def resolve_extends(data: Any, folder: Path, depth: int) -> Any:
    """``extends: NAME-or-PATH``: the named cluster's document with this one's keys merged over it.

    Why: a validation run or a site's cluster differs from a shipped one in two or three values (node
    count, NICs); writing only those keeps the cited hardware numbers in one file. Mappings merge key by
    key, everything else replaces; a relative path is read from the extending file's folder.
    """
    data = _load_calibration(data, folder)
    if not isinstance(data, dict) or "extends" not in data:
        return data
    if depth >= _MAX_EXTENDS:
        raise InputError("cluster.extends", data["extends"], f"a chain of at most {_MAX_EXTENDS} extends (a cycle?)")
    spec = data["extends"]
    child = {k: v for k, v in data.items() if k != "extends"}
    if not isinstance(spec, str) or not spec:
        raise InputError("cluster.extends", spec, "an embedded cluster's name or a path to a cluster file")
    path = folder / spec
    if path.is_file():
        base = resolve_extends(read_document(path, "cluster", "cluster file"), path.parent, depth + 1)
    elif spec in cluster_names():
        text = resources.files("flexcomm.costmodel").joinpath("clusters", f"{spec}.yaml").read_text(encoding="utf-8")
        base = resolve_extends(parse_document(text, "yaml", f"embedded cluster {spec}", "cluster"), folder, depth + 1)
    else:
        raise InputError("cluster.extends", spec, f"one of {', '.join(cluster_names())} or a cluster file's path "
                         f"relative to {folder}")
    if not isinstance(base, dict):
        raise InputError("cluster.extends", spec, "a cluster file holding a mapping")
    return _deep_merge(_another_device(base, child), child)


