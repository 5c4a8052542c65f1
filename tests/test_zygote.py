"""The service's zygote (`sweeps.service.zygote`) for real: a process that has done a driver's
imports forks drivers with the asking supervisor's stdio, cwd, env and arguments, hands back
their exit code, and a driver whose supervisor is killed dies with it. No Ray cluster: the
drivers here end on a bad spec, or wait on a Ray address nobody answers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT
from services import free_port

pytestmark = pytest.mark.timeout(120)

# What a job's supervisor does (`sweeps.jobs._start_driver`), in a process of its own so that
# the stdio it hands over are pipes this test reads.
SUPERVISOR = """
import sys
from sweeps.service import zygote
child = zygote.spawn(sys.argv[1], "sweeps.jobs", sys.argv[2:])
assert child is not None, "the zygote did not answer"
print("PID", child.pid, flush=True)
sys.exit(child.wait())
"""


@pytest.fixture
def zygote(tmp_path):
    sock = tmp_path / "z.sock"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sweeps.service.zygote", str(sock)], env=env, start_new_session=True
    )
    deadline = time.monotonic() + 60
    while not sock.exists():
        assert proc.poll() is None, "the zygote exited"
        assert time.monotonic() < deadline, "the zygote never listened"
        time.sleep(0.1)
    yield sock, proc.pid
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _supervise(sock: Path, cwd: Path, env: dict[str, str], *argv: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", SUPERVISOR, str(sock), *argv],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_forked_driver_runs_in_the_supervisors_folder_and_output_and_says_how_it_ended(
    zygote, tmp_path
):
    sock, zygote_pid = zygote
    job = tmp_path / "job"
    job.mkdir()
    (job / "spec.yaml").write_text("name: z\ntrainer: {epochs: -3}\n")
    sup = _supervise(sock, job, {}, "--drive", "spec.yaml")
    out, err = sup.communicate(timeout=60)
    assert out.startswith("PID "), out
    assert int(out.split()[1]) != zygote_pid
    assert "trainer.epochs" in err, "the spec was read from the supervisor's folder: " + err
    assert sup.returncode == 1, "the driver's exit code came back through the zygote"


def test_a_driver_dies_with_its_supervisor(zygote, tmp_path):
    sock, zygote_pid = zygote
    job = tmp_path / "job"
    job.mkdir()
    spec = (ROOT / "conf" / "quickstart.yaml").read_text()
    (job / "spec.yaml").write_text(spec)
    # A Ray address nobody answers: the driver waits in ray.init for much longer than this test.
    env = {"RAY_ADDRESS": f"127.0.0.1:{free_port()}", "SWEEPS_HOME": str(tmp_path / "home")}
    sup = _supervise(sock, job, env, "--drive", "spec.yaml")
    pid = int(sup.stdout.readline().split()[1])
    with open(f"/proc/{pid}/stat") as f:
        assert int(f.read().rsplit(")", 1)[1].split()[1]) == zygote_pid, "forked by the zygote"
    time.sleep(1.0)
    assert sup.poll() is None, sup.stderr.read()
    sup.kill()  # Ray's stop_job, escalated to SIGKILL
    sup.wait()
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not os.path.exists(f"/proc/{pid}"), "the driver outlived its supervisor"


def _zygote_at(sock: Path) -> subprocess.Popen:
    sock.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sweeps.service.zygote", str(sock)], env=env, start_new_session=True
    )
    deadline = time.monotonic() + 60
    while not sock.exists():
        assert proc.poll() is None, "the zygote exited"
        assert time.monotonic() < deadline, "the zygote never listened"
        time.sleep(0.1)
    return proc


def _until(check, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_a_hosted_sweep_outlives_its_submitter_logs_to_its_record_and_stops(tmp_path, monkeypatch):
    """The resident sweep host (`sweeps.service.sweephost`, issue 30): a fork of the zygote
    that does not die with the process that asked, writes to its record's log, and reports its
    status and exit code as Ray Jobs would; `stop` ends it."""
    from sweeps.service import sweephost

    home = tmp_path / "home"
    monkeypatch.setenv("SWEEPS_HOME", str(home))
    # A Ray address nobody answers (the hosted driver has the zygote's env, as on a service):
    # a driver that gets that far waits in ray.init until it is stopped.
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{free_port()}")
    proc = _zygote_at(home / "service" / "zygote.sock")
    try:
        job = tmp_path / "job"
        job.mkdir()
        (job / "bad.yaml").write_text("name: z\ntrainer: {epochs: -3}\n")
        monkeypatch.chdir(job)
        assert sweephost.submit(["--drive", "bad.yaml"], "job-bad")
        rec = sweephost.record_dir("job-bad")
        _until(lambda: sweephost.status("job-bad") == "FAILED")
        assert (rec / "exit").read_text() == "1"
        assert "trainer.epochs" in "".join(sweephost.logs("job-bad", follow=True))

        (job / "spec.yaml").write_text((ROOT / "conf" / "quickstart.yaml").read_text())
        assert sweephost.submit(["--drive", "spec.yaml"], "job-wait")
        _until(lambda: sweephost.status("job-wait") == "RUNNING")
        pid = int((sweephost.record_dir("job-wait") / "pid").read_text())
        with open(f"/proc/{pid}/stat") as f:
            assert int(f.read().rsplit(")", 1)[1].split()[1]) == proc.pid, "forked"
        assert sweephost.stop("job-wait")
        _until(lambda: sweephost.status("job-wait") == "STOPPED")
        assert not sweephost.stop("job-wait"), "nothing left to stop"
        assert sweephost.status("never-submitted") is None
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
