"""Sweeps as Ray Jobs: `submit` hands a sweep's driver to a cluster's Jobs API and returns; the
driver runs there under a small supervisor that restarts it, resuming the sweep, if it dies
(up to SWEEPS_DRIVER_RESTARTS times); `driver_logs` and `cancel` act on the job.

The job's working dir carries the validated spec, the user's code (`trainer.code_dir`) and, in
a file only the job reads and then deletes, the store settings and credentials: they never
appear in the job's metadata, in `ray job list` or in the dashboard. On this machine's own
service, with no code to ship, that folder is simply on this disk (`--dir`).

    python -m sweeps.jobs [--dir DIR] SPEC  the job's entrypoint (the supervisor); --drive SPEC:
    one driver run (what the supervisor starts)"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from sweeps.common import identity, loopback, names, paths
from sweeps.common.errors import NotFoundError
from sweeps.service import local as service
from sweeps.service import sweephost

if TYPE_CHECKING:  # not imported at run time: the job's supervisor starts the driver sooner
    from sweeps.spec import Spec

ENV_FILE = ".sweeps-env.json"
SPEC_FILE = ".sweeps-spec.yaml"
# What a driver needs from the submitting side: where the stores are, and their credentials.
PASS_ENV = (
    "SWEEPS_STORAGE",
    "OPTUNA_STORAGE",
    "MLFLOW_TRACKING_URI",
    "MLFLOW_REGISTRY_URI",
    "MLFLOW_EXPERIMENT_NAME",
    "MLFLOW_TRACKING_USERNAME",
    "MLFLOW_TRACKING_PASSWORD",
    "MLFLOW_TRACKING_TOKEN",
    "SWEEPS_CHECKPOINTS",
    "SWEEPS_ARTIFACTS",
    "SWEEPS_MACHINES",
    "SWEEPS_DATA_CACHE",
    "STORAGE_EMULATOR_HOST",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "SWEEPS_LANE_IDLE_S",
    "SWEEPS_PRIORITY",  # `submit --priority`: the sweep's fair-share tier (driver/arbitration)
    "SWEEPS_DRIVER_RESTARTS",
    "SWEEPS_RAY_PATH",  # private (fast) or public Ray Train path for the lanes
    "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S",
    "SWEEPS_VERBOSE",  # `sweeps -v submit`: the driver shows our libraries' output too
)


def _job_env(local: bool, spec: Spec) -> dict[str, str]:
    env = {k: os.environ[k] for k in PASS_ENV if os.environ.get(k)}
    env[identity.OWNER_ENV] = identity.owner()  # the driver records its submitter as owner
    if local:  # same machine: the driver uses exactly the stores this shell would
        env.update(
            SWEEPS_HOME=str(paths.home()),
            SWEEPS_STORAGE=paths.storage_url(spec.storage),
            MLFLOW_TRACKING_URI=paths.tracking_uri(spec.tracking.uri),
            SWEEPS_CHECKPOINTS=paths.checkpoint_root(),
            SWEEPS_ARTIFACTS=paths.artifact_root(),
        )
    return env


def _check_owner(spec: Spec, env: dict[str, str]) -> None:
    """The owner is the user a basic-auth MLflow server authenticates (wrong ones: exit 2)."""
    from tracking.whoami import checked_user

    uri = env.get("MLFLOW_TRACKING_URI") or paths.tracking_uri(spec.tracking.uri)
    user = env.get("MLFLOW_TRACKING_USERNAME")
    who = checked_user(uri, user, env.get("MLFLOW_TRACKING_PASSWORD"))
    if who:
        env[identity.OWNER_ENV] = who


def _working_dir(spec: Spec, env: dict[str, str], parent: str | None = None) -> str:
    """A folder with the spec, the user's code and the env file (owner-only)."""
    if parent:
        os.makedirs(parent, mode=0o700, exist_ok=True)
    work = tempfile.mkdtemp(prefix=f"sweeps-job-{spec.name}-", dir=parent)
    trainer = spec.trainer
    if trainer.code_dir:
        shutil.copytree(
            trainer.code_dir,
            os.path.join(work, "code"),
            ignore=shutil.ignore_patterns("__pycache__", ".git", "*.pyc"),
        )
        trainer = trainer.model_copy(update={"code_dir": "code"})
    with open(os.path.join(work, SPEC_FILE), "w") as f:
        f.write(spec.model_copy(update={"trainer": trainer}).to_yaml())
    fd = os.open(os.path.join(work, ENV_FILE), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(env, f)
    return work


def submit(spec: Spec, address: str | None = None) -> dict[str, Any]:
    """Submit the sweep's driver as a Ray Job; returns {name, job_id, address} at once."""
    local = not (address or os.environ.get("RAY_ADDRESS"))
    url, auth = service.resolve(address)
    env = _job_env(local, spec)
    _check_owner(spec, env)
    job_id = f"sweeps-{spec.name}-{uuid.uuid4().hex[:6]}"
    if local and not spec.trainer.code_dir:
        return _submit_here(spec, env, job_id, url, auth)
    work = _working_dir(spec, env)
    runtime_env: dict[str, Any] = {"working_dir": work}
    if not local:  # a cluster that may not have sweeps installed: ours travel with the job
        from sweeps.execution.cluster import our_packages

        runtime_env["py_modules"] = our_packages()
    undo = _record_submission(spec, env, job_id, url)  # before: the driver may start at once
    try:
        with service.jobs_client(url, auth) as client:
            _submit_job(
                client,
                entrypoint=f"python -m sweeps.jobs {SPEC_FILE}",
                submission_id=job_id,
                runtime_env=runtime_env,
                metadata={names.JOB_NAME: spec.name},
            )
    except BaseException:
        undo()
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)  # uploaded: the credentials leave this disk
    return {"name": spec.name, "job_id": job_id, "address": url}


