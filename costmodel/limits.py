"""Limits on what one input may ask for, so no file or flag can hang flexcomm or eat the machine's memory.

Why: a cluster of a billion nodes, a YAML alias bomb or a jitter redrawn every nanosecond are each one
line of input, and each used to run for minutes or take gigabytes before failing. Every limit here is far
above what a real study needs (the largest published training runs use ~10^5 GPUs), is checked before the
work starts, and fails with one line naming the limit and the environment variable that raises it.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import BinaryIO

from flexcomm.costmodel.errors import InputError


def _physical_memory_bytes() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # not POSIX: assume a small machine
        return 8 * 2**30


@dataclass(frozen=True)
class Limit:
    """A ceiling with a default and an environment variable that overrides it."""

    env: str
    default: int
    what: str  #: the unit counted, e.g. "nodes"

    @property
    def value(self) -> int:
        raw = os.environ.get(self.env)
        if raw is None or not raw.strip():
            return self.default
        try:
            value = int(float(raw))
        except ValueError:
            raise InputError(self.env, raw, "a whole number (an environment variable raising a limit)") from None
        if value < 1:
            raise InputError(self.env, raw, "a whole number >= 1 (an environment variable raising a limit)")
        return value

    def check(self, field: str, amount: float, got: object = None) -> None:
        """Raise a one-line InputError when ``amount`` exceeds the limit; ``got`` is what the user typed, when
        that differs from the amount it asks for (a period of 1ns is 10^9 events per second)."""
        limit = self.value
        if amount > limit:
            asks = "" if got is None else f", this asks for {amount:,.0f}"
            raise InputError(field, amount if got is None else got,
                             f"at most {limit:,} {self.what}{asks} (set {self.env} to raise the limit)")


#: Nodes of one cluster; and ranks (nodes x devices per node). Frontier and the largest GPU clusters have
#: ~10^4-10^5 accelerators; 2^19 ranks leave room for what-if studies, and pricing a collective on all of
#: them stays under ~3 s and ~300 MB (measured with `flexcomm cost --ranks 524288 --cluster FILE`).
MAX_NODES = Limit("FLEXCOMM_MAX_NODES", 65_536, "nodes")
MAX_RANKS = Limit("FLEXCOMM_MAX_RANKS", 524_288, "ranks")
#: Processes one `flexcomm launch` (or bench-collectives, train-ddp) starts on this machine.
MAX_LOCAL_PROCESSES = Limit("FLEXCOMM_MAX_PROCESSES", 256, "local processes")
#: A YAML/JSON document: bytes read, and nodes after expanding aliases (a "billion laughs" file has a few
#: hundred bytes and expands to 10^9 nodes).
MAX_DOCUMENT_BYTES = Limit("FLEXCOMM_MAX_DOCUMENT_BYTES", 2 * 2**20, "bytes")
MAX_DOCUMENT_NODES = Limit("FLEXCOMM_MAX_DOCUMENT_NODES", 200_000, "YAML nodes after expanding aliases")
#: Nested flow collections ([...] / {...}) in a YAML document: PyYAML's scanner is quadratic in this depth
#: (5,000 levels take 1.3 s before the composer gives up); cluster and study files nest fewer than ten.
MAX_DOCUMENT_FLOW_DEPTH = Limit("FLEXCOMM_MAX_DOCUMENT_FLOW_DEPTH", 100, "levels of nested [ ] or { }")
#: Network-dynamics changes per simulated second (a jitter redrawn every 1 ns would be 10^9 events/s).
MAX_EVENTS_PER_SIM_SECOND = Limit("FLEXCOMM_MAX_EVENTS_PER_SIM_SECOND", 1_000_000, "events per simulated second")
#: Iterations of one simulated job: each keeps a row (and its buckets') in memory, ~1 KB per iteration and rank.
MAX_SIM_ITERATIONS = Limit("FLEXCOMM_MAX_SIM_ITERATIONS", 1_000_000, "iterations")
#: Steps of one emulated or real training run: each keeps a row of metrics in memory (~0.5 KB).
MAX_TRAINING_STEPS = Limit("FLEXCOMM_MAX_TRAINING_STEPS", 1_000_000, "steps")
#: Bytes the ranks of one collective benchmark allocate on this machine: half its physical memory.
MAX_BENCH_BYTES = Limit("FLEXCOMM_MAX_BENCH_BYTES", _physical_memory_bytes() // 2, "bytes of buffers (half this "
                        "machine's memory)")
#: Bytes of a log, CSV, profile or trace read whole (nccl-tests logs, measurement CSVs, network traces,
#: calibration profiles): real ones are kilobytes to a few megabytes, and parsing 16 MiB takes seconds.
MAX_FILE_BYTES = Limit("FLEXCOMM_MAX_FILE_BYTES", 16 * 2**20, "bytes")
#: A file of a run flexcomm wrote and reads back (a train-ddp run's steps.csv and exchanges.csv, summaries,
#: a validation folder's tables): ~300 bytes per bucket exchange, so 64 MiB is ~200,000 exchanges.
MAX_RUN_FILE_BYTES = Limit("FLEXCOMM_MAX_RUN_FILE_BYTES", 64 * 2**20, "bytes")
#: A training checkpoint read whole before torch unpickles it (model, optimizer, residuals): the workloads
#: train here are megabytes; a quarter of this machine's memory leaves room for the model it is loaded into.
MAX_CHECKPOINT_BYTES = Limit("FLEXCOMM_MAX_CHECKPOINT_BYTES", _physical_memory_bytes() // 4, "bytes")
#: A torch.profiler Chrome trace (after gunzip): tens of MB for a few steps (the public GPU traces of
#: ../shared/data/traces: 10-35 MB). It is parsed as a stream (~50 MB/s here), so this bounds the time.
MAX_PROFILER_TRACE_BYTES = Limit("FLEXCOMM_MAX_PROFILER_TRACE_BYTES", 256 * 2**20, "bytes")
#: Events of one trace, every kind: 109,123 in the largest public trace (HTA's 8 x A100 rank, 35 MB, 74,937
#: of them complete events kept at ~1.5 KB each with their args); 300,000 keep a trace under ~500 MB of memory
#: and ~5 s, and a file of empty events is refused after a fraction of a second.
MAX_TRACE_EVENTS = Limit("FLEXCOMM_MAX_TRACE_EVENTS", 300_000, "events in one trace")
#: Table rows of one nccl-tests log: a sweep has ~30 sizes (-f 2), a few thousand with a fine -i step; each
#: row is priced by `validate`, ~40 us apiece.
MAX_LOG_ROWS = Limit("FLEXCOMM_MAX_LOG_ROWS", 10_000, "table rows of one nccl-tests log")
#: Points of one study after expanding its sweeps (each is a simulation or a pricing, and a journal row).
MAX_STUDY_POINTS = Limit("FLEXCOMM_MAX_STUDY_POINTS", 100_000, "points after expanding the sweeps")
#: Cables of one fabric, empty ports included (a 3-tier k-ary fat-tree has k^3/2 between switches: k = 100,000
#: is 5 x 10^14), and equal-cost paths between two hosts (k^2/4 across pods), which every route between two
#: pods lists. superpod-h100-128k has 262,144 cables: `cost` over all its ranks takes ~10 s and ~730 MB.
MAX_FABRIC_LINKS = Limit("FLEXCOMM_MAX_FABRIC_LINKS", 524_288, "cables in the fabric")
MAX_EQUAL_COST_PATHS = Limit("FLEXCOMM_MAX_EQUAL_COST_PATHS", 4_096, "equal-cost paths between two hosts")
#: Failures in one flow-simulated job (`simulate --fail random:mtbf=...`): each restart simulates its
#: iterations again (~30 ms of wall time apiece), so a job MTBF below an iteration ran for minutes.
MAX_SIM_FAILURES = Limit("FLEXCOMM_MAX_SIM_FAILURES", 1_000, "failures in one simulated job")
#: Failures and checkpoints over one recovery horizon (`simulate --recovery`, a recovery study): each
#: failure re-plans the job (1,725 failures took 2.9 s a policy) and each checkpoint is a step of the run
#: (`--horizon 1e9d` never ended).
MAX_RECOVERY_FAILURES = Limit("FLEXCOMM_MAX_RECOVERY_FAILURES", 10_000, "failures within the horizon")
MAX_RECOVERY_CHECKPOINTS = Limit("FLEXCOMM_MAX_RECOVERY_CHECKPOINTS", 1_000_000, "checkpoints within the horizon")
#: The global batch one plan may price. The largest published data-parallel batches are ~65,536 samples
#: (ResNet-50 on ImageNet, BERT with LAMB) and a few thousand sequences (LLM pre-training, 4-16M tokens); 2^20
#: is 16x beyond, while 10^12 priced an 8-year step without a word.
MAX_GLOBAL_BATCH = Limit("FLEXCOMM_MAX_GLOBAL_BATCH", 2**20, "samples in one global batch")

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe), which blocks until written"),
          (stat.S_ISCHR, "a character device, which may never end"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def _not_regular(field: str, path: str, what: str, mode: int) -> InputError:
    """The one-line error for a path that is not a regular file, naming what it is instead."""
    kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
    return InputError(field, path, f"a regular {what}; this is {kind}")


def open_regular(path: str | os.PathLike, field: str, what: str = "file",
                 limit: Limit = MAX_FILE_BYTES) -> BinaryIO:
    """The regular file ``path`` opened for reading, its kind checked before and after opening and its size
    against ``limit``; anything else is a one-line InputError naming ``field``.

    Why: a FIFO blocks ``open`` forever, ``/dev/zero`` never ends and a directory raises an odd OSError, so the
    file's kind is checked *before* it is opened (and again on the open descriptor, opened non-blocking, in
    case it was swapped in between)."""
    name = os.fspath(path)
    try:
        mode = os.stat(name).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(field, name, what, mode)
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise InputError(field, name, f"a readable {what} ({exc.strerror or exc.__class__.__name__})") from None
    handle = os.fdopen(fd, "rb")
    try:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise _not_regular(field, name, what, info.st_mode)
        limit.check(field, info.st_size, name)
    except InputError:
        handle.close()
        raise
    return handle


def read_bytes_bounded(path: str | os.PathLike, field: str, what: str = "file",
                       limit: Limit = MAX_FILE_BYTES) -> bytes:
    """The bytes of the regular file ``path`` (:func:`open_regular`), at most ``limit`` of them, else a one-line
    InputError: no more than ``limit`` + 1 bytes are ever read (``/proc`` files report size 0; a file may grow
    while read)."""
    name = os.fspath(path)
    with open_regular(path, field, what, limit) as handle:
        cap = limit.value
        try:
            data = handle.read(cap + 1)
        except OSError as exc:
            raise InputError(field, name, f"a readable {what} ({exc.strerror or exc.__class__.__name__})") from None
    if len(data) > cap:
        raise InputError(field, name, f"at most {cap:,} {limit.what} (it grew past that while read; set "
                         f"{limit.env} to raise the limit)")
    return data


def read_text_bounded(path: str | os.PathLike, field: str, what: str = "file", limit: Limit = MAX_FILE_BYTES,
                      errors: str = "strict") -> str:
    """:func:`read_bytes_bounded` decoded as UTF-8 (``errors="replace"`` for logs pasted from terminals)."""
    data = read_bytes_bounded(path, field, what, limit)
    try:
        return data.decode("utf-8", errors=errors)
    except UnicodeDecodeError as exc:
        raise InputError(field, os.fspath(path), f"a UTF-8 {what} (byte {exc.start:,} is not UTF-8)") from None
