"""nccl-tests output as data: parse a pasted log (and write one), with nccl-tests' own bandwidth conventions.

GPU users share collective measurements as the text ``all_reduce_perf`` and its siblings print, so that
text is an input format here, read as it is pasted: ``NCCL INFO`` lines, shell prompts, ``mpirun``'s
``[1,0]<stdout>:`` prefixes and the run's ``# nThread ... nGpus`` / ``#  Rank ... device`` preamble
interleaved, ``srun --label``'s ``0:`` and ``mpirun --tag-output`` tags even where they split a row
(``... -1[1,0]<stdout>:    85.70 ...``); both table layouts (nccl-tests >= 2.10: ``size count type redop root
time algbw busbw #wrong`` twice, out-of-place then in-place; older: no ``root`` and a float ``error``
column); and the CSV people transcribe runs into (``Nodes,GPUs,size(MB),...,out algbw(GB/s),out
busbw(GB/s),...``: sizes in MiB, no time column, so the time is size / algbw). What decides the price is kept:
the NCCL version the log or its header states, NCCL_ALGO / NCCL_PROTO / NCCL_BUFFSIZE, GPUs per thread
(``nGpus``, ``-g``: one thread launching several GPUs' kernels) and CUDA-graph replay (``graph: 1``, ``-G``).

Conventions, from nccl-tests' sources (``src/*.cu``, ``Get*Bw``), reproduced exactly by
:func:`bus_factor`: ``algbw = size / time`` with ``size`` the column as printed (for allgather,
reduce-scatter and alltoall the whole buffer of n x count elements), and ``busbw = algbw x factor``
with factor 2(n-1)/n for allreduce, (n-1)/n for allgather, reduce-scatter and alltoall, 1 for
broadcast, reduce and sendrecv.

Every problem is an :class:`~costmodel.errors.InputError` naming the line: a table row before any
header, a truncated row, a non-numeric cell, sizes that do not increase, a second table or a log that
names two collectives, a collective the log does not name (pass ``collective=``).
"""

from __future__ import annotations

import math
import os
import re
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from flexcomm.costmodel.atomic import write_text_atomic
from flexcomm.costmodel.collective_libraries.versions import version_in_text
from flexcomm.costmodel.collectives import BUS_BANDWIDTH_FACTOR
from flexcomm.costmodel.errors import InputError
from flexcomm.costmodel.limits import MAX_LOG_ROWS, read_text_bounded

#: nccl-tests binaries -> the collective names used everywhere else in flexcomm.
BINARIES: dict[str, str] = {
    "all_reduce_perf": "allreduce", "all_gather_perf": "allgather", "reduce_scatter_perf": "reduce-scatter",
    "broadcast_perf": "broadcast", "alltoall_perf": "alltoall", "sendrecv_perf": "sendrecv",
    "reduce_perf": "reduce",
}
COLLECTIVES = tuple(dict.fromkeys(BINARIES.values()))
#: What the corpus headers and people write for a collective (``all_reduce``, ``AllReduce``).
_ALIASES = {re.sub(r"[-_ ]", "", name): name for name in COLLECTIVES}
_ALIASES.update({re.sub(r"[-_ ]", "", b.removesuffix("_perf")): c for b, c in BINARIES.items()})
#: Collectives whose ``size`` column is n x count x element size (the whole gathered or scattered buffer).
_WHOLE_BUFFER = frozenset({"allgather", "reduce-scatter", "alltoall"})
#: Element sizes of nccl-tests' type names (``src/common.cu`` ``test_typenames``).
TYPE_BYTES: dict[str, int] = {
    "int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8, "half": 2, "float": 4,
    "double": 8, "bfloat16": 2, "f8e4m3": 1, "f8e5m2": 1, "fp8_e4m3": 1, "fp8_e5m2": 1,
}
LAYOUTS = {
    "root": ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
             "time", "algbw", "busbw", "#wrong"),
    "legacy": ("size", "count", "type", "redop", "time", "algbw", "busbw", "error", "time", "algbw", "busbw",
               "error"),
}
_HEADER = re.compile(r"^#?\s*size\s+count\s+type\s+redop\s+(?P<root>root\s+)?time\s+algbw\s+busbw\s+\S+\s+"
                     r"time\s+algbw\s+busbw\s+\S+\s*$")
