"""The local sweep service: `sweeps up` starts a Ray head (Jobs API and dashboard) and the
MLflow UI on this machine; `sweeps down` stops exactly what `up` started, by process group.

The service runs code for whoever can reach it, so it lets in only its owner: Ray's token auth
is on (the token in a file only the user can read) and every port is bound to 127.0.0.1 unless
`--host` says otherwise. What `up` started is recorded in SWEEPS_HOME/service/service.json.
Once it is up, a plain `sweeps run` on this machine uses it (its lanes stay warm between
sweeps), and `sweeps submit` sends drivers to it.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sweeps.common import names, paths
from sweeps.common.errors import ServiceError, SpecError, one_line
from sweeps.service import claim, daemons


@dataclass
class ServiceInfo:
    host: str
    ray_pid: int
    ray_address: str  # host:port of the head's GCS, for ray.init
    dashboard_url: str  # the Jobs API and dashboard
    token_path: str
    temp_dir: str
    mlflow_pid: int | None = None
    mlflow_url: str | None = None
    started: float = 0.0
    zygote_pid: int | None = None
    claim_pid: int | None = None  # holds the claim on its stores (claim.py)


def service_dir() -> Path:
    return paths.home() / "service"


def _record() -> Path:
    return service_dir() / "service.json"


def _why(log: Path) -> str:
    """The error a failed `ray start` or `mlflow server` left at the end of its log."""
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    for line in reversed(lines[-50:]):
        if "Error" in line or "error" in line:
            return line.split("Error: ", 1)[-1][:300]
    return lines[-1][:300] if lines else ""


def load() -> ServiceInfo | None:
    """The running service recorded under SWEEPS_HOME, or None (none, or its head is dead)."""
    try:
        info = ServiceInfo(**json.loads(_record().read_text()))
    except (OSError, ValueError, TypeError):
        return None
    return info if daemons.alive(info.ray_pid) else None


def auth_env(token_path: str) -> dict[str, str]:
    """What a Ray client needs to be let into the service."""
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": token_path}


def _token(path: Path) -> str:
    """The service's token file, created once, readable by its owner only."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    os.chmod(path, 0o600)
    return str(path)


def _answers(url: str, headers: dict[str, str] | None = None) -> bool:
    import urllib.request

    try:
        req = urllib.request.Request(url, headers=headers or {})
        with urllib.request.urlopen(req, timeout=2) as r:
            return 200 <= r.status < 300
    except Exception:
        return False


