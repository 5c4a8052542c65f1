"""`sweeps pause`: the parking rule (sweeps.driver.pause) and the driver applying it, stepped
against fakes (no Ray). The end-to-end pause and resume is tests/test_pause_sweep.py."""

from __future__ import annotations

import pytest
from driver_fakes import Harness

from sweeps.common import names
from sweeps.contracts.protocol import Assignment, Checkpointed, Decision
from sweeps.driver import pause, recovery
from sweeps.driver.state import Ending, SweepStatus
from sweeps.search import liveness

pytestmark = pytest.mark.timeout(60)
EPOCHS = {"model": "mlp", "dataset": "digits", "epochs": 6}


def test_a_trial_parks_at_the_report_after_its_checkpoint():
    # checkpoint_step, step, last, waited, every
    assert pause.park_now(3, 2, 6, 1, 1), "only epoch 3 runs again"
    assert not pause.park_now(3, 1, 6, 1, 1), "the checkpoint of step 2 is still coming"
    assert not pause.park_now(6, 5, 6, 1, 1), "its last epoch: it completes"
    assert pause.park_now(3, None, 6, None, 0), "checkpoints off: nothing to wait for"
    assert not pause.park_now(3, None, 6, None, 4), "the save interval has not passed yet"
    assert not pause.park_now(5, None, 9, 5, 4), "every 4 epochs: it may still save one"
    assert pause.park_now(6, None, 9, 6, 4), "a whole interval more and no save: it parks"
    assert "starts over" in pause.parked_line(1, 6, None)
    assert "resumes there" in pause.parked_line(1, 6, 2)
    assert pause.parked_line(1, 3, 2) == "paused: trial 1 parked at its checkpoint (step 2)"


def test_a_pause_is_a_request_like_stop_and_cancel_and_ends_paused():
    assert names.requested("pause") == names.PAUSE_REQUESTED
    s = SweepStatus()
    s.drain(pause.REASON, Ending.PAUSED)
    s.drain("budget reached: 2/2 trials")  # a budget spent while pausing: still paused
    s.restate(pause.ended_reason(1, "sw"))
    end = s.end()
    assert end.name == "paused"
    assert end.reason == "paused: 1 trial parked at its checkpoint; sweeps resume sw"
    s = SweepStatus()
    s.drain(pause.REASON, Ending.PAUSED)
    s.cancel("cancelled (sweeps cancel)")
    assert s.end().name == "cancelled", "a cancel outranks a pause"


def _paused(h: Harness) -> None:
    h.study.set_user_attr(names.PAUSE_REQUESTED, h.clock() + 0.5)
    h.clock.t += 3  # past the driver's poll interval
    h.driver.step(0)
    assert liveness.requested(h.study, h.driver.started) is liveness.Request.PAUSE


def test_the_driver_parks_a_running_trial_and_resume_requeues_it_from_its_checkpoint():
    seen: list[str] = []
    notices = type("Notices", (), {"on_notice": lambda self, ctx, line: seen.append(line)})
    h = Harness(
        observers=[notices()],
        budget={"trials": 2, "parallel": 1},
        trainer=EPOCHS,
        execution={"checkpoint_every": 1, "checkpoint_min_interval_s": 0},
    )
    h.driver.start()
    (lane,) = h.lanes
    a = h.next(lane)
    for step in (1, 2):
        assert h.report(a, lane, step, val_accuracy=0.1 * step) is Decision.CONTINUE
        h.channel.push(Checkpointed(lane.lane_id, a.seq, step, f"/ckpt/0-step{step}"))
    _paused(h)
    assert h.driver.status.state.name == "draining"
    assert h.report(a, lane, 3, val_accuracy=0.3) is Decision.CANCEL
    h.finish(a, lane, state="pruned")  # the worker raised TrialPruned("cancelled ...")
    t = h.trial(a.trial_number)
    assert t.state.name == "FAIL" and t.user_attrs[names.CANCELLED] is True
    assert t.user_attrs[names.PARKED] == 2
    assert t.user_attrs[names.ERROR] == "paused: trial 0 parked at its checkpoint (step 2)"
    assert seen == [t.user_attrs[names.ERROR]], "an event line says so"
    steps = [v[1] for c, v in h.tracker.calls if c == "log_epoch" and v[0] == a.trial_number]
    assert steps == [1, 2], "the parked epoch is not logged: a resume runs it again"
    assert h.tracker.ends[a.trial_number].killed
    assert not isinstance(h.next(lane), Assignment), "no new trial while paused"
    h.end_lane(lane)
    out = h.driver.finish()
    assert out.state == "paused"
    assert out.reason == "paused: 1 trial parked at its checkpoint; sweeps resume t"
    assert h.study.user_attrs[names.STATE] == "paused"

    # `resume`: the parked trial is queued again with its params, from its checkpoint.
    assert recovery.requeue_cancelled(h.study) == [a.trial_number]
    (queued,) = [t for t in h.study.trials if t.state.name == "WAITING"]
    assert queued.system_attrs["fixed_params"] == a.params
    assert queued.user_attrs[names.RESUME_CHECKPOINT] == "/ckpt/0-step2"
    assert queued.user_attrs[names.RESUME_STEP] == 2


def test_a_trial_between_checkpoints_runs_to_its_next_one_before_it_parks():
    h = Harness(
        budget={"trials": 1, "parallel": 1},
        trainer=EPOCHS,
        execution={"checkpoint_every": 2, "checkpoint_min_interval_s": 0},
    )
    h.driver.start()
    (lane,) = h.lanes
    a = h.next(lane)
    assert h.report(a, lane, 1, val_accuracy=0.1) is Decision.CONTINUE
    _paused(h)
    assert h.report(a, lane, 2, val_accuracy=0.2) is Decision.CONTINUE, "it saves at step 2"
    h.channel.push(Checkpointed(lane.lane_id, a.seq, 2, "/ckpt/0-step2"))
    assert h.report(a, lane, 3, val_accuracy=0.3) is Decision.CANCEL
    h.finish(a, lane, state="pruned")
    assert h.trial(a.trial_number).user_attrs[names.PARKED] == 2