_PREFIX = re.compile(r"^.*?<std(?:out|err)>:\s?|^\[\d+,\d+\]\s?|^\d+:\s")  # mpirun --tag-output, srun -l
_MID_TAG = re.compile(r"\[\d+,\d+\]<std(?:out|err)>:")  # a tag inside a row: the row was split by its rank's output
_CSV_HEADER = re.compile(r"^[^#]*size\(\s*(?P<unit>[KMG]i?B|B)\s*\)[^#]*algbw", re.IGNORECASE)
_GPUS_FLAG = re.compile(r"(?:^|\s)-g\s+(?P<gpus>\d+)\b")
_GRAPH = re.compile(r"\bgraph:\s*(?P<graph>\d+)|(?:^|\s)-G\s+(?P<flag>\d+)\b")
_RANK = re.compile(r"^#\s*Rank\s+(?P<rank>\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+\S+\s+device\s+\d+")
#: the GPU a Rank line names (``device 0 [0x19] NVIDIA H100 80GB HBM3``) or a header's ``gpu_model:``
_DEVICE = re.compile(r"device\s+\d+\s+\[[^\]]*\]\s+(?P<name>.+?)\s*$")
_GPU_MODEL = re.compile(r"^#?\s*gpu_model\s*:\s*(?P<name>[^(;]+)")
_THREADS = re.compile(r"nThread\s+(?P<threads>\d+)\s+nGpus\s+(?P<gpus>\d+)")
_BINARY = re.compile(r"\b(" + "|".join(BINARIES) + r")\b")
_DECLARED = re.compile(r"^(?:#\s*)?(?:collective\s*:\s*(?P<name>[A-Za-z_\-]+)"
                       r"|#\s*Collective test concluded:\s*(?P<binary>\w+))",
                       re.IGNORECASE)
_VERSION = re.compile(r"[NR]CCL version (?P<version>[\w.+]+)|nccl_version\s*:\s*(?P<declared>\d[\w.+]*)")
_ALGORITHM = re.compile(r"^#\s*flexcomm algorithm:\s*(?P<name>[\w-]+)")
_ENV = re.compile(r"\b(?P<key>NCCL_ALGO|NCCL_PROTO|NCCL_BUFFSIZE)=(?P<value>[\w,^:;]+)")
_NEGATIVE = re.compile(r"^-\d")  # a row whose size is negative: refused, not skipped as a non-row line
#: A time nccl-tests could have printed for one call (us): an hour. Past it the cell is mangled (1e308).
MAX_CALL_US = 3.6e9


def bus_factor(collective: str, ranks: int) -> float:
    """nccl-tests' busbw / algbw for ``collective`` on ``ranks`` ranks (its ``Get*Bw`` functions): the
    cost model's :data:`~costmodel.collectives.BUS_BANDWIDTH_FACTOR`, and 1 for reduce and sendrecv."""
    if collective not in COLLECTIVES:
        raise InputError("collective", collective, "one of " + ", ".join(COLLECTIVES))
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise InputError("ranks", ranks, "an integer >= 1")
    factor = BUS_BANDWIDTH_FACTOR.get(collective)
    return float(factor(np.float64(ranks))) if factor is not None else 1.0


def size_column(collective: str, nbytes: float, ranks: int) -> float:
    """nccl-tests' ``size`` (its S of algbw = S / t) of a call flexcomm counts as ``nbytes``: the gathered
    output for allgather (flexcomm counts each rank's contribution), the vector otherwise."""
    return nbytes * ranks if collective == "allgather" else nbytes


def flexcomm_bytes(collective: str, size: int, ranks: int) -> int:
    """The inverse of :func:`size_column`: the bytes flexcomm's cost model and measurements count."""
    return size // ranks if collective == "allgather" else size


@dataclass(frozen=True)
class NcclTestsRow:
    """One size of a sweep, SI units; ``in_place_*`` are None where the log says N/A."""

    line: int
    bytes: int
    count: int
    dtype: str
    redop: str
    root: int | None
    time_s: float
    algbw_Bps: float
    busbw_Bps: float
    in_place_time_s: float | None
    in_place_algbw_Bps: float | None
    in_place_busbw_Bps: float | None


@dataclass
class NcclTestsLog:
    """A parsed log: one collective's sweep and what the log says about the run."""

    collective: str
    rows: list[NcclTestsRow]
    layout: str
    ranks: int | None = None
    ranks_from: str = ""  # "Rank lines", "size / count", "busbw / algbw", "nThread x nGpus"
    nccl_version: str | None = None
    env: dict[str, str] = field(default_factory=dict)  # NCCL_ALGO / NCCL_PROTO / NCCL_BUFFSIZE as shown
    gpus_per_thread: int | None = None  # nccl-tests -g / nGpus: GPUs one thread launches (None: not shown)
    cuda_graph: bool = False  # -G / "graph: N" with N > 0: calls replayed from a CUDA graph
    zero_byte_rows: int = 0  # rows of 0 B left out (nothing moves; allgather prints them below one element)
    algorithm: str | None = None  # "# flexcomm algorithm: binomial" in a log flexcomm wrote
    source: str = "nccl-tests log"
    devices: tuple[str, ...] = ()  # the GPU names its Rank lines (or a gpu_model: header) give, in order seen

    @property
    def sizes(self) -> list[int]:
        return [r.bytes for r in self.rows]


