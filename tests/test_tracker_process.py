"""The tracker's writes in a child process (`tracking.writer_proc`), against a real SQLite MLflow
store: a trial is recorded whole, the driver learns its run id, a driver killed outright still
leaves what it had sent written, and a writer process that dies hands the writes back to the
driver, which says what may be missing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from mlflow.tracking import MlflowClient
from test_tracker_batch import _assert_whole, _record, _sweep, _trial

from sweeps.common import timeline
from sweeps.contracts.protocol import TrialResult
from sweeps.contracts.records import TrialEnd
from tracking.tracker import MLflowTracker

ROOT = Path(__file__).resolve().parent.parent


def _run_id(tracker: MLflowTracker, trial_id: int, timeout: float = 30) -> str:
    deadline, seen = time.monotonic() + timeout, {}
    while time.monotonic() < deadline:
        seen.update(tracker.created_runs())
        if trial_id in seen:
            return seen[trial_id]
        time.sleep(0.05)
    raise AssertionError(f"no run id came back for trial id {trial_id}")


def test_a_trial_is_recorded_whole_by_the_writer_process(tmp_path):
    uri = f"sqlite:///{tmp_path}/m.db"
    tracker = MLflowTracker(uri, process=True)
    # The child makes the new store's schema: this process's client (in _sweep) must not make
    # it at the same time (alembic's "expected to match one row" when two processes race).
    assert tracker.flush() == []
    ctx = _sweep(tracker)
    t = _trial()
    timeline.begin(from_process_start=False)
    _record(tracker, ctx, t)
    tracker._submit(timeline.mark, "writer.event", trial=t.number)  # a mark on the writer
    assert tracker.flush() == []
    _assert_whole(uri, _run_id(tracker, t.trial_id))
    assert timeline.current().first("writer.event", trial=0) is not None, "on our timeline"
    child = tracker.remote.proc
    tracker.close()
    assert child.poll() == 0, "the writer process ends with the tracker"


def test_writes_go_on_in_the_driver_when_the_writer_process_dies(tmp_path):
    uri = f"sqlite:///{tmp_path}/m.db"
    tracker = MLflowTracker(uri, process=True)
    # The child made the new store's schema first: this process's client (in _sweep) must
    # not create it at the same time (a sweep's driver never opens one).
    assert tracker.flush() == []
    ctx = _sweep(tracker)
    t = _trial()
    tracker.start_trial(ctx, t)
    run_id = _run_id(tracker, t.trial_id)
    tracker.remote.proc.kill()
    tracker.remote.proc.wait()
    tracker.remote._reader.join(timeout=10)  # it has seen the pipe close
    tracker.log_epoch(ctx, t, 1, {"val": 0.5})
    t.last_step = 1
    result = TrialResult(state="complete", metrics={"val": 0.5})
    tracker.end_trial(ctx, t, TrialEnd("COMPLETE", [0.5], result, {"duration_s": 1.0}))
    errors = tracker.flush()
    assert len(errors) == 1 and "MLflow writer process" in errors[0] and "missing" in errors[0]
    run = MlflowClient(uri).get_run(run_id)
    assert run.info.status == "FINISHED", "the driver's own writer closed the run"
    assert run.data.metrics["final_val"] == 0.5
    tracker.close()


def test_a_driver_killed_outright_leaves_what_it_sent_written(tmp_path):
    """SIGKILL the driver right after it handed over a trial's record: the writer process
    sees the pipe close, writes everything it was sent, and exits."""
    uri = f"sqlite:///{tmp_path}/m.db"
    script = textwrap.dedent(
        f"""
        import os, signal, sys
        sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / "tests")!r}]
        from test_tracker_batch import _record, _sweep, _trial
        from tracking.tracker import MLflowTracker
        tracker = MLflowTracker({uri!r}, process=True)
        assert tracker.flush() == []  # the child makes the schema first
        ctx = _sweep(tracker)
        _record(tracker, ctx, _trial())
        print(tracker.remote.proc.pid, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == -signal.SIGKILL, r.stderr[-2000:]
    child = int(r.stdout.split()[0])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _alive(child):
        time.sleep(0.1)
    assert not _alive(child), "the writer process outlived its work"
    client = MlflowClient(uri)
    runs = client.search_runs(
        [e.experiment_id for e in client.search_experiments()], "tags.`sweeps.role` = 'trial'"
    )
    assert len(runs) == 1
    _assert_whole(uri, runs[0].info.run_id)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (its parent, the killed driver, is gone: init reaps it soon)
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def test_the_parent_run_is_made_by_the_writer_process_and_mlflow_stays_out_of_the_driver(tmp_path):
    """A driver hands the parent run to the writer process and goes on: the trial it starts
    before the parent's ids come back is still nested under it, and the driver never imported
    MLflow (its import and the store's schema were ~2 s before a warm sweep's first trial)."""
    uri = f"sqlite:///{tmp_path}/m.db"
    script = textwrap.dedent(
        f"""
        import json, sys
        sys.path[:0] = [{str(ROOT)!r}, {str(ROOT / "tests")!r}]
        import time
        from conftest import make_spec
        from sweeps.contracts.records import SweepContext, TrialEnd, TrialRecord
        from sweeps.contracts.protocol import TrialResult
        from tracking.tracker import MLflowTracker
        tracker = MLflowTracker({uri!r}, process=True)
        ctx = SweepContext(make_spec(name="nested"), "nested", "sqlite://", time.time())
        tracker.start_sweep(ctx)
        early = ctx.parent_run_id
        t = TrialRecord(number=0, trial_id=7, params={{"lr": 0.1}},
                        config={{"lr": 0.1, "epochs": 2}}, seed=1, asked_at=0.0, assigned_at=0.0)
        tracker.start_trial(ctx, t)  # what test_tracker_batch._record does
        tracker.log_epoch(ctx, t, 1, {{"val": 0.5}})
        tracker.log_epoch(ctx, t, 2, {{"val": 0.6}})
        t.last_step = 2
        result = TrialResult(state="complete", metrics={{"val": 0.6}})
        tracker.end_trial(ctx, t, TrialEnd("COMPLETE", [0.6], result, {{"duration_s": 1.0}}))
        assert tracker.sweep_run(ctx, 120) and tracker.flush() == []
        print(json.dumps([early, ctx.parent_run_id, ctx.experiment_id,
                          sorted(m for m in sys.modules if m.split(".")[0] == "mlflow")]))
        tracker.close()
        """
    )
    # cwd: MLflow puts an experiment made without an artifact location under ./mlruns
    r = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=180, cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr[-3000:]
    early, parent, experiment, imported = json.loads(r.stdout.splitlines()[-1])
    assert early is None and parent and experiment, "the ids came back, later"
    assert imported == [], "the driver's side never imports MLflow"
    client = MlflowClient(uri)
    (run,) = client.search_runs([experiment], "tags.`sweeps.role` = 'trial'")
    assert run.data.tags["mlflow.parentRunId"] == parent
    assert client.get_run(parent).data.params["sampler"] == "tpe"
    _assert_whole(uri, run.info.run_id)
