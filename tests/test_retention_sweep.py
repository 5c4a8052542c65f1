"""Issue 32 #6 on a real local Ray: a sweep with `checkpoints: {keep_best_trials: 2}` keeps its
checkpoint folder within the bound while it runs and at its end, and `ls --json` gives the
bytes of the checkpoints left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import make_spec

from sweeps import api
from sweeps.search.study import load_study

pytestmark = [pytest.mark.usefixtures("ray_cluster"), pytest.mark.timeout(300)]
KEEP, PARALLEL = 2, 1


def _checkpoints(root: Path) -> dict[str, int]:
    """Each trial checkpoint folder under the store (trialNNNNNN-stepSSSSS-R) and its bytes."""
    out = {}
    for folder in root.glob("*/trial*-step*"):
        files = [f for f in folder.rglob("*") if f.is_file()]
        with_sizes = 0
        for f in files:
            try:
                with_sizes += f.stat().st_size
            except FileNotFoundError:  # deleted while this looked
                pass
        out[str(folder)] = with_sizes
    return out


def _trials_in(found: dict[str, int]) -> set[str]:
    return {Path(p).name.split("-")[0] for p in found}


def test_a_sweep_keeps_its_checkpoints_within_the_bound(home):
    spec = make_spec(
        name="kept",
        search_space={"lr": {"type": "float", "low": 0.001, "high": 0.05, "log": True}},
        sampler={"name": "random", "seed": 5},
        budget={"trials": 7, "parallel": PARALLEL},
        trainer={"epochs": 2},
        execution={"checkpoint_every": 1, "checkpoint_min_interval_s": 0},
        checkpoints={"keep_best_trials": KEEP, "keep_latest_per_trial": 1},
    )
    root = home / "checkpoints"
    most, done = [0], threading.Event()

    def watch() -> None:
        while not done.wait(0.05):
            if root.exists():
                most[0] = max(most[0], len(_trials_in(_checkpoints(root))))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        out = api.run(spec, install_signals=False)
    finally:
        done.set()
        watcher.join()
    assert out.state == "finished", out.reason
    study = load_study("kept", f"sqlite:///{home}/optuna.db")
    assert len(study.trials) == 7
    # The best complete trials and the one running, never more.
    assert 0 < most[0] <= KEEP + PARALLEL, most[0]
    left = _checkpoints(root)
    best = sorted(study.trials, key=lambda t: (-t.value, t.number))[:KEEP]
    assert _trials_in(left) == {f"trial{t.number:06d}" for t in best}
    assert len(left) == KEEP, "each kept trial keeps its latest checkpoint only"
    assert all(f"step{2:05d}" in p for p in left)
    env = {**os.environ, "SWEEPS_HOME": str(home)}
    proc = subprocess.run(
        [sys.executable, "-m", "sweeps.cli", "ls", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    assert rows["kept"]["checkpoint_bytes"] == sum(left.values()) > 0
