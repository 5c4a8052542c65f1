"""A two-node Ray cluster on this machine (`ray start --head` + `ray start --address`): a
2-worker trial spans it. Named to run last: it starts Ray nodes of its own."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from conftest import BYO
from mlflow.tracking import MlflowClient
from services import free_port

RAY = str(Path(sys.executable).parent / "ray")


def test_two_node_cluster_runs_a_trial_across_nodes(tmp_path):
    port = free_port()
    # A temp dir of its own keeps this cluster's address file away from other drivers.
    temp = tempfile.mkdtemp(prefix="ray2n-", dir="/tmp")
    env = {**os.environ}
    env.pop("RAY_ADDRESS", None)
    # Ray 2.60 token auth: every process of this cluster (nodes, `ray status`, the driver)
    # uses the same token file (~/.ray/auth_token); say so explicitly so none falls back.
    env["RAY_AUTH_MODE"] = "token"
    common = ["--num-cpus", "1", "--block", "--disable-usage-stats"]
    head = subprocess.Popen(
        [
            RAY,
            "start",
            "--head",
            "--port",
            str(port),
            "--temp-dir",
            temp,
            "--include-dashboard=false",
            *common,
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    nodes = [head]
    try:
        time.sleep(8)
        worker = subprocess.Popen(
            [RAY, "start", "--address", f"127.0.0.1:{port}", *common],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        nodes.append(worker)
        deadline = time.time() + 90
        while time.time() < deadline:
            r = subprocess.run(
                [RAY, "status", "--address", f"127.0.0.1:{port}"],
                env=env,
                capture_output=True,
                text=True,
            )
            if r.stdout.count("node_") >= 2:
                break
            time.sleep(2)
        else:
            raise AssertionError(f"second node never joined: {r.stdout} {r.stderr}")
        spec = tmp_path / "two.yaml"
        spec.write_text(
            "name: two-nodes\n"
            "search_space: {lr: {type: float, low: 0.01, high: 0.02}}\n"
            "pruner: {name: none}\n"
            "budget: {trials: 1}\n"
            "resources: {workers: 2, cpus_per_worker: 1}\n"
            f"trainer: {{entrypoint: 'byo_tasks:nodes', code_dir: '{BYO}', epochs: 1}}\n"
        )
        home = tmp_path / "h"
        run_env = {**env, "SWEEPS_HOME": str(home), "RAY_ADDRESS": f"127.0.0.1:{port}"}
        r = subprocess.run(
            [sys.executable, "-m", "sweeps.cli", "run", str(spec), "--json"],
            env=run_env,
            capture_output=True,
            text=True,
            timeout=400,
        )
        assert r.returncode == 0, r.stderr[-3000:]
        import json

        (t,) = json.loads(r.stdout)["trials"]
        assert t["state"] == "COMPLETE", t
        run = MlflowClient(f"sqlite:///{home}/mlflow.db").get_run(t["mlflow_run_id"])
        assert run.data.metrics["distinct_nodes"] == 2.0
    finally:
        for p in reversed(nodes):
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in nodes:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
        shutil.rmtree(temp, ignore_errors=True)
