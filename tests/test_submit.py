"""`sweeps submit` at its edges, without a cluster: a Jobs API whose agent is still starting,
and a submission that fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import ROOT
from services import free_port

from sweeps import jobs

SWEEPS = [sys.executable, "-m", "sweeps.cli"]


class _Client:
    """A Jobs API client that answers as Ray's does while the head's job agent starts."""

    def __init__(self, failures: int, error: str = jobs.AGENT_STARTING) -> None:
        self.failures, self.error, self.calls = failures, error, 0

    def submit_job(self, **job):
        self.calls += 1
        if self.calls <= self.failures:
            raise RuntimeError(f"Request failed with status code 500: {self.error}, try later.")
        return job["submission_id"]


def test_submit_waits_for_the_job_agent_and_gives_up_on_anything_else():
    c = _Client(failures=2)
    jobs._submit_job(c, wait_s=10, submission_id="x")
    assert c.calls == 3
    other = _Client(failures=1, error="runtime_env: bad working_dir")
    with pytest.raises(RuntimeError, match="bad working_dir"):
        jobs._submit_job(other, wait_s=10, submission_id="x")
    assert other.calls == 1
    stuck = _Client(failures=10**6)
    with pytest.raises(RuntimeError, match="No available agent"):
        jobs._submit_job(stuck, wait_s=0, submission_id="x")


def test_a_submission_that_fails_leaves_no_queued_sweep(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "MLFLOW_", "SWEEPS_"))}
    env["SWEEPS_HOME"] = str(tmp_path)
    dead = f"http://127.0.0.1:{free_port()}"
    r = subprocess.run(
        [*SWEEPS, "submit", str(ROOT / "conf" / "quickstart.yaml"), "--address", dead],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode != 0
    assert len(r.stderr.strip().splitlines()) == 1 and dead in r.stderr, r.stderr
    ls = subprocess.run(
        [*SWEEPS, "ls", "--json"], env=env, capture_output=True, text=True, timeout=60
    )
    assert ls.returncode == 0, ls.stderr
    assert [s["name"] for s in json.loads(ls.stdout)] == []
