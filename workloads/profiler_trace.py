"""Read a PyTorch profiler trace (Kineto's Chrome-trace JSON) into the steps a replay needs.

The trace is the one ``torch.profiler.profile(..., schedule=..., record_shapes=True)`` writes with
``export_chrome_trace`` (or ``tensorboard_trace_handler``, ``.json.gz``); no format of our own. What is read:

* **steps**: ``ProfilerStep#N`` spans (``user_annotation``; torch writes them only when the profiler has a
  ``schedule``);
* **backward compute**: ``autograd::engine::evaluate_function: ...`` ops on the threads that run autograd
  (the training thread on CPU, the device threads on CUDA);
* **collectives**: the process group's own spans, ``gloo:all_reduce`` / ``nccl:all_reduce`` ... (sizes from
  ``Input Dims`` and ``Input type``, so the profiler needs ``record_shapes=True``), or where those are absent
  ``record_param_comms`` ops (``Collective name``, ``In msg nelems``, ``Out msg nelems``, ``Group size``,
  ``dtype``), the form NCCL's process group writes; each collective's *launch* is the ``c10d::...`` op (or the
  ``record_param_comms`` op) on the training thread that issued it, the moment DDP found its bucket ready;
* **the group**: ``distributedInfo`` (``world_size``, ``backend``), else the collectives' ``Group size``.

Times are seconds from the start of their step. Torch-free: a trace is read where torch is not installed.
"""

from __future__ import annotations

import bisect
import itertools
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flexcomm.costmodel.bounded_stream import open_bounded
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.limits import MAX_PROFILER_TRACE_BYTES, MAX_RANKS, MAX_TRACE_EVENTS

TRACE_FORMAT = "the Chrome-trace JSON torch.profiler writes (export_chrome_trace)"
#: The largest buffer one rank's collective can name: 4 TiB, over ten times the largest GPU memory (B300:
#: 288 GB), so a size past it is a damaged or crafted trace, not a measurement (one sized 7,280 TiB was read).
MAX_COLLECTIVE_BYTES = 4 * 2**40

_STEP = re.compile(r"^ProfilerStep#(\d+)$")
#: The process group's span of a collective: ``gloo:all_reduce``, ``nccl:_allgather_base`` ...
_GROUP_SPAN = re.compile(r"^(gloo|nccl|ucc|mpi):(\w+)$")
_LAUNCH = re.compile(r"^c10d::(\w+)$")
_BACKWARD = "autograd::engine::evaluate_function"
#: The GPU-side copy of a CPU annotation (``nccl:all_reduce`` drawn again over the GPU stream): not a collective.
GPU_ANNOTATION = "gpu_user_annotation"
#: Where a CPU-side ``ProfilerStep#N`` lives: ``user_annotation`` (torch >= 1.10), ``Operator`` (the Kineto format of
#: 2021: ``cat`` ``Operator``/``Runtime``/``Kernel``), none at all in hand-made traces.
STEP_CATEGORIES = ("user_annotation", "Operator", "cpu_op", "")
_COPY_BACK = "torch.distributed.ddp.reducer::copy_bucket_to_grad"

#: Collective names as torch's process groups and record_param_comms spell them -> flexcomm's.
COLLECTIVE_NAMES: dict[str, str] = {
    "all_reduce": "allreduce", "allreduce": "allreduce", "allreduce_coalesced": "allreduce",
    "allreduce_sparse": "allreduce",
    "all_gather": "allgather", "allgather": "allgather", "_allgather_base": "allgather",
    "allgather_into_tensor_coalesced": "allgather", "all_gather_into_tensor": "allgather",
    "allgather_coalesced": "allgather",
    "reduce_scatter": "reduce-scatter", "_reduce_scatter_base": "reduce-scatter",
    "reduce_scatter_tensor_coalesced": "reduce-scatter", "reduce_scatter_tensor": "reduce-scatter",
    "broadcast": "broadcast", "reduce": "reduce", "gather": "gather", "scatter": "scatter",
    "all_gather_base": "allgather", "allgather_base": "allgather", "all_gather_into_tensor_coalesced": "allgather",
    "reduce_scatter_base": "reduce-scatter",
    "all_to_all": "alltoall", "alltoall": "alltoall", "alltoall_base": "alltoall", "all_to_all_single": "alltoall",
    "all_to_allv": "alltoall", "alltoallv": "alltoall", "all_to_all_base": "alltoall",
    "barrier": "barrier", "send": "send", "recv": "recv", "recv_any_source": "recv",
}

