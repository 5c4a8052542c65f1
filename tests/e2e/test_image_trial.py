"""Trials inside a container image (issue 16, item 4; seed 004's `--master-image-uri`): a sweep
run with `--image` on a `sweeps up` service, whose node starts the trials' workers through
Ray's image_uri (podman). The image is the one .ci/run builds for the team stack, copied into
podman's store there. The workers run the image's Python and code, checkpoint to storage every
container shares (`gs://` through the GCS emulator), and the driver on the host records it all.

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
from pathlib import Path

import optuna
import pytest
from mlflow.tracking import MlflowClient
from services import gcs_bucket, gcs_client, up_args
from stack import ROOT, unavailable

pytestmark = pytest.mark.timeout(1200)

SWEEPS = [sys.executable, "-m", "sweeps.cli"]
IMAGE = os.environ.get("SWEEPS_PODMAN_IMAGE", "localhost/sweeps:ci")
ADAPTER = Path(__file__).resolve().parent / "podman-as-root"


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


def test_a_sweeps_trials_run_inside_the_image(tmp_path, gcs_emulator):
    podman = _podman()
    home, log = tmp_path / "home", tmp_path / "podman.log"
    gcs_bucket(gcs_emulator, "image-ckpt")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "MLFLOW_", "SWEEPS_"))}
    path = env.get("PATH", "")
    env.update(
        SWEEPS_HOME=str(home),
        PATH=f"{ADAPTER}{os.pathsep}{path}" if os.geteuid() == 0 else path,
        SWEEPS_PODMAN_LOG=str(log),
        STORAGE_EMULATOR_HOST=gcs_emulator,
        SWEEPS_CHECKPOINTS="gs://image-ckpt/ckpt",
    )
    before = set(_containers(podman))
    up = _cli(env, *up_args())
    assert up.returncode == 0, up.stderr[-3000:]
    try:
        r = _cli(
            env,
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
            timeout=900,
        )
        assert r.returncode == 0, f"{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    finally:
        _cli(env, "down", timeout=120)
        # Ray starts its workers' containers without --rm: ours go, nobody else's.
        ours = set(_containers(podman)) - before
        if ours:
            subprocess.run([podman, "rm", "-f", *ours], capture_output=True, timeout=120)

    study = optuna.load_study(study_name="in-image", storage=f"sqlite:///{home}/optuna.db")
    (trial,) = study.trials
    assert trial.state.name == "COMPLETE", trial.user_attrs
    assert sorted(trial.intermediate_values) == [1, 2, 3]
    run = MlflowClient(f"sqlite:///{home}/mlflow.db").get_run(trial.user_attrs["mlflow_run_id"])
    tags = run.data.tags
    # The workers ran the image's interpreter (/opt/venv, see the Dockerfile), not this venv's.
    assert tags["sweeps.hw.python"].startswith("/opt/venv/"), tags
    assert tags["sweeps.hw.world_size"] == "2" and run.info.status == "FINISHED"
    starts = [line for line in log.read_text().splitlines() if line.startswith("run ")]
    workers = [s for s in starts if f" {IMAGE} " in s and "default_worker.py" in s]
    assert len(workers) >= 2, "each of the trial's 2 workers started in a container:\n" + "\n".join(
        starts
    )
    saved = trial.user_attrs.get("sweeps.checkpoint", "")
    assert saved.startswith("gs://image-ckpt/ckpt/"), trial.user_attrs
    assert _objects(gcs_emulator, "image-ckpt", saved), "the checkpoint is on the shared storage"


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
