"""The sweep service for real: `sweeps up` on loopback with token auth, sweeps submitted as Ray
Jobs that outlive the process that submitted them, warm lanes taken over by the next sweep, a
client that is no Ray node (`--address`), `cancel`, and `down` leaving nothing of ours running.

One service for the module (starting a Ray head costs ~10 s); the tests run in file order.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import BYO, ROOT
from mlflow.tracking import MlflowClient
from services import free_port, up_args

from sweeps import api
from sweeps.service import daemons
from sweeps.service import local as service

SWEEPS = [sys.executable, "-m", "sweeps.cli"]
pytestmark = pytest.mark.timeout(900)


@dataclass
class Svc:
    home: Path
    env: dict[str, str]
    info: dict

    @property
    def storage(self) -> str:
        return f"sqlite:///{self.home}/optuna.db"

    @property
    def tracking(self) -> str:
        return f"sqlite:///{self.home}/mlflow.db"

    def cli(self, *args: str, env: dict | None = None, timeout: float = 120, check: bool = True):
        r = subprocess.run(
            [*SWEEPS, *args], env=env or self.env, capture_output=True, text=True, timeout=timeout
        )
        if check:
            assert r.returncode == 0, f"sweeps {' '.join(args)}: {r.stderr[-3000:]}"
        return r

    def wait(self, name: str, states: tuple[str, ...], timeout: float = 400) -> dict:
        end, doc = time.time() + timeout, None
        while time.time() < end:
            try:
                doc = api.show(name, self.storage)
                if doc["state"] in states:
                    return doc
            except Exception as e:  # not submitted yet
                doc = {"error": str(e)}
            time.sleep(1.0)
        logs = self.cli("logs", name, "--driver", check=False)
        raise AssertionError(f"{name} never reached {states}: {doc}\ndriver log:\n{logs.stdout}")


@pytest.fixture(scope="module")
def svc(tmp_path_factory):
    home = tmp_path_factory.mktemp("svc")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "MLFLOW_", "SWEEPS_"))}
    env.update(SWEEPS_HOME=str(home), SWEEPS_LANE_IDLE_S="600")
    r = subprocess.run(
        [*SWEEPS, *up_args()],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    s = Svc(home, env, json.loads(r.stdout))
    try:
        yield s
    finally:
        subprocess.run([*SWEEPS, "down"], env=env, capture_output=True, timeout=120)


def _up_with_ports(home: Path, dashboard_port: int, mlflow_port: int):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "MLFLOW_", "SWEEPS_"))}
    env["SWEEPS_HOME"] = str(home)
    return subprocess.run(
        [*SWEEPS, "up", "--dashboard-port", str(dashboard_port), "--mlflow-port", str(mlflow_port)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_up_on_a_taken_dashboard_port_refuses_before_starting_anything(tmp_path):
    """Another process listens on the dashboard port: `up` names the flag and the address in one
    line, exit 2, and starts nothing."""
    import socket

    before = _pids_matching("sweeps-ray-")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = _up_with_ports(tmp_path, port, free_port())
    assert r.returncode == 2, r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--dashboard-port" in lines[0], r.stderr[-2000:]
    assert f"127.0.0.1:{port} is taken" in lines[0], lines[0]
    assert not (tmp_path / "service" / "service.json").exists(), "nothing recorded as running"
    assert not (tmp_path / "service" / "ray.log").exists(), "Ray's head was never started"
    assert _pids_matching(str(tmp_path)) == set()
    assert _pids_matching("sweeps-ray-") <= before


def test_up_does_not_take_another_mlflow_on_its_port_for_its_own(tmp_path):
    """A server already answering /health on the MLflow port (a colleague's MLflow UI) would pass
    `up`'s readiness check for ours: `up` refuses the port instead."""
    import http.server
    import threading

    class Healthy(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"OK")

        def log_message(self, *args) -> None:
            pass

    other = http.server.HTTPServer(("127.0.0.1", 0), Healthy)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        port = other.server_address[1]
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5).status == 200
        r = _up_with_ports(tmp_path, free_port(), port)
    finally:
        other.shutdown()
        other.server_close()
    assert r.returncode == 2, r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "--mlflow-port" in lines[0], r.stderr[-2000:]
    assert f"127.0.0.1:{port} is taken" in lines[0], lines[0]
    assert not (tmp_path / "service" / "service.json").exists()
    assert not (tmp_path / "service" / "mlflow.log").exists(), "no MLflow server was started"


