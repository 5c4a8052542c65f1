"""The team stack end to end (issue 16): `compose up` of docker-compose.yml as it ships, a sweep
submitted from the host through the token-protected Jobs API, its results in every store, and a
worker container killed mid-trial. Needs docker and the images .ci/run builds (see stack.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import pytest
import yaml
from stack import Stack, http, start, wait_for

from sweeps.common import names

pytestmark = pytest.mark.timeout(3600)

HERE = Path(__file__).resolve().parent
SWEEPS_CLI = [sys.executable, "-m", "sweeps.cli"]
PROGRESS = "/shared/e2e-progress"
TIMINGS: dict[str, float] = {}
TRANSCRIPT: list[str] = []  # what the user would see, for docs/TEAM.md (SWEEPS_E2E_REPORT)
SWEEPS: list[str] = []  # every sweep the module ran, for the final nothing-RUNNING check
OWNERS: dict[str, str] = {}  # sweep -> the MLflow user who submitted it (issue 31)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    s = start(tmp_path_factory.mktemp("stack"))
    ok = False
    try:
        t0 = time.monotonic()
        s.run("up", "-d", "--wait", "--wait-timeout", "900", "--no-build", timeout=1000)
        TIMINGS["compose_up_to_healthy_s"] = round(time.monotonic() - t0, 1)
        s.token = s.exec("ray-head", "cat", "/run/ray-auth/token").strip()
        yield s
        ok = True
    finally:
        if not ok:
            print(s.logs_tail(60))
        t0 = time.monotonic()
        s.run("down", "-v", "--remove-orphans", "-t", "10", check=False, timeout=300)
        TIMINGS["compose_down_s"] = round(time.monotonic() - t0, 1)
        if os.environ.get("SWEEPS_E2E_REPORT"):
            report = {**TIMINGS, "transcript": TRANSCRIPT}
            Path(os.environ["SWEEPS_E2E_REPORT"]).write_text(json.dumps(report, indent=1))


def write_spec(tmp: Path, spec: dict, with_task: bool = False) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    if with_task:
        shutil.copy(HERE / "e2e_task.py", tmp / "e2e_task.py")
    path = tmp / "sweep.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def host_env(s: Stack, **extra: str) -> dict[str, str]:
    """The host's environment with none of this machine's stores: the stack's token, and
    `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SWEEPS_", "MLFLOW_"))}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=s.token, RAY_ADDRESS="", **extra)
    return env


def submit(s: Stack, spec_path: Path) -> str:
    """`sweeps submit` from the host to the head's Jobs API, as the stack's MLflow admin; returns
    the job id. The stores are the head's (its environment): this client passes none of its
    own, so the owner is the MLflow user named, unchecked (the Ray token is the trust boundary)."""
    cmd = [*SWEEPS_CLI, "submit", spec_path.name, "--address", s.url("ray"), "--json"]
    env = host_env(s, MLFLOW_TRACKING_USERNAME=s.env["MLFLOW_TRACKING_USERNAME"])
    r = subprocess.run(cmd, cwd=spec_path.parent, env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    shown = f"$ sweeps submit {spec_path.name} --address {s.url('ray')} --json"
    TRANSCRIPT.append(f"{shown}\n{r.stdout}")
    doc = json.loads(r.stdout)
    assert (
        doc["address"] == s.url("ray")
        and doc["name"] == yaml.safe_load(spec_path.read_text())["name"]
    )
    return doc["job_id"]


def submit_as(s: Stack, spec_path: Path, user: str, password: str) -> str:
    """`sweeps submit` from the stack's client container as an MLflow user: submit asks the
    MLflow server who these credentials are, and that user owns the sweep. Returns the job id."""
    creds = {"MLFLOW_TRACKING_USERNAME": user, "MLFLOW_TRACKING_PASSWORD": password}
    # The client container runs as its own user: the spec and code (no secrets) must be readable.
    spec_path.parent.chmod(0o755)
    for f in spec_path.parent.iterdir():
        f.chmod(0o644)
    out = s.client(spec_path.parent, "sweeps", "submit", spec_path.name, "--json", env=creds)
    TRANSCRIPT.append(
        f"$ docker compose run --rm -e MLFLOW_TRACKING_USERNAME={user} -e "
        f"MLFLOW_TRACKING_PASSWORD=... sweeps sweeps submit {spec_path.name} --json\n{out}"
    )
    doc = json.loads(out[out.index("{") :])
    assert doc["name"] == yaml.safe_load(spec_path.read_text())["name"], doc
    return doc["job_id"]


def job(s: Stack, job_id: str, path: str = "") -> dict | str:
    status, body = http(
        f"{s.url('ray')}/api/jobs/{job_id}{path}", headers={"Authorization": f"Bearer {s.token}"}
    )
    assert status == 200, (status, body[:500])
    return json.loads(body)


def wait_job(s: Stack, job_id: str, timeout: float) -> None:
    final = wait_for(
        f"job {job_id}",
        lambda: job(s, job_id)["status"] in ("SUCCEEDED", "FAILED", "STOPPED"),
        timeout,
        every=3,
    )
    status = job(s, job_id)["status"]
    logs = job(s, job_id, "/logs")["logs"] if final else ""
    assert status == "SUCCEEDED", f"{job_id}: {status}\n{logs[-4000:]}"
    TRANSCRIPT.append(f"$ ray job logs {job_id}   # the last lines\n{logs[-1500:]}")


def optuna_trials(s: Stack, name: str) -> list:
    import optuna

    url = (
        f"postgresql+psycopg://sweeps:{s.env['POSTGRES_PASSWORD']}"
        f"@127.0.0.1:{s.ports['postgres']}/optuna"
    )
    return optuna.load_study(study_name=name, storage=url).get_trials(deepcopy=False)


def mlflow_trial_runs(s: Stack, name: str) -> list:
    return mlflow_runs(s, name, "trial")


def mlflow_runs(s: Stack, name: str, role: str) -> list:
    from mlflow.tracking import MlflowClient

    creds = {
        "MLFLOW_TRACKING_USERNAME": s.env["MLFLOW_TRACKING_USERNAME"],
        "MLFLOW_TRACKING_PASSWORD": s.env["MLFLOW_TRACKING_PASSWORD"],
    }
    with mock.patch.dict(os.environ, creds):
        client = MlflowClient(tracking_uri=s.url("mlflow"))
        exp = client.get_experiment_by_name(name)
        assert exp is not None, f"no MLflow experiment {name}"
        return client.search_runs([exp.experiment_id], f"tags.`sweeps.role` = '{role}'")


def test_sweep_runs_on_the_workers_and_lands_in_every_store(stack, tmp_path):
    s = stack
    # The service lets in only its owner: Jobs API and MLflow refuse a request without secrets.
    assert http(f"{s.url('ray')}/api/jobs/")[0] == 401
    assert (
        http(f"{s.url('ray')}/api/jobs/", headers={"Authorization": f"Bearer {s.token}"})[0] == 200
    )
    assert http(f"{s.url('mlflow')}/api/2.0/mlflow/experiments/search?max_results=1")[0] == 401

    name = f"e2e-digits-{os.getpid()}"
    SWEEPS.append(name)
    spec = {
        "name": name,
        "objective": {"metric": "val_accuracy", "direction": "maximize"},
        "search_space": {
            "lr": {"type": "float", "low": 0.002, "high": 0.02, "log": True},
            "hidden": {"type": "int", "low": 32, "high": 128, "step": 32},
        },
        "sampler": {"name": "random", "seed": 1},
        "budget": {"trials": 4, "parallel": 1},
        "resources": {"workers": 2, "cpus_per_worker": 1},
        "trainer": {"model": "mlp", "dataset": "digits", "epochs": 3, "batch_size": 64},
        "execution": {"checkpoint_min_interval_s": 0},
    }
    t0 = time.monotonic()
    job_id = submit(s, write_spec(tmp_path, spec))
    OWNERS[name] = s.env["MLFLOW_TRACKING_USERNAME"]
    TIMINGS["submit_s"] = round(time.monotonic() - t0, 1)
    wait_job(s, job_id, timeout=1500)
    TIMINGS["sweep_4x2_s"] = round(time.monotonic() - t0, 1)

    trials = optuna_trials(s, name)
    assert [t.state.name for t in trials] == ["COMPLETE"] * 4
    runs = mlflow_trial_runs(s, name)
    assert len(runs) == 4 and {r.info.status for r in runs} == {"FINISHED"}
    assert {r.data.tags["sweeps.hw.world_size"] for r in runs} == {"2"}
    # Trials ran on the worker container (the head has no CPUs): its hostname is its short id.
    workers = {c[:12] for c in s.containers("ray-worker")}
    assert {r.data.tags["sweeps.hw.host"] for r in runs} <= workers, workers
    # Checkpoints and artifacts, written by the workers and the MLflow server, are on the shared
    # volume as the head (which wrote none) sees it.
    # (sweeps names them trialNNNNNN-stepNNNNN-R, under one folder per lane).
    ckpts = s.exec("ray-head", "find", "/shared/checkpoints", "-name", "trial*-step*", "-type", "d")
    assert ckpts.split(), "no checkpoint on the shared volume"
    arts = s.exec("mlflow", "find", "/shared/mlartifacts", "-type", "f").split()
    assert any(run.info.run_id in a for run in runs for a in arts), arts[:5]
    status, body = http(f"{s.url('dashboard')}/api/studies")
    assert status == 200 and name in body


def test_killed_worker_container_resumes_its_trial_from_the_checkpoint(stack, tmp_path):
    s = stack
    t0 = time.monotonic()
    s.run("up", "-d", "--wait", "--wait-timeout", "600", "--no-build", "--no-recreate",
          "--scale", "ray-worker=2", timeout=700)  # fmt: skip
    TIMINGS["scale_to_2_workers_s"] = round(time.monotonic() - t0, 1)
    workers = s.containers("ray-worker")
    assert len(workers) == 2

    name = f"e2e-kill-{os.getpid()}"
    SWEEPS.append(name)
    progress = f"{PROGRESS}/{name}"
    spec = {
        "name": name,
        "objective": {"metric": "val_accuracy", "direction": "maximize"},
        "search_space": {"lr": {"type": "float", "low": 0.01, "high": 0.1}},
        "budget": {"trials": 1, "parallel": 1},
        "resources": {"workers": 2, "cpus_per_worker": 1, "max_failures": 3},
        "trainer": {
            "entrypoint": "e2e_task:slow_epochs",
            "code_dir": ".",
            "epochs": 8,
            "params": {"epoch_s": 3, "progress_dir": progress},
        },
        "execution": {"checkpoint_min_interval_s": 0},
    }
    # A second MLflow user, made by the admin; wrong credentials are refused at submit (exit 2,
    # one line, nothing submitted), right ones make carol the sweep's owner.
    password = s.add_mlflow_user("carol")
    spec_path = write_spec(tmp_path, spec, with_task=True)
    wrong = host_env(
        s,
        MLFLOW_TRACKING_URI=s.url("mlflow"),
        MLFLOW_TRACKING_USERNAME="carol",
        MLFLOW_TRACKING_PASSWORD="not-" + password,
    )
    cmd = [*SWEEPS_CLI, "submit", spec_path.name, "--address", s.url("ray")]
    r = subprocess.run(cmd, cwd=tmp_path, env=wrong, capture_output=True, text=True)
    assert r.returncode == 2 and "refused user 'carol'" in r.stderr, r.stdout + r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    t0 = time.monotonic()
    job_id = submit_as(s, spec_path, "carol", password)
    OWNERS[name] = "carol"
    TIMINGS["submit_as_carol_s"] = round(time.monotonic() - t0, 1)

    def rank0_lines() -> list[list[str]]:
        out = s.run("exec", "-T", "ray-head", "cat", f"{progress}/trial0-rank0.log",
                    check=False, timeout=120)  # fmt: skip
        return [line.split() for line in out.splitlines() if line.strip()]

    # Kill the container running rank 0 once epoch 2 is done, so that epoch 1's checkpoint (or
    # 2's) is registered: Ray Train keeps a checkpoint once its controller has polled it.
    def epoch2() -> list[list[str]]:
        if job(s, job_id)["status"] in ("FAILED", "STOPPED"):
            raise AssertionError(
                f"{job_id} ended early:\n{job(s, job_id, '/logs')['logs'][-3000:]}"
            )
        return [x for x in rank0_lines() if int(x[1]) >= 2]

    lines = wait_for("epoch 2 of the trial", epoch2, 900)
    host = lines[0][0]
    (victim,) = [c for c in workers if c.startswith(host)]
    subprocess.run(["docker", "kill", victim], check=True, capture_output=True)
    killed_at = len(rank0_lines())
    wait_job(s, job_id, timeout=1200)
    TIMINGS["sweep_with_worker_kill_s"] = round(time.monotonic() - t0, 1)

    (trial,) = optuna_trials(s, name)
    assert trial.state.name == "COMPLETE"
    (run,) = mlflow_trial_runs(s, name)
    assert run.info.status == "FINISHED"
    assert int(run.data.tags["sweeps.restarts"]) >= 1
    # Resumed from a checkpoint of this trial (epoch >= 1), not from scratch, on the survivor,
    # which read it from the shared volume where the killed container had written it.
    resumed = int(run.data.metrics["final_resumed_from"])
    assert resumed >= 1
    (survivor,) = s.containers("ray-worker")
    after = rank0_lines()[killed_at:]
    assert {h for h, _ in after} == {survivor[:12]}, after
    assert [int(e) for _, e in after] == list(range(resumed + 1, 9)), after
    state = subprocess.run(["docker", "inspect", "-f", "{{.State.Status}}", victim],
                           capture_output=True, text=True).stdout.strip()  # fmt: skip
    assert state == "exited"
    # Nothing left RUNNING in either store, for every sweep of this stack.
    for sweep in SWEEPS:
        assert all(t.state.name != "RUNNING" for t in optuna_trials(s, sweep))
        assert all(r.info.status != "RUNNING" for r in mlflow_trial_runs(s, sweep))
    assert_ls_shows_owners(s)


def assert_ls_shows_owners(s: Stack) -> None:
    """`sweeps ls` from the host, on the stack's study storage: each sweep's owner is the MLflow
    user who submitted it, also on its MLflow parent run."""
    storage = (
        f"postgresql+psycopg://sweeps:{s.env['POSTGRES_PASSWORD']}"
        f"@127.0.0.1:{s.ports['postgres']}/optuna"
    )
    env = host_env(s, SWEEPS_STORAGE=storage, COLUMNS="200")
    r = subprocess.run([*SWEEPS_CLI, "ls", "--json"], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    shown = {row["name"]: row["owner"] for row in json.loads(r.stdout)}
    assert {n: shown.get(n) for n in OWNERS} == OWNERS and len(set(OWNERS.values())) == 2, shown
    r = subprocess.run([*SWEEPS_CLI, "ls"], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    TRANSCRIPT.append(f"$ sweeps ls\n{r.stdout}")
    for name, owner in OWNERS.items():
        (row,) = [line for line in r.stdout.splitlines() if f" {name} " in line]
        assert f" {owner} " in row, r.stdout
        (parent,) = mlflow_runs(s, name, "sweep")
        assert parent.data.tags[names.OWNER] == owner
