"""The launcher and the bounded process group: agreement, exit codes, timeouts, dead and stuck peers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from flexcomm.costmodel.calibration import load_measurements
from flexcomm.costmodel.errors import InputError
from flexcomm.experiments.cli import main
from flexcomm.real_backend.launch import EXIT_TIMEOUT, exit_status, first_failure, launch, resolve_command

REPO = Path(__file__).resolve().parents[1]


def _script(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return path


@pytest.mark.timeout(60)
def test_two_gloo_ranks_allreduce_and_agree(tmp_path: Path) -> None:
    worker = _script(tmp_path, "worker.py", f"""
        import torch, torch.distributed as dist
        from flexcomm.real_backend.dist import init_from_env, shutdown
        info = init_from_env(timeout_s=30)
        t = torch.tensor([float(info.rank + 1), 10.0])
        dist.all_reduce(t)
        answer = f"{{info.backend}} {{info.world_size}} {{t.tolist()}}"
        open({str(tmp_path)!r} + f"/rank{{info.rank}}.txt", "w").write(answer)
        shutdown()
    """)
    result = launch([str(worker)], 2, timeout_s=50, log_dir=tmp_path / "logs")
    logs = "".join(p.read_text() for p in sorted((tmp_path / "logs").glob("*.log")))
    assert result.returncode == 0, logs
    answers = {(tmp_path / f"rank{r}.txt").read_text() for r in range(2)}
    assert answers == {"gloo 2 [3.0, 20.0]"}


@pytest.mark.timeout(30)
def test_a_failing_rank_propagates_its_exit_code_and_stops_the_others() -> None:
    code = "import os, sys, time; r = int(os.environ['RANK']); time.sleep(0.3 if r == 1 else 60); sys.exit(7)"
    start = time.monotonic()
    result = launch([sys.executable, "-c", code], 2, timeout_s=25, quiet=True)
    assert result.returncode == 7
    assert result.failed_rank == 1
    assert time.monotonic() - start < 15  # rank 0 (sleeping 60 s) was stopped, not waited for
    assert result.returncodes[0] is not None


@pytest.mark.timeout(30)
def test_the_run_is_bounded_by_its_timeout() -> None:
    result = launch([sys.executable, "-c", "import time; time.sleep(60)"], 2, timeout_s=1.0, quiet=True)
    assert result.returncode == EXIT_TIMEOUT and result.timed_out
    assert result.elapsed_s < 15


def test_rank_environment_is_torchruns(tmp_path: Path) -> None:
    code = ("import os, json; keys = ['RANK','WORLD_SIZE','LOCAL_RANK','LOCAL_WORLD_SIZE','MASTER_ADDR','MASTER_PORT'];"
            "env = json.dumps({k: os.environ[k] for k in keys});"
            f"open({str(tmp_path)!r} + '/env' + os.environ['RANK'], 'w').write(env)")
    assert launch(["python", "-c", code], 3, timeout_s=20).returncode == 0
    import json

    envs = [json.loads((tmp_path / f"env{r}").read_text()) for r in range(3)]
    assert [e["RANK"] for e in envs] == ["0", "1", "2"] and {e["WORLD_SIZE"] for e in envs} == {"3"}
    assert {e["MASTER_ADDR"] for e in envs} == {"127.0.0.1"} and len({e["MASTER_PORT"] for e in envs}) == 1


def test_command_resolution_and_exit_status() -> None:
    assert resolve_command(["--", "-m", "pkg.mod", "x"]) == [sys.executable, "-m", "pkg.mod", "x"]
    assert resolve_command(["python", "a.py"]) == [sys.executable, "a.py"]
    assert resolve_command(["tool.py"]) == [sys.executable, "tool.py"]
    assert resolve_command(["/bin/true"]) == ["/bin/true"]
    with pytest.raises(InputError):
        resolve_command(["--"])
    assert exit_status(-9) == 137 and exit_status(3) == 3 and exit_status(None) == 0


def test_cli_errors_are_one_line_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["launch", "--nproc", "0", "--", "python", "-c", "pass"]) == 2
    assert main(["launch", "--nproc", "2"]) == 2
    assert main(["launch", "--nproc", "2", "--timeout", "soon", "--", "true"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("flexcomm: error:") for line in err)


def test_init_from_env_without_a_launcher_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from flexcomm.real_backend.dist import init_from_env

    for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(InputError, match="RANK"):
        init_from_env()
    monkeypatch.setenv("FLEXCOMM_DIST_TIMEOUT_S", "-1")
    from flexcomm.real_backend.dist import timeout_from_env

    with pytest.raises(InputError):
        timeout_from_env()


@pytest.mark.timeout(20)
def test_watchdog_ends_a_stuck_step_with_a_message() -> None:
    code = ("import time; from flexcomm.real_backend.dist import Watchdog; w = Watchdog(0.5, label='rank 0')\n"
            "with w.guard('allreduce of 4MiB'): time.sleep(30)")
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=15, cwd=REPO)
    assert proc.returncode == 3
    assert "rank 0: allreduce of 4MiB did not finish within 0.5s" in proc.stderr
    assert time.monotonic() - start < 10


@pytest.mark.timeout(60)
def test_a_stuck_peer_makes_the_survivor_fail_by_itself_within_its_timeout(tmp_path: Path) -> None:
    # Rank 1 joins, then never calls the collective: rank 0's allreduce must end at its 3 s timeout.
    worker = _script(tmp_path, "stuck.py", """
        import time, torch, torch.distributed as dist
        from flexcomm.real_backend.dist import init_from_env
        info = init_from_env(timeout_s=3)
        if info.rank == 1:
            time.sleep(120)
        dist.all_reduce(torch.ones(4))
    """)
    result = launch([str(worker)], 2, timeout_s=50, grace_s=0.0, log_dir=tmp_path / "logs", quiet=True)
    assert result.returncode not in (0, EXIT_TIMEOUT)
    assert result.failed_rank == 0
    assert result.elapsed_s < 40
    assert "timed out" in (tmp_path / "logs" / "rank0.log").read_text().lower()


def _rank_pid(marker: str, rank: int) -> int | None:
    """The pid of the bench worker of ``rank`` whose command line mentions ``marker``."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"flexcomm.real_backend.bench" in cmdline and any(marker.encode() in c for c in cmdline):
            if f"RANK={rank}".encode() in environ:
                return int(entry.name)
    return None