def _collective_named(text: str) -> str | None:
    key = re.sub(r"[-_ ]", "", text.strip().lower())
    return _ALIASES.get(key)


def _number(cell: str, name: str, where: str, allow_na: bool = False) -> float | None:
    if allow_na and cell.upper() == "N/A":
        return None
    try:
        value = float(cell)
    except ValueError:
        raise InputError(where, cell, f"a number in the {name} column") from None
    if not math.isfinite(value) or value < 0:
        raise InputError(where, cell, f"a finite number >= 0 in the {name} column")
    return value


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


def _row(cells: list[str], layout: str, where: str, line: int) -> NcclTestsRow:
    names = LAYOUTS[layout]
    if len(cells) == len(names) - 1 and _is_number(cells[3]):
        cells = [*cells[:3], "none", *cells[3:]]  # older alltoall prints an empty redop cell
    half = len(names) - 4
    if cells and cells[-1].lower() == "[cut]" and len(cells) > half:
        # a transcription marks where its source cut the row off: the out-of-place half stands, the rest is N/A
        cells = [*cells[:half], *(["N/A"] * 4)]
    if len(cells) != len(names):
        raise InputError(where, " ".join(cells), f"{len(names)} cells ({' '.join(names)}), got {len(cells)}: "
                         "a truncated or mangled row")
    size = _number(cells[0], "size", where)
    count = _number(cells[1], "count", where)
    if size != int(size) or count != int(count):
        raise InputError(where, cells[0] if size != int(size) else cells[1], "a whole number of bytes / elements")
    at = 5 if layout == "root" else 4
    root = None
    if layout == "root":
        root_value = cells[4]
        try:
            root = int(root_value)
        except ValueError:
            raise InputError(where, root_value, "an integer in the root column") from None
    t, algbw, busbw = (_number(cells[at + i], n, where) for i, n in enumerate(("time", "algbw", "busbw")))
    ip = [_number(cells[at + 4 + i], n, where, allow_na=True) for i, n in enumerate(("time", "algbw", "busbw"))]
    if not t:
        raise InputError(where, cells[at], "a positive time in us")
    if layout == "root":
        for half in (at + 3, at + 7):
            _no_wrong_results(cells[half], where)
    _time_matches(size, t, algbw, cells[at], where)
    if ip[0] and ip[1] is not None:
        _time_matches(size, ip[0], ip[1], cells[at + 4], where)
    return NcclTestsRow(line, int(size), int(count), cells[2], cells[3], root, t / 1e6, algbw * 1e9, busbw * 1e9,
                        None if ip[0] is None else ip[0] / 1e6, None if ip[1] is None else ip[1] * 1e9,
                        None if ip[2] is None else ip[2] * 1e9)


def _no_wrong_results(cell: str, where: str) -> None:
    """``#wrong`` counts the elements nccl-tests found corrupted (``-c 1``); a row with any is not a
    measurement of a working collective, so it is refused rather than priced (``N/A``: not checked)."""
    if cell.upper() == "N/A":
        return
    if not cell.isdigit():
        raise InputError(where, cell, "a count >= 0 or N/A in the #wrong column")
    if int(cell):
        raise InputError(where, cell, "0 in the #wrong column: nccl-tests found corrupted results in this row, "
                         "so its time does not measure a working collective (fix the run, or delete the row)")


def _time_matches(size: float, time_us: float, algbw: float, cell: str, where: str) -> None:
    """nccl-tests prints ``algbw = size / time``; a time that disagrees with it (beyond the printed digits)
    or runs past an hour was mangled or edited (a ``1e308`` us cell was priced as 10^302 s)."""
    if time_us > MAX_CALL_US:
        raise InputError(where, cell, f"a time below {MAX_CALL_US:,.0f} us (an hour for one call)")
    implied = size / time_us / 1e3  # GB/s
    if abs(implied - algbw) > 0.006 + 0.02 * algbw:
        raise InputError(where, cell, f"a time matching the row's algbw ({size:.0f} B in {time_us:g} us is "
                         f"{implied:.3g} GB/s, the row says {algbw:g}): a mangled or edited row")


def _clean(raw: str) -> str:
    return _PREFIX.sub("", _MID_TAG.sub("", raw.rstrip("\r\n")).strip()).strip()


