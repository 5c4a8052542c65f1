"""Trials inside a container image, on one `sweeps up` service whose node starts the trials'
workers through Ray's image_uri (podman). The image is the one .ci/run builds for the team
stack, copied into podman's store there. The workers run the image's Python and code, write to
storage every container shares (`gs://` through the GCS emulator), and the driver on the host
records it all.

- issue 16, item 4 (seed 004's `--master-image-uri`): a native sweep run with `--image`.
- issue 28, item 2: a legacy AI Platform job run with `--master-image-uri` and
  `--package-path`, as gcloud submits it: the package (tests/aiplatform_packages/image_job,
  written as Google's samples are) is installed in the image with its `install_requires`, then
  run there; its model lands under `--job-dir gs://...` per trial.

Both share one service (module fixture): `up` and `down` cost ~30 s each on the CI machine.
Ray runs as root on the CI machine, where podman refuses the rootless flag Ray passes: the node
finds the small adapter in `podman-as-root/` first on its PATH (it says why). Skipped only where
neither CI nor SWEEPS_E2E is set and podman or the image is missing (see stack.unavailable).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import optuna
import pytest
from mlflow.tracking import MlflowClient
from services import gcs_bucket, gcs_client, up_args
from stack import ROOT, unavailable

from sweeps.common import names

pytestmark = pytest.mark.timeout(1200)

SWEEPS = [sys.executable, "-m", "sweeps.cli"]
IMAGE = os.environ.get("SWEEPS_PODMAN_IMAGE", "localhost/sweeps:ci")
ADAPTER = Path(__file__).resolve().parent / "podman-as-root"
PACKAGE = ROOT / "tests" / "aiplatform_packages" / "image_job"


@dataclass
class Service:
    """A `sweeps up` service whose node runs image workers, and what the tests read of it."""

    env: dict[str, str]
    home: Path
    podman_log: Path
    emulator: str

    def cli(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
        return _cli(self.env, *args, timeout=timeout)

    def worker_starts(self, skip: int = 0) -> list[str]:
        """The podman log's container starts of Ray workers in IMAGE, from line `skip` on."""
        lines = self.podman_log.read_text().splitlines()[skip:] if self.podman_log.exists() else []
        return [
            s
            for s in lines
            if s.startswith("run ") and f" {IMAGE} " in s and "default_worker.py" in s
        ]

    def log_lines(self) -> int:
        return len(self.podman_log.read_text().splitlines()) if self.podman_log.exists() else 0

    def mlflow(self) -> MlflowClient:
        return MlflowClient(f"sqlite:///{self.home}/mlflow.db")

    def study(self, name: str) -> optuna.Study:
        return optuna.load_study(study_name=name, storage=f"sqlite:///{self.home}/optuna.db")


def _podman() -> str:
    podman = shutil.which("podman")
    if podman is None:
        unavailable("podman is not installed")
    if subprocess.run([podman, "image", "exists", IMAGE]).returncode != 0:
        unavailable(f"image {IMAGE} is not in podman's store")
    return podman


def _cli(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*SWEEPS, *args], env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def service(tmp_path_factory, gcs_emulator) -> Iterator[Service]:
    podman = _podman()
    tmp = tmp_path_factory.mktemp("image-service")
    gcs_bucket(gcs_emulator, "image-ckpt")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "MLFLOW_", "SWEEPS_"))}
    path = env.get("PATH", "")
    env.update(
        SWEEPS_HOME=str(tmp / "home"),
        PATH=f"{ADAPTER}{os.pathsep}{path}" if os.geteuid() == 0 else path,
        SWEEPS_PODMAN_LOG=str(tmp / "podman.log"),
        STORAGE_EMULATOR_HOST=gcs_emulator,
        SWEEPS_CHECKPOINTS="gs://image-ckpt/ckpt",
    )
    before = set(_containers(podman))
    up = _cli(env, *up_args())
    assert up.returncode == 0, up.stderr[-3000:]
    try:
        yield Service(env, tmp / "home", tmp / "podman.log", gcs_emulator)
    finally:
        _cli(env, "down", timeout=120)
        # Ray starts its workers' containers without --rm: ours go, nobody else's.
        ours = set(_containers(podman)) - before
        if ours:
            subprocess.run([podman, "rm", "-f", *ours], capture_output=True, timeout=120)


