"""Piped output is whole: no value cut with an ellipsis and no line wrapped, even where the
terminal would be 80 columns wide (people grep logs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import optuna

from sweeps.common import names

NAME = "a-sweep-with-a-long-name-that-does-not-fit"


def _sweeps(home, *args):
    env = {**os.environ, "SWEEPS_HOME": str(home), "COLUMNS": "80"}
    r = subprocess.run(
        [sys.executable, "-m", "sweeps.cli", *args], env=env, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_show_and_ls_piped_at_80_columns_cut_and_wrap_nothing(tmp_path):
    storage = f"sqlite:///{tmp_path}/optuna.db"
    study = optuna.create_study(study_name=NAME, storage=storage, direction="maximize")
    space = {
        "learning_rate": optuna.distributions.FloatDistribution(1e-5, 1, log=True),
        "dropout": optuna.distributions.FloatDistribution(0, 0.5),
        "batch_size": optuna.distributions.IntDistribution(16, 256),
    }
    params = []
    for value in (0.987654321, 0.5):
        trial = study.ask(space)
        study.tell(trial, value)
        params.append(json.dumps(trial.params))
    study.tell(study.ask(space), state=optuna.trial.TrialState.FAIL)
    shown = _sweeps(tmp_path, "show", NAME)
    listed = _sweeps(tmp_path, "ls")
    for text in (shown, listed):
        assert "…" not in text, text
    rows = [line for line in shown.splitlines() if "COMPLETE" in line]
    assert len(rows) == 2 and all(p in "\n".join(rows) for p in params), shown
    assert NAME in listed and "finished" in listed and "complete" in listed, listed
    compared = _sweeps(tmp_path, "compare", NAME, NAME)
    assert "│ failed " in compared and "│ fail " not in compared, compared  # as ls says it


def test_numbers_read_alike_and_the_version_is_one_line(tmp_path):
    from sweeps.cli._app import fmt

    assert [fmt(v) for v in (8e-06, 0.000249, 0.5, 12345.678)] == [
        "0.000008",
        "0.000249",
        "0.5",
        "12346",
    ]
    (line,) = _sweeps(tmp_path, "--version").splitlines()
    assert line.startswith("sweeps ") and "optuna 5." in line and "ray 2." in line, line


def _env(home) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SWEEPS_", "RAY_ADDRESS"))}
    env.pop("MLFLOW_TRACKING_URI", None)
    return {**env, "SWEEPS_HOME": str(home), "COLUMNS": "80"}


def _whole_lines(text: str, *wanted: str) -> None:
    """Nothing cut with an ellipsis, and each wanted text whole on one line."""
    assert "…" not in text, text
    for w in wanted:
        assert any(w in line for line in text.splitlines()), (w, text)


def test_models_and_doctor_piped_at_80_columns_cut_and_wrap_nothing(tmp_path):
    from mlflow.tracking import MlflowClient

    home = tmp_path / ("a-sweeps-home-folder-with-a-long-name-" * 2)
    home.mkdir()
    model = "digits-mlp-registered-under-a-long-name"
    client = MlflowClient(f"sqlite:///{home}/mlflow.db")
    client.create_registered_model(model)
    decisions = []
    for v in ("1", "2"):
        client.create_model_version(model, source=str(tmp_path), run_id=None)
        decisions.append(f"2026-12-07 01:02:0{v} champion: challenger 0.98765{v} beats holder 0.9")
        tags = {names.SWEEP: NAME, names.METRIC: "val_accuracy", names.TRIAL: v}
        tags |= {names.METRIC_VALUE: f"0.98765432{v}", names.DECISION: decisions[-1]}
        for k, value in tags.items():
            client.set_model_version_tag(model, v, k, value)
    client.set_registered_model_alias(model, "champion", "2")
    r = subprocess.run(
        [sys.executable, "-m", "sweeps.cli", "models", model],
        env=_env(home),
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    _whole_lines(r.stdout, *decisions, NAME, "0.987654322")
    doctor = [sys.executable, "-m", "sweeps.cli", "doctor"]
    r = subprocess.run(doctor, env=_env(home), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    _whole_lines(r.stdout, f"sqlite:///{home}/optuna.db", f"sqlite:///{home}/mlflow.db")


def test_run_piped_at_80_columns_cuts_and_wraps_nothing(tmp_path):
    """`sweeps run` as a user pipes it (`| tee run.log`): one small trial, its own Ray."""
    name = "a-run-with-a-name-long-enough-to-fill-most-of-an-80-column-terminal-line"
    spec = tmp_path / "run.yaml"
    spec.write_text(
        f"name: {name}\n"
        "objective: {metric: val_accuracy, direction: maximize}\n"
        "search_space:\n"
        "  learning_rate_with_a_long_name: {type: float, low: 0.001, high: 0.002, log: true}\n"
        "  dropout_probability_of_hidden_layers: {type: float, low: 0.1, high: 0.2}\n"
        "budget: {trials: 1, parallel: 1}\n"
        "trainer: {model: mlp, dataset: digits, epochs: 1}\n"
    )
    ray_tmp = tempfile.mkdtemp(prefix="ray-piped-", dir="/tmp")  # short: socket path limits
    r = subprocess.run(
        [sys.executable, "-m", "sweeps.cli", "run", str(spec)],
        env={**_env(tmp_path), "RAY_TMPDIR": ray_tmp},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{tmp_path}/optuna.db")
    best = study.best_trial
    _whole_lines(
        r.stdout + r.stderr,
        f"{name}: finished (budget reached: 1/1 trials); complete 1",
        f"params {json.dumps(best.params)}",
        f"parent run {study.user_attrs[names.MLFLOW_PARENT_RUN_ID]}",
    )
