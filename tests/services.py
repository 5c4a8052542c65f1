"""Real services on loopback for the scale tests: PostgreSQL (Debian's binaries), `mlflow server`
(optionally with basic-auth), and the GCS emulator. Each is started on a free port, waited for,
and stopped at teardown. Missing binaries fail loudly: `.ci/run` installs PostgreSQL."""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

VENV_BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def up_args() -> list[str]:
    """`sweeps up` on free loopback ports: a developer's own service may hold the defaults."""
    return ["up", "--json", "--dashboard-port", str(free_port()), "--mlflow-port", str(free_port())]


def wait_port(port: int, timeout: float = 60.0, proc: subprocess.Popen | None = None) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"service exited early with code {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout:.0f} s")


def _pg_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        pytest.fail(
            f"PostgreSQL's {name} not found under /usr/lib/postgresql/*/bin: "
            "install Debian's `postgresql` package (.ci/run does)"
        )
    return found[-1]


def _as_postgres(args: list[str], **kw) -> subprocess.CompletedProcess:
    # PostgreSQL refuses to run as root; the Debian package creates the `postgres` user.
    cmd = args if os.getuid() != 0 else ["runuser", "-u", "postgres", "--", *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


@dataclass
class Postgres:
    port: int
    password: str
    admin_password: str
    datadir: str = ""
    options: str = ""

    def url(self, db: str = "sweeps", driver: str = "postgresql+psycopg") -> str:
        return f"{driver}://sweeps:{self.password}@127.0.0.1:{self.port}/{db}"

    def sql(self, statement: str) -> None:
        subprocess.run(
            [
                _pg_bin("psql"),
                "-h",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-U",
                "postgres",
                "-v",
                "ON_ERROR_STOP=1",
                "-c",
                statement,
            ],
            check=True,
            capture_output=True,
            env={**os.environ, "PGPASSWORD": self.admin_password},
        )

    def create_database(self, name: str) -> str:
        self.sql(f"CREATE DATABASE {name} OWNER sweeps")
        return self.url(name)

    def stop(self) -> None:
        """An outage: the server goes away (connections drop) until start()."""
        _as_postgres([_pg_bin("pg_ctl"), "-D", self.datadir, "-m", "fast", "-w", "stop"])

    def start(self) -> None:
        _as_postgres(
            [
                _pg_bin("pg_ctl"),
                "-D",
                self.datadir,
                "-l",
                self.datadir + ".log",
                "-w",
                "-o",
                self.options,
                "start",
            ]
        )


@pytest.fixture(scope="session")
def postgres():
    with postgres_server() as pg:
        yield pg


@contextmanager
def postgres_server():
    """A throwaway PostgreSQL on a free loopback port (also used by bench/chaos_report.py)."""
    base = tempfile.mkdtemp(prefix="sweeps-pg-")
    os.chmod(base, 0o755)
    datadir, sockdir = os.path.join(base, "data"), os.path.join(base, "sock")
    os.makedirs(sockdir)
    admin = secrets.token_hex(8)
    pwfile = os.path.join(base, "pw")
    with open(pwfile, "w") as f:
        f.write(admin + "\n")
    if os.getuid() == 0:
        for path in (base, sockdir, pwfile):
            shutil.chown(path, "postgres")
    port = free_port()
    _as_postgres(
        [
            _pg_bin("initdb"),
            "-D",
            datadir,
            "-U",
            "postgres",
            "--pwfile",
            pwfile,
            "-A",
            "scram-sha-256",
            "--no-sync",
        ]
    )
    options = (
        f"-c listen_addresses=127.0.0.1 -p {port} -k {sockdir} -c fsync=off -c max_connections=200"
    )
    _as_postgres(
        [
            _pg_bin("pg_ctl"),
            "-D",
            datadir,
            "-l",
            os.path.join(base, "log"),
            "-w",
            "-o",
            options,
            "start",
        ]
    )
    pg = Postgres(port, secrets.token_hex(8), admin, datadir, options)
    pg.sql(f"CREATE USER sweeps WITH PASSWORD '{pg.password}' CREATEDB")
    pg.sql("CREATE DATABASE sweeps OWNER sweeps")
    try:
        yield pg
    finally:
        _as_postgres([_pg_bin("pg_ctl"), "-D", datadir, "-m", "immediate", "stop"])
        shutil.rmtree(base, ignore_errors=True)


@dataclass
class MlflowServer:
    url: str
    proc: subprocess.Popen
    username: str | None = None
    password: str | None = None

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def start_mlflow_server(
    backend: str,
    artifacts: str,
    *,
    auth: bool = False,
    env_extra: dict | None = None,
    port: int | None = None,
) -> MlflowServer:
    port = port or free_port()
    env = {**os.environ, **(env_extra or {})}
    env.pop("MLFLOW_TRACKING_URI", None)
    # No GenAI job runner (a uvicorn app, a runner and a huey consumer per server): nothing here
    # uses it, and on 2 cores it slowed every test that starts a server. `sweeps up` does the same.
    env.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
    cmd = [
        str(VENV_BIN / "mlflow"),
        "server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--backend-store-uri",
        backend,
        "--artifacts-destination",
        artifacts,
        "--workers",
        "1",
    ]
    user = password = None
    if auth:
        # basic-auth reads its settings from an ini file; its users live in their own DB.
        d = tempfile.mkdtemp(prefix="mlflow-auth-")
        user, password = "admin", secrets.token_hex(8)
        ini = os.path.join(d, "basic_auth.ini")
        with open(ini, "w") as f:
            f.write(
                "[mlflow]\ndefault_permission = READ\n"
                f"database_uri = sqlite:///{d}/auth.db\n"
                f"admin_username = {user}\nadmin_password = {password}\n"
                "authorization_function = mlflow.server.auth:authenticate_request_basic_auth\n"
            )
        env["MLFLOW_AUTH_CONFIG_PATH"] = ini
        env["MLFLOW_FLASK_SERVER_SECRET_KEY"] = secrets.token_hex(16)
        cmd += ["--app-name", "basic-auth"]
    log = open(tempfile.mktemp(prefix="mlflow-server-", suffix=".log"), "w")
    proc = subprocess.Popen(
        cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        wait_port(port, 120, proc)
        import requests

        end = time.time() + 60
        while time.time() < end:
            try:
                if requests.get(f"http://127.0.0.1:{port}/health", timeout=2).ok:
                    break
            except requests.RequestException:
                pass
            time.sleep(0.3)
    except Exception:
        proc.kill()
        raise RuntimeError(f"mlflow server did not start; see {log.name}") from None
    return MlflowServer(f"http://127.0.0.1:{port}", proc, user, password)


@pytest.fixture(scope="session")
def gcs_emulator():
    port = free_port()
    proc = subprocess.Popen(
        [
            str(VENV_BIN / "gcp-storage-emulator"),
            "start",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--in-memory",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_port(port, 60, proc)
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=10)


def gcs_client(emulator: str):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    # The endpoint as a client option, not os.environ: a variable left set here would reach
    # every Ray process started later in the session and hide a lane that never got it.
    return storage.Client(
        project="test",
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": emulator},
    )


def gcs_bucket(emulator: str, name: str):
    client = gcs_client(emulator)
    try:
        return client.create_bucket(name)
    except Exception:
        return client.bucket(name)


RAY = str(Path(sys.executable).parent / "ray")


class TwoNodes:
    """A two-node Ray cluster on this machine: a head (2 CPUs) and a worker node (1 CPU), each a
    `ray start --block` process tree of its own so that one can be SIGKILLed as a lost node."""

    def __init__(self) -> None:
        self.port = free_port()
        # A temp dir of its own keeps this cluster's address file away from other drivers.
        self.temp = tempfile.mkdtemp(prefix="ray2n-", dir="/tmp")
        self.env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        # Ray 2.60 token auth: every process of this cluster (nodes, `ray status`, the driver)
        # uses the same token file (~/.ray/auth_token); say so explicitly so none falls back.
        self.env["RAY_AUTH_MODE"] = "token"
        self.head = self._start(
            "--head",
            "--port",
            str(self.port),
            "--temp-dir",
            self.temp,
            "--include-dashboard=false",
            "--num-cpus",
            "2",
        )
        self._wait_nodes(1)
        self.worker = self._start("--address", f"127.0.0.1:{self.port}", "--num-cpus", "1")
        self._wait_nodes(2)

    def _start(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen(
            [RAY, "start", "--block", "--disable-usage-stats", *args],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )

    def _wait_nodes(self, n: int) -> None:
        deadline = time.time() + 90
        while time.time() < deadline:
            r = subprocess.run(
                [RAY, "status", "--address", f"127.0.0.1:{self.port}"],
                env=self.env,
                capture_output=True,
                text=True,
            )
            if r.stdout.count("node_") >= n:
                return
            time.sleep(2)
        raise AssertionError(f"{n} nodes never joined: {r.stdout} {r.stderr}")

    def run(self, spec: Path, home: Path) -> subprocess.Popen:
        env = {**self.env, "SWEEPS_HOME": str(home), "RAY_ADDRESS": f"127.0.0.1:{self.port}"}
        return subprocess.Popen(
            [sys.executable, "-m", "sweeps.cli", "run", str(spec), "--json"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def kill_worker_node(self) -> None:
        os.killpg(self.worker.pid, signal.SIGKILL)  # raylet, its workers: the whole node
        self.worker.wait(timeout=30)

    def stop(self) -> None:
        for p in (self.worker, self.head):
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        # `ray start --block` takes 30 s and more to stop its node on SIGTERM; the tests are done
        # with it, so a few seconds' grace, then the whole process group.
        for p in (self.worker, self.head):
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=30)
        shutil.rmtree(self.temp, ignore_errors=True)
