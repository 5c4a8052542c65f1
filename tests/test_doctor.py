"""`sweeps doctor` against real services: one row per store, ok or a one-line reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from services import start_mlflow_server

from sweeps.doctor import check


def test_doctor_reports_each_service(postgres, tmp_path):
    rows = check(postgres.url(), f"sqlite:///{tmp_path}/m.db", None, str(tmp_path / "ck"))
    assert [r["service"] for r in rows] == [
        "optuna storage",
        "mlflow tracking",
        "ray",
        "checkpoints",
    ]
    assert all(r["ok"] for r in rows), rows
    assert "postgresql" in rows[0]["detail"] and postgres.password not in rows[0]["url"]
    bad = check(
        "postgresql+psycopg://u:p@127.0.0.1:9/x",
        "http://127.0.0.1:9",
        "127.0.0.1:9",
        str(tmp_path / "ck"),
    )
    assert [r["ok"] for r in bad] == [False, False, False, True]
    assert all("\n" not in r["detail"] for r in bad)


def test_doctor_cli_wrong_password_exit_1(tmp_path):
    server = start_mlflow_server(f"sqlite:///{tmp_path}/s.db", str(tmp_path / "a"), auth=True)
    try:
        env = {
            **os.environ,
            "SWEEPS_HOME": str(tmp_path / "h"),
            "MLFLOW_TRACKING_URI": server.url,
            "MLFLOW_TRACKING_USERNAME": server.username,
            "MLFLOW_TRACKING_PASSWORD": "nope",
        }
        r = subprocess.run(
            [sys.executable, "-m", "sweeps.cli", "doctor", "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 1
        rows = {row["service"]: row for row in json.loads(r.stdout)}
        assert not rows["mlflow tracking"]["ok"]
        assert "refused the credentials" in rows["mlflow tracking"]["detail"]
        env["MLFLOW_TRACKING_PASSWORD"] = server.password
        r = subprocess.run(
            [sys.executable, "-m", "sweeps.cli", "doctor", "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        server.stop()