#: Bytes per element of the dtypes a profiler names (``Input type`` and record_param_comms' ``dtype``).
ELEMENT_BYTES: dict[str, int] = {
    "float": 4, "float32": 4, "int": 4, "int32": 4, "unsigned int": 4, "uint32": 4,
    "double": 8, "float64": 8, "long int": 8, "long": 8, "int64": 8, "c10::complex<float>": 8,
    "c10::half": 2, "half": 2, "float16": 2, "c10::bfloat16": 2, "bfloat16": 2, "short int": 2, "int16": 2,
    "signed char": 1, "int8": 1, "unsigned char": 1, "uint8": 1, "bool": 1, "c10::float8_e4m3fn": 1,
    "c10::float8_e5m2": 1, "float8_e4m3fn": 1, "float8_e5m2": 1,
}

#: Names record_param_comms and the process groups also use for what is not a collective (a work's wait, the
#: communicator's creation, coalescing markers): skipped, not refused.
NOT_COLLECTIVES = frozenset({"wait", "init", "coalesced", "start_coalescing", "end_coalescing", "split", "abort",
                             "shutdown", "comm_split"})

#: What records a collective's size: the profiler's shapes (``record_param_comms`` writes them from torch 2.1 on
#: whatever ``record_shapes`` says; older torch needs it), else the execution trace of the same run.
SIZE_HINT = ("collectives with their sizes and dtypes: profile with record_shapes=True (torch < 2.1; newer torch "
             "writes them in record_param_comms) or give --execution-trace")
PROFILE_HINT = ("torch.profiler.profile(..., schedule=torch.profiler.schedule(wait=1, warmup=1, active=3), "
                "record_shapes=True) and prof.step() after each training step")


@dataclass(frozen=True)
class TracedCollective:
    """One collective of a step: what it moved and when it was issued (seconds from the step's start)."""

    kind: str
    numel: int
    element_bytes: int
    group_size: int
    launch_s: float
    #: the process group's span (end - start) where the trace has one; NaN for record_param_comms alone
    span_s: float

    @property
    def nbytes(self) -> int:
        return self.numel * self.element_bytes


@dataclass(frozen=True)
class TracedStep:
    """One ``ProfilerStep#N``: its length, its backward pass on the autograd threads and its collectives."""

    number: int
    duration_s: float
    #: start of the first and end of the last backward op (NaN, NaN: the step has no backward)
    backward_start_s: float
    backward_end_s: float
    #: when the training thread went on after the backward and the whole exchange: the start of DDP's copy of
    #: the last bucket back into the gradients where the trace has those copies, else of its first op after
    #: the backward (the step's end when there is none)
    resumed_s: float
    collectives: tuple[TracedCollective, ...]

    def bucket_exchanges(self) -> tuple[TracedCollective, ...]:
        return _buckets_during(self.collectives, self.backward_start_s, self.backward_end_s)


def _buckets_during(collectives: Sequence[TracedCollective], start_s: float,
                    end_s: float) -> tuple[TracedCollective, ...]:
    """The gradient buckets: the allreduces issued while the backward ran (DDP's hooks), ``start_s``..``end_s``
    from the step's start (NaN: the step has no backward)."""
    if not math.isfinite(start_s):
        return ()
    return tuple(c for c in collectives if c.kind == "allreduce" and start_s <= c.launch_s <= end_s)


@dataclass(frozen=True)
class ProfilerTrace:
    """A whole trace: its steps in order, the process group it ran in and where it came from."""

    path: str
    steps: tuple[TracedStep, ...]
    backend: str
    world_size: int
    rank: int
    device: str