def _csv_row(line: str, columns: list[str], unit: str, where: str, number: int) -> NcclTestsRow | None:
    """One row of a transcription: ``size(MB)`` and ``out algbw(GB/s)`` (``in ...`` where given)."""
    cells = [c.strip() for c in line.split(",")]
    if len(cells) != len(columns):
        raise InputError(where, line[:60], f"{len(columns)} comma-separated cells as the header names, got "
                         f"{len(cells)}")
    by = dict(zip(columns, cells, strict=True))
    scale = {"b": 1, "kb": 1 << 10, "kib": 1 << 10, "mb": 1 << 20, "mib": 1 << 20, "gb": 1 << 30, "gib": 1 << 30}
    size = _number(by[next(c for c in columns if c.startswith("size"))], "size", where) * scale[unit.lower()]

    def cell(prefix: str, kind: str) -> float | None:
        name = next((c for c in columns if c.startswith(prefix) and kind in c), None)
        return None if name is None else _number(by[name], name, where, allow_na=True)

    algbw, busbw = cell("out", "algbw"), cell("out", "busbw")
    if not algbw or not math.isfinite(size / (algbw * 1e9)) or size / (algbw * 1e9) * 1e6 > MAX_CALL_US:
        raise InputError(where, line[:60], "a positive out-of-place algbw (GB/s): the time is size / algbw")
    ip_alg, ip_bus = cell("in", "algbw"), cell("in", "busbw")
    return NcclTestsRow(number, int(size), 0, "", "", None, size / (algbw * 1e9), algbw * 1e9,
                        (busbw or 0.0) * 1e9, size / (ip_alg * 1e9) if ip_alg else None,
                        ip_alg * 1e9 if ip_alg else None, ip_bus * 1e9 if ip_bus else None)


@dataclass(slots=True)
class _LogScan:
    """What one pass over a log's lines has gathered so far: the parser's state from one line to the next."""

    name: str
    lines: list[str]
    #: collective -> first line naming its binary (a command may run several)
    named: dict[str, int] = field(default_factory=dict)
    #: collective -> first line declaring it ("collective:", "test concluded")
    declared: dict[str, int] = field(default_factory=dict)
    ranks_seen: set[int] = field(default_factory=set)
    threads: tuple[int, int] | None = None
    layout: str | None = None
    header_line: int = 0
    rows: list[NcclTestsRow] = field(default_factory=list)
    version: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    algorithm: str | None = None
    ended: bool = False
    gpus_flag: int | None = None
    graph: bool = False
    csv_columns: list[str] | None = None
    csv_unit: str = "MB"
    csv_ranks: set[int] = field(default_factory=set)
    zero_rows: int = 0
    devices: list[str] = field(default_factory=list)
    pending: str | None = None  # a row cut by a tag at its end: its rest follows on the next line


def parse_nccl_tests(text: str, collective: str | None = None, name: str = "nccl-tests log") -> NcclTestsLog:
    """Parse one collective's nccl-tests sweep from pasted text; see the module for what is accepted."""
    if collective is not None and _collective_named(collective) is None:
        raise InputError("collective", collective, "one of " + ", ".join(COLLECTIVES))
    forced = _collective_named(collective) if collective else None
    scan = _LogScan(name, text.splitlines())
    _scan_lines(scan)
    if scan.layout is None:
        raise InputError(f"{name} line 1", name, "an nccl-tests table (a '# size count type redop ...' header); "
                         "none found")
    if not scan.rows:
        raise InputError(f"{name} line {scan.header_line}", "a header without rows", "at least one table row"
                         + (f" of more than 0 bytes ({scan.zero_rows} rows of 0 B)" if scan.zero_rows else ""))
    log = _log_of(scan, _chosen_collective(scan, forced, collective))
    _check_bus_factor(log, name)
    return log


def _scan_lines(scan: _LogScan) -> None:
    """The one pass over the lines. Each line is run flags, a CSV header or row, the run's facts (binary, version,
    ranks, header) or a table row; the dispatch stays inline so a row line costs no more calls than it must."""
    lines, name = scan.lines, scan.name
    for number, raw in enumerate(lines, start=1):
        line = _clean(raw)
        where = f"{name} line {number}"
        if scan.pending is not None:
            line, scan.pending = f"{scan.pending} {line}", None
        if not line:
            continue
        if (g := _GPUS_FLAG.search(line)) is not None and scan.gpus_flag is None and not line[0].isdigit():
            scan.gpus_flag = int(g["gpus"])
        if (gr := _GRAPH.search(line)) is not None and not line[0].isdigit():
            scan.graph = scan.graph or int(gr["graph"] or gr["flag"] or 0) > 0
        if scan.csv_columns is None and (c := _CSV_HEADER.match(line)) is not None and "," in line:
            scan.csv_columns = [col.strip().lower() for col in line.split(",")]
            scan.csv_unit = c["unit"]
            scan.layout, scan.header_line = "csv", number
            continue
        if scan.csv_columns is not None and (line[0].isdigit() or _NEGATIVE.match(line)):
            _add_csv_row(scan, line, where, number)
            continue
        if _note_run_facts(scan, line, where, number):
            continue
        if not line[0].isdigit() and not (scan.layout is not None and _NEGATIVE.match(line)):
            if scan.rows and line.startswith("#"):
                scan.ended = True  # "# Out of bounds values", "# Avg bus bandwidth": the table is over
            continue
        _add_table_row(scan, line, where, number)


