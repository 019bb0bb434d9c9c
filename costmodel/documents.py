"""Read the YAML and JSON files users hand us (clusters, studies, profiles) within bounded time and memory.

Why: ``yaml.safe_load`` is safe against code execution but not against size. A "billion laughs" file
(nine anchors, each a list of nine aliases of the previous) is 300 bytes, loads in microseconds because
PyYAML shares the aliased objects, and then takes gigabytes in whatever walks it (validation, JSON
dumps). So every document is size-checked before parsing, its node graph is measured *with aliases
expanded* before any Python object is built, and recursive aliases and runaway nesting are refused.
Every problem is one :class:`~costmodel.errors.InputError` naming the field (e.g. ``cluster``) and, for a
limit, the environment variable that raises it (:mod:`costmodel.limits`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

import yaml

from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.limits import (
    MAX_DOCUMENT_BYTES,
    MAX_DOCUMENT_FLOW_DEPTH,
    MAX_DOCUMENT_NODES,
    read_text_bounded,
)

Format = Literal["yaml", "json"]


class _Expansion(Exception):
    """Raised inside the node walk; turned into an InputError by :func:`parse_document`."""


def _expanded_size(root: yaml.Node, limit: int) -> int:
    """Nodes of the document with every alias expanded (memoised per node, so the walk itself is linear)."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise _Expansion("a document without recursive aliases (an anchor used inside itself)")
        open_nodes.add(key)
        if isinstance(node, yaml.SequenceNode):
            total = 1 + sum(size(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            _refuse_duplicate_keys(node)
            total = 1 + sum(size(k) + size(v) for k, v in node.value)
        else:
            total = 1
        open_nodes.discard(key)
        if total > limit:
            raise _Expansion(f"at most {limit:,} YAML nodes after expanding aliases "
                             f"(set {MAX_DOCUMENT_NODES.env} to raise the limit)")
        sizes[key] = total
        return total

    return size(root)


_MERGE_TAG = "tag:yaml.org,2002:merge"


def _refuse_duplicate_keys(node: yaml.MappingNode) -> None:
    """A key written twice in one mapping: YAML loaders keep the last silently, so half of what the user wrote
    would be ignored without a word (``nodes: 4`` ... ``nodes: 8``)."""
    seen: dict[tuple[str, str], int] = {}
    for key, _ in node.value:
        if not isinstance(key, yaml.ScalarNode) or key.tag == _MERGE_TAG:
            continue
        line = key.start_mark.line + 1
        if (key.tag, key.value) in seen:
            first = seen[(key.tag, key.value)]
            raise _Expansion(f"a mapping without duplicate keys ({key.value!r} at line {first} and line {line})")
        seen[(key.tag, key.value)] = line


def _refuse_duplicate_json_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document: dict[str, Any] = {}
    for key, value in pairs:
        if key in document:
            raise _Expansion(f"an object without duplicate keys ({key!r} appears twice)")
        document[key] = value
    return document


_BRACKETS = re.compile(r"[\[\]{}]")


def _flow_depth(text: str) -> int:
    """The deepest nesting of brackets in ``text``, counted without parsing (a bracket inside a string
    counts too, which can only over-count: a real document stays far below the limit)."""
    depth = deepest = 0
    for match in _BRACKETS.finditer(text):
        if match.group() in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth = max(depth - 1, 0)
    return deepest


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"valid YAML ({getattr(exc, 'problem', None) or 'syntax error'}{where})"


def parse_document(text: str, fmt: Format, source: str, field: str) -> Any:
    """The Python value of a YAML or JSON document, or an InputError on ``field`` naming ``source``."""
    MAX_DOCUMENT_BYTES.check(field, len(text.encode("utf-8", errors="replace")))
    try:
        if fmt == "json":
            return json.loads(text, object_pairs_hook=_refuse_duplicate_json_keys)
        depth = _flow_depth(text)
        if depth > MAX_DOCUMENT_FLOW_DEPTH.value:
            raise _Expansion(f"at most {MAX_DOCUMENT_FLOW_DEPTH.value:,} {MAX_DOCUMENT_FLOW_DEPTH.what}, this nests "
                             f"{depth:,} (set {MAX_DOCUMENT_FLOW_DEPTH.env} to raise the limit)")
        loader = yaml.SafeLoader(text)
        try:
            root = loader.get_single_node()
            if root is None:
                return None
            _expanded_size(root, MAX_DOCUMENT_NODES.value)
            return loader.construct_document(root)
        finally:
            loader.dispose()
    except _Expansion as exc:
        raise InputError(field, source, str(exc)) from None
    except json.JSONDecodeError as exc:
        raise InputError(field, source, f"valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})") from None
    except yaml.YAMLError as exc:
        raise InputError(field, source, _yaml_problem(exc)) from None
    except RecursionError:
        raise InputError(field, source, "a document nested less deeply (it recursed past Python's limit)") from None


def read_document(path: str | Path, field: str, what: str = "file") -> Any:
    """Read ``path`` (``.json`` as JSON, anything else as YAML) within the size limit, then parse it."""
    path = Path(path)
    text = read_text_bounded(path, field, what, MAX_DOCUMENT_BYTES)  # a regular file only: no FIFO, no device
    return parse_document(text, "json" if path.suffix.lower() == ".json" else "yaml", str(path), field)