def _submit_here(
    spec: Spec, env: dict[str, str], job_id: str, url: str, auth: dict[str, str]
) -> dict[str, Any]:
    """This machine's service, and no user code to ship: the job's folder stays on this disk
    (SWEEPS_HOME/jobs, owner-only; the job removes it when it ends); the service's zygote forks
    the job (`sweephost`), else it is one REST request: `sweeps submit` neither imports Ray nor
    uploads a package. A `code_dir` travels as a Ray Job's working dir, to any node."""
    work = _working_dir(spec, env, str(paths.home() / "jobs"))
    if sweephost.enabled() and sweephost.submit_recorded(  # no Ray Job, no new interpreter
        ["--dir", work, SPEC_FILE],
        job_id,
        env.get("SWEEPS_STORAGE") or "",
        lambda: _record_submission(spec, env, job_id, sweephost.ADDRESS),
    ):
        return {"name": spec.name, "job_id": job_id, "address": sweephost.ADDRESS}
    client = service.RestJobs(url, auth.get("RAY_AUTH_TOKEN_PATH"))
    try:
        _submit_job(
            client,
            entrypoint=f"python -m sweeps.jobs --dir {shlex.quote(work)} {SPEC_FILE}",
            submission_id=job_id,
            metadata={names.JOB_NAME: spec.name},
        )
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    # Recorded after the request, while Ray starts the job (~1 s): a live driver's beat wins.
    try:
        _record_submission(spec, env, job_id, url)
    except BaseException:
        with contextlib.suppress(Exception):
            client.stop_job(job_id)  # the store this side cannot write, the driver cannot either
        raise
    return {"name": spec.name, "job_id": job_id, "address": url}


# Ray's answer while the head's job agent is still starting (seconds after `ray start`/`sweeps up`).
AGENT_STARTING = "No available agent to submit job"


