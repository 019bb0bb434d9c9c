"""Inputs that used to hang flexcomm, eat gigabytes or print a traceback: each is now one line and exit 2.

Every case runs the real console script in a subprocess whose peak memory the kernel reports (the
children's ``ru_maxrss``, read by a parent that runs nothing else), so "under 500 MB" is checked on the
process that did the work. Time is only guarded against hangs here (a unit test asserts no speed;
``benchmarks/bench_bad_inputs.py`` measures how quickly each case fails, against the CLI's own start-up in
the same run).
"""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
from cli_probe import HANG_GUARD_S, run_cli_measured

MAX_RSS_BYTES = 500 * 2**20

BOMB = "".join(f"{name}: &{name} [{', '.join([f'*{prev}'] * 9) if prev else ', '.join(['lol'] * 9)}]\n"
               for prev, name in zip([None, *"abcdefgh"], "abcdefghi", strict=True))
HUGE_CLUSTER = """name: huge
nodes: 1000000000
devices_per_node: 8
device: {name: g, peak_flops: 1TFLOP/s, memory: 1GiB}
intra_link: {latency: 1us, bandwidth: 1GB/s}
inter_link: {latency: 1us, bandwidth: 1GB/s}
"""
FILES = {
    "bomb.yaml": BOMB,
    "huge.yaml": HUGE_CLUSTER,
    "recursive.yaml": "a: &a [*a]\n",
    "deep.yaml": "x: " + "[" * 5000 + "]" * 5000 + "\n",
    "malformed.yaml": "name: [unclosed\n",
}

#: (argv with {dir} for the files' folder, the field the one line must name)
CASES = [
    (["cost", "--ranks", "2", "--size", "1MiB", "--cluster", "{dir}/bomb.yaml"], "cluster"),
    (["clusters", "{dir}/bomb.yaml"], "cluster"),
    (["study", "{dir}/bomb.yaml", "--out", "{dir}/study-out"], "study"),
    (["plan", "--model", "gpt", "--cluster", "{dir}/bomb.yaml"], "cluster"),
    (["cost", "--ranks", "2", "--size", "1MiB", "--cluster", "{dir}/recursive.yaml"], "cluster"),
    (["clusters", "{dir}/deep.yaml"], "cluster"),
    (["cost", "--ranks", "2", "--size", "1MiB", "--cluster", "{dir}/huge.yaml"], "cluster.nodes"),
    (["clusters", "{dir}/huge.yaml"], "cluster.nodes"),
    (["simulate", "--cluster", "{dir}/huge.yaml", "--workload", "resnet50"], "cluster.nodes"),
    (["plan", "--model", "gpt", "--cluster", "{dir}/malformed.yaml"], "cluster"),
    (["place", "--cluster", "{dir}/malformed.yaml"], "cluster"),
    (["launch", "--nproc", "1000000000", "--", "true"], "nproc"),
    (["study", "whatif-small", "--out", "{dir}/s", "--workers", "1000000000"], "workers"),
    (["simulate", "--cluster", "8x1-10gbe", "--workload", "resnet50", "--jitter", "0.1", "--jitter-period", "1ns"],
     "jitter-period"),
    (["simulate", "--cluster", "8x1-10gbe", "--workload", "resnet50", "--congestion", "good=1ns,bad=1ns"],
     "congestion"),
    (["simulate", "--cluster", "8x1-10gbe", "--workload", "resnet50", "--jitter", "1e30"], "jitter"),
    (["simulate", "--cluster", "8x1-10gbe", "--workload", "resnet50", "--iterations", "1000000000"], "iterations"),
    (["simulate", "--cluster", "8x1-10gbe", "--workload", "nosuchmodel"], "workload"),
    (["simulate", "--cluster", "8x1-10gbe", "--workload", "resnet50", "--iterations", "1", "--trace",
      "/proc/flexcomm-no-such-dir/t.json"], "trace"),
    (["train-emulated", "--steps", "1000000000", "--out", "{dir}/em"], "steps"),
    (["train-emulated", "--switch-cost=-5ms", "--out", "{dir}/em"], "switch-cost"),
    (["bench-collectives", "--nproc", "2", "--sizes", "1KiB", "--out", "/proc/flexcomm-no-such-dir/m.csv"], "out"),
    (["bench-collectives", "--nproc", "2", "--sizes", "1KiB:64TiB", "--out", "{dir}/m.csv"], "sizes"),
    (["cost", "--ranks", "8", "--size", "-0", "--latency", "10us", "--bandwidth", "10Gbit/s"], "size"),
    (["cost", "--algorithm", "hierarchical", "--ranks", "8", "--ranks-per-node", "3", "--size", "1MiB",
      "--latency", "1us", "--bandwidth", "1Gbit/s"], "ranks"),
    (["cost", "--collective", "all_to_all_v", "--ranks", "8", "--size", "1MiB", "--latency", "1us",
      "--bandwidth", "1Gbit/s"], "collective"),
    (["train-ddp", "--strategy", "dense", "--out", "{dir}/ddp", "--batch-size", "0"], "batch-size"),
    (["train-ddp", "--strategy", "dense", "--out", "{dir}/ddp", "--lr", "nan"], "lr"),
    (["whatif", "--out", ""], "out"),
    (["study", "whatif-small", "--out", "{dir}/s2", "--scheduler", "not-an-address"], "scheduler"),
    (["study", "whatif-small", "--out", "{dir}/s3", "--batch", "0"], "batch"),
]


