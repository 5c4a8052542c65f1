"""`sweeps --help`, `ls` and `validate` must not import torch, ray or mlflow."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT

PROBE = """
import sys
from typer.testing import CliRunner
from sweeps.cli import app
r = CliRunner().invoke(app, {args!r})
assert r.exit_code == 0, r.output
print(",".join(m for m in ("torch", "ray", "mlflow") if m in sys.modules) or "none")
"""


def _heavy(args: list[str], env_home: str) -> str:
    import os

    r = subprocess.run(
        [sys.executable, "-c", PROBE.format(args=args)],
        capture_output=True,
        text=True,
        env={**os.environ, "SWEEPS_HOME": env_home},
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout.strip().splitlines()[-1]


def test_light_commands_import_no_heavy_library(tmp_path):
    assert _heavy(["--help"], str(tmp_path)) == "none"
    assert _heavy(["validate", str(ROOT / "conf" / "quickstart.yaml")], str(tmp_path)) == "none"
    assert _heavy(["ls"], str(tmp_path)) == "none"