def _submit_job(client: Any, wait_s: float = 60.0, **job: Any) -> None:
    """submit_job, retried while the head's job agent starts: `sweeps up && sweeps submit`
    must not fail because the dashboard answered before its agent did."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            client.submit_job(**job)
            return
        except RuntimeError as e:
            if AGENT_STARTING not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def _record_submission(spec: Spec, env: dict[str, str], job_id: str, url: str) -> Any:
    """Mark the sweep `queued` in its study, when this side can reach the same store; returns
    what puts the study back as it was (the submission failed)."""
    storage = env.get("SWEEPS_STORAGE") or env.get("OPTUNA_STORAGE") or spec.storage
    if not storage:
        return lambda: None  # the cluster's own store: `show` works there, not from here
    import optuna

    from sweeps.common.quietlogs import quiet_optuna
    from sweeps.search import owners
    from sweeps.search.study import open_study

    quiet_optuna()  # "A new study created" is ours to say; its warnings only with -v
    study = open_study(spec, storage)
    keys = (names.STATE, names.JOB_ID, names.SUBMITTED, names.JOB_ADDRESS)
    before = {k: study.user_attrs.get(k) for k in keys}
    created = not study.trials and not any(before.values())
    study.set_user_attr(names.SUBMITTED, time.time())
    owners.record(study)
    study.set_user_attr(names.JOB_ID, job_id)
    study.set_user_attr(names.JOB_ADDRESS, url)
    if before[names.STATE] != "running":
        study.set_user_attr(names.STATE, "queued")

    def undo() -> None:
        if created:  # a submission that failed leaves no `queued` sweep behind
            optuna.delete_study(study_name=spec.name, storage=storage)
            return
        for k, v in before.items():
            study.set_user_attr(k, v)

    return undo


def _job_of(name: str, storage_url: str | None, address: str | None) -> tuple[str, str, Any]:
    """(job id, Jobs API URL, study) of a submitted sweep."""
    from sweeps.search.study import load_study

    study = load_study(name, paths.storage_url(storage_url))
    job_id = study.user_attrs.get(names.JOB_ID)
    if not job_id:
        raise NotFoundError(f"sweep '{name}' was not submitted as a job (run with `sweeps run`)")
    return job_id, address or study.user_attrs.get(names.JOB_ADDRESS) or "", study


def driver_logs(
    name: str, follow: bool, storage_url: str | None = None, address: str | None = None
) -> Iterator[str]:
    """The driver's job log, whole, then (follow) as it grows until the job ends."""
    job_id, addr, _ = _job_of(name, storage_url, address)
    if addr == sweephost.ADDRESS:
        yield from sweephost.logs(job_id, follow)
        return
    url, auth = service.resolve(addr or None)
    with service.jobs_client(url, auth) as client:
        if not follow:
            yield client.get_job_logs(job_id)
            return
        import asyncio

        # tail_job_logs is an async generator that ends with the job; relay it chunk by chunk.
        loop = asyncio.new_event_loop()
        gen = client.tail_job_logs(job_id)
        try:
            while True:
                try:
                    yield loop.run_until_complete(gen.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            loop.close()


def cancel(
    name: str, storage_url: str | None = None, address: str | None = None, grace_s: float = 30
) -> str:
    """End the sweep now: its driver cancels running trials (FAIL, runs KILLED), then the job
    is stopped; whatever a dead driver left RUNNING is closed here. Returns the final state."""
    from sweeps.queries import describe
    from sweeps.search import liveness, owners
    from sweeps.search import study as st

    url = paths.storage_url(storage_url)
    job_id = address_used = None
    with contextlib.suppress(NotFoundError):
        job_id, address_used, _ = _job_of(name, storage_url, address)
    study = st.load_study(name, url)
    owners.check_control(study, "cancel")
    study.set_user_attr(names.CANCEL_REQUESTED, time.time())
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and liveness.live_drivers(study):
        time.sleep(0.5)
    if address_used == sweephost.ADDRESS:  # its driver ends by itself, once it has said so
        sweephost.stop(job_id or "", wait_s=deadline - time.monotonic())
    elif job_id and service.job_status(job_id, address_used or None) in ("PENDING", "RUNNING"):
        with service.jobs_client(*service.resolve(address_used or None)) as client:
            client.stop_job(job_id)
    _close_leftovers(study, url)
    if describe(study)["state"] in ("running", "interrupted", "queued"):
        study.set_user_attr(names.STATE, "cancelled")
        study.set_user_attr(names.STOP_REASON, "cancelled (sweeps cancel)")
    return describe(study)["state"]


def _close_leftovers(study: Any, storage_url: str) -> None:
    """Trials left RUNNING by a driver that did not get to end them: FAIL (not re-queued: the
    sweep is cancelled), their MLflow runs KILLED."""
    import optuna

    from sweeps.search import study as st

    running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
    runs = []
    for t in running:
        if st.fail_trial(study, st.trial_id(t), "cancelled (sweeps cancel)"):
            runs.append(st.run_id_of(study.user_attrs, t))
    runs = [r for r in runs if r]
    if runs:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(paths.tracking_uri())
        for run_id in runs:
            client.set_tag(run_id, names.STATE, "KILLED")
            client.set_terminated(run_id, status="KILLED")


# ----- the job side -----------------------------------------------------------------------------
def _load_env() -> None:
    """Take the store settings and credentials out of the working dir, into this process."""
    if os.path.exists(ENV_FILE):
        with open(ENV_FILE) as f:
            loopback.apply(json.load(f), os.environ, say=print)  # 127.0.0.1 there: not here
        os.remove(ENV_FILE)


def _drive(spec_path: str) -> int:
    from sweeps.common.quietlogs import quiet
    from sweeps.driver.assemble import run_sweep
    from sweeps.driver.joblog import ProgressLines
    from sweeps.driver.summary import counts_text, ending_text
    from sweeps.spec import load_spec

    quiet()  # the driver's log (`sweeps logs --driver`) shows the sweep, as a terminal would
    spec = load_spec(spec_path)
    outcome = run_sweep(spec, callbacks=[ProgressLines()], from_process_start=True)
    counts = counts_text(outcome.summary.counts)
    print(f"{outcome.name}: {ending_text(outcome.state, outcome.reason)}; {counts}")
    return {"interrupted": 130, "cancelled": 143, "failed": 1}.get(outcome.state, 0)


def _start_driver(spec_path: str, here: bool) -> Any:
    """The driver: forked by the local service's zygote (its imports done) for a job submitted
    on this machine (`here`: the zygote's code is the submitter's), else a fresh process.
    Either answers `send_signal` and `wait` as a `subprocess.Popen` does."""
    from sweeps.service import zygote

    argv = ["--drive", spec_path]
    sock = paths.zygote_socket()
    forked = zygote.spawn(str(sock), names.JOBS_MODULE, argv) if here and sock.exists() else None
    return forked or subprocess.Popen([sys.executable, "-m", names.JOBS_MODULE, *argv])


def _supervise(spec_path: str, here: bool = False) -> int:
    """Run the driver; if it dies by a signal (OOM killer, a SIGKILL), start another, which
    takes over its trials and continues them from their checkpoints."""
    restarts = int(os.environ.get("SWEEPS_DRIVER_RESTARTS", "2"))
    stopped: list[int] = []  # signals the job was sent (`cancel`, `down`, `ray job stop`)
    for attempt in range(restarts + 1):
        child = _start_driver(spec_path, here)

        def forward(signum: int, _frame: Any, child: Any = child) -> None:
            stopped.append(signum)
            child.send_signal(signum)

        signal.signal(signal.SIGTERM, forward)
        signal.signal(signal.SIGINT, forward)
        rc = child.wait()
        if rc >= 0 or stopped:  # a driver stopped on purpose is not started again
            return rc if rc >= 0 else 128 - rc
        print(f"driver died ({signal.Signals(-rc).name}); restart {attempt + 1} of {restarts}")
    return 1


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    os.environ["SWEEPS_JOB"] = "1"  # the driver's code came with the job (sweeps.execution.cluster)
    here = None
    if args[:1] == ["--dir"]:  # a job folder on this disk (`_submit_here`), not Ray's upload
        here = args[1]
        os.chdir(here)
        args = args[2:]
    _load_env()
    if args and args[0] == "--drive":
        return _drive(args[1])
    try:
        return _supervise(args[0], here=bool(here))
    finally:
        if here:
            shutil.rmtree(here, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
