"""Legacy AI Platform jobs run unchanged: config mapping (pure) and a real 2-worker run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from conftest import ROOT

from sweeps.common.errors import SpecError
from sweeps.common.extras import install_hint
from sweeps.importers.aiplatform import (
    apply_gcloud_flags,
    load_config,
    package_root,
    sweep_name,
    to_spec,
)
from sweeps.spec import spec_from_dict

PKG = ROOT / "examples" / "aiplatform_trainer"


def test_config_maps_to_a_native_spec():
    raw, notes = to_spec(
        load_config(PKG / "config.yaml"),
        name="legacy",
        package_path=str(PKG),
        module_name="trainer.task",
    )
    spec = spec_from_dict(raw)
    assert spec.objective.metric == "accuracy" and spec.objective.direction == "maximize"
    lr = spec.search_space["learning_rate"]
    assert lr.type == "float" and lr.log and (lr.low, lr.high) == (0.001, 0.1)
    assert spec.search_space["hidden_units"].type == "int"
    assert spec.search_space["optimizer"].choices == ["sgd", "adam"]
    assert spec.budget.trials == 4 and spec.budget.max_failed_trials == 2
    assert spec.pruner.name == "median"
    assert spec.resources.workers == 2 and spec.resources.machine_type == "n1-standard-4"


def test_bad_legacy_configs_are_named():
    with pytest.raises(SpecError, match="params\\[0\\].type"):
        to_spec(
            {
                "trainingInput": {
                    "hyperparameters": {"params": [{"parameterName": "x", "type": "FLOATY"}]}
                }
            },
            name="x",
            package_path=".",
            module_name="m",
        )
    with pytest.raises(SpecError, match="trainingInput: required"):
        to_spec({}, name="x", package_path=".", module_name="m")


def test_package_path_is_the_package_folder_as_in_gcloud_or_its_parent(tmp_path, monkeypatch):
    cfg = PKG / "config.yaml"
    assert package_root(PKG / "trainer", "trainer.task", cfg) == PKG  # gcloud's form
    assert package_root(str(PKG / "trainer") + "/", "trainer.task", cfg) == PKG
    assert package_root(PKG, "trainer.task", cfg) == PKG  # the parent folder
    monkeypatch.chdir(tmp_path)
    assert package_root(None, "trainer.task", cfg) == PKG  # next to the config
    with pytest.raises(SpecError, match="module trainer.nope not found"):
        package_root(PKG / "trainer", "trainer.nope", cfg)
    with pytest.raises(SpecError, match="folder not found"):
        package_root(tmp_path / "missing", "trainer.task", cfg)
    with pytest.raises(SpecError, match="no package 'trainer'"):
        package_root(None, "trainer.task", tmp_path / "config.yaml")


def test_a_sweep_is_named_after_the_job_or_project_and_gcloud_flags_apply():
    config = load_config(PKG / "config.yaml")
    assert sweep_name(config, PKG, "trainer.task", "my_job_1") == "my_job_1"
    assert sweep_name({"jobId": "census 2"}, PKG, "trainer.task", None) == "census-2"
    assert sweep_name(config, PKG, "trainer.task", None) == "aiplatform_trainer"
    ti = apply_gcloud_flags(config, scale_tier="basic-gpu", master_machine_type=None)
    assert ti["trainingInput"]["scaleTier"] == "BASIC_GPU"
    ti = apply_gcloud_flags(config, scale_tier=None, master_machine_type="n1-standard-8")
    raw, _ = to_spec(ti, name="x", package_path=str(PKG), module_name="trainer.task")
    assert raw["resources"]["machine_type"] == "n1-standard-8"


def test_import_prints_only_what_the_job_says(tmp_path):
    import yaml

    r = subprocess.run(
        [sys.executable, "-m", "sweeps.cli", "import-aiplatform", str(PKG / "config.yaml")],
        capture_output=True,
        text=True,
        cwd=tmp_path,  # not the package's folder: found next to the config
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    raw = yaml.safe_load(r.stdout)
    assert raw["name"] == "aiplatform_trainer"
    assert set(raw["trainer"]) == {"entrypoint", "code_dir", "params"}  # no model, dataset, epochs
    assert "gpus_per_worker" not in raw["resources"]
    # Relative to where the spec goes (here the current folder): a spec moves with its code.
    assert (tmp_path / raw["trainer"]["code_dir"]).resolve() == PKG.resolve()
    spec_from_dict(raw)


def test_missing_hypertune_names_the_extra(monkeypatch):
    import importlib.util

    from typer.testing import CliRunner

    from sweeps.cli import app
    from sweeps.worker import program, runtime

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "hypertune" else real(n, *a)
    )
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    r = CliRunner().invoke(app, ["run", "--aiplatform", str(PKG / "config.yaml")])
    # The extra of this checkout, never `sweeps[...]` from the index (another project).
    assert r.exit_code == 2 and install_hint("aiplatform") in r.output, r.output
    assert "'sweeps[" not in r.output and "-m pip install -e '" in r.output
    monkeypatch.undo()
    # On a worker without it, the trial's error says the same.
    settings = {
        "command": ["${interpreter}", "-S", "hypertune_task.py"],  # -S: no site-packages
        "code_dir": str(ROOT / "tests" / "scripts"),
        "metrics": {"collector": "hypertune"},
        "objectives": ["accuracy"],
        "param_names": [],
    }
    runtime._set_context(
        runtime.TrialContext(
            rank=0,
            world_size=1,
            local_rank=0,
            device=None,
            data_dir=None,
            trial_number=0,
            seed=0,
            params={},
        )  # fmt: skip
    )
    try:
        with pytest.raises(program.ProgramError, match=re.escape(install_hint("aiplatform"))):
            program.run_script(settings, {})
    finally:
        runtime._set_context(None)


def test_legacy_package_runs_unchanged_on_two_workers(tmp_path):
    env = {**os.environ, "SWEEPS_HOME": str(tmp_path / "h")}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "sweeps.cli",
            # gcloud ai-platform jobs submit training legacy ... with its leading words changed
            "run",
            "--aiplatform",
            "legacy",
            "--package-path",
            str(PKG / "trainer") + "/",  # the package folder itself, as gcloud takes it
            "--module-name=trainer.task",
            f"--config={PKG / 'config.yaml'}",
            "--region=us-central1",
            "--json",
            "--",
            "--epochs=4",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "--region us-central1: noted, not used" in r.stderr
    doc = json.loads(r.stdout)
    assert len(doc["trials"]) == 4
    assert all(t["state"] in ("COMPLETE", "PRUNED") for t in doc["trials"]), doc["trials"]
    # Well above chance (10 classes): the package trained and reported through hypertune. Its
    # job samples 4 trials unseeded, sgd or adam, lr down to 0.001, so the best of them reaches
    # 0.8 only most of the time (one CI run's best: 0.796).
    assert doc["best"]["value"] > 0.5
    for t in doc["trials"]:
        assert set(t["params"]) == {"learning_rate", "hidden_units", "optimizer"}
    from mlflow.tracking import MlflowClient

    from sweeps import api

    os.environ["SWEEPS_HOME"] = env["SWEEPS_HOME"]
    try:
        number, log = api.logs("legacy", trial=doc["best"]["number"])
    finally:
        os.environ.pop("SWEEPS_HOME", None)
    assert "rank 0 of 2" in log and "epoch 4: accuracy=" in log
    assert "job_dir=\n" in log, "no --job-dir: the job sets none"
    client = MlflowClient(f"sqlite:///{tmp_path}/h/mlflow.db")
    hist = client.get_metric_history(doc["best"]["mlflow_run_id"], "accuracy")
    assert [m.step for m in hist] == [1, 2, 3, 4], "global_step is the step"


def test_a_custom_container_job_runs_its_module_in_the_image_not_a_host_folder(tmp_path):
    """`masterConfig.imageUri` (or gcloud's --master-image-uri) becomes resources.image: the
    module is in the image, so no package folder is looked for or shipped."""
    config = load_config(PKG / "config.yaml")
    ti = apply_gcloud_flags(
        config, scale_tier=None, master_machine_type=None, master_image_uri="reg/train:3"
    )
    assert ti["trainingInput"]["masterConfig"]["imageUri"] == "reg/train:3"
    raw, notes = to_spec(ti, name="x", package_path=None, module_name="trainer.task")
    spec = spec_from_dict(raw)
    assert spec.resources.image == "reg/train:3" and spec.trainer.code_dir is None
    assert spec.trainer.params["package_path"] == ""
    assert "package_archive" not in spec.trainer.params
    assert any("imageUri reg/train:3" in n for n in notes)
    raw, _ = to_spec(config, name="y", package_path=str(PKG), module_name="trainer.task")
    assert "image" not in raw["resources"], "no container unless the job names one"
    # A container job's folder holds only its config: no trainer package to find.
    import yaml

    job = tmp_path / "job"
    job.mkdir()
    config["trainingInput"]["masterConfig"] = {"imageUri": "reg/train:4"}
    (job / "config.yaml").write_text(yaml.safe_dump(config))
    r = subprocess.run(
        [sys.executable, "-m", "sweeps.cli", "import-aiplatform", str(job / "config.yaml")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    out = yaml.safe_load(r.stdout)
    assert out["resources"]["image"] == "reg/train:4" and "code_dir" not in out["trainer"]
