"""Fair share on a real local service (2 CPUs, so two one-CPU lanes): the arbiter splits the
lanes between two owners' sweeps (neither may cancel the other's; a sweep over its team's quota
is refused), a high-priority sweep takes one back at the next checkpoint
and the trial it parks finishes later from there, with the same params; the arbiter is
SIGKILLed mid-sweep, Ray restarts it, and every sweep still finishes with nothing lost.

One sweep of each kind, reused for every assertion: the whole file is one service and ~2 min.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import optuna
import pytest
from conftest import BYO
from mlflow.tracking import MlflowClient
from test_service import Svc, svc  # noqa: F401  (the module's service fixture)

from sweeps.common import names

pytestmark = pytest.mark.timeout(600)
EPOCHS, EPOCH_S = 8, 1.0


def _spec(path: Path, name: str, trials: int, parallel: int, epochs: int) -> str:
    path.write_text(
        f"name: {name}\n"
        "objective: {metric: val_accuracy, direction: maximize}\n"
        "search_space: {lr: {type: float, low: 0.001, high: 0.02, log: true}}\n"
        "sampler: {name: random, seed: 5}\n"
        "pruner: {name: none}\n"
        f"budget: {{trials: {trials}, parallel: {parallel}}}\n"
        "execution: {checkpoint_every: 1, checkpoint_min_interval_s: 0}\n"
        f"trainer: {{entrypoint: 'retry_tasks:endless', code_dir: '{BYO}', epochs: {epochs}, "
        f"params: {{epoch_s: {EPOCH_S}}}}}\n"
    )
    return str(path)


def _submit(s: Svc, spec: str, owner: str, *args: str) -> None:
    s.cli("submit", spec, *args, env={**s.env, "SWEEPS_OWNER": owner}, timeout=180)


def _queue(s: Svc) -> dict:
    return json.loads(s.cli("queue", "--json", timeout=120).stdout)


def _rows(doc: dict) -> dict[str, dict]:
    return {r["sweep"]: r for r in doc["sweeps"]}


def _until(what: str, ok, timeout: float = 150.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = ok()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"never: {what}")


def _trials(s: Svc, name: str) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=name, storage=s.storage).get_trials(deepcopy=False)


def _overlap(trials: list[optuna.trial.FrozenTrial]) -> bool:
    spans = sorted((t.datetime_start, t.datetime_complete) for t in trials)
    return any(b[0] < a[1] for a, b in zip(spans, spans[1:], strict=False))


def test_fair_share_preemption_and_a_killed_arbiter(svc, tmp_path):  # noqa: F811
    t0 = time.monotonic()
    # (a) two owners' sweeps, each asking for both lanes, submitted together; 3 trials each:
    # work left for fs-c to take a lane from, on a loaded machine too
    _submit(svc, _spec(tmp_path / "a.yaml", "fs-a", 3, 2, EPOCHS), "alice")
    _submit(svc, _spec(tmp_path / "b.yaml", "fs-b", 3, 2, EPOCHS), "bob")

    def split():
        rows = _rows(_queue(svc))
        pair = [rows.get("fs-a", {}), rows.get("fs-b", {})]
        return rows if all(r.get("held") == 1 and r.get("target") == 1 for r in pair) else None

    def both_train():  # a lane still starting would go back unparked: wait for trials
        running = [
            [t for t in _trials(svc, n) if t.state.name == "RUNNING"] for n in ("fs-a", "fs-b")
        ]
        return all(running)

    rows = _until("each sweep holds one lane", split)
    _until("each sweep runs a trial", both_train)
    assert rows["fs-a"]["owner"] == "alice" and rows["fs-b"]["owner"] == "bob"
    assert rows["fs-a"]["want"] == 2 and rows["fs-a"]["priority"] == "normal"
    split_s = time.monotonic() - t0

    # an owner cannot cancel another owner's sweep: exit 2, one line, the sweep runs on
    bob = {**svc.env, "MLFLOW_TRACKING_USERNAME": "bob"}
    r = svc.cli("cancel", "fs-a", env=bob, check=False)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0, r.stderr
    assert "sweep 'fs-a' is alice's: bob may not cancel it" in r.stderr

    # (b) a high-priority third sweep gets a lane back from one of them
    submitted = time.time()
    _submit(svc, _spec(tmp_path / "c.yaml", "fs-c", 1, 1, 3), "carol", "--priority", "high")
    first = _until(
        "fs-c's trial starts",
        lambda: [t for t in _trials(svc, "fs-c") if t.datetime_start] if _has(svc, "fs-c") else 0,
    )
    waited_s = first[0].datetime_start.timestamp() - submitted

    # (c) the arbiter's process is SIGKILLed mid-sweep: Ray starts it again
    before = _queue(svc)
    assert _rows(before)["fs-c"]["priority"] == "high"
    queued = [(r["sweep"], r.get("position")) for r in before["sweeps"] if r["state"] == "queued"]
    assert len(queued) == 1 and queued[0][0] in ("fs-a", "fs-b") and queued[0][1] == 1, queued
    print("\n" + svc.cli("queue", env={**svc.env, "COLUMNS": "120"}).stdout)
    os.kill(before["pid"], signal.SIGKILL)
    # (while the sweeps finish) a sweep over its team's quota is refused before anything of
    # it starts: exit 2
    teams = tmp_path / "teams.yaml"
    teams.write_text("teams:\n  vision: {members: [dave], quota: {usd: 0.0001, period: month}}\n")
    dave = {**svc.env, "SWEEPS_TEAMS": str(teams), "MLFLOW_TRACKING_USERNAME": "dave"}
    spec_d = _spec(tmp_path / "d.yaml", "fs-d", 2, 1, EPOCHS)
    priced = (
        "--set",
        "budget.trial_timeout_s=3600",
        "--set",
        "resources.machine_type=e2-standard-2",
    )
    r = svc.cli("submit", spec_d, *priced, env=dave, check=False)
    assert r.returncode == 2 and r.stderr.startswith("error: quota: team vision has $0.00"), r
    assert "this sweep may cost $" in r.stderr and not _has(svc, "fs-d")
    for name in ("fs-a", "fs-b", "fs-c"):
        assert svc.wait(name, ("finished", "failed", "stopped"), timeout=300)["state"] == "finished"
    after = _queue(svc)
    assert after["pid"] and after["pid"] != before["pid"], "restarted by Ray"

    client = MlflowClient(svc.tracking)
    trials = {name: _trials(svc, name) for name in ("fs-a", "fs-b", "fs-c")}
    parked = [t for ts in trials.values() for t in ts if names.PREEMPTED in t.user_attrs]
    assert parked, "a trial of fs-a or fs-b gave its lane to fs-c"
    for ts in trials.values():
        states = {t.state.name for t in ts if names.PREEMPTED not in t.user_attrs}
        assert states == {"COMPLETE"}, [(t.number, t.state.name, t.user_attrs) for t in ts]
    for name in ("fs-a", "fs-b"):  # one lane each, never two at once
        assert not _overlap([t for t in trials[name] if t.datetime_complete]), name
    for t in parked:
        step = t.user_attrs[names.PREEMPTED]
        assert t.state.name == "FAIL" and t.user_attrs[names.CANCELLED] and step >= 1
        assert t.user_attrs[names.ERROR].startswith(f"preempted: trial {t.number} parked")
        run = client.get_run(t.user_attrs["mlflow_run_id"])
        assert run.info.status == "KILLED" and run.data.tags[names.PREEMPTED] == str(step)
        sweep = next(n for n, ts in trials.items() if t in ts)
        (again,) = [x for x in trials[sweep] if x.user_attrs.get(names.REQUEUED_FROM) == t.number]
        assert again.state.name == "COMPLETE" and again.params == t.params
        assert again.user_attrs[names.RESUME_STEP] == step
        started = client.get_metric_history(again.user_attrs["mlflow_run_id"], "started_at")
        assert {m.value for m in started} == {float(step)}, "resumed past step 0, from there"
    # a checkpoint interval (one epoch) plus a lane start, plus the submission itself
    assert waited_s < 60, waited_s
    print(f"\nsplit after {split_s:.1f} s; fs-c's trial {waited_s:.1f} s after its submit")


def _has(s: Svc, name: str) -> bool:
    try:
        optuna.load_study(study_name=name, storage=s.storage)
        return True
    except KeyError:
        return False
