"""docker-compose.yml: valid, healthy by construction, loopback-only, no secrets.

No Docker engine (or compose plugin) runs on the CI machine, so `docker compose config` is run
only where the plugin answers; the structural checks below run everywhere.
"""

from __future__ import annotations

import re
import shutil
import subprocess

import yaml
from conftest import ROOT

COMPOSE = ROOT / "docker-compose.yml"
SECRETISH = re.compile(r"(PASSWORD|SECRET|TOKEN|KEY)", re.I)


def _load() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


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


def test_ports_bind_loopback_only():
    for name, svc in _load()["services"].items():
        for port in svc.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), (name, port)


def test_no_secret_values_in_the_file():
    for name, svc in _load()["services"].items():
        env = svc.get("environment") or {}
        items = env.items() if isinstance(env, dict) else (e.split("=", 1) for e in env)
        for key, value in items:
            if SECRETISH.search(key):
                assert re.fullmatch(r"\$\{[A-Z_]+\}", str(value)), (name, key)
    text = COMPOSE.read_text()
    assert "replace-me" not in text
    assert ".env" in (ROOT / ".gitignore").read_text().split()
    assert (ROOT / ".env.example").exists()


def test_ray_worker_scales_and_reserves_gpus():
    w = _load()["services"]["ray-worker"]
    assert "container_name" not in w and "ports" not in w
    dev = w["deploy"]["resources"]["reservations"]["devices"][0]
    assert dev["driver"] == "nvidia" and "gpu" in dev["capabilities"]


def test_docker_compose_config_where_available():
    docker = shutil.which("docker")
    ok = (
        docker
        and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0
    )
    if not ok:
        # The plugin is absent here (see README "Testing notes"): YAML checks above stand in.
        return
    r = subprocess.run(
        [
            docker,
            "compose",
            "-f",
            str(COMPOSE),
            "--env-file",
            str(ROOT / ".env.example"),
            "config",
            "-q",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