def _add_csv_row(scan: _LogScan, line: str, where: str, number: int) -> None:
    """A transcription's row, and the rank count its GPUs column gives (checked one per file at the end)."""
    rows, csv_columns = scan.rows, scan.csv_columns
    MAX_LOG_ROWS.check(scan.name, len(rows) + 1)
    row = _csv_row(line, csv_columns, scan.csv_unit, where, number)
    if "gpus" in csv_columns:
        gpus = line.split(",")[csv_columns.index("gpus")].strip()
        if gpus.isdigit():
            scan.csv_ranks.add(int(gpus))
    if rows and row.bytes <= rows[-1].bytes:
        raise InputError(where, row.bytes, f"a size above the previous row's {rows[-1].bytes} B (line "
                         f"{rows[-1].line}): sizes must increase")
    rows.append(row)


def _note_run_facts(scan: _LogScan, line: str, where: str, number: int) -> bool:
    """Record what a line says about the run (binaries, declared collective, version, algorithm, env, ranks, GPUs,
    threads, the table header); True where the line is nothing else (NCCL INFO, Rank lines, the header)."""
    for match in _BINARY.finditer(line):
        scan.named.setdefault(BINARIES[match[1]], number)
    if (d := _DECLARED.match(line)) is not None:
        said = _collective_named(d["name"] or BINARIES.get(d["binary"], d["binary"]))
        if said is not None:
            scan.declared.setdefault(said, number)
    lowered = line.lower()
    if scan.version is None and (_VERSION.search(line) or "nccl-library=" in lowered
                                 or lowered.lstrip("# ").startswith("nccl_version")):
        stated = version_in_text(line)  # "nccl_version: NOT stated ..." states none
        match = _VERSION.search(line)
        scan.version = (match["version"] or match["declared"]) if match and stated is not None else (
            str(stated) if stated is not None else None)
    if (a := _ALGORITHM.match(line)) is not None:
        scan.algorithm = a["name"]
    for e in _ENV.finditer(line):
        scan.env.setdefault(e["key"], e["value"])
    if "NCCL INFO" in line or "NCCL WARN" in line:
        return True
    devices = scan.devices
    if (r := _RANK.match(line)) is not None:
        scan.ranks_seen.add(int(r["rank"]))
        if (dev := _DEVICE.search(line)) is not None and dev["name"].strip() not in devices:
            devices.append(dev["name"].strip())
        return True
    if (gm := _GPU_MODEL.match(line)) is not None and gm["name"].strip() not in devices:
        devices.append(gm["name"].strip())
    if (t := _THREADS.search(line)) is not None and scan.threads is None:
        scan.threads = (int(t["threads"]), int(t["gpus"]))
    if _HEADER.match(line):
        if scan.rows:
            raise InputError(where, line[:60], "one table per log (a second header after the rows of the "
                             f"first, line {scan.header_line}: split the log into one file per collective)")
        scan.layout, scan.header_line = ("root" if _HEADER.match(line)["root"] else "legacy"), number
        return True
    return False


