"""Training code as it is, through real sweeps: a script with flags whose metrics are read from
its output (2 workers per trial, pruned by its own curve), a seed-004-style job whose files and
metrics.json land in MLflow, a W&B sweep config run unchanged, a notebook's function, and the
richer logging calls. The scripts import nothing from sweeps."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import optuna
import pytest
from conftest import ROOT, make_spec
from mlflow.tracking import MlflowClient

from sweeps import api
from sweeps.common import names

SWEEPS = [sys.executable, "-m", "sweeps.cli"]


def _cli(home, *args, timeout=600):
    env = {**os.environ, "SWEEPS_HOME": str(home)}
    return subprocess.run(
        [*SWEEPS, *args], env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.usefixtures("ray_cluster")
def test_a_script_with_flags_on_two_workers_is_measured_from_its_output_and_pruned(home):
    r = _cli(
        home,
        "run",
        str(ROOT / "examples/any_script/spec.yaml"),
        "--json",
        "--trials",
        "4",
        "--set",
        "sampler.seed=3",
        "--enqueue",
        str(
            _enqueue(
                home,
                [{"lr": 0.1, "hidden": 64}, {"lr": 0.1, "hidden": 96}, {"lr": 0.001, "hidden": 16}],
            )
        ),
    )
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    states = [t["state"] for t in doc["trials"]]
    assert "PRUNED" in states and "COMPLETE" in states, states
    client = MlflowClient(f"sqlite:///{home}/mlflow.db")
    best = client.get_run(doc["best"]["mlflow_run_id"])
    hist = client.get_metric_history(best.info.run_id, "val_accuracy")
    assert [m.step for m in hist] == list(range(1, 7)), "one value per epoch, at its epoch"
    assert best.data.params["resources.workers"] == "2"
    study = optuna.load_study(study_name="any-script", storage=f"sqlite:///{home}/optuna.db")
    pruned = [t for t in study.trials if t.state.name == "PRUNED"]
    assert all(len(t.intermediate_values) < 6 for t in pruned), "pruning stopped the script"
    _, log = api.logs("any-script", trial=doc["best"]["number"])
    assert "[rank 0] training on 2 process(es), threads per process: 1" in log
    assert log.count("[rank 0] epoch=6 ") == 1, "each line once"


def _enqueue(home, rows) -> str:
    path = home.parent / "enqueue.json"
    home.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rows))
    return str(path)


@pytest.mark.usefixtures("ray_cluster")
def test_a_seed004_job_writes_its_model_and_metrics_json(home):
    r = _cli(home, "run", str(ROOT / "examples/seed004/spec.yaml"), "--json", "--trials", "2")
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert all(t["state"] == "COMPLETE" for t in doc["trials"]), doc["trials"]
    client = MlflowClient(f"sqlite:///{home}/mlflow.db")
    run_id = doc["best"]["mlflow_run_id"]
    outputs = {a.path for a in client.list_artifacts(run_id, "outputs")}
    assert "outputs/model.pth" in outputs and "outputs/metrics.json" in outputs, outputs
    assert client.get_run(run_id).data.metrics["final_accuracy"] == pytest.approx(
        doc["best"]["value"]
    )
    # Promote registers the trial's files; predict says plainly they are not a loadable model.
    p = api.promote("seed004", "seed004-model")
    assert p["version"] == "1"
    from sweeps.common.errors import NotFoundError

    npy = home / "x.npy"
    import numpy as np

    np.save(npy, np.zeros((2, 64), dtype=np.float32))
    with pytest.raises(NotFoundError, match="nothing loadable"):
        api.predict("seed004-model/1", str(npy))


@pytest.mark.usefixtures("ray_cluster")
def test_a_wandb_sweep_config_runs_unchanged_and_round_trips(home, tmp_path):
    cfg = ROOT / "examples/any_script/wandb-sweep.yaml"
    spec = tmp_path / "from-wandb.yaml"
    code = str(ROOT / "examples/any_script")
    r = _cli(home, "import-wandb", str(cfg), "--code-dir", code, "--out", str(spec))
    assert r.returncode == 0, r.stderr
    v = _cli(home, "validate", str(spec))
    assert v.returncode == 0, v.stderr
    r = _cli(
        home,
        "run",
        "--wandb",
        str(cfg),
        "--name",
        "wb",
        "--set",
        "budget.trials=2",
        "--set",
        "resources.workers=1",
        "--json",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert len(doc["trials"]) == 2 and doc["best"]["value"] > 0.5
    assert set(doc["best"]["params"]) == {"lr", "hidden"}


def test_bad_program_input_is_one_line_and_exit_2(home, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('val_accuracy=1')\n")
    for command, needle in (
        ('["${interpreter}", "train.py", "${argz}"]', "unknown macro ${argz}"),
        ('["${interpreter}", "nope.py", "${args}"]', "nope.py"),
    ):
        spec = tmp_path / "bad.yaml"
        spec.write_text(
            "name: bad\nsearch_space: {lr: {type: float, low: 0.01, high: 0.1}}\n"
            f"trainer: {{code_dir: '{tmp_path}', command: {command}}}\n"
        )
        r = _cli(home, "validate", str(spec))
        assert r.returncode == 2, r.stderr
        assert needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (home / "optuna.db").exists(), "nothing written"


@pytest.mark.usefixtures("ray_cluster")
def test_a_metric_that_never_appears_fails_the_trial_saying_which(home, tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import sys\nprint('loss=0.5', flush=True)\n")
    spec = make_spec(
        name="nometric",
        budget={"trials": 1},
        trainer={"code_dir": str(tmp_path), "command": ["${interpreter}", "train.py", "${args}"]},
    )
    out = api.run(spec, install_signals=False)
    (t,) = api.show("nometric")["trials"]
    assert t["state"] == "FAIL" and "val_accuracy" in t["error"], t
    assert out.state == "failed", "every trial failed"


DEEP_FAILURE = """
import argparse
import sys


