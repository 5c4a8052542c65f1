"""Issue 32 #6 on a real local Ray (its acceptance): a 20-trial sweep with `checkpoints:
{keep_best_trials: 2, keep_latest_per_trial: 1}` keeps its checkpoint folder within the bound
while it runs (a thread samples the folder: how many checkpoints, of how many trials, how many
bytes) and at its end, and `ls --json` gives the bytes of the checkpoints left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import BYO, make_spec

from sweeps import api
from sweeps.driver.retention import HELD_KEEP
from sweeps.search.study import load_study

pytestmark = [pytest.mark.usefixtures("ray_cluster"), pytest.mark.timeout(300)]
KEEP, PARALLEL, TRIALS, EPOCHS, PAD_KB = 2, 1, 20, 3, 32
# At any moment: the best KEEP trials' latest each; per running trial its HELD_KEEP newest
# (what a resume falls back on) and the one being written; and a trial that just ended, its
# HELD_KEEP newest until the driver's next turn applies the policy.
MOST_CHECKPOINTS = KEEP + PARALLEL * (HELD_KEEP + 1) + HELD_KEEP
MOST_BYTES = MOST_CHECKPOINTS * (PAD_KB + 2) * 1024


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
        objective={"metric": "val_accuracy", "direction": "maximize"},
        sampler={"name": "random", "seed": 5},
        budget={"trials": TRIALS, "parallel": PARALLEL},
        trainer={
            "entrypoint": "fault_tasks:lr_curve",  # tiny: a few ms per epoch
            "code_dir": str(BYO),
            "epochs": EPOCHS,
            "params": {"pad_kb": PAD_KB},
        },
        execution={"checkpoint_every": 1, "checkpoint_min_interval_s": 0},
        checkpoints={"keep_best_trials": KEEP, "keep_latest_per_trial": 1},
    )
    root = home / "checkpoints"
    most, samples, done = {"trials": 0, "folders": 0, "bytes": 0}, [0], threading.Event()

    def watch() -> None:
        while not done.wait(0.02):
            if root.exists():
                found = _checkpoints(root)
                samples[0] += bool(found)
                for key, n in (
                    ("trials", len(_trials_in(found))),
                    ("folders", len(found)),
                    ("bytes", sum(found.values())),
                ):
                    most[key] = max(most[key], n)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        out = api.run(spec, install_signals=False)
    finally:
        done.set()
        watcher.join()
    assert out.state == "finished", out.reason
    study = load_study("kept", f"sqlite:///{home}/optuna.db")
    assert len(study.trials) == TRIALS
    assert samples[0] >= TRIALS, f"the folder was sampled {samples[0]} times while it ran"
    # The best complete trials and the one running (and one just ended), never more.
    assert 0 < most["trials"] <= KEEP + PARALLEL + 1, most
    assert most["folders"] <= MOST_CHECKPOINTS, most
    assert most["bytes"] <= MOST_BYTES, most
    left = _checkpoints(root)
    best = sorted(study.trials, key=lambda t: (-t.value, t.number))[:KEEP]
    assert _trials_in(left) == {f"trial{t.number:06d}" for t in best}
    assert len(left) == KEEP, "each kept trial keeps its latest checkpoint only"
    assert all(f"step{EPOCHS:05d}" in p for p in left)
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