def _json_error(path: Path, exc: Exception, expected: str) -> InputError:
    """ijson's (yajl's) multi-line messages as one line: truncated input, or not JSON at all."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
    if "premature eof" in text.lower() or isinstance(exc, EOFError):
        return InputError(str(path), "truncated JSON (it ends early)", expected)
    return InputError(str(path), f"not JSON ({text[:120].rstrip('.')})", expected)


def _stream_items(path: Path, prefix: str, field: str, expected: str) -> Iterator[Any]:
    """The items of the JSON array at ``prefix`` (``traceEvents.item``), parsed from a bounded stream one at a
    time: a trace of hundreds of megabytes is never held whole, and a gzip bomb stops at the trace limit."""
    import ijson

    with open_bounded(path, field, "trace file", MAX_PROFILER_TRACE_BYTES, json_nesting=True) as stream:
        try:
            yield from ijson.items(stream, prefix, use_float=True)
        except ijson.JSONError as exc:
            raise _json_error(path, exc, expected) from None


#: How far into a trace its header (every top-level key Kineto writes before ``traceEvents``) is looked for.
_HEADER_BYTES = 1 << 20


def _header(path: Path) -> dict[str, Any] | None:
    """The top-level keys before ``"traceEvents"`` as one dict, read from the first megabyte only (Kineto writes
    ``schemaVersion``, ``deviceProperties``, ``distributedInfo`` ... first); None where the events come first or
    the header does not parse, and the caller streams the whole document instead."""
    import json

    with open_bounded(path, "from-trace", "trace file", MAX_PROFILER_TRACE_BYTES) as stream:
        head = stream.read(_HEADER_BYTES)
    at = head.find(b'"traceEvents"')
    if at < 0:
        return None
    try:
        doc = json.loads(head[:at].decode("utf-8") + '"traceEvents": []}')
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


def _first_value(path: Path, key: str, field: str, expected: str) -> Any:
    """The top-level ``key``'s value (``distributedInfo``), None where the document has none: from the header
    where the trace writes one (so a trace without the key is not read through to its end for it), else the
    stream ends at the value."""
    header = _header(path) if field == "from-trace" else None
    if header is not None and (key in header or set(header) - {"schemaVersion", "traceEvents"}):
        return header.get(key)  # Kineto writes its metadata before the events: a key not there is not anywhere
    return next(_stream_items(path, key, field, expected), None)


def _events(path: Path) -> list[_Event]:
    """The complete (``ph: X``) events of the trace; at most :data:`MAX_TRACE_EVENTS` events of any kind read."""
    out: list[_Event] = []
    cap = MAX_TRACE_EVENTS.value
    seen = False
    for index, event in enumerate(_stream_items(path, "traceEvents.item", "from-trace", TRACE_FORMAT)):
        seen = True
        if index >= cap:
            MAX_TRACE_EVENTS.check("from-trace", index + 1, str(path))
        if not isinstance(event, dict) or event.get("ph") != "X":
            continue
        ts = _number(event, "ts", index, path)
        dur = _number(event, "dur", index, path)
        args = event.get("args") if isinstance(event.get("args"), dict) else {}
        out.append(_Event(index, str(event.get("name", "")), str(event.get("cat", "")), event.get("tid"), ts,
                          ts + dur, args, event.get("pid")))
    if not seen:
        raise InputError(str(path), "no traceEvents list", TRACE_FORMAT)
    return out


def _dims_numel(dims: Any) -> int | None:
    """Elements of the first tensor in ``Input Dims`` (``[[n]]``, ``[[[n]], ...]`` for a tensor list)."""
    first = dims
    while isinstance(first, list) and first and isinstance(first[0], list):
        first = first[0]
    if not isinstance(first, list) or not first or not all(_count(d) for d in first):
        return None
    return math.prod(first)


def _count(value: Any) -> bool:
    """A JSON whole number >= 0 (``true`` is not one, though Python calls it an int)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _element_bytes(name: Any) -> int | None:
    if isinstance(name, list):
        name = name[0] if name else None
    return ELEMENT_BYTES.get(str(name).strip().lower()) if name is not None else None


def _number(event: dict[str, Any], key: str, index: int, path: Path) -> float:
    value = event.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or (
            key == "dur" and value < 0):
        raise InputError(str(path), f"event #{index} ({event.get('name')!r}) {key}={value!r}",
                         f"a finite {'non-negative ' if key == 'dur' else ''}number of microseconds")
    return float(value)


@dataclass
class _Event:
    index: int
    name: str
    cat: str
    tid: Any
    ts: float
    end: float
    args: dict[str, Any]
    pid: Any = None