def test_a_service_part_that_exits_at_start_is_reported_at_once_and_the_rest_stopped(
    tmp_path, monkeypatch
):
    """Ray's head exits while MLflow runs: `up` quotes the error from Ray's log as soon as the
    process is gone (not at the 180 s timeout) and stops MLflow's process group."""
    monkeypatch.setenv("SWEEPS_HOME", str(tmp_path))
    d = service.service_dir()
    err = "ValueError: Failed to bind to 127.0.0.1:1, the port is occupied"
    ray_pid = daemons.spawn(["sh", "-c", f"echo '{err}'; exit 1"], d / "ray.log", dict(os.environ))
    mlflow_pid = daemons.spawn(["sleep", "300"], d / "mlflow.log", dict(os.environ))
    info = service.ServiceInfo(
        host="127.0.0.1",
        ray_pid=ray_pid,
        ray_address="127.0.0.1:1",
        dashboard_url=f"http://127.0.0.1:{free_port()}",
        token_path=service._token(d / "auth_token"),
        temp_dir=str(tmp_path / "ray-temp"),
        mlflow_pid=mlflow_pid,
        mlflow_url=f"http://127.0.0.1:{free_port()}",
    )
    service._record().write_text(json.dumps(service.asdict(info)))
    t0 = time.monotonic()
    with pytest.raises(service.ServiceError) as e:
        service._wait_ready(info, wait_s=120)
    # Not at the 120 s timeout, nor after waiting out MLflow's unreaped zombie (35 s, before).
    assert time.monotonic() - t0 < 20, "reported when Ray exited, MLflow stopped at once"
    msg = str(e.value)
    assert "Ray exited" in msg and "the port is occupied" in msg and "ray.log" in msg, msg
    assert not daemons.alive(mlflow_pid), "MLflow's group was stopped"
    assert not service._record().exists()


def _pids_matching(text: str) -> set[str]:
    r = subprocess.run(["pgrep", "-f", text], capture_output=True, text=True)
    return set(r.stdout.split()) - {str(os.getpid())}


def _get(url: str, token: str | None) -> int:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_up_is_idempotent_and_the_jobs_api_wants_the_token(svc):
    again = json.loads(svc.cli("up", "--json").stdout)
    assert again["already"] and again["jobs_api"] == svc.info["jobs_api"]
    token_file = Path(svc.info["token_file"])
    assert token_file.stat().st_mode & 0o077 == 0, "the token is readable by its owner only"
    jobs = svc.info["jobs_api"] + "/api/jobs/"
    assert jobs.startswith("http://127.0.0.1:")
    assert _get(jobs, None) in (401, 403), "a request without the token is refused"
    assert _get(jobs, "not-the-token") in (401, 403)
    assert _get(jobs, token_file.read_text().strip()) == 200
    assert _get(svc.info["mlflow_ui"] + "/health", None) == 200
    # `sweeps submit`'s own REST client (no `import ray`) is refused the same way, with Ray's
    # client's error, so the one retry policy applies to it.
    wrong = Path(svc.home) / "wrong-token"
    wrong.write_text("not-the-token")
    with pytest.raises(RuntimeError, match="status code 40[13]"):
        service.RestJobs(svc.info["jobs_api"], str(wrong)).submit_job(entrypoint="echo never")


