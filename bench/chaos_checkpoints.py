"""The chaos report's rows for checkpoint faults and parking (issue 32, item 7).

    .venv/bin/python bench/chaos_report.py --only checkpoints --out bench/RESULTS.md

- "checkpoint write on a full disk": the lanes' checkpoint storage (SWEEPS_CHECKPOINTS) is a
  1 MiB tmpfs that each trial fills during its epoch 3 and frees before epoch 4. Injected: the
  checkpoint writes that failed (the run's one-line notices); survived: trials that completed
  with their last epoch's checkpoint written.
- "corrupted latest checkpoint on resume": the first attempt cuts its latest checkpoint's file
  short and SIGKILLs its worker; `retries: {max: 1}` resumes it. Survived: the retry said it
  fell back and trained on from the checkpoint before (step 2), to the end.
- "pause, then resume": `sweeps pause` parks the running trial at a checkpoint, the `run`
  process ends `paused`; `sweeps resume` continues it. Survived: the sweep finished with the
  parked trial continued from its parked step.

Needs root (mount) for the tmpfs.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BYO = ROOT / "tests" / "byo"
Row = tuple[str, int, int, int, int]
NOT_WRITTEN, FELL_BACK = "checkpoint not written", "damaged checkpoint"


def _spec(home: Path, name: str, entry: str, extra: str, epochs: int, params: str) -> Path:
    p = home.parent / f"{name}.yaml"
    p.write_text(
        f"name: {name}\nsearch_space: {{lr: {{type: float, low: 0.001, high: 0.02}}}}\n"
        "sampler: {name: random, seed: 1}\npruner: {name: none}\n"
        "execution: {checkpoint_every: 1, checkpoint_min_interval_s: 0}\n"
        f"{extra}"
        f"trainer: {{entrypoint: '{entry}', code_dir: '{BYO}', epochs: {epochs}, "
        f"params: {params}}}\n"
    )
    return p


@contextlib.contextmanager
def _tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        if subprocess.run(["umount", str(path)], check=False).returncode:
            subprocess.run(["umount", "-l", str(path)], check=False)


def _trials(h: Path, name: str) -> list:
    import optuna

    return optuna.load_study(study_name=name, storage=f"sqlite:///{h}/optuna.db").trials


def full_disk(home: Callable[[str], Path], cli: Callable, audit: Callable) -> Row:
    h = home("fulldisk")
    trials = 2
    with _tmpfs(h.parent / "disk", "1m") as disk:
        params = f"{{fill: '{disk}/filler', full_from: 2, full_until: 3, pad_kb: 64}}"
        s = _spec(
            h,
            "fulldisk",
            "fault_tasks:disk_fills",
            f"budget: {{trials: {trials}, parallel: 1}}\n",
            5,
            params,
        )
        r = cli(h, "run", str(s), env={"SWEEPS_CHECKPOINTS": str(disk / "c")}, timeout=600)
    lost, left, _ = audit(h, "fulldisk")
    injected = sum(NOT_WRITTEN in ln for ln in (r.stdout + r.stderr).splitlines())
    ok = sum(
        t.state.name == "COMPLETE" and t.user_attrs.get("sweeps.checkpoint_step") == 5
        for t in _trials(h, "fulldisk")
    )
    return ("checkpoint write on a full disk (1 MiB tmpfs)", injected, ok, lost, left)


def torn_latest(home: Callable[[str], Path], cli: Callable, audit: Callable) -> Row:
    h = home("torn")
    marker = h.parent / "markers"
    marker.mkdir()
    params = f"{{marker_dir: '{marker}', store: '{h / 'checkpoints'}'}}"
    extra = "budget: {trials: 1, parallel: 1}\nresources: {max_failures: 0}\nretries: {max: 1}\n"
    s = _spec(h, "torn", "fault_tasks:torn_then_killed", extra, 5, params)
    r = cli(h, "run", str(s), timeout=600)
    lost, left, _ = audit(h, "torn")
    said = any(FELL_BACK in ln and "step00002" in ln for ln in (r.stdout + r.stderr).splitlines())
    log = h / "logs" / "torn" / "trial-00001.log"
    went_on = log.exists() and "trained epochs 3..5" in log.read_text()
    done = [t for t in _trials(h, "torn") if t.state.name == "COMPLETE"]
    ok = int(said and went_on and len(done) == 1)
    return ("corrupted latest checkpoint on resume (retried)", 1, ok, lost, left)


def pause_resume(home: Callable[[str], Path], cli: Callable, audit: Callable) -> Row:
    h = home("parked")
    s = _spec(
        h,
        "parked",
        "retry_tasks:endless",
        "budget: {trials: 2, parallel: 1}\n",
        8,
        "{epoch_s: 0.5}",
    )
    env = {**os.environ, "SWEEPS_HOME": str(h)}
    run = subprocess.Popen(
        [sys.executable, "-m", "sweeps.cli", "run", str(s)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.time() + 240
    while time.time() < deadline and run.poll() is None:
        with contextlib.suppress(Exception):
            steps = [t.user_attrs.get("sweeps.checkpoint_step") or 0 for t in _trials(h, "parked")]
            if max(steps, default=0) >= 2:
                break
        time.sleep(0.3)
    cli(h, "pause", "parked", timeout=120)
    run.wait(timeout=300)
    paused = run.returncode == 0
    cli(h, "resume", "parked", timeout=600)
    lost, left, c = audit(h, "parked")
    trials = _trials(h, "parked")
    parked = {t.number: t.user_attrs.get("sweeps.parked") for t in trials}
    continued = [
        t
        for t in trials
        if t.user_attrs.get("sweeps.resumed_from_trial") in parked
        and t.user_attrs.get("sweeps.resume_step")
        == parked[t.user_attrs["sweeps.resumed_from_trial"]]
        and t.state.name == "COMPLETE"
    ]
    ok = int(paused and len(continued) == 1 and c.get("COMPLETE", 0) == 2)
    return ("pause, then resume (trial parked at its checkpoint)", 1, ok, lost, left)


def checkpoint_rows(home: Callable[[str], Path], cli: Callable, audit: Callable) -> list[Row]:
    """The three rows; `home`, `cli` and `audit` are chaos_report's."""
    return [f(home, cli, audit) for f in (full_disk, torn_latest, pause_resume)]