def test_a_sweeps_trials_run_inside_the_image(service):
    r = service.cli(
        "run",
        str(ROOT / "conf/quickstart.yaml"),
        "--name",
        "in-image",
        "--image",
        IMAGE,
        "--trials",
        "1",
        "--parallel",
        "1",
        "--set",
        "trainer.epochs=3",
        "--set",
        "resources.workers=2",
        "--set",
        "pruner.name=none",
        "--set",
        "execution.checkpoint_min_interval_s=0",
    )
    assert r.returncode == 0, f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}"

    (trial,) = service.study("in-image").trials
    assert trial.state.name == "COMPLETE", trial.user_attrs
    assert sorted(trial.intermediate_values) == [1, 2, 3]
    run = service.mlflow().get_run(trial.user_attrs["mlflow_run_id"])
    tags = run.data.tags
    # The workers ran the image's interpreter (/opt/venv, see the Dockerfile), not this venv's.
    assert tags[names.hw("python")].startswith("/opt/venv/"), tags
    assert tags[names.hw("world_size")] == "2" and run.info.status == "FINISHED"
    workers = service.worker_starts()
    assert len(workers) >= 2, "each of the trial's 2 workers started in a container:\n" + "\n".join(
        workers
    )
    saved = trial.user_attrs.get(names.CHECKPOINT, "")
    assert saved.startswith("gs://image-ckpt/ckpt/"), trial.user_attrs
    assert _objects(service.emulator, "image-ckpt", saved), (
        "the checkpoint is on the shared storage"
    )


def test_an_ai_platform_package_is_installed_and_run_in_the_master_image(service):
    """gcloud's `--master-image-uri` with `--package-path`: the package, with its setup.py's
    install_requires (cloudml-hypertune, which the image lacks: shipped with the package, for the
    image reaches no index), installed in the image and run there, per trial under the job dir."""
    bucket = gcs_bucket(service.emulator, "aip-image")
    seen = service.log_lines()
    r = service.cli(
        "run",
        "--aiplatform",
        "digits_image",
        "--config",
        str(PACKAGE / "hptuning_config.yaml"),
        "--package-path",
        str(PACKAGE / "trainer"),
        "--module-name",
        "trainer.task",
        "--master-image-uri",
        IMAGE,
        "--job-dir",
        "gs://aip-image/digits",
        "--",
        "--epochs=2",
    )
    assert r.returncode == 0, f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    assert "installed and run in the image" in r.stderr, r.stderr[-2000:]

    assert service.worker_starts(seen), "the package's trials started no worker in the image"
    trials = service.study("digits_image").trials
    assert [t.state.name for t in trials] == ["COMPLETE", "COMPLETE"], [
        t.user_attrs for t in trials
    ]
    client = service.mlflow()
    for t in trials:
        trial = str(t.number + 1)  # AI Platform's trial ids
        assert sorted(t.intermediate_values) == [1, 2], "hypertune per epoch, global_step the step"
        ran = json.loads(bucket.blob(f"digits/{trial}/ran.json").download_as_text())
        # Installed by the package's install_requires into the job's env in the container...
        assert ran["hypertune_version"] == "0.1.0.dev6", ran
        assert ran["hypertune_file"].startswith("/tmp/sweeps-aip-env-"), ran
        assert ran["python"].startswith("/tmp/sweeps-aip-env-"), ran
        # ...over the image's own packages (/opt/venv, see the Dockerfile), not this venv's.
        assert ran["torch_file"].startswith("/opt/venv/"), ran
        assert ran["job_dir"] == f"gs://aip-image/digits/{trial}"  # the sample's own join
        assert ran["lr"] == pytest.approx(t.params["lr"])  # the sampled value trained
        assert bucket.blob(f"digits/{trial}/model.pt").exists(), f"trial {trial}: no model"
        tags = client.get_run(t.user_attrs["mlflow_run_id"]).data.tags
        assert tags[names.hw("python")].startswith("/opt/venv/"), tags  # the Ray worker's
        assert tags[names.JOB_DIR] == "gs://aip-image/digits"
        assert tags[names.OUTPUT_URI] == f"gs://aip-image/digits/{trial}/"
        listing = json.loads(tags[names.OUTPUT_FILES])
        assert sorted(listing["files"]) == ["model.pt", "ran.json"], listing


def _containers(podman: str) -> list[str]:
    out = subprocess.run(
        [podman, "ps", "-a", "--filter", f"ancestor={IMAGE}", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    return [c["Id"] for c in json.loads(out or "[]")]


def _objects(emulator: str, bucket: str, uri: str) -> list[str]:
    client = gcs_client(emulator)
    prefix = uri.removeprefix(f"gs://{bucket}/").rstrip("/") + "/"
    return [b.name for b in client.list_blobs(bucket, prefix=prefix)]
