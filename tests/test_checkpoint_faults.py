"""Issue 32 #7, checkpoint faults: a write that fails on a full disk costs only that checkpoint
(the trial goes on, one line in its log and on the terminal, the next one is written), and a
torn latest checkpoint on resume falls back to the one before it, saying so. The choice is
pure (`sweeps.worker.ckpt_faults`); the two faults run for real on the session's local Ray, the
full disk a small tmpfs mounted for the test."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import optuna
import pytest
from conftest import BYO, make_spec

from sweeps import api
from sweeps.common import names
from sweeps.contracts.observers import SweepObserver
from sweeps.driver.trial_logs import live_log_path
from sweeps.worker import ckpt_faults as cf

pytestmark = pytest.mark.timeout(240)


# ----- pure ------------------------------------------------------------------------------------
def _meta(files: dict[str, int], step: int = 3) -> str:
    return json.dumps({"trial_number": 1, "seq": 1, "step": step, "files": files})


def test_a_checkpoint_is_torn_when_a_listed_file_is_short_missing_or_the_meta_unreadable():
    files = {"state.pt": 100, "sub/best.pt": 7}
    assert cf.damage(_meta(files), {**files, cf.META: 50}) is None
    assert cf.damage(_meta(files), {"state.pt": 60, "sub/best.pt": 7}) == (
        "state.pt has 60 of its 100 bytes"
    )
    assert cf.damage(_meta(files), {"state.pt": 100}) == "sub/best.pt is missing"
    assert cf.damage(None, files) == f"{cf.META} is missing"
    assert cf.damage('{"step": 3, "fi', files) == f"{cf.META} is unreadable"
    # One written before the list was kept passes on its step alone.
    assert cf.damage(json.dumps({"step": 2}), {}) is None


def test_resume_order_is_the_latest_then_the_same_trials_earlier_ones_newest_first():
    siblings = [
        "trial000004-step00002-0",
        "trial000004-step00005-0",  # the latest itself
        "trial000004-step00004-1",  # after a restart of the worker group
        "trial000009-step00003-0",  # another trial in the same lane
        "trial000004-step00007-0",  # later than the latest (not its past)
        "checkpoint_manager_snapshot.json",
    ]
    assert cf.resume_order("/c/lane/trial000004-step00005-0", siblings) == [
        "/c/lane/trial000004-step00005-0",
        "/c/lane/trial000004-step00004-1",
        "/c/lane/trial000004-step00002-0",
    ]
    assert cf.resume_order("/c/other/checkpoint_x", siblings) == ["/c/other/checkpoint_x"]


def test_another_sweeps_checkpoints_on_a_warm_lane_carry_its_name():
    assert cf.checkpoint_name("a", "a-lane0-12ab34", 4, 5, 0) == "trial000004-step00005-0"
    name = cf.checkpoint_name("b", "a-lane0-12ab34", 4, 5, 1)
    assert name == "b-trial000004-step00005-1"  # trial 4 of sweep a is another checkpoint
    siblings = ["trial000004-step00002-0", "b-trial000004-step00003-0", "c-trial000004-step00001-0"]
    assert cf.resume_order(f"/c/a-lane0-12ab34/{name}", siblings) == [
        f"/c/a-lane0-12ab34/{name}",
        "/c/a-lane0-12ab34/b-trial000004-step00003-0",
    ]


def test_pick_passes_over_torn_ones_and_names_both_in_one_line():
    torn = {"/l/trial000004-step00005-0": "state.pt has 3 of its 9 bytes"}
    order = ["/l/trial000004-step00005-0", "/l/trial000004-step00004-0"]
    path, lines = cf.pick(order, torn.get)
    assert path == "/l/trial000004-step00004-0"
    assert lines == [
        f"{cf.FELL_BACK} /l/trial000004-step00005-0 (state.pt has 3 of its 9 bytes); "
        "resuming from /l/trial000004-step00004-0"
    ]
    assert cf.pick(order, lambda p: None) == (order[0], [])
    path, lines = cf.pick(order[:1], torn.get)
    assert path is None and "no intact one before it: starting over" in lines[0]
    text = f"epoch 3\n{lines[0]}\n{cf.NOT_WRITTEN} at step 4 (x)\nepoch 4\n"
    assert cf.terminal_lines(text) == [lines[0], f"{cf.NOT_WRITTEN} at step 4 (x)"]


# ----- on a real local Ray ---------------------------------------------------------------------
class Notices(SweepObserver):
    def __init__(self) -> None:
        self.lines: list[str] = []

    def on_notice(self, ctx, line):
        self.lines.append(line)


def _spec(name: str, fn: str, epochs: int, params: dict, **fields):
    trainer = {"entrypoint": f"fault_tasks:{fn}", "code_dir": str(BYO), "epochs": epochs}
    return make_spec(
        name=name,
        sampler={"name": "random", "seed": 2},
        budget={"trials": 1, "parallel": 1},
        execution={"checkpoint_every": 1, "checkpoint_min_interval_s": 0},
        trainer={**trainer, "params": params},
        **fields,
    )


@pytest.fixture
def small_disk(tmp_path, monkeypatch):
    """SWEEPS_CHECKPOINTS on a 1 MiB tmpfs, unmounted after the test."""
    mnt = tmp_path / "small-disk"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], check=True)
    monkeypatch.setenv("SWEEPS_CHECKPOINTS", str(mnt / "checkpoints"))
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], check=False).returncode:
            subprocess.run(["umount", "-l", str(mnt)], check=False)  # a process still in it


@pytest.mark.usefixtures("ray_cluster")
def test_a_checkpoint_write_on_a_full_disk_costs_that_checkpoint_only(home, small_disk):
    # Epochs 1-2 checkpoint; the disk is nearly full during epoch 3: 64 KB free, room for Ray
    # Train's own small records but not for the 128 KB checkpoint, which fails. It is freed
    # before epoch 4, whose checkpoint and epoch 5's are written.
    params = {
        "fill": str(small_disk / "filler"),
        "full_from": 2,
        "full_until": 3,
        "pad_kb": 128,
        "leave_kb": 64,
    }
    seen = Notices()
    out = api.run(_spec("full", "disk_fills", 5, params), callbacks=[seen], install_signals=False)
    assert out.state == "finished", out.reason
    (t,) = optuna.load_study(study_name="full", storage=f"sqlite:///{home}/optuna.db").trials
    assert t.state.name == "COMPLETE", t.user_attrs.get(names.ERROR)
    assert t.user_attrs[names.CHECKPOINT_STEP] == 5, "the checkpoints after it were written"
    assert sorted(t.intermediate_values) == [1, 2, 3, 4, 5], "no epoch lost or repeated"
    said = [ln for ln in seen.lines if cf.NOT_WRITTEN in ln]
    assert len(said) == 1 and "at step 3" in said[0] and "No space left" in said[0], seen.lines
    log = live_log_path("full", t.number).read_text()
    assert sum(cf.NOT_WRITTEN in ln for ln in log.splitlines()) == 1, log
    assert "Traceback" not in log, log
    kept = list(Path(small_disk).glob("checkpoints/*/trial*-step*"))
    assert not [p for p in kept if "step00003" in p.name], "the torn copy is removed"


@pytest.mark.usefixtures("ray_cluster")
def test_a_torn_latest_checkpoint_on_resume_falls_back_to_the_one_before(home, tmp_path):
    # The first attempt tears its own latest checkpoint (step 3) and dies at epoch 4; the retry
    # resumes from step 2, and says so.
    marker = tmp_path / "markers"
    marker.mkdir()
    params = {"marker_dir": str(marker), "store": str(home / "checkpoints")}
    seen = Notices()
    spec = _spec(
        "torn",
        "torn_then_killed",
        5,
        params,
        resources={"max_failures": 0},
        retries={"max": 1},
    )
    out = api.run(spec, callbacks=[seen], install_signals=False)
    assert out.state == "finished", out.reason
    first, retry = optuna.load_study(
        study_name="torn", storage=f"sqlite:///{home}/optuna.db"
    ).trials
    assert retry.state.name == "COMPLETE" and retry.params == first.params
    assert retry.user_attrs[names.RESUME_STEP] == 3, "it was given the torn latest"
    assert "trained epochs 3..5" in live_log_path("torn", retry.number).read_text()
    said = [ln for ln in seen.lines if cf.FELL_BACK in ln]
    assert len(said) == 1, seen.lines
    assert "trial000000-step00003-0 (pad.bin has" in said[0]
    lane = str(home / "checkpoints")
    assert re.search(rf"resuming from {lane}/[^/ ]+/trial000000-step00002-0$", said[0]), said
