"""What a new user tripped on (issue 17), seen the way they saw it: through the CLI of one real
sweep (2 trials, 2 workers each, every rank printing a line per epoch), then `ls`, `show`,
`logs`, `stop` and a second `run` of the same finished sweep."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import optuna
import pytest
from conftest import BYO
from mlflow.tracking import MlflowClient

NAME = "honest"
EPOCHS = 3


def _cli(
    home: Path, *args: str, timeout: float = 600, ray_tmp: str | None = None
) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SWEEPS_", "RAY_ADDRESS"))}
    env["SWEEPS_HOME"] = str(home)
    if ray_tmp:
        env["RAY_TMPDIR"] = ray_tmp
    return subprocess.run(
        [sys.executable, "-m", "sweeps.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    base = tmp_path_factory.mktemp("honest")
    home = base / "home"
    spec = base / "honest.yaml"
    spec.write_text(
        f"name: {NAME}\n"
        "search_space: {lr: {type: float, low: 0.01, high: 0.02}}\n"
        "sampler: {name: random, seed: 3}\n"
        "pruner: {name: none}\n"
        "budget: {trials: 2, parallel: 1}\n"
        "resources: {workers: 2, cpus_per_worker: 1}\n"
        f"trainer: {{entrypoint: 'byo_tasks:chatty', code_dir: '{BYO}', epochs: {EPOCHS}}}\n"
    )
    # Its own Ray temp dir (short: Ray's socket paths must fit in 107 bytes), to find its
    # processes by.
    ray_tmp = tempfile.mkdtemp(prefix="ray-honest-", dir="/tmp")
    first = _cli(home, "run", str(spec), ray_tmp=ray_tmp)
    assert first.returncode == 0, first.stderr[-3000:]
    return home, spec, first, ray_tmp


def _processes_naming(text: str) -> list[str]:
    """Live processes with `text` in their command line or environment: Ray's agents retitle
    themselves (`ray::DashboardAgent`), but keep the RAY_TMPDIR they were started with."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().decode(errors="replace")
            with open(f"/proc/{pid}/stat") as f:
                zombie = f.read().rsplit(")", 1)[-1].split()[0] == "Z"
        except OSError:
            continue  # ended while we looked, or not ours to read
        if (text in cmd or text in env) and not zombie:
            found.append(f"{pid}: {cmd[:200]}")
    return found