def test_a_second_service_on_the_same_stores_refuses_and_leaves_the_first_alone(svc, tmp_path):
    """Two `sweeps up` (two SWEEPS_HOME) on one Optuna store and MLflow backend: the second
    stops in one line naming the first (where it runs, since when), exit 2, starting nothing;
    the first keeps its claim and answers (issue 31)."""
    record = svc.home / "service" / "service.json"
    before = record.read_text()
    env = {**svc.env, "SWEEPS_HOME": str(tmp_path)}
    env.update(SWEEPS_STORAGE=svc.storage, MLFLOW_TRACKING_URI=svc.tracking)
    r = subprocess.run([*SWEEPS, *up_args()], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    (line,) = r.stderr.strip().splitlines()
    first = json.loads(before)["claim_pid"]
    assert f"store {svc.home}/optuna.db is claimed by the sweeps service of {svc.home} on " in line
    assert f"(pid {first}), up since " in line, line
    assert not (tmp_path / "service" / "service.json").exists()
    assert not (tmp_path / "service" / "ray.log").exists(), "nothing of the second started"
    assert record.read_text() == before and daemons.alive(first)
    claimed = json.loads((svc.home / "optuna.db.sweeps-service").read_text())
    assert claimed["home"] == str(svc.home)
    token = Path(svc.info["token_file"]).read_text().strip()
    assert _get(svc.info["jobs_api"] + "/api/jobs/", token) == 200


def test_a_submitted_sweep_outlives_the_process_that_submitted_it(svc):
    client = subprocess.Popen(
        [
            *SWEEPS,
            "submit",
            str(ROOT / "conf" / "quickstart.yaml"),
            "--name",
            "qs-svc",
            "--trials",
            "4",
            "--set",
            "trainer.epochs=3",
            "--json",
        ],
        env=svc.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    text, line = "", ""
    while not line.startswith("}"):  # the whole JSON document, and not a moment longer
        line = client.stdout.readline() or "}"
        text += line
    os.killpg(client.pid, signal.SIGKILL)  # the laptop's lid closes
    client.wait()
    sub = json.loads(text)
    assert sub["name"] == "qs-svc" and sub["job_id"].startswith("sweeps-qs-svc-")
    doc = svc.wait("qs-svc", ("finished", "failed", "stopped"))
    assert doc["state"] == "finished", doc
    assert sum(doc["counts"].get(k, 0) for k in ("COMPLETE", "PRUNED")) == 4
    assert doc["job_id"] == sub["job_id"]
    # The study says "finished" a moment before the driver prints its last line and exits:
    # -f reads the log to the job's end, as a user following it would.
    log = svc.cli("logs", "qs-svc", "--driver", "-f").stdout
    assert "qs-svc: finished" in log
    # Progress as trials end, not only the last line (issue 29 #14): one line per trial, each
    # flushed when it ends, before the sweep's last line.
    lines = log.splitlines()
    last = next(i for i, ln in enumerate(lines) if ln.startswith("qs-svc: finished"))
    ended = [ln for ln in lines[:last] if re.match(r"qs-svc: trial #\d+ ", ln)]
    assert len(ended) == 4 and ended[-1].endswith("4/4 ended, best " + ended[-1].split()[-1])
    assert not any((svc.home / "jobs").iterdir()), "the ended job removed its folder"
    ls = json.loads(svc.cli("ls", "--json").stdout)
    assert {r["name"]: r["state"] for r in ls}["qs-svc"] == "finished", "ls and show agree"
    # Hosted by the service's resident sweep host, not a Ray Job; credentials and store
    # settings travel in a file the job deletes, and its record holds no more than the log.
    assert sub["address"] == "local-sweep-host"
    rec = svc.home / "service" / "sweeps" / sub["job_id"]
    assert sorted(p.name for p in rec.iterdir()) == ["driver.log", "exit", "pid"]
    assert (rec / "exit").read_text() == "0" and rec.stat().st_mode & 0o077 == 0
    listed = subprocess.run(
        [
            str(Path(sys.executable).parent / "ray"),
            "job",
            "list",
            "--address",
            svc.info["jobs_api"],
        ],  # noqa: E501
        env={**svc.env, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": svc.info["token_file"]},
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    assert sub["job_id"] not in listed, "no Ray Job: " + listed[-2000:]


def _byo_spec(path: Path, name: str, trials: int, epochs: int = 1, sleep: float = 0.0) -> str:
    task = "worker_pid" if not sleep else "slow"
    path.write_text(
        f"name: {name}\n"
        "search_space: {lr: {type: float, low: 0.001, high: 0.02}}\n"
        "sampler: {name: random, seed: 4}\n"
        "pruner: {name: none}\n"
        f"budget: {{trials: {trials}, parallel: 1}}\n"
        f"trainer: {{entrypoint: 'byo_tasks:{task}', code_dir: '{BYO}', epochs: {epochs}, "
        f"params: {{sleep: {sleep}}}}}\n"
    )
    return str(path)


def _lanes_and_pids(svc: Svc, name: str) -> tuple[set[str], set[float]]:
    import optuna

    study = optuna.load_study(study_name=name, storage=svc.storage)
    client = MlflowClient(svc.tracking)
    lanes = {t.user_attrs["sweeps.lane"] for t in study.trials}
    pids = {
        client.get_run(t.user_attrs["mlflow_run_id"]).data.metrics["worker_pid"]
        for t in study.trials
    }
    return lanes, pids


def test_the_next_sweep_runs_on_the_first_ones_warm_worker_processes(svc, tmp_path):
    for name in ("warm-a", "warm-b"):
        svc.cli("submit", _byo_spec(tmp_path / f"{name}.yaml", name, trials=3))
        assert svc.wait(name, ("finished", "failed"))["state"] == "finished"
    lanes_a, pids_a = _lanes_and_pids(svc, "warm-a")
    lanes_b, pids_b = _lanes_and_pids(svc, "warm-b")
    assert len(lanes_a) == 1 and lanes_b == lanes_a, "the second sweep took the first's lane"
    assert len(pids_a) == 1 and pids_b == pids_a, "...and its worker process"


def test_a_sweep_run_in_the_foreground_on_the_service_machine_takes_its_warm_lane(svc, tmp_path):
    """`sweeps run` where `sweeps up` runs: the driver is let into the token-guarded cluster
    (Ray reads its auth settings when it is imported, so they must be set before that) and
    takes the lane the submitted sweeps left warm."""
    r = svc.cli("run", _byo_spec(tmp_path / "fg.yaml", "fg", trials=2), timeout=300, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    lanes_a, pids_a = _lanes_and_pids(svc, "warm-a")
    lanes, pids = _lanes_and_pids(svc, "fg")
    assert lanes == lanes_a and pids == pids_a, (lanes, lanes_a)


def test_a_sweep_with_its_own_code_runs_it_not_the_code_of_the_job_before(svc, tmp_path):
    # The service's lane host was started by an earlier job: lanes must get this job's code,
    # not the working dir that host inherited. A script as a user writes one.
    code = tmp_path / "own"
    code.mkdir()
    (code / "helpers.py").write_text("MARK = 0.25\n")
    (code / "own_task.py").write_text(
        "import sweeps\n"
        "from helpers import MARK\n\n\n"
        "def train(config):\n"
        "    sweeps.report({'val_accuracy': MARK})\n"
        "    return {'val_accuracy': MARK}\n"
    )
    spec = tmp_path / "own.yaml"
    spec.write_text(
        "name: own-code\n"
        "search_space: {lr: {type: float, low: 0.001, high: 0.02}}\n"
        "pruner: {name: none}\n"
        "budget: {trials: 2, parallel: 1}\n"
        f"trainer: {{entrypoint: 'own_task:train', code_dir: '{code}', epochs: 1}}\n"
    )
    svc.cli("submit", str(spec))
    doc = svc.wait("own-code", ("finished", "failed"))
    assert doc["state"] == "finished", svc.cli("logs", "own-code", "--driver", check=False).stdout
    assert doc["best"]["value"] == 0.25


def test_a_sweep_the_service_hosts_is_cancelled_and_its_supervisor_ends(svc, monkeypatch):
    """The resident path (issue 30): `submit` forks the sweep from the service's zygote; its
    driver log, status and `cancel` work as they did for a Ray Job."""
    monkeypatch.setenv("SWEEPS_HOME", str(svc.home))  # where job_status finds its record
    quickstart = str(ROOT / "conf" / "quickstart.yaml")  # no code to ship: the resident path
    long = ["--trials", "20", "--set", "trainer.epochs=2000", "--set", "pruner.name=none"]
    sub = json.loads(svc.cli("submit", quickstart, "--name", "hosted", *long, "--json").stdout)
    assert sub["address"] == "local-sweep-host"
    end = time.time() + 300
    while not api.show("hosted", svc.storage)["counts"].get("RUNNING"):
        assert time.time() < end, "the sweep never ran a trial"
        time.sleep(0.5)
    assert service.job_status(sub["job_id"], sub["address"]) == "RUNNING"
    pid = int((svc.home / "service" / "sweeps" / sub["job_id"] / "pid").read_text())
    with open(f"/proc/{pid}/stat") as f:
        ppid = int(f.read().rsplit(")", 1)[1].split()[1])
    record = json.loads((svc.home / "service" / "service.json").read_text())
    assert ppid == record["zygote_pid"], "forked by the service's zygote: no new interpreter"
    r = svc.cli("cancel", "hosted", timeout=180)
    assert "cancelled" in r.stdout
    doc = api.show("hosted", svc.storage)
    assert doc["state"] == "cancelled" and not doc["counts"].get("RUNNING"), doc
    deadline = time.time() + 30
    while os.path.exists(f"/proc/{pid}") and time.time() < deadline:
        time.sleep(0.2)
    assert service.job_status(sub["job_id"], sub["address"]) == "STOPPED"
    assert "hosted: cancelled" in svc.cli("logs", "hosted", "--driver", "-f").stdout


def test_submit_beside_the_service_runs_warm_in_its_zygote(svc, tmp_path):
    """`sweeps submit` on the service's machine hands itself to the zygote (sweeps/cli/thin.py):
    the command's own process never imports Optuna, and its output and exit code are the
    forked command's. SWEEPS_THIN_CLIENT=0 runs it in the process, as before."""
    qs = str(ROOT / "conf" / "quickstart.yaml")
    one = ["--trials", "1", "--set", "trainer.epochs=1", "--json"]
    for name, thin in (("thin", True), ("thick", False)):
        env = svc.env if thin else {**svc.env, "SWEEPS_THIN_CLIENT": "0"}
        r = subprocess.run(
            [sys.executable, "-X", "importtime", *SWEEPS[1:], "submit", qs, "--name", name, *one],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0, r.stderr[-3000:]
        imported = {
            ln.rsplit("|", 1)[-1].strip() for ln in r.stderr.splitlines() if "import time:" in ln
        }
        assert ("optuna" in imported) is not thin, name
        assert json.loads(r.stdout)["name"] == name
        assert svc.wait(name, ("finished", "failed", "stopped"))["state"] == "finished"
    bad = svc.cli("submit", str(tmp_path / "none.yaml"), check=False)
    assert bad.returncode == 2 and bad.stderr.startswith("error: spec file not found"), bad.stderr


def test_a_client_that_is_no_ray_node_submits_shows_follows_and_cancels(svc, tmp_path):
    env = {
        **{k: v for k, v in svc.env.items() if k != "SWEEPS_HOME"},
        "SWEEPS_HOME": str(tmp_path / "elsewhere"),  # no service recorded here
        "SWEEPS_STORAGE": svc.storage,
        "MLFLOW_TRACKING_URI": svc.tracking,
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": svc.info["token_file"],
    }
    addr = ["--address", svc.info["jobs_api"]]
    spec = _byo_spec(tmp_path / "remote.yaml", "remote", trials=20, epochs=50, sleep=0.2)
    sub = json.loads(svc.cli("submit", spec, *addr, "--json", env=env).stdout)
    assert sub["address"] == svc.info["jobs_api"]
    end = time.time() + 300
    while time.time() < end:
        doc = json.loads(svc.cli("show", "remote", "--json", env=env).stdout)
        if doc["state"] == "running" and doc["counts"].get("RUNNING"):
            break
        time.sleep(1)
    else:
        raise AssertionError(f"the remote sweep never ran a trial: {doc}")
    log = svc.cli("logs", "remote", "--driver", *addr, env=env).stdout
    assert isinstance(log, str)
    r = svc.cli("cancel", "remote", *addr, env=env, timeout=180)
    assert "cancelled" in r.stdout
    doc = api.show("remote", svc.storage)
    assert doc["state"] == "cancelled", doc
    assert not doc["counts"].get("RUNNING"), "nothing left RUNNING"
    client = MlflowClient(svc.tracking)
    cancelled = [t for t in doc["trials"] if t["state"] == "FAIL"]
    assert cancelled, doc["trials"]
    for t in cancelled:  # as the README says, and naming what stopped it (issue 29 #11)
        assert client.get_run(t["mlflow_run_id"]).info.status == "KILLED"
        assert t["error"] == "cancelled: sweeps cancel", t


def test_zz_down_stops_what_up_started_and_nothing_else(svc, tmp_path):
    """...and a sweep still running is warned of, interrupted and recorded so: no trial left
    RUNNING, a stop reason, its cancelled trial marked for `resume` to run again (#10)."""
    spec = _byo_spec(tmp_path / "late.yaml", "late", trials=20, epochs=50, sleep=0.2)
    svc.cli("submit", spec)
    end = time.time() + 300
    while not api.show("late", svc.storage)["counts"].get("RUNNING"):
        assert time.time() < end, "the sweep never ran a trial"
        time.sleep(1)
    pids = _service_pids(svc.home)
    assert pids, "the service's processes are recorded"
    r = svc.cli("down")
    assert "ray" in r.stdout
    assert "warning: 1 sweep(s) running: late" in r.stderr and "sweeps resume" in r.stderr
    doc = api.show("late", svc.storage)
    assert doc["state"] == "interrupted" and "sweeps down" in (doc["stop_reason"] or ""), doc
    assert not doc["counts"].get("RUNNING"), doc["counts"]
    (stopped,) = [t for t in doc["trials"] if t["state"] == "FAIL"]
    assert stopped["error"] == "interrupted: sweeps down"
    assert MlflowClient(svc.tracking).get_run(stopped["mlflow_run_id"]).info.status == "KILLED"
    import optuna

    study = optuna.load_study(study_name="late", storage=svc.storage)
    assert study.trials[stopped["number"]].user_attrs["sweeps.cancelled"], "resume re-runs it"
    time.sleep(2)
    alive = [p for p in pids if daemons.alive(p)]  # a zombie, not yet reaped by PID 1, is not
    assert not alive, f"still running: {alive}"
    left = subprocess.run(["pgrep", "-f", svc.info["ray_address"]], capture_output=True, text=True)
    assert not left.stdout.strip(), f"Ray processes of the service still run: {left.stdout}"


def _service_pids(home: Path) -> list[int]:
    raw = json.loads((home / "service" / "service.json").read_text())
    return [p for p in (raw.get("ray_pid"), raw.get("mlflow_pid"), raw.get("claim_pid")) if p]