def _steps(events: list[_Event], path: Path) -> list[_Event]:
    """The CPU ``ProfilerStep#N`` spans in time order (a CUDA trace repeats each as ``gpu_user_annotation``,
    and the Chrome-trace format does not promise file order)."""
    steps = sorted((e for e in events if _STEP.match(e.name) and e.cat in STEP_CATEGORIES),
                   key=lambda e: e.ts)
    if not steps:
        raise InputError(str(path), "no ProfilerStep#N event", "a trace of training steps: profile with "
                         + PROFILE_HINT)
    for before, after in itertools.pairwise(steps):
        if int(_STEP.match(after.name).group(1)) <= int(_STEP.match(before.name).group(1)) or after.ts < before.ts:
            raise InputError(str(path), f"event #{after.index} ({after.name}) out of order after event "
                             f"#{before.index} ({before.name})", "ProfilerStep#N spans in increasing N and time")
        if after.ts < before.end - 1.0:  # 1 us: Kineto rounds each end
            raise InputError(str(path), f"event #{after.index} ({after.name}) starts inside event #{before.index} "
                             f"({before.name})", "steps that do not overlap")
    return steps


def distributed_info(path: Path) -> Any:
    """The trace's ``distributedInfo`` (None where it has none)."""
    return _first_value(path, "distributedInfo", "from-trace", TRACE_FORMAT)


def _group(path: Path, info: Any = None) -> tuple[str, int, int]:
    """(backend, world size, rank) from ``distributedInfo`` (``info``, else read from ``path``); a rank outside
    its world is refused."""
    info = distributed_info(path) if info is None else info
    if isinstance(info, dict) and _count(info.get("world_size")) and info["world_size"] >= 1:
        rank = info.get("rank")
        world = int(info["world_size"])
        MAX_RANKS.check(f"{path} distributedInfo world_size", world)
        if _count(rank) and rank >= world:
            raise InputError(str(path), f"distributedInfo rank {rank} in a world of {world}",
                             "a rank below the world size")
        return str(info.get("backend", "")), world, int(rank) if _count(rank) else 0
    return "", 0, 0


def collective_kind(raw: str) -> str | None:
    """flexcomm's name of a collective as torch spells it (``_all_gather_base``, ``allreduce_``, ``all_to_allv``),
    None where torch's name is not one."""
    text = str(raw).strip().lower()
    return COLLECTIVE_NAMES.get(text) or COLLECTIVE_NAMES.get(text.strip("_"))


def _launch_kind(event: _Event) -> str | None:
    return collective_kind(_LAUNCH.match(event.name).group(1))


ET_FORMAT = "the execution trace torch.profiler.ExecutionTraceObserver writes (schema 1.0.x or 1.1.x)"


def _et_node_size(node: dict[str, Any]) -> tuple[int | None, list[Any] | None]:
    """(rf_id, first tensor) of an execution-trace node in either schema: 1.0.x keeps ``rf_id`` and a list of
    tensors at the top (``inputs: [[id, storage, offset, elements, bytes per element, device], ...]``), 1.1.x
    puts ``rf_id`` among ``attrs`` and the tensors under ``inputs.values``."""
    raw_attrs = node.get("attrs")
    attrs = {a.get("name"): a.get("value") for a in (raw_attrs if isinstance(raw_attrs, list) else [])
             if isinstance(a, dict)}
    rf_id = attrs.get("rf_id", node.get("rf_id"))
    inputs = node.get("inputs")
    values = inputs.get("values") if isinstance(inputs, dict) else inputs
    tensor = values[0] if isinstance(values, list) and values else None
    while isinstance(tensor, list) and tensor and isinstance(tensor[0], list):
        tensor = tensor[0]
    return (int(rf_id) if _count(rf_id) else None), tensor if isinstance(tensor, list) else None


def execution_trace_pid(path: str | Path) -> int | None:
    """The process an execution trace was recorded in (its top-level ``pid``), None where it names none."""
    pid = _first_value(Path(path), "pid", "execution-trace", ET_FORMAT)
    return int(pid) if _count(pid) else None