#: Profiler traces that once blew memory or read on silently (bytes, written by the fixture).
TRACE_FILES = {
    "empties.json.gz": gzip.compress(b'{"traceEvents": [' + b"{}," * 400_000 + b"{}]}"),
    "zeros.json.gz": gzip.compress(b"\0" * 20_000_000),
    "two-members.json.gz": gzip.compress(b'{"traceEvents": []}') + gzip.compress(b"{}"),
    "trailing.json.gz": gzip.compress(b'{"traceEvents": []}') + b"garbage",
    "deep.json": b"[" * 100_000 + b"]" * 100_000,
}
TRACE_CASES = [
    (["simulate", "--from-trace", "{dir}/empties.json.gz"], "from-trace: got '{dir}/empties.json.gz'; expected at "
     "most 300,000 events in one trace"),
    (["simulate", "--from-trace", "{dir}/zeros.json.gz"], "{dir}/zeros.json.gz: got 'not JSON"),
    (["simulate", "--from-trace", "{dir}/spaces.json.gz"], "from-trace: got '{dir}/spaces.json.gz'; expected at "
     "most 268,435,456 bytes once decompressed"),
    (["simulate", "--from-trace", "{dir}/two-members.json.gz"], "from-trace: got '{dir}/two-members.json.gz'; "
     "expected one gzip stream"),
    (["simulate", "--from-trace", "{dir}/trailing.json.gz"], "from-trace: got '{dir}/trailing.json.gz'; "
     "expected one gzip stream"),
    (["simulate", "--from-trace", "{dir}/deep.json"], "from-trace: got '{dir}/deep.json'; expected JSON nested "
     "at most 100"),
    (["simulate", "--from-trace", "/dev/zero"], "from-trace: got '/dev/zero'; expected a regular trace file; "
     "this is a character device"),
    (["simulate", "--from-trace", "{dir}/fifo.json"], "from-trace: got '{dir}/fifo.json'; expected a regular "
     "trace file; this is a FIFO"),
    (["simulate", "--from-trace", "{dir}/empties.json.gz", "--execution-trace", "{dir}/deep.json"],
     "execution-trace: got '{dir}/deep.json'; expected JSON nested at most 100"),
]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("bad-inputs")
    for name, text in FILES.items():
        (folder / name).write_text(text)
    for name, data in TRACE_FILES.items():
        (folder / name).write_bytes(data)
    deflate = zlib.compressobj(9, wbits=31)  # 260 MiB of spaces (valid JSON whitespace), written a MiB at a time
    with open(folder / "spaces.json.gz", "wb") as handle:
        for _ in range(260):
            handle.write(deflate.compress(b" " * 2**20))
        handle.write(deflate.flush())
    os.mkfifo(folder / "fifo.json")
    return folder


@pytest.mark.parametrize(("argv", "field"), CASES, ids=[" ".join(a[:3]) for a, _ in CASES])
def test_bad_input_is_one_line_exit_2_and_bounded(argv: list[str], field: str, inputs: Path) -> None:
    args = [a.replace("{dir}", str(inputs)) for a in argv]
    code, err, rss = run_cli_measured(args)
    lines = err.strip().splitlines()
    assert code == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"flexcomm: error: {field.replace('{dir}', str(inputs))}"), lines[0]
    assert 0 < rss < MAX_RSS_BYTES, f"peak memory {rss / 2**20:.0f} MiB"


@pytest.mark.parametrize(("argv", "message"), TRACE_CASES, ids=[a[-1].rsplit("/", 1)[-1] for a, _ in TRACE_CASES])
def test_a_bad_trace_is_one_line_in_bounded_memory(argv: list[str], message: str, inputs: Path) -> None:
    """gzip bombs, empty events, a second gzip member, deep nesting, devices and FIFOs: refused while read as
    a stream, under 500 MB (600 MB of gzipped empty events once took 1.7 GB and a MemoryError traceback)."""
    args = [a.replace("{dir}", str(inputs)) for a in argv]
    code, err, rss = run_cli_measured(args)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("flexcomm: error: " + message.replace("{dir}", str(inputs))), lines[0]
    assert len(lines[0]) < 300 and 0 < rss < MAX_RSS_BYTES, (len(lines[0]), f"{rss / 2**20:.0f} MiB")


def test_nothing_is_created_by_a_refused_study(inputs: Path) -> None:
    code, _, _ = run_cli_measured(["study", "whatif-small", "--out", str(inputs / "never"), "--scheduler", "nope"])
    assert code == 2 and not (inputs / "never").exists()


#: Refusals that must come before torch is imported (torch alone takes ~2 s to import on a small machine,
#: which would break "a one-line error within a second"): the option checks run on torch-free modules.
TORCH_FREE_REFUSALS = [
    ["train-emulated", "--steps", "1000000000", "--out", "{dir}/em"],
    ["train-emulated", "--workload", "nosuch", "--out", "{dir}/em"],
    ["train-emulated", "--moo-rule", "nosuch", "--out", "{dir}/em"],
    ["train-ddp", "--strategy", "dense", "--out", "{dir}/ddp", "--batch-size", "0"],
    ["train-ddp", "--strategy", "nosuch", "--out", "{dir}/ddp"],
    ["simulate", "--cluster", "8x1-10gbe", "--workload", "nosuchmodel"],
    ["clusters", "{dir}/deep.yaml"],
]


@pytest.mark.parametrize("argv", TORCH_FREE_REFUSALS, ids=[" ".join(a[:3]) for a in TORCH_FREE_REFUSALS])
def test_refusal_comes_before_torch_is_imported(argv: list[str], inputs: Path) -> None:
    args = [a.replace("{dir}", str(inputs)) for a in argv]
    code = ("import sys\nfrom flexcomm.experiments.cli import main\n"
            f"rc = main({args!r})\nprint(rc, 'torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert proc.stdout.split() == ["2", "False"], proc.stdout + proc.stderr
