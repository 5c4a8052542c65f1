"""AI Platform trials as AI Platform runs them (issue 28, item 2): `--job-dir` passed only when
set and as given (`gs://` stays `gs://`), the trial identity in TF_CONFIG / CLOUD_ML_TRIAL_ID /
AIP_MODEL_DIR, the job's package installed with its install_requires, what a trial wrote under
the job dir linked from its MLflow run and promotable. The trainer packages in
tests/aiplatform_packages/ are written as Google's samples are, importing nothing from sweeps;
the job dir is the GCS emulator."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from conftest import ROOT
from mlflow.tracking import MlflowClient
from services import gcs_bucket, gcs_client

from sweeps.cli.sources import aiplatform_raw
from sweeps.common import names
from sweeps.common.errors import SpecError
from sweeps.importers.aiplatform import apply_gcloud_flags, load_config, to_spec
from sweeps.spec import spec_from_dict
from sweeps.worker import cloudml
from tracking.registry import job_dir_model

PKGS = ROOT / "tests" / "aiplatform_packages"
LEGACY = ROOT / "examples" / "aiplatform_trainer"
NO_FLAGS = {"scale_tier": None, "master_machine_type": None}


def _params(job_dir=None, config=None, **kw):
    raw, notes = to_spec(
        config or load_config(LEGACY / "config.yaml"),
        name="x",
        package_path=kw.pop("package_path", str(LEGACY)),
        module_name="trainer.task",
        user_args=["--epochs=2"],
        job_dir=job_dir,
        **kw,
    )
    spec_from_dict(raw)  # valid
    return raw, raw["trainer"]["params"], notes


def test_job_dir_is_passed_only_when_the_job_sets_it_and_as_given():
    _, p, _ = _params()
    assert "job_dir" not in p
    _, p, _ = _params("gs://bucket/jobs/run1")
    assert p["job_dir"] == "gs://bucket/jobs/run1"  # not a local folder
    assert p["tf_config_job"]["job_dir"] == "gs://bucket/jobs/run1"
    config = load_config(LEGACY / "config.yaml")
    config["trainingInput"]["jobDir"] = "gs://bucket/from-config"
    _, p, _ = _params(config=config)
    assert p["job_dir"] == "gs://bucket/from-config"  # trainingInput.jobDir, as in the API
    flagged = apply_gcloud_flags(
        config, scale_tier=None, master_machine_type=None, job_dir="gs://bucket/flag"
    )
    _, p, _ = _params(config=flagged)
    assert p["job_dir"] == "gs://bucket/flag"  # gcloud's --job-dir overrides it
    job = p["tf_config_job"]
    assert job["python_module"] == "trainer.task" and job["args"] == ["--epochs=2"]
    assert job["hyperparameters"]["hyperparameter_metric_tag"] == "accuracy"  # snake_case
    with pytest.raises(SpecError, match="not passed on literally"):
        _params("gs://bucket/${USER}")


def test_each_trial_sees_the_identity_ai_platform_gives_it():
    s = {"job_dir": "gs://b/jobs/", "tf_config_job": {"python_module": "trainer.task"}}
    env = cloudml.trial_env(4, 0, s, ("10.0.0.7", 2345))
    assert env["AIP_MODEL_DIR"] == "gs://b/jobs/5/model/"  # Vertex: BASE/TRIAL/model/
    assert env["AIP_CHECKPOINT_DIR"] == "gs://b/jobs/5/checkpoints/"
    assert env["AIP_TENSORBOARD_LOG_DIR"] == "gs://b/jobs/5/logs/"
    assert env["CLOUD_ML_JOB_DIR"] == "gs://b/jobs/"
    tf = json.loads(env["TF_CONFIG"])
    assert tf["task"] == {"type": "master", "index": 0, "trial": "5"}
    assert tf["cluster"] == {"master": ["10.0.0.7:2345"]} and tf["environment"] == "cloud"
    assert tf["job"] == {"python_module": "trainer.task"}
    tf = json.loads(cloudml.trial_env(4, 2, s, ("h", 1))["TF_CONFIG"])
    assert tf["task"] == {"type": "worker", "index": 1, "trial": "5"}
    # No job dir, not an AI Platform job: program mode's own (local) folders stand.
    assert cloudml.trial_env(4, 0, {}, ("h", 1)) == {}


def test_an_image_job_with_a_package_ships_it_and_cluster_python_opts_out(tmp_path):
    config = load_config(LEGACY / "config.yaml")
    config["trainingInput"]["masterConfig"] = {"imageUri": "reg/train:5"}
    raw, p, notes = _params(config=config)
    assert raw["resources"]["image"] == "reg/train:5" and "code_dir" not in raw["trainer"]
    assert p["package_archive"] and any("--cluster-python" in n for n in notes)
    root = cloudml.unpack(p["package_archive"])  # what a worker in the image unpacks
    assert (root / "trainer" / "task.py").read_bytes() == (
        LEGACY / "trainer" / "task.py"
    ).read_bytes()
    raw, p, _ = _params(config=config, cluster_python=True)
    assert "image" not in raw["resources"] and raw["trainer"]["code_dir"] == str(LEGACY)
    assert "package_archive" not in p
    raw, p, _ = _params(config=config, package_path=None)  # the module is in the image
    assert raw["resources"]["image"] == "reg/train:5" and "package_archive" not in p


def test_promote_finds_the_model_under_the_trials_job_dir_folder():
    def run(files, uri="gs://b/j/3/"):
        listing = json.dumps({"count": len(files), "bytes": 1, "files": files})
        tags = {names.OUTPUT_URI: uri, names.OUTPUT_FILES: listing}
        return SimpleNamespace(data=SimpleNamespace(tags=tags))

    assert job_dir_model(run(["model/saved_model.pb", "logs/x"])) == "gs://b/j/3/model/"
    assert job_dir_model(run(["model.pt"])) == "gs://b/j/3/"
    assert job_dir_model(run([])) is None  # nothing was written there
    assert job_dir_model(SimpleNamespace(data=SimpleNamespace(tags={}))) is None


@pytest.mark.usefixtures("ray_cluster")
def test_a_samples_style_package_writes_each_trial_under_its_gs_job_dir(
    home, gcs_emulator, monkeypatch
):
    from sweeps import api

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator)
    bucket = gcs_bucket(gcs_emulator, "aip-jobs")
    raw, _ = aiplatform_raw(
        PKGS / "gcs_job" / "hptuning_config.yaml",
        "digits_job",
        PKGS / "gcs_job" / "trainer",
        "trainer.task",
        None,
        ["--epochs=2"],
        {**NO_FLAGS, "job_dir": "gs://aip-jobs/digits"},  # gcloud's --job-dir
    )
    out = api.run(spec_from_dict(raw), install_signals=False)
    doc = api.show("digits_job")
    assert [t["state"] for t in doc["trials"]] == ["COMPLETE", "COMPLETE"], doc["trials"]
    blobs = {b.name for b in gcs_client(gcs_emulator).list_blobs("aip-jobs")}
    assert {"digits/1/model.pt", "digits/2/model.pt", "digits/1/seen.json"} <= blobs, blobs
    client = MlflowClient(out.tracking_uri)
    for t in doc["trials"]:
        trial = str(t["number"] + 1)
        seen = json.loads(bucket.blob(f"digits/{trial}/seen.json").download_as_text())
        tf = json.loads(seen["TF_CONFIG"])
        assert tf["task"] == {"type": "master", "index": 0, "trial": trial}
        assert tf["environment"] == "cloud" and tf["job"]["job_dir"] == "gs://aip-jobs/digits"
        assert seen["CLOUD_ML_TRIAL_ID"] == trial
        assert seen["AIP_MODEL_DIR"] == f"gs://aip-jobs/digits/{trial}/model/"
        assert seen["job_dir"] == f"gs://aip-jobs/digits/{trial}"  # the sample's own join
        assert seen["lr"] == pytest.approx(t["params"]["lr"])  # the sampled value trained
        tags = client.get_run(t["mlflow_run_id"]).data.tags
        assert tags[names.JOB_DIR] == "gs://aip-jobs/digits"
        assert tags[names.OUTPUT_URI] == f"gs://aip-jobs/digits/{trial}/"
        listing = json.loads(tags[names.OUTPUT_FILES])
        assert sorted(listing["files"]) == ["model.pt", "seen.json"] and listing["count"] == 2
        hist = client.get_metric_history(t["mlflow_run_id"], "my_accuracy_tag")
        # MLflow returns a history in no set order (by timestamp on SQL stores)
        assert sorted(m.step for m in hist) == [1, 2], "hypertune per epoch, global_step the step"
    p = api.promote("digits_job", "digits")
    best = str(doc["best"]["number"] + 1)
    version = client.get_model_version("digits", p["version"])
    assert version.source == f"gs://aip-jobs/digits/{best}/"


@pytest.mark.usefixtures("ray_cluster")
def test_a_trainer_without_a_job_dir_flag_runs_when_the_job_sets_none(home):
    from sweeps import api

    raw, _ = aiplatform_raw(
        PKGS / "no_job_dir" / "config.yaml", "plain", None, "trainer.task", None, [], NO_FLAGS
    )
    out = api.run(spec_from_dict(raw), install_signals=False)
    (t,) = api.show("plain")["trials"]
    assert t["state"] == "COMPLETE", t  # no --job-dir reached its argparse
    client = MlflowClient(out.tracking_uri)
    assert names.JOB_DIR not in client.get_run(t["mlflow_run_id"]).data.tags
    local = client.download_artifacts(t["mlflow_run_id"], "outputs/seen.json")
    with open(local) as f:
        seen = json.load(f)
    assert json.loads(seen["TF_CONFIG"])["task"]["trial"] == "1"
    assert seen["CLOUD_ML_TRIAL_ID"] == "1"
    assert seen["AIP_MODEL_DIR"].startswith("/")  # the trial's own folder, packed to MLflow


def test_an_image_job_where_no_image_can_run_names_the_flag(monkeypatch):
    import shutil

    from typer.testing import CliRunner

    from sweeps.cli import app

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    real = shutil.which
    monkeypatch.setattr(shutil, "which", lambda n, *a, **k: None if n == "podman" else real(n))
    args = ["run", "--aiplatform", "legacy", "--config", str(LEGACY / "config.yaml")]
    args += ["--package-path", str(LEGACY / "trainer"), "--master-image-uri", "reg/train:6"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, r.output
    assert "podman" in r.output and "--cluster-python runs the package" in r.output