def read_execution_trace(path: str | Path) -> dict[int, tuple[int, int]]:
    """``torch.profiler.ExecutionTraceObserver``'s file (the input Chakra converts), schema 1.0.x or 1.1.x: for
    every ``c10d::`` op, its record-function id -> (elements, bytes per element) of its first tensor, so a Kineto
    trace recorded without shapes still has its collectives' sizes (Kineto names the same id ``Record function
    id``)."""
    path = Path(path)
    sizes: dict[int, tuple[int, int]] = {}
    seen = False
    for index, node in enumerate(_stream_items(path, "nodes.item", "execution-trace", ET_FORMAT)):
        seen = True
        if not isinstance(node, dict) or not str(node.get("name", "")).startswith("c10d::"):
            continue
        rf_id, tensor = _et_node_size(node)
        # a tensor is [tensor id, storage id, offset, elements, bytes per element, device]
        if rf_id is not None and tensor is not None and len(tensor) >= 5 and all(_count(v) for v in tensor[3:5]):
            sizes[rf_id] = (int(tensor[3]), int(tensor[4]))
        elif node.get("name") != "c10d::barrier":
            raise InputError(str(path), f"node #{index} ({node.get('name')}) without an rf_id and a tensor",
                             "c10d nodes as ExecutionTraceObserver writes them")
    if not seen:
        raise InputError(str(path), "no nodes list", ET_FORMAT)
    return sizes


def check_execution_trace(trace_path: str | Path, events: list[_Event], et_path: str | Path,
                          sizes: dict[int, tuple[int, int]]) -> None:
    """Refuse an execution trace of another run: its process must be the trace's and the record-function ids
    of the trace's collective ops must be among its own (one line naming both files otherwise)."""
    pid = execution_trace_pid(et_path)
    cpu_pids = {e.pid for e in events if _STEP.match(e.name) and e.cat in STEP_CATEGORIES}
    if pid is not None and cpu_pids and pid not in cpu_pids:
        raise InputError(str(et_path), f"an execution trace of process {pid}; {trace_path} is process "
                         f"{sorted(cpu_pids)[0]}", "the execution trace of the same rank and process as the trace")
    named = {int(e.args["Record function id"]) for e in events if _LAUNCH.match(e.name)
             and _count(e.args.get("Record function id")) and e.args.get("Record function id")}
    if named and sizes and not named & set(sizes):
        raise InputError(str(et_path), f"none of {trace_path}'s {len(named)} collective ops (record-function "
                         "ids) in it", "the execution trace of the same run as the trace")


def _record_fields(record: _Event) -> tuple[str, Any, int | None, Any]:
    """(collective name, elements, element bytes, group size) as record_param_comms writes them; allgather's
    ``In msg nelems`` is each rank's part, reduce-scatter's the whole vector: flexcomm's own conventions."""
    numel = record.args.get("In msg nelems")
    out_numel = record.args.get("Out msg nelems")
    if not _count(numel) or (numel == 0 and _count(out_numel)):
        numel = out_numel if _count(out_numel) else None
    size = record.args.get("Group size")
    ranks = record.args.get("Process Group Ranks")
    if not _count(size) and isinstance(ranks, str) and ranks.startswith("["):
        size = ranks.count(",") + 1 if ranks.strip("[] ") else None
    return (str(record.args.get("Collective name", "")).strip(), numel, _element_bytes(record.args.get("dtype")),
            size)


def _span_numel(kind: str | None, dims: Any) -> int | None:
    """Elements of a span's tensors as flexcomm counts them: allgather takes each rank's part (the smallest
    tensor of ``_allgather_base(output, input)``), reduce-scatter the whole vector (the largest), others the
    first tensor."""
    if not isinstance(dims, list) or not dims:
        return None
    if kind in ("allgather", "reduce-scatter") and len(dims) > 1:
        numels = [n for n in (_dims_numel([d]) for d in dims) if n]
        if numels:
            return min(numels) if kind == "allgather" else max(numels)
    return _dims_numel(dims)