def wait_http(url: str, timeout: float, headers: dict[str, str] | None = None) -> bool:
    """Poll `url` until it answers 2xx; False after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _answers(url, headers):
            return True
        time.sleep(0.5)
    return False


def up(
    host: str = "127.0.0.1",
    dashboard_port: int = 8265,
    mlflow_port: int = 5000,
    wait_s: float = 180.0,
) -> tuple[ServiceInfo, bool]:
    """Start the service, or find it running; returns (info, whether it was already up)."""
    running = load()
    if running is not None:
        return running, True
    uri = paths.tracking_uri()
    daemons.check_port_free(host, dashboard_port, "--dashboard-port")
    if uri.startswith("sqlite:///"):
        daemons.check_port_free(host, mlflow_port, "--mlflow-port")
    # Another service on these stores: refused here, before anything of this one starts.
    claim_pid = claim.hold(paths.home(), [paths.storage_url(), uri], service_dir() / "claim.log")
    bindir = Path(sys.executable).parent
    token = _token(service_dir() / "auth_token")
    env = _service_env(bindir, token)
    # Unix socket paths are short: the session folder lives under /tmp, named for this home.
    temp = f"/tmp/sweeps-ray-{abs(hash(str(paths.home()))) % 10**8}"
    gcs_port = daemons.free_port(host)
    ray_cmd = _ray_head_cmd(bindir, host, gcs_port, dashboard_port, temp)
    info = ServiceInfo(
        host=host,
        ray_pid=daemons.spawn(ray_cmd, service_dir() / "ray.log", env),
        ray_address=f"{host}:{gcs_port}",
        dashboard_url=f"http://{host}:{dashboard_port}",
        token_path=token,
        temp_dir=temp,
        started=time.time(),
        claim_pid=claim_pid,
    )
    if uri.startswith("sqlite:///"):  # the embedded store: serve its UI too
        _start_mlflow(info, uri, bindir, env, mlflow_port)
    # Drivers of sweeps submitted here start as forks of a process with their imports done.
    zygote_cmd = [sys.executable, "-m", names.ZYGOTE_MODULE, str(paths.zygote_socket())]
    info.zygote_pid = daemons.spawn(zygote_cmd, service_dir() / "zygote.log", env)
    _record().write_text(json.dumps(asdict(info), indent=1))
    _wait_ready(info, wait_s)
    return info, False


def _service_env(bindir: Path, token: str) -> dict[str, str]:
    """The service's processes: let in by its token, this interpreter's tools first on PATH."""
    env = {
        **os.environ,
        **auth_env(token),
        "PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    env.pop("RAY_ADDRESS", None)
    return env


def _ray_head_cmd(
    bindir: Path, host: str, gcs_port: int, dashboard_port: int, temp: str
) -> list[str]:
    """`ray start --head` for the service: Jobs API and dashboard on `host`, in the foreground."""
    return [
        str(bindir / "ray"),
        "start",
        "--head",
        "--block",
        "--disable-usage-stats",
        "--node-ip-address",
        host,
        "--port",
        str(gcs_port),
        "--dashboard-host",
        host,
        "--dashboard-port",
        str(dashboard_port),
        "--include-dashboard=true",
        # Its own, not Ray's fixed 52365: with another Ray on the machine (a test session, a
        # colleague's), the job agent could not bind it and every submit got "No available agent".
        "--dashboard-agent-listen-port",
        str(daemons.free_port(host)),
        "--temp-dir",
        temp,
    ]


def _start_mlflow(
    info: ServiceInfo, uri: str, bindir: Path, env: dict[str, str], mlflow_port: int
) -> None:
    """Serve the MLflow UI of the embedded store; records its pid and URL in `info`."""
    paths.ensure_local_dirs(uri)
    mlflow_cmd = [
        str(bindir / "mlflow"),
        "server",
        "--workers",
        "1",
        "--backend-store-uri",
        uri,
        "--default-artifact-root",
        paths.artifact_root(),
        "--host",
        info.host,
        "--port",
        str(mlflow_port),
    ]
    # One worker, no GenAI job runner: a UI for one user, not a serving fleet.
    mlflow_env = {**env, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    info.mlflow_pid = daemons.spawn(mlflow_cmd, service_dir() / "mlflow.log", mlflow_env)
    info.mlflow_url = f"http://{info.host}:{mlflow_port}"


def bearer(token_path: str) -> dict[str, str]:
    """The header Ray's token auth reads on an HTTP request."""
    return {"Authorization": f"Bearer {Path(token_path).read_text().strip()}"}


def _wait_ready(info: ServiceInfo, wait_s: float) -> None:
    headers = bearer(info.token_path)
    deadline = time.monotonic() + wait_s
    ray_ok = mlflow_ok = False
    while time.monotonic() < deadline:
        ray_ok = ray_ok or _answers(f"{info.dashboard_url}/api/jobs/", headers)
        mlflow_ok = mlflow_ok or not info.mlflow_url or _answers(f"{info.mlflow_url}/health")
        if ray_ok and mlflow_ok:
            return
        for ok, pid, what, log in (
            (ray_ok, info.ray_pid, "Ray", "ray.log"),
            (mlflow_ok, info.mlflow_pid, "MLflow", "mlflow.log"),
        ):
            # It exited: say why now, not at the timeout.
            if not ok and pid and not daemons.alive(pid):
                down()
                why = _why(service_dir() / log)
                raise ServiceError(
                    f"the service did not come up: {what} exited"
                    + (f" ({why})" if why else "")
                    + f"; see {service_dir() / log}"
                )
        time.sleep(0.5)
    down()
    log = service_dir() / ("ray.log" if not ray_ok else "mlflow.log")
    raise ServiceError(
        f"the service did not come up in {wait_s:g} s ({'Ray' if not ray_ok else 'MLflow'} "
        f"never answered); see {log}"
    )


def down(wait_s: float = 30.0, say: Callable[[str], None] | None = None) -> list[str]:
    """Stop what `up` started (its process groups) and nothing else; returns what stopped.
    Sweeps still running are interrupted first and recorded so (`say` warns of each)."""
    try:
        raw = json.loads(_record().read_text())
    except (OSError, ValueError):
        return []
    if daemons.alive(raw.get("ray_pid")):
        _interrupt_sweeps(wait_s, say)
    stopped = []
    started = ("ray", "mlflow", "zygote", "claim")
    for name, pid in ((n, raw.get(f"{n}_pid")) for n in started):
        if daemons.alive(pid):
            # Ray's head: once its raylet has stopped the workers (~10 s after SIGTERM), what
            # is left (GCS, `ray start`'s monitor) holds nothing of ours but took 22 s more to
            # exit; Ray's own `ray stop` kills it after 16 s as well.
            daemons.stop_group(int(pid), wait_s, until_gone="raylet" if name == "ray" else None)
            stopped.append(name)
    _record().unlink(missing_ok=True)
    import shutil

    shutil.rmtree(raw.get("temp_dir") or "/nonexistent", ignore_errors=True)
    return stopped