def test_the_sweeps_ray_ends_with_the_process(swept):
    """`sweeps run` exits as soon as the sweep is recorded, without Ray's teardown: the local
    cluster it started must still end with it, not linger: its DashboardAgent and
    RuntimeEnvAgent stayed ~100 s, reparented to PID 1 (issue 29 #28)."""
    *_, ray_tmp = swept
    assert os.listdir(ray_tmp), "the sweep's Ray used this temp dir"
    deadline = time.monotonic() + 10
    while (left := _processes_naming(ray_tmp)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, left


def test_the_terminal_shows_the_sweep_not_our_dependencies(swept):
    """Item 19: no Ray/MLflow/Optuna warnings, no download bars; the last line says the state."""
    _, _, first, _ = swept
    both = first.stdout + first.stderr
    for noise in ("WARNING", "There are no complete trials", "pickle", "Downloading", "INFO"):
        assert noise not in both, (noise, both[-3000:])
    last = first.stdout.strip().splitlines()
    tail = "\n".join(last[-6:])
    assert f"{NAME}: finished" in tail, tail
    assert "finishing running trials" not in tail and not tail.rstrip().endswith(";")


def test_logs_hold_every_ranks_lines_once_prefixed_without_ray_internals(swept):
    """Items 6 and 7: each rank's output, once, with its rank; none of Ray's own lines."""
    home, *_ = swept
    r = _cli(home, "logs", NAME, "--trial", "0", timeout=120)
    assert r.returncode == 0, r.stderr
    for rank in (0, 1):
        for e in range(EPOCHS):
            line = f"[rank {rank}] epoch {e} on rank {rank}:"
            assert r.stdout.count(line) == 1, (line, r.stdout)
    # Ray Train logs from threads of its own while a trial runs (issue 29 #15); the user's
    # own records stay.
    assert r.stdout.count("chatty's own warning on rank 0") == 1, r.stdout
    for internal in ("RayTrainWorker", "pid=", "Downloading", "ray.train", "TrainingReport"):
        assert internal not in r.stdout, (internal, r.stdout)
    assert "Downloading" not in r.stderr


def test_ls_and_show_agree_on_the_state_and_give_wall_and_trial_time(swept):
    """Items 2 and 4: one state everywhere; wall (command start to end) and the trials' time."""
    home, *_ = swept
    ls = json.loads(_cli(home, "ls", "--json", timeout=120).stdout)
    show = json.loads(_cli(home, "show", NAME, "--json", timeout=120).stdout)
    (row,) = [r for r in ls if r["name"] == NAME]
    assert row["state"] == show["state"] == "finished"
    assert show["trial_s"] > 0
    assert row["wall_s"] == show["wall_s"] > show["trial_s"], "set-up counts in the wall time"


def test_stop_on_a_finished_sweep_says_it_already_finished(swept):
    """Item 5."""
    home, *_ = swept
    r = _cli(home, "stop", NAME, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "already finished" in r.stdout and "stop requested" not in r.stdout
    study = optuna.load_study(study_name=NAME, storage=f"sqlite:///{home}/optuna.db")
    assert "sweeps.stop_requested" not in study.user_attrs


def test_the_experiment_opens_in_mlflow_model_training_mode(swept):
    """Item 19: MLflow 3's UI shows a sweep's experiment as model training, not GenAI."""
    home, *_ = swept
    exp = MlflowClient(f"sqlite:///{home}/mlflow.db").search_experiments()
    kinds = {e.name: e.tags.get("mlflow.experimentKind") for e in exp}
    assert "custom_model_development" in kinds.values(), kinds


def test_running_a_finished_sweep_again_says_plainly_that_nothing_would_run(swept):
    """Issue 29 #7 (before: the old totals, printed as if this run had made them): the study's
    own totals, in one line, exit 2, before anything starts; and how to run more."""
    home, spec, *_ = swept
    r = _cli(home, "run", str(spec))
    assert r.returncode == 2, r.stderr[-3000:]
    assert f"sweep '{NAME}' exists (finished, 2 trials), and a budget of 2 trials runs none" in (
        r.stderr
    )
    assert "raise --trials above 2" in r.stderr and len(r.stderr.splitlines()) == 1
    study = optuna.load_study(study_name=NAME, storage=f"sqlite:///{home}/optuna.db")
    assert len(study.trials) == 2, "nothing new was run"


def test_logs_follow_waits_for_the_first_trial(tmp_path):
    """Item 6: `logs -f` started before the first trial waits instead of failing."""
    home = tmp_path / "home"
    home.mkdir()
    optuna.create_study(study_name="early", storage=f"sqlite:///{home}/optuna.db")
    env = {**os.environ, "SWEEPS_HOME": str(home)}
    p = subprocess.Popen(
        [sys.executable, "-m", "sweeps.cli", "logs", "early", "-f"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(8)
        assert p.poll() is None, p.communicate()
    finally:
        p.kill()
        p.wait()
    # without -f the same question is a one-line answer
    r = subprocess.run(
        [sys.executable, "-m", "sweeps.cli", "logs", "early"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode != 0 and "no trials yet" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_progress_starts_from_the_studys_totals():
    """Item 3, the unit: a bar over a study with 3 finished trials starts at 3."""
    from rich.console import Console

    from sweeps.cli.progress import RichProgress
    from sweeps.contracts.records import SweepContext
    from sweeps.spec import spec_from_dict

    spec = spec_from_dict(
        {
            "name": "p",
            "search_space": {"x": {"type": "float", "low": 0, "high": 1}},
            "budget": {"trials": 5},
        }
    )
    study = optuna.create_study(direction="maximize")
    for v in (0.1, 0.7, 0.4):
        study.add_trial(
            optuna.trial.create_trial(
                params={"x": v},
                distributions={"x": optuna.distributions.FloatDistribution(0, 1)},
                value=v,
            )
        )
    bar = RichProgress(spec, Console(file=io.StringIO()))
    try:
        ctx = SweepContext(spec=spec, study_name="p", storage_url="", started_at=0.0, study=study)
        bar.on_sweep_start(ctx)
        task = bar.progress.tasks[0]
        assert (task.completed, task.total) == (3, 5)
        assert bar.best == 0.7
    finally:
        bar.close(discard=True)


def test_quiet_by_default_and_verbose_with_v(monkeypatch):
    """Item 19, the unit: dependencies' loggers are raised to ERROR unless -v."""
    from sweeps.cli._app import quiet

    for var in (
        "SWEEPS_VERBOSE",
        "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR",
        "MLFLOW_LOGGING_LEVEL",
        "OPTUNA_VERBOSITY",
        "PYTHONWARNINGS",
    ):
        monkeypatch.setenv(var, "x")  # recorded, so the test leaves the process as it found it
        monkeypatch.delenv(var)
    names = ("ray", "mlflow", "optuna", "alembic", "sweeps")
    saved = {n: logging.getLogger(n).level for n in names}
    try:
        with warnings.catch_warnings():
            quiet(False)
            assert logging.getLogger("mlflow").getEffectiveLevel() >= logging.ERROR
            assert logging.getLogger("ray").getEffectiveLevel() >= logging.ERROR
            assert os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] == "false"
            assert os.environ["PYTHONWARNINGS"] == "ignore"  # the processes we start, too
            monkeypatch.delenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR")
            quiet(True)
            assert logging.getLogger("mlflow").getEffectiveLevel() <= logging.INFO
            assert os.environ["SWEEPS_VERBOSE"] == "1"
            assert os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] == "true"
    finally:
        for n, lvl in saved.items():
            logging.getLogger(n).setLevel(lvl)
