"""Issue 29 items 21 and 24: what `report` and `predict` print, run as a user runs them.

No Optuna warning lines ("[W ...] There are no complete trials.") and no MLflow UserWarning
with raw colour codes unless `-v`; a wrongly shaped input names the shape the model expects,
and never dumps the array. Real Optuna, MLflow registry (SQLite) and a built-in model; no Ray.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import numpy as np
import optuna
import pytest
from conftest import ROOT

# The built-in model as a trial packages it (trainer.packaging), registered as digits@champion.
MAKE_MODEL = r"""
import io, sys, tarfile
import numpy as np, torch
from mlflow.tracking import MlflowClient
from trainer import packaging as pk
from trainer.models import build_model

home = sys.argv[1]
example = np.zeros((2, 1, 8, 8), dtype=np.float32)
model = build_model("mlp", (1, 8, 8), 10, hidden=16, layers=1)
info = {"model": "mlp", "arch": {"hidden": 16, "layers": 1}, "input_shape": [1, 8, 8],
        "num_classes": 10}
blob = pk.package_builtin(model, info, example, {})
tarfile.open(fileobj=io.BytesIO(blob)).extractall(home)
client = MlflowClient(f"sqlite:///{home}/mlflow.db")
client.create_registered_model("digits")
client.create_model_version("digits", source=f"{home}/model", run_id=None)
client.set_registered_model_alias("digits", "champion", "1")
"""


def _sweeps(home, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SWEEPS_HOME": str(home), "COLUMNS": "80"}
    env.pop("SWEEPS_VERBOSE", None)
    env.pop("MLFLOW_TRACKING_URI", None)
    cmd = [sys.executable, "-m", "sweeps.cli", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, cwd=ROOT)


@pytest.fixture(scope="module")
def registered(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    r = subprocess.run(
        [sys.executable, "-c", MAKE_MODEL, str(home)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    rng = np.random.default_rng(0)
    np.save(home / "images.npy", rng.random((5, 1, 8, 8), dtype=np.float32))
    np.save(home / "rows.npy", rng.random((5, 64), dtype=np.float32))
    np.save(home / "squares.npy", rng.random((5, 8, 8), dtype=np.float32) + 123)
    np.save(home / "short.npy", rng.random((5, 63), dtype=np.float32) + 123)
    return home


def test_predict_prints_no_mlflow_warning_and_v_shows_it_without_colour_codes(registered):
    quiet = _sweeps(registered, "predict", "digits@champion", str(registered / "images.npy"))
    assert quiet.returncode == 0, quiet.stderr
    assert "5 predictions" in quiet.stdout
    assert "Warning" not in quiet.stderr and "\x1b[" not in quiet.stderr, quiet.stderr
    loud = _sweeps(registered, "-v", "predict", "digits@champion", str(registered / "rows.npy"))
    assert loud.returncode == 0 and "5 predictions" in loud.stdout, loud.stderr
    assert "UserWarning" in loud.stderr and "\x1b[" not in loud.stderr, loud.stderr


@pytest.mark.parametrize("array", ["squares", "short"])
def test_a_wrongly_shaped_input_names_the_expected_shape_and_never_dumps_it(registered, array):
    r = _sweeps(registered, "predict", "digits@champion", str(registered / f"{array}.npy"))
    assert r.returncode == 2, (r.returncode, r.stderr)
    (line,) = r.stderr.strip().splitlines()
    assert "(N, 1, 8, 8)" in line and "123." not in line, line
    shape = "(5, 8, 8)" if array == "squares" else "(5, 63)"
    assert f"shape {shape}" in line, line


def test_fit_shape_is_pure():
    from tracking.predict import fit_shape

    assert fit_shape((5, 64), (-1, 1, 8, 8)) == (5, 1, 8, 8)  # a CSV row per image
    assert fit_shape((5, 1, 8, 8), (-1, 1, 8, 8)) == (5, 1, 8, 8)
    assert fit_shape((5, 4), (-1, 4)) == (5, 4)
    assert "(N, 4)" in fit_shape((5, 3), (-1, 4))


def test_report_prints_no_optuna_warnings_unless_v(tmp_path):
    storage = f"sqlite:///{tmp_path}/optuna.db"
    study = optuna.create_study(study_name="none-complete", storage=storage)
    space = {"x": optuna.distributions.FloatDistribution(0, 1)}
    for _ in range(2):
        study.tell(study.ask(space), state=optuna.trial.TrialState.FAIL)
    quiet = _sweeps(tmp_path, "report", "none-complete")
    assert quiet.returncode == 0, quiet.stderr
    assert "[W " not in quiet.stderr and "no complete trials" not in quiet.stderr, quiet.stderr
    loud = _sweeps(tmp_path, "-v", "report", "none-complete")
    assert "There are no complete trials." in loud.stderr, loud.stderr


def test_only_quietlogs_sets_optunas_verbosity():
    """`run`, a submitted job's driver and the notebook API all go through `run_sweep`; none of
    them may turn Optuna's warnings back on after `quiet`."""
    callers = []
    for pkg in ("sweeps", "tracking"):
        for path in (ROOT / pkg).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Attribute) and node.attr == "set_verbosity":
                    callers.append(str(path.relative_to(ROOT)))
    assert callers == ["sweeps/common/quietlogs.py"], callers