def _interrupt_sweeps(wait_s: float, say: Callable[[str], None] | None) -> None:
    """Sweeps whose drivers run: interrupted and recorded before their lanes go."""
    from sweeps.service import inflight

    live = inflight.live_sweeps()
    if not live:
        return
    if say is not None:
        say(
            f"warning: {len(live)} sweep(s) running: {', '.join(live)}. Interrupting them: "
            "running trials are cancelled (MLflow runs KILLED) and `sweeps resume NAME` runs "
            "them again"
        )
    inflight.interrupt(live, wait_s)


def resolve(address: str | None) -> tuple[str, dict[str, str]]:
    """The Jobs API URL to use and the environment a client needs: `--address`, else
    RAY_ADDRESS (an http:// dashboard URL), else the local service."""
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address:
        if not address.startswith(("http://", "https://")):
            raise SpecError(
                f"--address: {address} is not the Jobs API's http://HOST:PORT (port 8265 by "
                "default)"
            )
        info = load()
        if info is not None and info.dashboard_url.rstrip("/") == address.rstrip("/"):
            # This machine's service, named by its URL (as a sweep records where it went).
            return address.rstrip("/"), auth_env(info.token_path)
        return address.rstrip("/"), {}
    info = load()
    if info is None:
        raise ServiceError(
            "no sweep service here: start one with `sweeps up`, or name one with --address "
            "http://HOST:8265"
        )
    return info.dashboard_url, auth_env(info.token_path)


def urls(info: ServiceInfo) -> dict[str, Any]:
    return {
        "ray_address": info.ray_address,
        "jobs_api": info.dashboard_url,
        "dashboard": info.dashboard_url,
        "mlflow_ui": info.mlflow_url,
        "token_file": info.token_path,
    }


@contextlib.contextmanager
def jobs_client(url: str, auth: dict[str, str]) -> Iterator[Any]:
    """A JobSubmissionClient that sends the service's token (Ray reads it from the env)."""
    saved = {k: os.environ.get(k) for k in auth}
    os.environ.update(auth)
    try:
        from ray.job_submission import JobSubmissionClient

        from sweeps.common.quietlogs import quiet_ray

        quiet_ray()  # "Uploading package ..." is Ray's to say under -v
        try:
            yield JobSubmissionClient(url)
        except (ConnectionError, RuntimeError) as e:
            raise ServiceError(f"Jobs API at {url}: {one_line(e)}") from None
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class RestJobs:
    """Job submission through Ray's documented Jobs REST API (`POST /api/jobs/`), for this
    machine's service: a submit that needs no upload then costs one HTTP request instead of
    `import ray` (~0.45 s of the ~1.7 s `sweeps submit` took) and Ray's version and package
    requests. Same contract as `JobSubmissionClient.submit_job`, errors included, so one retry
    policy (`sweeps.jobs._submit_job`) covers both."""

    def __init__(self, url: str, token_path: str | None) -> None:
        self.url = url.rstrip("/")
        self.headers = {
            "Content-Type": "application/json",
            **(bearer(token_path) if token_path else {}),
        }

    def submit_job(self, **job: Any) -> str:
        return str(self._post("/api/jobs/", job)["submission_id"])

    def stop_job(self, job_id: str) -> bool:
        return bool(self._post(f"/api/jobs/{job_id}/stop", {}).get("stopped"))

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        import urllib.error
        import urllib.request

        req = urllib.request.Request(
            self.url + path, json.dumps(body).encode(), self.headers, method="POST"
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return dict(json.loads(resp.read()))
        except urllib.error.HTTPError as e:
            body = e.read().decode(errors="replace")
            raise RuntimeError(f"Request failed with status code {e.code}: {body}") from None
        except (urllib.error.URLError, OSError) as e:
            raise ServiceError(f"Jobs API at {self.url}: {one_line(e)}") from None


def job_status(job_id: str, address: str | None) -> str | None:
    """A job's status (PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED), or None if unknown."""
    if address == names.SWEEPHOST_ADDRESS:
        from sweeps.service import sweephost

        return sweephost.status(job_id)
    try:
        url, auth = resolve(address)
        with jobs_client(url, auth) as client:
            return str(client.get_job_status(job_id).value)
    except Exception:
        return None
