"""The shaped-network testbed: timings match the cost model, and nothing is ever left behind.

Needs root and iproute2 (network namespaces, veth, bridge, tc tbf); skipped otherwise. Every
testbed gets a fresh random id, so parallel runs do not collide.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_netns

from flexcomm.costmodel.calibration import load_measurements
from flexcomm.costmodel.collectives import predict
from flexcomm.costmodel.errors import InputError
from flexcomm.experiments.cli import main
from flexcomm.real_backend.testbed import (
    Testbed,
    burst_bytes,
    burst_rate_for,
    list_namespaces,
    parse_per_link,
    run_in_testbed,
)


@pytest.fixture(autouse=True)
def _private_state_dir(private_testbed_state: Path) -> None:
    """Every test here keeps its testbed state files to itself."""


def _names(testbed: Testbed) -> set[str]:
    return {*testbed.namespaces, testbed.bridge_namespace}


def test_plan_names_everything_with_the_prefix_and_a_private_subnet() -> None:
    testbed = Testbed.plan(3, "100Mbit/s", "2=10Mbit/s", testbed_id="ab12cd")
    assert testbed.namespaces == ["fxc-ab12cd-r0", "fxc-ab12cd-r1", "fxc-ab12cd-r2"]
    assert testbed.bridge_namespace == "fxc-ab12cd-br"
    assert testbed.addresses == ["10.213.171.1", "10.213.171.2", "10.213.171.3"]
    assert testbed.link_rate_Bps(2) == 10e6 / 8 and testbed.link_rate_Bps(0) == 100e6 / 8
    assert testbed.effective_bandwidth_Bps == pytest.approx(1448 / 1514 * 10e6 / 8)
    assert burst_bytes(100e6 / 8) == 64 * 1024 and burst_bytes(1e9 / 8) == 500_000
    # a slow testbed (<= 20 Mbit/s at its fastest) sizes one small bucket for every rate it takes
    assert burst_rate_for(200e6 / 8) == 0.0 and burst_rate_for(10e6 / 8) == 10e6 / 8
    assert burst_bytes(0.4e6 / 8, burst_rate_for(10e6 / 8)) == 4 * 1514 == burst_bytes(10e6 / 8, 10e6 / 8)
    assert burst_bytes(20e6 / 8, burst_rate_for(20e6 / 8)) == 10_000
    assert parse_per_link("0=1Gbit/s, 1=5Mbit/s", 2) == {0: 1e9 / 8, 1: 5e6 / 8}
    for bad in ["2=1Gbit/s", "x=1Gbit/s", "1", "1=fast"]:
        with pytest.raises(InputError):
            parse_per_link(bad, 2)
    with pytest.raises(InputError):
        Testbed.plan(0, "100Mbit/s")


def test_without_root_it_is_a_one_line_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert main(["testbed", "up", "--ranks", "2", "--bandwidth", "100Mbit/s"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "root" in err[0] and err[0].startswith("flexcomm: error: testbed")


@needs_netns
@pytest.mark.timeout(90)
def test_allreduce_on_the_shaped_testbed_matches_the_bandwidth_term(tmp_path: Path) -> None:
    from flexcomm.real_backend.bench import run_benchmark

    out = tmp_path / "shaped.csv"
    with Testbed.up(2, "100Mbit/s") as testbed:
        names = _names(testbed)
        assert names <= set(list_namespaces())
        result = run_benchmark(None, [4 * 2**20], out, ["allreduce"], warmup=1, iters=3, testbed=testbed,
                               timeout_s=80, op_timeout_s=30, quiet=True)
        assert result.returncode == 0
        bandwidth = testbed.effective_bandwidth_Bps
    assert not names & set(list_namespaces())  # down removed every namespace it made
    table = load_measurements(out)
    assert set(table["link_class"]) == {"inter"} and len(table) == 3
    measured = float(np.median(table["seconds"]))
    predicted = float(predict("allreduce", "ring", 4 * 2**20, 2, 0.0, bandwidth).total)  # 2(N-1)/N M / (1448/1514 R)
    assert predicted == pytest.approx(4 * 2**20 / (1448 / 1514 * 100e6 / 8))
    assert measured == pytest.approx(predicted, rel=0.30)


@needs_netns
@pytest.mark.timeout(60)
def test_cleanup_happens_even_when_the_command_inside_fails() -> None:
    code = "import os, sys; sys.exit(3 if os.environ['RANK'] == '1' else 0)"
    result = run_in_testbed([sys.executable, "-c", code], 2, "1Gbit/s", timeout_s=30)
    assert result.returncode == 3 and result.testbed
    assert not [n for n in list_namespaces() if n.startswith(f"fxc-{result.testbed}-")]
    with pytest.raises(RuntimeError):
        with Testbed.up(2, "1Gbit/s") as testbed:
            names = _names(testbed)
            raise RuntimeError("the experiment broke")
    assert not names & set(list_namespaces())


@needs_netns
@pytest.mark.timeout(60)
def test_cli_up_status_run_down(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["testbed", "up", "--ranks", "2", "--bandwidth", "1Gbit/s", "--per-link", "1=200Mbit/s"]) == 0
    (testbed,) = [Testbed.load(p.stem.removeprefix("testbed-")) for p in (tmp_path / "state").glob("*.json")]
    try:
        assert _names(testbed) <= set(list_namespaces())
        qdisc = subprocess.run(["tc", "-n", testbed.namespaces[1], "qdisc", "show", "dev", testbed.interfaces[1]],
                               capture_output=True, text=True).stdout
        assert "tbf" in qdisc and "200Mbit" in qdisc
        assert main(["testbed", "status"]) == 0
        assert testbed.id in capsys.readouterr().out
        probe = tmp_path / "probe"
        script = f"import os; open({str(probe)!r} + os.environ['RANK'], 'w').write(os.environ['MASTER_ADDR'] + ' ' + " \
                 "os.environ['GLOO_SOCKET_IFNAME'])"
        assert main(["testbed", "run", "--id", testbed.id, "--timeout", "30s", "--", "python", "-c", script]) == 0
        assert (tmp_path / "probe1").read_text() == f"{testbed.addresses[0]} fxr1"
    finally:
        assert main(["testbed", "down", testbed.id]) == 0
    assert not _names(testbed) & set(list_namespaces())
    assert main(["testbed", "down", testbed.id]) == 2  # gone: a clear error, not a traceback


@needs_netns
@pytest.mark.timeout(60)
def test_the_delay_line_adds_its_delay_to_every_round_trip(tmp_path: Path) -> None:
    worker = tmp_path / "rtt.py"
    worker.write_text(textwrap.dedent(f"""
        import os, socket, time
        rank, addr = int(os.environ["RANK"]), os.environ["MASTER_ADDR"]
        if rank == 0:
            server = socket.create_server((addr, 31111))
            conn, _ = server.accept()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            while data := conn.recv(1):
                conn.sendall(data)
        else:
            for _ in range(100):
                try:
                    conn = socket.create_connection((addr, 31111), timeout=5)
                    break
                except ConnectionRefusedError:
                    time.sleep(0.05)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            times = []
            for _ in range(15):
                start = time.perf_counter(); conn.sendall(b"x"); conn.recv(1); times.append(time.perf_counter() - start)
            open({str(tmp_path)!r} + "/rtt", "w").write(repr(sorted(times)[len(times) // 2]))
            conn.close()
    """))
    with Testbed.up(2, "100Mbit/s", delay="5ms") as testbed:
        assert testbed.delay_pid is not None
        assert testbed.launch([str(worker)], timeout_s=40).returncode == 0
        pid = testbed.delay_pid
    rtt = float((tmp_path / "rtt").read_text())
    # two 5 ms crossings: the delay line holds every packet, so the round trip cannot be shorter (the upper
    # bound only catches a stuck line; how close it stays to 10 ms is measured in the docs, not asserted)
    assert 0.0095 < rtt < 1.0
    assert not Path(f"/proc/{pid}").exists() or b"delayline" not in Path(f"/proc/{pid}/cmdline").read_bytes()