@pytest.mark.timeout(90)
def test_a_rank_killed_mid_run_fails_the_run_and_keeps_the_measured_rows(tmp_path: Path) -> None:
    out = tmp_path / "killed.csv"
    cmd = [sys.executable, "-m", "flexcomm.experiments.cli", "bench-collectives", "--nproc", "2",
           "--sizes", "1KiB,2KiB",
           "--collectives", "allreduce", "--warmup", "1", "--iters", "100000", "--out", str(out),
           "--op-timeout", "20s", "--timeout", "80s"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            if out.exists() and len(out.read_text().splitlines()) > 20:
                break
            time.sleep(0.1)
        else:
            pytest.fail("no rows were measured")
        pid = _rank_pid(str(out), 1)
        assert pid is not None
        rows_at_kill = len(out.read_text().splitlines()) - 1
        killed_at = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    assert time.monotonic() - killed_at < 60
    assert "rank 1 exited with status 137" in err
    table = load_measurements(out)
    assert len(table) >= rows_at_kill and set(table["collective"]) == {"allreduce"}


@pytest.mark.parametrize("codes, rank", [
    ([None, None, None], None),
    ([0, 0, None], None),
    ([1, None, 3], 0),  # no signal: the lowest failed rank
    ([1, -9, None], 1),  # seen in one poll: the killed rank is the cause, its peer's exit 1 the fallout
    ([None, -15, -9], 1),
])
def test_the_cause_of_a_failed_run_is_a_killed_rank_before_its_peers(codes: list, rank: int | None) -> None:
    assert first_failure(codes) == rank