def _add_table_row(scan: _LogScan, line: str, where: str, number: int) -> None:
    """A table row: joined with its rest where a rank's tag split it, refused outside a table, 0-byte rows
    counted apart, and sizes, type and operation checked against the rows before it."""
    cells = line.split()
    layout, lines, rows = scan.layout, scan.lines, scan.rows
    if layout is not None and layout != "csv" and len(cells) < len(LAYOUTS[layout]) - 1 \
            and _MID_TAG.search(lines[number - 1]) is None and number < len(lines) \
            and _MID_TAG.search(lines[number]) is not None:
        scan.pending = line  # the rest of this row follows its rank's tag on the next line
        return
    if layout is None:
        raise InputError(where, line[:60], "a table header (# size count type redop root time algbw busbw "
                         "#wrong ...) before the first row: no header in this log")
    if scan.ended:
        raise InputError(where, line[:60], "no rows after the table's summary lines (a second table?)")
    MAX_LOG_ROWS.check(scan.name, len(rows) + scan.zero_rows + 1)  # before the row: a 10^6-row log is refused early
    row = _row(cells, layout, where, number)
    if row.bytes == 0:
        scan.zero_rows += 1  # allgather / reduce-scatter print 0-byte rows below one element a rank
        return
    if rows:
        last = rows[-1]
        if row.bytes <= last.bytes:
            raise InputError(where, row.bytes, f"a size above the previous row's {last.bytes} B (line "
                             f"{last.line}): sizes must increase")
        if (row.dtype, row.redop) != (rows[0].dtype, rows[0].redop):
            raise InputError(where, f"{row.dtype} {row.redop}", f"{rows[0].dtype} {rows[0].redop} as on "
                             f"line {rows[0].line} (one table, one type and operation)")
    rows.append(row)


def _chosen_collective(scan: _LogScan, forced: str | None, collective: str | None) -> str:
    """The collective the log is of: ``collective=`` where given (refused if the log names another), else the one
    the log declares, else the one binary its command lines name."""
    evidence = scan.declared or scan.named  # a declaration decides; binaries on a command line only when none is made
    if forced is not None and len(evidence) == 1 and forced not in evidence:
        (said, line_said), = evidence.items()
        raise InputError("collective", collective, f"the log's own collective, {said} (line {line_said}), or "
                         "no --collective: it names its test")
    if len(evidence) > 1 and forced is None:
        (a, la), (b, lb) = sorted(evidence.items(), key=lambda kv: kv[1])[:2]
        raise InputError(f"{scan.name} line {lb}", b, f"the collective named on line {la} ({a}): a log holds one "
                         "collective's sweep (or pass collective= / --collective)")
    chosen = forced or next(iter(evidence), None)
    if chosen is None:
        raise InputError(f"{scan.name} line {scan.header_line}", "no *_perf binary or 'collective:' line",
                         "a log that names its test (e.g. all_reduce_perf), or collective= / --collective")
    return chosen


def _log_of(scan: _LogScan, chosen: str) -> NcclTestsLog:
    """The parsed log, with its ranks from a CSV's GPUs column (one count per file) or the best other evidence."""
    threads = scan.threads
    log = NcclTestsLog(chosen, scan.rows, scan.layout, nccl_version=scan.version, env=scan.env,
                       algorithm=scan.algorithm, source=scan.name,
                       gpus_per_thread=threads[1] if threads else scan.gpus_flag, cuda_graph=scan.graph,
                       zero_byte_rows=scan.zero_rows, devices=tuple(scan.devices))
    csv_ranks = scan.csv_ranks
    if len(csv_ranks) == 1:
        log.ranks, log.ranks_from = csv_ranks.pop(), "GPUs column"
    elif len(csv_ranks) > 1:
        raise InputError(f"{scan.name} line {scan.header_line}", sorted(csv_ranks), "one rank count per file (the "
                         "GPUs column names several: split the file)")
    else:
        _count_ranks(log, scan.ranks_seen, threads)
    return log


def _check_bus_factor(log: NcclTestsLog, name: str) -> None:
    """nccl-tests prints ``busbw = algbw x`` the collective's bus factor on the log's ranks; a row that says
    otherwise (beyond the printed digits) was edited or mangled, or the ranks are not the log's: refused.
    Only where the ranks come from the log's own listing (Rank lines, a GPUs column, nThread x nGpus): read off
    busbw / algbw the check cannot fail, and off size / count it would only test that inference."""
    if log.ranks is None or not log.ranks_from.startswith(("Rank lines", "GPUs column", "nThread x nGpus")):
        return
    factor = bus_factor(log.collective, log.ranks)
    for row in log.rows:
        for algbw, busbw in ((row.algbw_Bps, row.busbw_Bps), (row.in_place_algbw_Bps, row.in_place_busbw_Bps)):
            if not algbw or not busbw:
                continue
            expected = algbw * factor  # both printed to 0.01 GB/s: algbw's rounding grows by the factor
            if abs(busbw - expected) > 0.0051e9 * (1 + factor) + 0.02 * expected:
                raise InputError(f"{name} line {row.line}", f"busbw {busbw / 1e9:g} GB/s",
                                 f"algbw x {factor:.4g} = {expected / 1e9:.3g} GB/s, nccl-tests' bus factor for "
                                 f"{log.collective} on the log's {log.ranks} ranks (from its {log.ranks_from}): a "
                                 "mangled or edited row")