def block(depth, width):
    if depth == 0:
        raise ValueError(f"mat1 and mat2 shapes cannot be multiplied (64x{width} and 12x10)")
    return block(depth - 1, width)


parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float)
args = parser.parse_args()
print("val_accuracy=0.5", flush=True)
for step in range(60):  # warnings before the failure, as a training loop prints them
    print(f"UserWarning: step {step}: the learning rate is above the stable range", file=sys.stderr)
block(60, 81)
"""


@pytest.mark.usefixtures("ray_cluster")
def test_a_failed_trial_keeps_the_end_of_its_error_everywhere(home, tmp_path):
    (tmp_path / "train.py").write_text(DEEP_FAILURE)
    spec = make_spec(
        name="deepfail",
        budget={"trials": 1},
        trainer={"code_dir": str(tmp_path), "command": ["${interpreter}", "train.py", "${args}"]},
    )
    out = api.run(spec, install_signals=False)
    exception = "ValueError: mat1 and mat2 shapes cannot be multiplied (64x81 and 12x10)"
    (t,) = api.show("deepfail")["trials"]
    assert len(t["error"]) > 1000 and t["error"].rstrip().endswith(exception), t["error"][-300:]
    assert t["error"].startswith("ProgramError: train.py exited with code 1"), t["error"][:200]
    assert out.state == "failed" and exception in out.reason, out.reason
    shown = _cli(home, "show", "deepfail")
    assert exception in shown.stdout, shown.stdout
    logs = _cli(home, "logs", "deepfail")
    assert logs.stderr.startswith("deepfail trial #0 (FAIL)\n"), logs.stderr
    assert exception in logs.stderr.splitlines()[-1] and ", in block" in logs.stdout
    run = MlflowClient(f"sqlite:///{home}/mlflow.db").get_run(t["mlflow_run_id"])
    assert run.data.tags[names.ERROR].rstrip().endswith(exception)


def _notebook_train(config):
    import sweeps

    for epoch in range(1, 4):
        sweeps.report({"val_accuracy": config["lr"] * epoch, "epoch": epoch})
    sweeps.log({"batch_loss": 0.5}, step=7)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([1, 2, 3])
    sweeps.log_figure(fig, "curve")
    return {"val_accuracy": config["lr"] * 3}


@pytest.mark.usefixtures("ray_cluster")
def test_a_function_from_a_notebook_is_swept_and_comes_back_as_a_dataframe(home):
    import sweeps

    spec = {
        "name": "nb",
        "search_space": {"lr": {"type": "float", "low": 0.01, "high": 0.1}},
        "sampler": {"name": "random", "seed": 1},
        "pruner": {"name": "none"},
        "budget": {"trials": 3},
    }
    result = sweeps.run(spec, train=_notebook_train)
    assert result.state == "finished"
    df = result.trials_dataframe()
    assert list(df["number"]) == [0, 1, 2] and set(df["state"]) == {"COMPLETE"}
    assert {"value", "params_lr", "duration_s", "cost_usd", "mlflow_run_id"} <= set(df.columns)
    assert result.best["value"] == pytest.approx(df["value"].max())
    client = MlflowClient(f"sqlite:///{home}/mlflow.db")
    run_id = result.best["mlflow_run_id"]
    (m,) = client.get_metric_history(run_id, "batch_loss")
    assert (m.step, m.value) == (7, 0.5), "sweeps.log reached the trial's run"
    assert {a.path for a in client.list_artifacts(run_id, "figures")} == {"figures/curve.png"}


def test_the_example_notebook_runs_top_to_bottom(home):
    """examples/notebook/sweep_a_function.ipynb, executed by a real Jupyter kernel."""
    import nbformat
    from nbclient import NotebookClient

    path = ROOT / "examples/notebook/sweep_a_function.ipynb"
    nb = nbformat.read(path, as_version=4)
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(home.parent)}}
    ).execute()
    frame = nb.cells[3].outputs[0]["data"]["text/plain"]
    assert frame.count("COMPLETE") == 3, frame
    assert "'value':" in nb.cells[4].outputs[0]["data"]["text/plain"]
    doc = api.show("notebook")
    assert doc["state"] == "finished" and len(doc["trials"]) == 3
