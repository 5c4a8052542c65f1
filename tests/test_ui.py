"""`sweeps ui` for real (issue 29 #12): its ports are checked as `up` checks its own (one line,
exit 2, nothing started, no other server's URL printed), and SIGTERM on it stops the MLflow
UI, its workers and optuna-dashboard: no process it started outlives it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import psutil
from services import free_port

SWEEPS = [sys.executable, "-m", "sweeps.cli"]


def _env(home) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "MLFLOW_", "SWEEPS_"))}
    env["SWEEPS_HOME"] = str(home)
    return env


def test_ui_refuses_a_taken_port_at_once_and_prints_no_url(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        t0 = time.monotonic()
        r = subprocess.run(
            [*SWEEPS, "ui", "--port", str(port), "--dashboard-port", str(free_port())],
            env=_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert time.monotonic() - t0 < 20, "no wait for a server that cannot start"
    assert f"--port: 127.0.0.1:{port} is taken by another process" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "http://" not in r.stdout, "another server's URL is never printed as ours"


def test_sigterm_on_ui_stops_every_server_it_started(tmp_path):
    mlflow_port, dash_port = free_port(), free_port()
    proc = subprocess.Popen(
        [*SWEEPS, "ui", "--port", str(mlflow_port), "--dashboard-port", str(dash_port)],
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        printed = [proc.stdout.readline() for _ in range(2)]  # a URL once each server answers
        assert "MLflow UI:" in printed[0] and f":{mlflow_port}/" in printed[0], printed
        assert f"optuna-dashboard: http://127.0.0.1:{dash_port}/" in printed[1], printed
        started = psutil.Process(proc.pid).children(recursive=True)
        assert len(started) >= 3, "mlflow ui, its worker(s), optuna-dashboard"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 143
        _gone, alive = psutil.wait_procs(started, timeout=5)
        left = [p for p in alive if p.status() != psutil.STATUS_ZOMBIE]
        assert not left, [(p.pid, p.cmdline()[:4]) for p in left]
    finally:
        if proc.poll() is None:
            proc.kill()