def _count_ranks(log: NcclTestsLog, ranks_seen: set[int], threads: tuple[int, int] | None) -> None:
    """Ranks from the best evidence the log holds (the ``Rank`` lines list every rank)."""
    if ranks_seen:
        log.ranks, log.ranks_from = max(ranks_seen) + 1, "Rank lines"
        return
    big = max(log.rows, key=lambda r: r.bytes)
    element = TYPE_BYTES.get(big.dtype)
    if log.collective in _WHOLE_BUFFER and element and big.count:
        n = big.bytes / (big.count * element)
        if n == int(n) and n >= 1:
            log.ranks, log.ranks_from = int(n), "size / count"
            return
    if log.collective == "allreduce":
        # busbw / algbw = 2(n-1)/n, so n = 2 / (2 - f); both are printed to 0.01 GB/s, which bounds f. Only
        # a single whole n inside those bounds counts (at 1,440 ranks f is 1.9986 and rounding allows dozens).
        best = max(log.rows, key=lambda r: r.algbw_Bps)
        a, b = best.algbw_Bps / 1e9, best.busbw_Bps / 1e9
        if a > 0.005:
            low, high = (b - 0.005) / (a + 0.005), (b + 0.005) / (a - 0.005)
            n_low = 2 / (2 - low) if low < 2 else math.inf
            n_high = 2 / (2 - high) if high < 2 else math.inf
            whole = [n for n in range(max(2, math.ceil(n_low)), math.floor(n_high) + 1)] if n_high < 1e6 else []
            if len(whole) == 1:
                log.ranks, log.ranks_from = whole[0], "busbw / algbw"
                return
    if threads is not None:
        log.ranks, log.ranks_from = threads[0] * threads[1], "nThread x nGpus (one process)"


def read_nccl_tests(path: str, collective: str | None = None) -> NcclTestsLog:
    """Read a log file; a missing or unreadable file is an InputError naming it."""
    text = read_text_bounded(path, "nccl-tests", "nccl-tests log", errors="replace")
    return parse_nccl_tests(text, collective, name=str(path))


# --- writing ---------------------------------------------------------------------------------------


def _binary(collective: str) -> str:
    return next(b for b, c in BINARIES.items() if c == collective)


def format_row(collective: str, ranks: int, nbytes: int, count: int, dtype: str, redop: str, root: int,
               time_s: float, in_place_time_s: float | None = None) -> str:
    """One table line as nccl-tests prints it (``%12li %12li %8s %6s %6i %7s %6.2f %6.2f %5s`` twice)."""
    factor = bus_factor(collective, ranks)

    def part(seconds: float | None) -> str:
        if seconds is None:
            return f"  {'N/A':>7s} {'N/A':>6s} {'N/A':>6s} {'N/A':>5s}"
        us = seconds * 1e6
        algbw = nbytes / seconds / 1e9
        shown = f"{us:7.2f}" if us < 1e4 else (f"{us:7.1f}" if us < 1e5 else f"{us:7.0f}")
        return f"  {shown} {algbw:6.2f} {algbw * factor:6.2f} {'N/A':>5s}"

    return f"{nbytes:12d} {count:12d} {dtype:>8s} {redop:>6s} {root:6d}{part(time_s)}{part(in_place_time_s)}"



def format_log(collective: str, ranks: int, rows: Iterable[Sequence], devices: Sequence[str] = (),
               note: str = "", algorithm: str | None = None) -> str:
    """A whole log in nccl-tests' layout: ``rows`` of (bytes, count, dtype, redop, root, time_s[, in_place_s]).

    ``#wrong`` is ``N/A``: flexcomm does not check results. The output parses back with
    :func:`parse_nccl_tests` to the same sizes, times and bandwidths (to the printed precision)."""
    lines = [f"# {_binary(collective)}: written by flexcomm bench-collectives" + (f" ({note})" if note else ""),
             f"# nThread 1 nGpus 1 ranks {ranks}", *([f"# flexcomm algorithm: {algorithm}"] if algorithm else []),
             "#", "# Using devices"]
    lines += [f"#  Rank {r:2d} Group  0 Pid {0:6d} on {'localhost':>10s} device {r:2d} [0x00] {name}"
              for r, name in enumerate(devices or ["cpu"] * ranks)]
    lines += ["#", f"#{'out-of-place':>62s}{'in-place':>35s}",
              f"#{'size':>12s} {'count':>12s} {'type':>8s} {'redop':>6s} {'root':>6s} {'time':>7s} {'algbw':>6s} "
              f"{'busbw':>6s} {'#wrong':>6s} {'time':>7s} {'algbw':>6s} {'busbw':>6s} {'#wrong':>6s}",
              f"#{'(B)':>12s} {'(elements)':>12s} {'':>8s} {'':>6s} {'':>6s} {'(us)':>7s} {'(GB/s)':>6s} "
              f"{'(GB/s)':>6s} {'':>6s} {'(us)':>7s} {'(GB/s)':>6s} {'(GB/s)':>6s}"]
    lines += [format_row(collective, ranks, *row) for row in rows]
    lines.append(f"# Collective test concluded: {_binary(collective)}")
    return "\n".join(lines) + "\n"


