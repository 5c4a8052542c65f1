"""The chaos report's row for preemption-style parking (issue 32, item 7).

    .venv/bin/python bench/chaos_report.py --only preempt

On a `sweeps up` service (2 CPUs, so two one-CPU lanes), a normal-priority sweep holds both
lanes; a high-priority sweep is submitted, and the arbiter takes a lane back: the trial on it
parks at its next checkpointed report and its params are queued again from there. Injected:
trials parked. Survived: parked trials whose requeued copy completed with the same params,
resumed at the parked step. Lost and left RUNNING are counted over both sweeps.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BYO = ROOT / "tests" / "byo"
Row = tuple[str, int, int, int, int]
ROW = "preempted by a high-priority sweep (trial parked, requeued from its checkpoint)"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spec(path: Path, name: str, trials: int, parallel: int, epochs: int) -> str:
    path.write_text(
        f"name: {name}\nsearch_space: {{lr: {{type: float, low: 0.001, high: 0.02}}}}\n"
        "sampler: {name: random, seed: 5}\npruner: {name: none}\n"
        f"budget: {{trials: {trials}, parallel: {parallel}}}\n"
        "execution: {checkpoint_every: 1, checkpoint_min_interval_s: 0}\n"
        f"trainer: {{entrypoint: 'retry_tasks:endless', code_dir: '{BYO}', epochs: {epochs}, "
        "params: {epoch_s: 1.0}}\n"
    )
    return str(path)


def _until(ok: Callable[[], object], timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if ok():
                return True
        except Exception:  # a sweep not created yet
            pass
        time.sleep(0.5)
    return False


def preempt_row(home: Callable[[str], Path], audit: Callable) -> Row:
    """The row; `home` and `audit` are chaos_report's."""
    from sweeps import api
    from sweeps.common import names

    h = home("preempt")
    h.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "MLFLOW_", "SWEEPS_"))}
    env.update(SWEEPS_HOME=str(h), SWEEPS_LANE_IDLE_S="600")

    def cli(*args: str, **kw: str) -> subprocess.CompletedProcess:
        e = {**env, **kw}
        cmd = [sys.executable, "-m", "sweeps.cli", *args]
        return subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=300)

    ports = ("--dashboard-port", str(_port()), "--mlflow-port", str(_port()))
    up = cli("up", "--json", *ports)
    if up.returncode:
        raise RuntimeError(f"sweeps up failed: {up.stderr[-2000:]}")
    storage = f"sqlite:///{h}/optuna.db"
    try:
        # 20 one-second epochs a trial: a lane is taken mid-trial, not freed by a trial's end
        cli("submit", _spec(h.parent / "low.yaml", "pre-low", 3, 2, 20), SWEEPS_OWNER="alice")

        def both_run() -> bool:
            return sum(t["state"] == "RUNNING" for t in api.show("pre-low", storage)["trials"]) == 2

        if not _until(both_run, 240):
            raise RuntimeError("pre-low never ran two trials at once")
        high = _spec(h.parent / "high.yaml", "pre-high", 1, 1, 3)
        cli("submit", high, "--priority", "high", SWEEPS_OWNER="carol")
        done = ("finished", "failed", "stopped")
        for name in ("pre-low", "pre-high"):
            if not _until(lambda n=name: api.show(n, storage)["state"] in done, 400):
                raise RuntimeError(f"{name} never ended")
    finally:
        cli("down")
    import optuna

    trials = optuna.load_study(study_name="pre-low", storage=storage).trials
    parked = [t for t in trials if names.PREEMPTED in t.user_attrs]
    ok = 0
    for t in parked:
        again = [x for x in trials if x.user_attrs.get(names.REQUEUED_FROM) == t.number]
        ok += any(
            x.state.name == "COMPLETE"
            and x.params == t.params
            and x.user_attrs.get(names.RESUME_STEP) == t.user_attrs[names.PREEMPTED]
            for x in again
        )
    lost = left = 0
    for name in ("pre-low", "pre-high"):
        n_lost, n_left, _ = audit(h, name)
        lost, left = lost + n_lost, left + n_left
    print(json.dumps({"parked": len(parked), "requeued_complete": ok}), file=sys.stderr)
    return (ROW, len(parked), ok, lost, left)
