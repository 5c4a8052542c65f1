"""The learning log: report, notes, logs, stop, compare, plots on the parent run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import BYO, byo
from mlflow.tracking import MlflowClient

from sweeps import api


@pytest.fixture(scope="module")
def logged_sweep(ray_cluster, tmp_path_factory):
    home = tmp_path_factory.mktemp("loghome")
    old = os.environ.get("SWEEPS_HOME")
    os.environ["SWEEPS_HOME"] = str(home)
    try:
        spec = byo(
            "curve",
            name="logged",
            budget={"trials": 4, "parallel": 2},
            sampler={"name": "random", "seed": 3},
        )
        out = api.run(spec, install_signals=False)
        yield home, out
    finally:
        if old is None:
            os.environ.pop("SWEEPS_HOME", None)
        else:
            os.environ["SWEEPS_HOME"] = old


def test_report_says_which_prices_were_used():
    from tracking.report import price_basis

    assert price_basis("name: x\nresources: {preemptible: true}\n").startswith("spot")
    assert price_basis("name: x\nresources: {preemptible: false}\n").startswith("on-demand")
    assert price_basis("").startswith("on-demand")


def test_plots_on_the_parent_run(logged_sweep):
    home, out = logged_sweep
    client = MlflowClient(f"sqlite:///{home}/mlflow.db")
    arts = {a.path for a in client.list_artifacts(out.parent_run_id, "plots")}
    for name in ("optimization_history", "parallel_coordinate", "intermediate_values"):
        # PNGs: the MLflow UI's frame resolves no path to a shared plotly.js (issue 29 item 22)
        assert f"plots/{name}.png" in arts and f"plots/{name}.html" not in arts, arts


def test_plots_of_many_trials_stay_a_readable_size(tmp_path):
    """Optuna's matplotlib plots give every trial a legend entry: at 1,000 trials the
    intermediate-values PNG was 756x20296 px. Past 20 entries the legend goes (the HTML
    plot names each trial on hover), and the image keeps the size of a plot."""
    import matplotlib.image
    import optuna

    from tracking.plots import make_plots

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    dist = {"x": optuna.distributions.FloatDistribution(0, 1)}
    for i in range(60):
        x = i / 60
        study.add_trial(
            optuna.trial.create_trial(
                params={"x": x}, distributions=dist, value=x, intermediate_values={1: x}
            )
        )
    files, _ = make_plots(study, str(tmp_path))
    height, width = matplotlib.image.imread(files["intermediate_values"]["png"]).shape[:2]
    assert height < 1000 and width < 1500, (height, width)


def test_note_and_report_have_every_section(logged_sweep, tmp_path):
    home, out = logged_sweep
    api.note("logged", "loss diverged at lr>0.3; capped lr high at 0.2")
    api.note("logged", "trial 1 was slow: shared CPU with the other lane", trial=1)
    client = MlflowClient(f"sqlite:///{home}/mlflow.db")
    assert "capped lr" in client.get_run(out.parent_run_id).data.tags["mlflow.note.content"]
    files = api.report("logged", str(tmp_path / "rep"))
    md = Path(files["markdown"]).read_text()
    for section in (
        "## What was trained",
        "## Resources and cost",
        "## Durations",
        "## Top trials",
        "## Best params",
        "## Notes: problems and solutions",
        "## Plots",
    ):
        assert section in md, section
    assert "capped lr" in md and "trial 1" in md
    assert "- Prices: on-demand list prices" in md
    assert "byo_tasks:curve" in md
    html = Path(files["html"]).read_text()
    assert "data:image/png;base64," in html


def test_logs_show_what_a_worker_printed(logged_sweep):
    number, text = api.logs("logged", trial=2)
    assert number == 2
    assert "trial 2 done on rank 0" in text


def test_compare_two_sweeps(logged_sweep, ray_cluster):
    spec = byo(
        "curve", name="logged-b", budget={"trials": 2}, sampler={"name": "random", "seed": 4}
    )
    api.run(spec, install_signals=False)
    doc = api.compare("logged", "logged-b")
    assert set(doc) == {"logged", "logged-b"}
    assert doc["logged"]["trials"]["COMPLETE"] == 4 and doc["logged-b"]["trials"]["COMPLETE"] == 2
    assert doc["logged"]["best"] is not None


def _spec_file(tmp_path: Path, name: str, trials: int, epochs: int, sleep: float) -> Path:
    p = tmp_path / f"{name}.yaml"
    p.write_text(
        f"name: {name}\n"
        "search_space: {lr: {type: float, low: 0.001, high: 0.02}}\n"
        "pruner: {name: none}\n"
        f"budget: {{trials: {trials}, parallel: 1}}\n"
        f"trainer: {{entrypoint: 'byo_tasks:slow', code_dir: '{BYO}', epochs: {epochs}, "
        f"params: {{sleep: {sleep}}}}}\n"
    )
    return p


def _wait_for(pred, timeout: float = 120.0) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return
        time.sleep(0.5)
    raise AssertionError("condition not reached")


def _started(home: Path, name: str) -> bool:
    try:
        return any(t["state"] == "COMPLETE" for t in api.show(name)["trials"])
    except Exception:
        return False


def test_stop_from_a_second_process_ends_the_sweep_gracefully(home, tmp_path):
    spec = _spec_file(tmp_path, "stoppable", trials=50, epochs=3, sleep=0.3)
    env = {**os.environ, "SWEEPS_HOME": str(home)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sweeps.cli", "run", str(spec), "--profile"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(lambda: _started(home, "stoppable"), 180)
        r = subprocess.run(
            [sys.executable, "-m", "sweeps.cli", "stop", "stoppable"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 0, r.stderr
        stdout, stderr = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr
    assert "stop requested" in stdout
    doc = api.show("stoppable")
    assert len(doc["trials"]) < 50
    assert all(t["state"] == "COMPLETE" for t in doc["trials"]), "nothing left RUNNING"
    # --profile: where the time went, and the same timeline kept on the parent run
    assert "where the time went" in stderr and "until first trial assigned" in stderr, stderr
    client = MlflowClient(f"sqlite:///{home}/mlflow.db")
    path = client.download_artifacts(doc["parent_run_id"], "timeline.json", str(tmp_path))
    events = json.loads(Path(path).read_text())
    names = [e["event"] for e in events]
    for phase in ("imports.done", "stores.ready", "ray.ready", "lane.launch", "trial.assigned"):
        assert phase in names, names
    assert names.count("trial.ended") == len(doc["trials"])
    assert all(a["t"] <= b["t"] for a, b in zip(events, events[1:], strict=False))


def test_ctrl_c_finishes_running_trials_and_exits_130(home, tmp_path):
    spec = _spec_file(tmp_path, "interrupted", trials=50, epochs=4, sleep=0.3)
    env = {**os.environ, "SWEEPS_HOME": str(home)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sweeps.cli", "run", str(spec)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(lambda: _started(home, "interrupted"), 180)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert proc.returncode == 130, stderr
    doc = api.show("interrupted")
    states = {t["state"] for t in doc["trials"]}
    assert states == {"COMPLETE"}, "the running trial finished; nothing left RUNNING"
    client = MlflowClient(f"sqlite:///{home}/mlflow.db")
    assert all(client.get_run(t["mlflow_run_id"]).info.status == "FINISHED" for t in doc["trials"])


@pytest.mark.usefixtures("ray_cluster")
def test_system_metrics_on_the_sweep_run(home, monkeypatch):
    monkeypatch.setenv("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "1")
    spec = byo(
        "slow",
        name="sysm",
        budget={"trials": 2},
        tracking={"system_metrics": True},
        trainer={"epochs": 3, "params": {"sleep": 0.5}},
    )
    out = api.run(spec, install_signals=False)
    metrics = MlflowClient(f"sqlite:///{home}/mlflow.db").get_run(out.parent_run_id).data.metrics
    assert any(k.startswith("system/") and "cpu_utilization_percentage" in k for k in metrics), (
        sorted(metrics)
    )