# --- as calibration measurements -------------------------------------------------------------------

#: The algorithm each collective's rows are attributed to when calibrating (NCCL's ring-family defaults;
#: ``algorithm=`` overrides, e.g. tree for a log run with NCCL_ALGO=Tree).
CALIBRATION_ALGORITHMS = {"allreduce": "ring", "allgather": "ring", "reduce-scatter": "ring",
                          "broadcast": "pipelined-ring", "alltoall": "pairwise"}


_SNIFF_BYTES = 2**20


def looks_like_nccl_tests(path: str) -> bool:
    """Whether a file holds an nccl-tests table (else it is read as a measurement CSV, whose reader refuses
    what is not a readable regular file). Only a regular file is opened, and only its first MiB is looked
    at: a FIFO would block and ``/dev/zero`` is one endless line."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            return False
        with open(path, "rb") as handle:
            head = handle.read(_SNIFF_BYTES).decode("utf-8", errors="replace")
    except OSError:
        return False
    # the text table's header, or the CSV transcription's (size(MB), ..., algbw) that parse_nccl_tests reads too
    return any(_HEADER.match(_clean(line)) or (_CSV_HEADER.match(line) is not None and "," in line)
               for line in head.splitlines()[:5000])


def to_measurements(log: NcclTestsLog, ranks: int | None = None, algorithm: str | None = None,
                    link_class: str = "inter", in_place: bool = False):  # -> pandas.DataFrame
    """The log's rows as ``costmodel.calibration`` measurements (``bytes`` as flexcomm counts them: the
    per-rank contribution for allgather, the vector otherwise); ranks from the log unless given."""
    import pandas as pd

    n = ranks if ranks is not None else log.ranks
    if n is None:
        raise InputError("ranks", None, f"the rank count of {log.source} (the log does not show it: no Rank "
                         "lines and nothing to infer it from; pass --ranks)")
    if log.ranks is not None and ranks is not None and ranks != log.ranks:
        raise InputError("ranks", ranks, f"the log's own {log.ranks} ranks (from its {log.ranks_from})")
    if log.collective not in CALIBRATION_ALGORITHMS:
        raise InputError("collective", log.collective, "a collective the cost model prices: "
                         + ", ".join(CALIBRATION_ALGORITHMS))
    out = []
    for row in log.rows:
        seconds = row.in_place_time_s if in_place else row.time_s
        if seconds is None:
            continue
        per_rank = flexcomm_bytes(log.collective, row.bytes, n)
        out.append({"collective": log.collective, "algorithm": algorithm or log.algorithm
                    or CALIBRATION_ALGORITHMS[log.collective],
                    "link_class": link_class, "ranks": n, "bytes": per_rank, "seconds": seconds,
                    "busbw_Bps": row.busbw_Bps if not in_place else row.in_place_busbw_Bps, "line": row.line})
    return pd.DataFrame(out)


def measurements_to_logs(table, folder: str, note: str = "") -> list[str]:  # table: pandas.DataFrame
    """Median seconds per (collective, ranks, bytes) of a flexcomm measurement table, written as one
    nccl-tests log per collective and rank count (``FOLDER/all_reduce_perf-4ranks.txt``), float32 elements."""
    from pathlib import Path


    written = []
    for (collective, ranks), part in table.groupby(["collective", "ranks"], sort=True):
        if collective not in COLLECTIVES:
            continue
        n = int(ranks)
        rows = []
        for nbytes, seconds in part.groupby("bytes")["seconds"].median().items():
            per_rank = int(nbytes)
            count = per_rank // TYPE_BYTES["float"] // (n if collective == "reduce-scatter" else 1)
            size = size_column(collective, per_rank, n)
            redop = "sum" if collective in ("allreduce", "reduce-scatter", "reduce") else "none"
            rows.append((size, count, "float", redop, 0 if collective == "broadcast" else -1, float(seconds)))
        path = Path(folder) / f"{_binary(collective)}-{n}ranks.txt"
        algorithms = sorted(set(part["algorithm"].astype(str))) if "algorithm" in part else []
        write_text_atomic(path, format_log(collective, n, rows, note=note,
                                           algorithm=algorithms[0] if len(algorithms) == 1 else None))
        written.append(str(path))
    return written