def collective_size(event: _Event, issuer: _Event | None, record: _Event | None, group_size: int,
                    sizes: dict[int, tuple[int, int]], path: Path,
                    required: bool = True) -> tuple[str, int | None, int, int]:
    """(kind, numel, element bytes, group size) of a process-group span or a record_param_comms op. The size
    from record_param_comms where it has one (``record``: the one around a span), else the span's ``Input
    Dims``, else the c10d op that issued it, else the execution trace's record of that op; ``required`` False
    gives numel None for a collective without one instead of refusing the trace."""
    element: int | None
    if event.name == "record_param_comms":
        raw, numel, element, size = _record_fields(event)
    else:
        raw = _GROUP_SPAN.match(event.name).group(2)
        kind = collective_kind(raw)
        numel = _span_numel(kind, event.args.get("Input Dims"))
        size = group_size
        element = _element_bytes(event.args.get("Input type"))
        if record is not None:
            _, r_numel, r_element, r_size = _record_fields(record)
            if _count(r_numel) and r_element is not None:
                numel, element = r_numel, r_element
            size = r_size if _count(r_size) and r_size else size
        if (numel is None or element is None) and issuer is not None:
            numel, element = issuer_size(kind, issuer, element, sizes)
    kind = collective_kind(raw)
    if kind is None:
        raise InputError(str(path), f"event #{event.index} ({event.name}) collective {raw!r}",
                         "a collective torch's process groups name: " + ", ".join(sorted(set(COLLECTIVE_NAMES))))
    if not _count(size) or size < 1:
        size = group_size
    if kind == "barrier":
        return kind, 0, 1, int(size or 0)
    if not _count(numel) or element is None:
        if not required:
            return kind, None, element or 1, int(size or 0)
        raise InputError(str(path), f"event #{event.index} ({event.name}) without a size", SIZE_HINT)
    if not _count(size) or size < 1:
        raise InputError(str(path), f"event #{event.index} ({event.name}) without a group size",
                         "a trace with distributedInfo (torch >= 2.1 writes it) or record_param_comms' Group size")
    MAX_RANKS.check(f"{path} event #{event.index} ({event.name}) group size", int(size))
    if int(numel) * element > MAX_COLLECTIVE_BYTES:
        raise InputError(str(path), f"event #{event.index} ({event.name}) of {int(numel) * element:,} bytes",
                         f"a collective of at most {MAX_COLLECTIVE_BYTES:,} bytes (4 TiB: more than any GPU's "
                         "memory)")
    return kind, int(numel), element, int(size)


def issuer_size(kind: str | None, issuer: _Event, element: int | None,
                sizes: dict[int, tuple[int, int]]) -> tuple[int | None, int | None]:
    """(elements, bytes per element) from the ``c10d::`` op that issued a collective: its ``Input Dims`` (as
    :func:`_span_numel` counts them) with ``element`` or its own dtype (a TensorList names none: fp32
    gradients), replaced by the execution trace's record of that op where there is one."""
    numel = _span_numel(kind, issuer.args.get("Input Dims"))
    if numel is not None:
        element = element or _element_bytes(issuer.args.get("Input type")) or 4
    else:
        element = None
    rf_id = issuer.args.get("Record function id")
    recorded = sizes.get(rf_id) if _count(rf_id) else None
    return recorded if recorded is not None else (numel, element)


def is_group_span(event: _Event) -> bool:
    """A process group's CPU-side span of a collective (``nccl:all_reduce``), not its GPU-side copy nor a wait."""
    m = _GROUP_SPAN.match(event.name)
    return m is not None and m.group(2).lower() not in NOT_COLLECTIVES and event.cat != GPU_ANNOTATION


def is_collective_record(event: _Event) -> bool:
    """A record_param_comms op of a collective (it also wraps a work's wait and, in old traces, names nothing)."""
    return event.name == "record_param_comms" and collective_kind(str(event.args.get("Collective name", ""))) \
        is not None


def enclosing(inner: _Event, outer: list[_Event], starts: list[float]) -> _Event | None:
    """The last event of ``outer`` (sorted by start, ``starts`` their starts) on ``inner``'s thread that holds it
    (starts at or before it and ends at or after it): record_param_comms around a process group's span."""
    k = bisect.bisect_right(starts, inner.ts)
    for candidate in reversed(outer[max(0, k - 8):k]):
        if candidate.tid == inner.tid and candidate.end >= inner.end - 1.0:
            return candidate
    return None


def _issuer(span: _Event, unused: list[_Event]) -> _Event | None:
    """The c10d op that issued a process-group span: of its kind, started before it, and of its element count
    where both name one (gloo runs two worker threads, so two buckets' spans can start in either order); else
    the earliest of its kind."""
    kind = collective_kind(_GROUP_SPAN.match(span.name).group(2))
    candidates = [e for e in unused if e.ts <= span.ts and _launch_kind(e) == kind]
    numel = _dims_numel(span.args.get("Input Dims"))
    same = [e for e in candidates if numel is not None and _dims_numel(e.args.get("Input Dims")) == numel]
    return (same or candidates or [None])[0]


