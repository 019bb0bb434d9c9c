"""One training job, described once: model, batch per device, sequence, layout, precision, scheme, cluster.

Why: ``simulate``, ``plan`` and ``whatif`` each take the job through their own flags (``--workload`` here,
``--model`` there; a batch per rank here, a global batch there). Typed twice, the two runs priced two jobs
and nobody noticed. A job file names each fact once, in the units people use (samples per device; the
global batch follows from the cluster), and every command reads the same file (:mod:`experiments.commands.
job_options` turns it into each command's flags, printed so a reader sees what the job meant there).

A job file is YAML or JSON read with the bounded safe loader (:func:`costmodel.documents.read_document`): it
is data, never code. Every field is checked here, and a bad one is one line naming ``job.FIELD``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from flexcomm.costmodel.compressed import PRICED_SCHEMES
from flexcomm.costmodel.compute import ATTENTION_KINDS
from flexcomm.costmodel.documents import read_document
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.training_state import PRECISIONS
from flexcomm.costmodel.units import parse_ratio

#: A transformer's shape, as ``plan --model gpt`` takes it (``seq_len`` is the sequence in tokens).
GPT_SHAPE_KEYS = ("layers", "hidden", "heads", "seq_len", "vocab")


@dataclass(frozen=True)
class GptShape:
    """``model: gpt``'s shape; ``vocab`` left out takes the planner's default."""

    layers: int
    hidden: int
    heads: int
    seq_len: int
    vocab: int | None = None


@dataclass(frozen=True)
class Job:
    """What is trained, where, and how; ``None`` leaves a command's own default (which it then prints)."""

    model: str
    cluster: str
    batch_per_device: int | None = None
    gpt: GptShape | None = None
    scheme: str | None = None
    ratio: float | None = None
    precision: str | None = None
    attention: str | None = None
    tp: int | None = None
    pp: int | None = None
    seed: int | None = None

    def given(self) -> list[str]:
        """The fields the file set, in declaration order (what a command is asked to honour)."""
        return [f.name for f in fields(self) if getattr(self, f.name) is not None]


def _count(data: Mapping[str, Any], key: str, where: str, *, minimum: int = 1) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InputError(f"{where}.{key}", value, f"a whole number >= {minimum}")
    return value


def _text(data: Mapping[str, Any], key: str, where: str, choices: tuple[str, ...] | None = None) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        expected = "one of " + ", ".join(choices) if choices else "a non-empty text"
        raise InputError(f"{where}.{key}", value, expected)
    if choices is not None and value not in choices:
        raise InputError(f"{where}.{key}", value, "one of " + ", ".join(choices))
    return value


def _known(data: Any, keys: tuple[str, ...], where: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise InputError(where, data, "a mapping with keys " + ", ".join(keys))
    for key in data:
        if key not in keys:
            raise InputError(f"{where}.{key}", data[key], "no such key; known keys here: " + ", ".join(keys))
    return data


JOB_KEYS = tuple(f.name for f in fields(Job))


def job_from_mapping(data: Any, where: str = "job") -> Job:
    """A :class:`Job` from a parsed document, every field checked (``job.batch_per_device: got 0; ...``)."""
    data = _known(data, JOB_KEYS, where)
    for key in ("model", "cluster"):
        if data.get(key) is None:
            raise InputError(f"{where}.{key}", None, "a value (a job names its model and its cluster)")
    model = _text(data, "model", where)
    gpt = None
    if model == "gpt":
        shape = _known(data.get("gpt"), GPT_SHAPE_KEYS, f"{where}.gpt")
        sizes = {key: _count(shape, key, f"{where}.gpt") for key in GPT_SHAPE_KEYS}
        missing = [key for key in GPT_SHAPE_KEYS[:4] if sizes[key] is None]
        if missing:
            raise InputError(f"{where}.gpt.{missing[0]}", None, "a whole number >= 1 (model: gpt needs "
                             + ", ".join(GPT_SHAPE_KEYS[:4]) + "; vocab is optional)")
        gpt = GptShape(**sizes)  # type: ignore[arg-type]
    elif data.get("gpt") is not None:
        raise InputError(f"{where}.gpt", data["gpt"], "nothing unless model is gpt (a zoo model has its own shape)")
    ratio = data.get("ratio")
    if ratio is not None:
        ratio = parse_ratio(ratio, f"{where}.ratio")
    seed = data.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise InputError(f"{where}.seed", seed, "a whole number >= 0")
    return Job(
        model=model or "", cluster=_text(data, "cluster", where) or "",
        batch_per_device=_count(data, "batch_per_device", where), gpt=gpt,
        scheme=_text(data, "scheme", where, PRICED_SCHEMES), ratio=ratio,
        precision=_text(data, "precision", where, tuple(PRECISIONS)),
        attention=_text(data, "attention", where, ATTENTION_KINDS),
        tp=_count(data, "tp", where), pp=_count(data, "pp", where), seed=seed,
    )


def load_job(path: str | Path, field: str = "job") -> Job:
    """Read a job file (``.json`` as JSON, anything else as YAML), bounded and safe, and check every field."""
    return job_from_mapping(read_document(path, field, "job file"), field)


def global_batch(job: Job, devices: int) -> int | None:
    """The global batch ``plan`` takes: the job's batch per device on every device, or ``None``."""
    if job.batch_per_device is None:
        return None
    if devices < 1:
        raise InputError("job.cluster", job.cluster, "a cluster with at least one device")
    return job.batch_per_device * devices
