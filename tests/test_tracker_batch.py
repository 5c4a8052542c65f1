"""The tracker's per-trial write buffer: a trial's params, epochs and end go out in as few
log_batch calls as the writer's backlog allows, and a store that fails a write loses nothing
and duplicates nothing. A real SQLite MLflow store; only its log_batch is made to fail."""

from __future__ import annotations

from types import SimpleNamespace

from mlflow.tracking import MlflowClient

from sweeps.contracts.protocol import TrialResult
from sweeps.contracts.records import TrialEnd, TrialRecord
from tracking.tracker import MLflowTracker


def _trial() -> TrialRecord:
    return TrialRecord(
        number=0,
        trial_id=7,
        params={"lr": 0.1},
        config={"lr": 0.1, "epochs": 2},
        seed=1,
        asked_at=0.0,
        assigned_at=0.0,
    )


def _sweep(tracker: MLflowTracker) -> SimpleNamespace:
    exp = tracker.client.create_experiment("batch")
    parent = tracker.client.create_run(exp).info.run_id
    return SimpleNamespace(
        parent_run_id=parent, study_name="s", spec=SimpleNamespace(name="s"), experiment_id=exp
    )


def _record(tracker: MLflowTracker, ctx: SimpleNamespace, t: TrialRecord) -> None:
    tracker.start_trial(ctx, t)
    tracker.log_epoch(ctx, t, 1, {"val": 0.5})
    tracker.log_epoch(ctx, t, 2, {"val": 0.6})
    t.last_step = 2
    result = TrialResult(state="complete", metrics={"val": 0.6})
    tracker.end_trial(ctx, t, TrialEnd("COMPLETE", [0.6], result, {"duration_s": 1.0}))


def _assert_whole(uri: str, run_id: str) -> None:
    client = MlflowClient(uri)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params["lr"] == "0.1" and run.data.params["fixed.epochs"] == "2"
    history = client.get_metric_history(run_id, "val")
    assert sorted((m.step, m.value) for m in history) == [(1, 0.5), (2, 0.6)]
    assert len(client.get_metric_history(run_id, "final_val")) == 1, "no duplicate on retry"
    assert len(client.get_metric_history(run_id, "objective")) == 1
    assert run.data.tags["sweeps.state"] == "COMPLETE"


def test_a_trial_is_written_whole_when_the_store_fails_some_writes(tmp_path):
    uri = f"sqlite:///{tmp_path}/m.db"
    tracker = MLflowTracker(uri)
    ctx = _sweep(tracker)
    real, calls = tracker.client.log_batch, []

    def flaky(run_id, **kw):  # the first two writes of the trial fail, as a blinking store's
        calls.append(kw)
        if run_id != ctx.parent_run_id and len(calls) <= 2:
            raise ConnectionError("store blinked")
        return real(run_id, **kw)

    tracker.client.log_batch = flaky
    t = _trial()
    _record(tracker, ctx, t)
    assert tracker.flush() == []
    run_id = dict(tracker.created_runs())[t.trial_id]
    _assert_whole(uri, run_id)
    tracker.close()


def test_writes_that_pile_up_go_out_together(tmp_path):
    uri = f"sqlite:///{tmp_path}/m.db"
    tracker = MLflowTracker(uri)
    ctx = _sweep(tracker)
    real, calls = tracker.client.log_batch, []

    def counted(run_id, **kw):
        calls.append(kw)
        return real(run_id, **kw)

    tracker.client.log_batch = counted
    gate = __import__("threading").Event()
    tracker.writer.submit(gate.wait)  # the writer is busy while the trial runs and ends
    t = _trial()
    _record(tracker, ctx, t)
    gate.set()
    assert tracker.flush() == []
    # Params, both epochs, the final metrics and tags: one log_batch (it was three or four).
    assert len(calls) == 1, calls
    _assert_whole(uri, dict(tracker.created_runs())[t.trial_id])
    tracker.close()