def _copy_back_start(copies: list[_Event], last_numel: int) -> float | None:
    """When DDP began copying the last bucket back into the gradients: DDP waits for each bucket's exchange and
    copies it (``copy_bucket_to_grad``, one op per parameter) in bucket order, so the last bucket's copies are
    the final ones whose elements add up to its size; their start is when the whole exchange had finished.
    None when the copies do not add up (a hook with gradient_as_bucket_view copies nothing)."""
    total = 0
    for copy in reversed(copies):
        numel = _dims_numel(copy.args.get("Input Dims"))
        if numel is None:
            return None
        total += numel
        if total == last_numel:
            return copy.ts
        if total > last_numel:
            return None
    return None


def read_profiler_trace(path: str | Path, execution_trace: str | Path | None = None) -> ProfilerTrace:
    """Parse ``path`` (and the execution trace of the same run, for sizes the trace lacks); every problem is
    one :class:`InputError` naming the file and the event."""
    path = Path(path)
    sizes = read_execution_trace(execution_trace) if execution_trace is not None else {}
    events = _events(path)
    if execution_trace is not None:
        check_execution_trace(path, events, execution_trace, sizes)
    step_events = _steps(events, path)
    backend, world, rank = _group(path)
    thread = step_events[0].tid
    spans = [e for e in events if is_group_span(e)]
    use_spans = bool(spans)
    issued = spans if use_spans else [
        e for e in events if e.name == "record_param_comms"
        and str(e.args.get("Collective name", "")).strip().lower() not in NOT_COLLECTIVES]
    launches = sorted((e for e in events if e.tid == thread and _LAUNCH.match(e.name)), key=lambda e: e.ts)
    records = sorted((e for e in events if is_collective_record(e)), key=lambda e: e.ts)
    record_starts = [e.ts for e in records]
    backward = [e for e in events if e.name.startswith(_BACKWARD)]
    on_thread = sorted((e for e in events if e.tid == thread and not _STEP.match(e.name)), key=lambda e: e.ts)
    device = "cuda" if any(e.cat == "kernel" for e in events) else "cpu"
    steps = []
    for step in step_events:
        start, end = step.ts, step.end
        inside = sorted((e for e in issued if start <= e.ts < end), key=lambda e: e.ts)
        unused = [e for e in launches if start <= e.ts < end]
        collectives = []
        for event in inside:
            issuer = None
            if use_spans:  # the op that issued it: an unused c10d op of its kind before the span, of its size
                issuer = _issuer(event, unused)
                if issuer is not None:
                    unused.remove(issuer)
            record = enclosing(event, records, record_starts) if use_spans else None
            kind, numel, element, size = collective_size(event, issuer, record, world, sizes, path)
            launch = issuer.ts if issuer is not None else event.ts
            span = (event.end - event.ts) / 1e6 if use_spans else math.nan
            collectives.append(TracedCollective(kind, numel, element, size, (launch - start) / 1e6, span))
        mine = [e for e in backward if start <= e.ts < end]
        if mine:
            b0 = min(e.ts for e in mine)
            b1 = max(e.end for e in mine)
            after = next((e.ts for e in on_thread if e.ts >= b1 and e.ts < end), end)
            b_start, b_end = (b0 - start) / 1e6, (b1 - start) / 1e6
            buckets = _buckets_during(collectives, b_start, b_end)
            copies = [e for e in on_thread if e.name == _COPY_BACK and b1 <= e.ts < end]
            if buckets and copies:  # the first op after the backward copies bucket 0, maybe before the last is done
                last = _copy_back_start(copies, buckets[-1].numel)
                after = last if last is not None else after
            resumed = (after - start) / 1e6
        else:
            b_start = b_end = math.nan
            resumed = (end - start) / 1e6
        steps.append(TracedStep(int(_STEP.match(step.name).group(1)), (end - start) / 1e6, b_start, b_end,
                                resumed, tuple(collectives)))
    if not world:
        group_sizes = {c.group_size for s in steps for c in s.collectives}
        world = max(group_sizes) if group_sizes else 1
    return ProfilerTrace(str(path), tuple(steps), backend or ("nccl" if device == "cuda" else "gloo"), world, rank,
                         device)


def step_numbers(numbers: Sequence[int]) -> str:
    """``2-4`` or ``2, 5``: the step numbers a statement is about, as people write them."""
    numbers = list(numbers)
    if numbers and numbers == list(range(numbers[0], numbers[0] + len(numbers))) and len(numbers) > 2:
        return f"{numbers[0]}-{numbers[-1]}"
    return ", ".join(str(n) for n in numbers)
