"""AI Platform's side of a trial on a worker (legacy Cloud ML Engine and Vertex).

`trial_env`: what AI Platform gives each trial beyond program mode's defaults. `install`: the
user's package installed with its `install_requires`, as AI Platform installs it per job.
`outputs`: where the trial wrote under the job dir, as tags for its MLflow run.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import shutil
import site
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import filelock

from sweeps.common import names

SETUP_FILES = ("setup.py", "pyproject.toml")
SKIP = {"__pycache__", ".git", "build", "dist"}
MAX_LISTED = 50  # file names kept in the OUTPUT_FILES tag; the count and bytes cover all


def trial_id(trial_number: int) -> str:
    return str(trial_number + 1)  # AI Platform's trial ids count from "1"


def trial_env(
    trial_number: int, rank: int, s: dict[str, Any], master: tuple[str, int]
) -> dict[str, str]:
    """With a job dir (as given, `gs://` too): Vertex's per-trial dirs under it. For a legacy
    job (settings' `tf_config_job`): TF_CONFIG with the trial id in `task.trial`."""
    trial = trial_id(trial_number)
    env: dict[str, str] = {}
    job_dir = s.get("job_dir")
    if job_dir:
        base = f"{str(job_dir).rstrip('/')}/{trial}"
        env.update(
            AIP_MODEL_DIR=f"{base}/model/",
            AIP_CHECKPOINT_DIR=f"{base}/checkpoints/",
            AIP_TENSORBOARD_LOG_DIR=f"{base}/logs/",
            CLOUD_ML_JOB_DIR=str(job_dir),
        )
    job = s.get("tf_config_job")
    if isinstance(job, dict):
        kind, index = ("master", 0) if rank == 0 else ("worker", rank - 1)
        task = {"type": kind, "index": index}
        tf_config = {
            "cluster": {"master": [f"{master[0]}:{master[1]}"]},
            "task": {**task, "trial": trial},
            "job": job,
            "environment": "cloud",
        }
        env["TF_CONFIG"] = json.dumps(tf_config)
    return env


# ----- the package ------------------------------------------------------------------------------
def archive(root: str | Path) -> str:
    """The package folder as base64 tar.gz: how it reaches workers in an image, which see no
    host folder."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for p in _files(Path(root)):
            tar.add(p, arcname=str(p.relative_to(root)), recursive=False)
    return base64.b64encode(buf.getvalue()).decode()


def _files(root: Path) -> list[Path]:
    return sorted(
        p
        for p in root.rglob("*")
        if p.is_file()
        and not SKIP.intersection(p.relative_to(root).parts)
        and not any(part.endswith(".egg-info") for part in p.relative_to(root).parts)
    )


def unpack(blob: str) -> Path:
    """A shipped package, extracted once per node (by content)."""
    data = base64.b64decode(blob)
    where = Path(tempfile.gettempdir()) / f"sweeps-aip-src-{hashlib.sha256(data).hexdigest()[:16]}"
    with _locked(where):
        if not (where / ".done").exists():
            shutil.rmtree(where, ignore_errors=True)
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
                if hasattr(tarfile, "data_filter"):
                    tar.extractall(where, filter="data")
                else:  # Python < 3.11.4 (Debian 12's 3.11.2 in an image) has no filters
                    tar.extractall(where, members=_plain_files(tar))
            (where / ".done").touch()
    return where


def _plain_files(tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
    """What `archive` writes, checked as the "data" filter would: regular files inside the
    folder, no links, no absolute or parent paths."""
    members = tar.getmembers()
    for m in members:
        parts = Path(m.name).parts
        if not m.isfile() or Path(m.name).is_absolute() or ".." in parts:
            raise ValueError(f"the job's package archive holds {m.name!r}: not a plain file in it")
    return members


def has_setup(root: str | Path) -> bool:
    return any((Path(root) / f).is_file() for f in SETUP_FILES)


def install(root: str | Path) -> str:
    """Install the package at `root` (its setup.py / pyproject.toml, with install_requires)
    into a per-job environment on this node; returns that environment's Python.

    The environment is a venv that also sees this Python's packages (a .pth file), so only
    what is missing is installed, and a requirement that needs another version of an installed
    package gets it in the venv, shadowing the cluster's without touching it. One install per
    node and package content; concurrent lanes wait on a lock."""
    root = Path(root)
    digest = hashlib.sha256(sys.executable.encode())
    for p in _files(root):
        digest.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes())
    env_dir = Path(tempfile.gettempdir()) / f"sweeps-aip-env-{digest.hexdigest()[:16]}"
    python = env_dir / "bin" / "python"
    with _locked(env_dir):
        if (env_dir / ".done").exists():
            return str(python)
        shutil.rmtree(env_dir, ignore_errors=True)
        _run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], "python -m venv")
        purelib = subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        inherited = [*site.getsitepackages(), sysconfig.get_paths()["purelib"]]
        Path(purelib, "_sweeps_cluster.pth").write_text("\n".join(dict.fromkeys(inherited)))
        with tempfile.TemporaryDirectory(prefix="sweeps-aip-build-") as tmp:
            src = Path(tmp) / "src"  # a copy: setuptools writes egg-info and build/ in place
            shutil.copytree(root, src, ignore=shutil.ignore_patterns(*SKIP, "*.egg-info"))
            argv = [sys.executable, "-m", "pip", "--python", str(python), "install"]
            argv += ["--disable-pip-version-check", "--no-input", "--quiet"]
            if _has_setuptools():  # offline clusters: build with the installed setuptools
                argv.append("--no-build-isolation")
            _run([*argv, str(src)], f"pip install {root.name}")
        (env_dir / ".done").touch()
    return str(python)


def _has_setuptools() -> bool:
    import importlib.util

    return importlib.util.find_spec("setuptools") is not None


def _run(argv: list[str], what: str) -> None:
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        tail = "\n".join((r.stderr or r.stdout).strip().splitlines()[-15:])
        raise RuntimeError(f"the job's package could not be installed ({what}):\n{tail}")


def _locked(path: Path) -> filelock.FileLock:
    return filelock.FileLock(f"{path}.lock")


# ----- what the trial wrote under the job dir ---------------------------------------------------
def outputs(job_dir: str, trial_number: int) -> dict[str, str]:
    """Tags for the trial's MLflow run: the job dir, the trial's folder under it (where
    Google's samples and Vertex's AIP_MODEL_DIR put its outputs), and the files found there."""
    uri = f"{job_dir.rstrip('/')}/{trial_id(trial_number)}/"
    tags = {names.JOB_DIR: job_dir, names.OUTPUT_URI: uri}
    try:
        files = _list(uri)
    except Exception as e:  # the trial's result stands; the tag says why nothing is listed
        msg = " ".join(str(e).split())[:300]
        tags[names.OUTPUT_FILES] = json.dumps({"error": f"{type(e).__name__}: {msg}"})
        return tags
    listing = {
        "count": len(files),
        "bytes": sum(size for _, size in files),
        "files": [name for name, _ in files[:MAX_LISTED]],
    }
    tags[names.OUTPUT_FILES] = json.dumps(listing)
    return tags


def _list(uri: str) -> list[tuple[str, int]]:
    """(name relative to `uri`, size) of every file under it: GCS, or a folder on this node."""
    if uri.startswith("gs://"):
        from google.cloud import storage

        bucket, _, prefix = uri[len("gs://") :].partition("/")
        client = storage.Client()
        blobs = client.list_blobs(bucket, prefix=prefix, timeout=30)
        return [(b.name[len(prefix) :], int(b.size or 0)) for b in blobs]
    if "://" in uri and not uri.startswith("file://"):
        raise ValueError(f"{uri.split('://')[0]}:// is not listed (gs:// and folders are)")
    root = Path(uri.removeprefix("file://"))
    if not root.is_dir():
        return []
    found = sorted(p for p in root.rglob("*") if p.is_file())
    return [(str(p.relative_to(root)), p.stat().st_size) for p in found]
