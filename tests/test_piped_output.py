"""Piped output is whole: no value cut with an ellipsis and no line wrapped, even where the
terminal would be 80 columns wide (people grep logs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import optuna

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
