"""W&B programs run as `wandb agent` runs them: params in `wandb.config` (and `${args}`), and
what `wandb.log` writes streams into the sweep, with the real wandb package offline.

The programs under tests/wandb_programs are written as W&B's examples are and import nothing
from sweeps; what they built is read back from the model they saved with their run's files.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
import torch
import yaml
from conftest import ROOT

from sweeps.importers.wandb import load_config, to_spec
from sweeps.spec import spec_from_dict
from sweeps.worker import program, runtime, wandb_agent
from sweeps.worker.collectors import make
from sweeps.worker.collectors.wandb import WandbCollector
from sweeps.worker.collectors.wandb_log import FLUSH_ENV, LogReader

PROGRAMS = ROOT / "tests" / "wandb_programs"
SWEEPS = [sys.executable, "-m", "sweeps.cli"]


@pytest.fixture(autouse=True)
def _no_user_wandb(monkeypatch, tmp_path):
    """A developer's W&B settings must not leak in; nothing may reach a W&B server."""
    for var in list(os.environ):
        if var.startswith("WANDB_"):
            monkeypatch.delenv(var)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # refused at once if tried
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))


def _python(script: str, cwd: Path, env: dict[str, str], **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=cwd,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def test_the_param_file_is_wandbs_own_and_wandb_init_loads_it_offline(tmp_path):
    from wandb.sdk.lib import config_util

    params = {"lr": 0.05, "hidden": 7, "optimizer": "adam", "nesterov": True}
    env = wandb_agent.agent_env(tmp_path, params, sweep_id="sw1", run="abc12345", environ={})
    path = Path(env["WANDB_SWEEP_PARAM_PATH"])
    assert path == tmp_path / "wandb" / "sweep-sw1" / "config-abc12345.yaml"
    theirs = tmp_path / "theirs.yaml"  # what wandb's agent writes for the same run
    config_util.save_config_file_from_dict(
        str(theirs), {k: {"value": v} for k, v in params.items()}
    )
    assert path.read_text() == theirs.read_text()
    assert env["WANDB_MODE"] == "offline" and env["WANDB_DIR"] == str(tmp_path)
    assert wandb_agent.agent_env(tmp_path, {}, sweep_id="s", run="r", environ={"WANDB_MODE": "x"})[
        "WANDB_MODE"
    ] == "x"  # fmt: skip

    script = (
        "import json, wandb\n"
        "run = wandb.init(config={'lr': 1.0, 'hidden': 99, 'keep': 'mine'})\n"
        "print(json.dumps([dict(wandb.config), run.sweep_id, run.id, run.offline]))\n"
        "run.finish()\n"
    )
    started = time.monotonic()
    p = _python(script, tmp_path, env)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 0, err[-2000:]
    config, sweep_id, run_id, offline = json.loads(out.strip().splitlines()[-1])
    # The sweep's values win over the script's defaults, as under an agent; others stay.
    assert config == {**params, "keep": "mine"}
    assert (sweep_id, run_id, offline) == ("sw1", "abc12345", True)
    assert time.monotonic() - started < 60
    debug = "".join(p.read_text() for p in tmp_path.glob("wandb/offline-run-*/logs/*.log"))
    assert "127.0.0.1:9" not in debug  # no server was tried


STREAM = """
import pathlib, time, wandb
run = wandb.init()
wandb.log({"loss": 1.0, "train": {"acc": 0.25}, "note": "text"})
wandb.log({"loss": 0.5})
while not pathlib.Path("go").exists():
    time.sleep(0.1)
wandb.log({"val": 0.7}, step=5)
wandb.log({"val": 0.8}, step=6)
run.finish()
"""


def test_the_collector_streams_a_real_offline_run_while_it_runs(tmp_path):
    env = wandb_agent.agent_env(tmp_path, {"x": 1}, sweep_id="s", run="stream01", environ={})
    assert env[FLUSH_ENV] == "1.0"
    c = make({"collector": "wandb"}, objective="loss", trial_dir=str(tmp_path), hypertune_file="")
    assert isinstance(c, WandbCollector)
    p = _python(STREAM, tmp_path, env)
    try:
        got: list = []
        deadline = time.monotonic() + 90
        while len(got) < 2 and time.monotonic() < deadline and p.poll() is None:
            got += c.poll()
            time.sleep(0.2)
        # Read while the script still runs (it waits for "go"): the objective's 1st and 2nd
        # values (at W&B's implicit _step 0 and 1).
        assert p.poll() is None and got == [
            (1, {"loss": 1.0, "train.acc": 0.25}),
            (2, {"loss": 0.5}),
        ]
        (tmp_path / "go").touch()
        p.wait(timeout=90)
    finally:
        p.kill()
    assert p.returncode == 0, p.stderr.read()[-2000:]
    rest = c.finish()
    assert rest == [(None, {"val": 0.7}), (None, {"val": 0.8})]  # seen, not the objective
    assert c.poll() == [] and "W&B run" in c.describe()


def test_the_reader_waits_for_a_half_written_record_and_joins_records_across_blocks(tmp_path):
    script = (
        "import wandb\n"
        "run = wandb.init()\n"
        "for i in range(3):\n"
        "    wandb.log({**{f'm{k}': float(k + i) for k in range(2500)}, 'loss': 1.0 / (i + 1)})\n"
        "run.finish()\n"
    )
    env = wandb_agent.agent_env(tmp_path, {}, sweep_id="s", run="blocks01", environ={})
    p = _python(script, tmp_path, env)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err[-2000:]
    (real,) = tmp_path.glob("wandb/offline-run-*/run-blocks01.wandb")
    data = real.read_bytes()
    assert len(data) > 3 * 32768  # each row spans blocks: FIRST, MIDDLE and LAST chunks
    whole = WandbCollector(tmp_path, "loss").poll()
    assert [(s, m["loss"], m["m2499"]) for s, m in whole] == [
        (1, 1.0, 2499.0),
        (2, 0.5, 2500.0),
        (3, 1 / 3, 2501.0),
    ]
    # The same file as it grows, cut anywhere: nothing is lost, nothing comes twice.
    growing = tmp_path / "copy" / "wandb" / "offline-run-1" / "run-x.wandb"
    growing.parent.mkdir(parents=True)
    c = WandbCollector(tmp_path / "copy", "loss")
    seen = []
    for cut in [3, 7, 9, 5000, 32768, 32775, 40000, 70000, 100000, len(data) - 1, len(data)]:
        growing.write_bytes(data[:cut])
        seen += c.poll()
    assert seen == whole
    assert len(LogReader(real).read()) > 3


def _flags_settings() -> dict:
    raw, _ = to_spec(load_config(PROGRAMS / "sweep_flags.yaml"), code_dir=str(PROGRAMS))
    assert raw["trainer"]["metrics"] == {"collector": "wandb"}
    return program.settings(spec_from_dict(raw))


def _run_flags(monkeypatch, params, prune_at=None):
    reports: list = []
    real = runtime.report

    def report(metrics, **kw):
        real(metrics, **kw)
        reports.append((runtime.context().step, dict(metrics)))
        if runtime.context().step == prune_at:
            raise runtime.TrialPruned(f"pruned at step {prune_at}")

    monkeypatch.setattr(runtime, "report", report)
    ctx = runtime.TrialContext(
        rank=0, world_size=1, local_rank=0, device=None, data_dir=None,
        trial_number=3, seed=0, params=params, lane_id="lane", seq=1,
    )  # fmt: skip
    runtime._set_context(ctx)
    try:
        return program.run_program({**params, program.SETTINGS_KEY: _flags_settings()}), reports
    finally:
        runtime._set_context(None)


def _saved(blob: bytes) -> dict:
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r:gz") as tar:
        names = tar.getnames()
        (model,) = [n for n in names if n.endswith("/files/model.pt")]
        assert any(n.endswith(".wandb") for n in names)  # the run's W&B files are artifacts
        return torch.load(io.BytesIO(tar.extractfile(model).read()), weights_only=True)


def test_a_flags_program_gets_args_and_config_and_reports_each_logged_step(monkeypatch):
    params = {"lr": 0.3, "hidden": 5, "epochs": 3}
    out, reports = _run_flags(monkeypatch, params)
    saved = _saved(out["artifacts"])
    assert saved["model"]["0.weight"].shape == (5, 16)  # the hidden size it built
    assert saved["optimizer"]["param_groups"][0]["lr"] == pytest.approx(0.3)
    assert [s for s, _ in reports] == [1, 2, 3]  # wandb.log(..., step=epoch)
    assert set(reports[0][1]) == {"train_loss", "val_accuracy"}
    assert out["val_accuracy"] == reports[-1][1]["val_accuracy"]


def test_pruning_acts_on_wandb_log_steps_and_stops_the_script(monkeypatch):
    started = time.monotonic()
    with pytest.raises(runtime.TrialPruned, match="step 2"):
        _run_flags(monkeypatch, {"lr": 0.1, "hidden": 7, "epochs": 100000}, prune_at=2)
    assert time.monotonic() - started < 120  # 100000 epochs would take far longer


def test_a_script_importing_wandb_where_it_is_missing_fails_in_one_line(tmp_path):
    (tmp_path / "train.py").write_text("import wandb\nwandb.init()\n")
    settings = {
        "command": ["${interpreter}", "-S", "${program}", "${args}"],  # -S: no site-packages
        "program": "train.py",
        "code_dir": str(tmp_path),
        "metrics": {"collector": "wandb"},
        "objectives": ["loss"],
        "param_names": ["lr"],
    }
    runtime._set_context(
        runtime.TrialContext(
            rank=0, world_size=1, local_rank=0, device=None, data_dir=None,
            trial_number=0, seed=0, params={"lr": 0.1},
        )
    )  # fmt: skip
    try:
        with pytest.raises(program.ProgramError) as e:
            program.run_script(settings, {"lr": 0.1})
    finally:
        runtime._set_context(None)
    first = str(e.value).splitlines()[0]
    assert first.startswith("train.py exited with code 1 (wandb is not installed")


def _artifact(client, run_id: str, suffix: str, path: str = "") -> str:
    for f in client.list_artifacts(run_id, path):
        if f.is_dir:
            found = _artifact(client, run_id, suffix, f.path)
            if found:
                return found
        elif f.path.endswith(suffix):
            return f.path
    return ""


@pytest.mark.usefixtures("ray_cluster")
def test_a_wandb_sweep_runs_as_the_agent_runs_it(home, tmp_path):
    """W&B's example style (wandb.init(), wandb.config, wandb.log) through `run --wandb`."""
    r = subprocess.run(
        [*SWEEPS, "run", "--wandb", str(PROGRAMS / "sweep.yaml"), "--name", "wb", "--json"],
        env={**os.environ, "SWEEPS_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert [t["state"] for t in doc["trials"]] == ["COMPLETE", "COMPLETE"], doc["trials"]
    import optuna
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{home}/mlflow.db")
    study = optuna.load_study(study_name="wb", storage=f"sqlite:///{home}/optuna.db")
    for t in doc["trials"]:
        p = t["params"]
        run_id = t["mlflow_run_id"]
        local = client.download_artifacts(
            run_id, _artifact(client, run_id, "model.pt"), str(tmp_path)
        )
        saved = torch.load(local, weights_only=True)
        # What the script built is what was sampled: it read them from wandb.config.
        assert saved["model"]["0.weight"].shape == (p["fc_layer_size"], 32)
        group = saved["optimizer"]["param_groups"][0]
        assert group["lr"] == pytest.approx(p["learning_rate"])
        assert ("betas" in group) == (p["optimizer"] == "adam")
        # Each epoch's loss at its iteration, as W&B's hyperband counts them, though a batch
        # loss is logged at every _step between them.
        steps = [1, 2]
        # MLflow returns a history in no set order: by step here.
        hist = sorted(client.get_metric_history(t["mlflow_run_id"], "loss"), key=lambda m: m.step)
        assert [m.step for m in hist] == steps
        trial = study.trials[t["number"]]
        assert sorted(trial.intermediate_values) == steps
        assert t["value"] == pytest.approx(hist[-1].value)
    config = yaml.safe_load((PROGRAMS / "sweep.yaml").read_text())
    assert set(doc["best"]["params"]) == set(config["parameters"]) - {"epochs"}
