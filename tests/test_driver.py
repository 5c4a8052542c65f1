"""The driver's decisions, stepped one turn at a time against fakes: no Ray, no ray.init.

Each test plays the lanes' side of the protocol (NextTrial, Report, Finished, ...) and checks
what the driver answered and what it wrote to an in-memory Optuna study and to the tracker.
"""

from __future__ import annotations

import time

import pytest
from driver_fakes import Harness

from sweeps.common.errors import ProtocolError
from sweeps.contracts.observers import SweepObserver
from sweeps.contracts.protocol import (
    Assignment,
    Checkpointed,
    Decision,
    Failed,
    Finished,
    Log,
    Restarted,
    Stop,
    TrialResult,
    next_key,
)
from sweeps.search import study as st
from sweeps.search.trial_attrs import PendingAttrs

pytestmark = pytest.mark.timeout(60)


def _started(**spec_fields):
    h = Harness(**spec_fields)
    h.driver.start()
    return h


def test_a_lane_asking_gets_an_assignment_of_a_claimed_trial():
    h = _started()
    (lane,) = h.lanes
    a = h.next(lane)
    assert isinstance(a, Assignment)
    t = h.trial(a.trial_number)
    assert t.state.name == "RUNNING"
    assert t.user_attrs["sweeps.driver"] == h.driver.driver_id
    assert a.params == t.params and a.config["lr"] == t.params["lr"]
    assert a.config["epochs"] == 3, "fixed trainer settings travel with the params"
    assert "mlflow_run_id" not in t.user_attrs, "the link waits for the trial's next write"
    h.clock.t += PendingAttrs.DEFER_S
    h.driver.step(0)
    t = h.trial(a.trial_number)
    assert t.user_attrs["mlflow_run_id"] == f"run-{a.trial_number}", "or written once overdue"
    assert t.user_attrs["sweeps.lane"] == lane.lane_id and t.user_attrs["sweeps.seed"] == a.seed


def test_a_short_trial_is_linked_placed_and_costed_in_one_write_before_its_tell():
    h = _started()
    (lane,) = h.lanes
    writes = []
    real = st.set_trial_attrs
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(
            st, "set_trial_attrs", lambda s, tid, attrs: writes.append(attrs) or real(s, tid, attrs)
        )
        a = h.run_trial(lane, [0.5])
    claim, *rest = writes  # the ask's claim (an in-memory storage writes it apart)
    assert list(claim) == ["sweeps.driver"] and len(rest) == 1, writes
    t = h.trial(a.trial_number)
    assert t.state.name == "COMPLETE"
    assert {"mlflow_run_id", "sweeps.lane", "sweeps.seed", "duration_s", "cost_usd"} <= set(
        t.user_attrs
    )


def test_reports_reach_optuna_and_the_tracker_and_continue():
    h = _started()
    (lane,) = h.lanes
    a = h.next(lane)
    assert h.report(a, lane, 1, val_accuracy=0.5) is Decision.CONTINUE
    assert h.trial(a.trial_number).intermediate_values == {1: 0.5}
    assert ("log_epoch", (a.trial_number, 1)) in h.tracker.calls


def test_the_pruner_decides_prune_and_the_trial_ends_pruned():
    h = _started(pruner={"name": "median", "options": {"n_startup_trials": 1}})
    (lane,) = h.lanes
    h.run_trial(lane, [0.8, 0.9])
    a = h.next(lane)
    assert h.report(a, lane, 1, val_accuracy=0.1) is Decision.PRUNE
    h.finish(a, lane, state="pruned")
    assert h.trial(a.trial_number).state.name == "PRUNED"
    assert h.tracker.ends[a.trial_number].state == "PRUNED"


def test_an_end_that_overtakes_its_last_report_waits_for_it():
    """With no pruner a one-worker trial does not wait for a report's answer, and Ray does not
    order an async actor's calls: a trial's end can reach the driver before its last report.
    The end waits for it (a told trial is read-only), and one whose report never comes ends
    after LATE_S."""
    assert _started(pruner={"name": "median"}).next_of_first_lane().trainer.prunes is True
    h = _started(pruner={"name": "none"})
    (lane,) = h.lanes
    a = h.next(lane)
    assert a.trainer.prunes is False, "the workers need not wait for an answer"
    h.report(a, lane, 1, val_accuracy=0.5)
    ended = TrialResult(state="complete", metrics={"val_accuracy": 0.7}, steps=2)
    h.channel.push(Finished(lane.lane_id, a.seq, ended))
    h.driver.step(0)
    assert h.trial(a.trial_number).state.name == "RUNNING", "its step-2 report is on its way"
    assert h.report(a, lane, 2, val_accuracy=0.7) is Decision.CONTINUE
    t = h.trial(a.trial_number)
    assert t.state.name == "COMPLETE" and t.intermediate_values == {1: 0.5, 2: 0.7}
    assert h.tracker.ends[a.trial_number].state == "COMPLETE"

    h.driver.book.LATE_S = 0.05
    b = h.next(lane)
    h.channel.push(Finished(lane.lane_id, b.seq, TrialResult(state="complete", steps=1)))
    h.driver.step(0)
    assert h.trial(b.trial_number).state.name == "RUNNING"
    time.sleep(0.1)
    h.driver.step(0)
    assert h.trial(b.trial_number).state.name == "FAIL", "no objective came: failed, not lost"


def test_a_trial_at_its_last_epoch_is_never_pruned():
    """The built-in trainer's last report (epochs = 3 here) ends the training anyway: pruning
    there would throw a complete result away and label it PRUNED. Earlier epochs still prune;
    user code, whose last step the driver cannot know, is pruned as Optuna says."""
    h = _started(pruner={"name": "median", "options": {"n_startup_trials": 1}})
    (lane,) = h.lanes
    h.run_trial(lane, [0.8, 0.9, 0.95])
    a = h.next(lane)
    assert h.report(a, lane, 1, val_accuracy=0.85) is Decision.CONTINUE
    assert h.report(a, lane, 2, val_accuracy=0.92) is Decision.CONTINUE
    assert h.report(a, lane, 3, val_accuracy=0.1) is Decision.CONTINUE, "the last epoch"
    assert h.trial(a.trial_number).intermediate_values[3] == 0.1, "still reported to Optuna"
    b = h.next(lane)
    assert h.report(b, lane, 2, val_accuracy=0.1) is Decision.PRUNE, "before it, it prunes"
    u = _started(
        pruner={"name": "median", "options": {"n_startup_trials": 1}},
        trainer={"entrypoint": "byo_tasks:train", "epochs": 3},
    )
    (lane,) = u.lanes
    u.run_trial(lane, [0.8, 0.9, 0.95])
    c = u.next(lane)
    assert u.report(c, lane, 3, val_accuracy=0.1) is Decision.PRUNE, "user code: Optuna decides"


def test_a_finished_trial_is_complete_with_its_value_and_cost_attrs():
    h = _started()
    (lane,) = h.lanes
    h.clock.t += 0  # assignment and end at the same fake time: zero duration
    a = h.run_trial(lane, [0.5, 0.7])
    t = h.trial(a.trial_number)
    assert t.state.name == "COMPLETE" and t.value == 0.7
    assert {"duration_s", "cost_usd", "gpu_hours", "train_seconds"} <= set(t.user_attrs)
    end = h.tracker.ends[a.trial_number]
    assert end.state == "COMPLETE" and end.values == [0.7]


def test_a_run_created_after_its_trial_ended_is_linked_at_once():
    """The tracker's writer may create a tiny trial's MLflow run only after the trial's
    Finished arrived: the driver serves the lanes meanwhile, and links and tells the trial as
    soon as the run appears (not after its 10 s wait, and without sleeping for it)."""
    h = _started()
    (lane,) = h.lanes
    held: list[tuple[int, str]] = []
    created_runs = h.tracker.created_runs
    release_at = time.monotonic() + 0.5

    def late() -> list[tuple[int, str]]:  # runs appear half a second late
        held.extend(created_runs())
        if time.monotonic() < release_at:
            return []
        out, held[:] = list(held), []
        return out

    h.tracker.created_runs = late
    t0 = time.monotonic()
    a = h.run_trial(lane, [0.5])
    assert time.monotonic() - t0 < 0.4, "finish waited for the run instead of serving lanes"
    assert h.trial(a.trial_number).state.name == "RUNNING", "told only once linked"
    assert isinstance(h.next(lane), Assignment), "the lane got its next trial meanwhile"
    while h.trial(a.trial_number).state.name == "RUNNING" and time.monotonic() - t0 < 5:
        h.driver.step(0)
    assert time.monotonic() - t0 < 5, "told as soon as its run appeared, not after 10 s"
    t = h.trial(a.trial_number)
    assert t.state.name == "COMPLETE" and t.user_attrs["mlflow_run_id"] == f"run-{a.trial_number}"


def test_a_missing_objective_metric_cancels_and_fails_the_trial():
    h = _started()
    (lane,) = h.lanes
    a = h.next(lane)
    assert h.report(a, lane, 1, accuracy=0.5) is Decision.CANCEL
    h.finish(a, lane, state="pruned")
    t = h.trial(a.trial_number)
    assert t.state.name == "FAIL"
    assert (
        "objective metric 'val_accuracy' is not among the reported metrics"
        in (t.user_attrs["sweeps.error"])
    )


def test_the_failure_limit_drains_and_the_sweep_ends_failed():
    h = _started(budget={"trials": 5, "parallel": 1, "max_failed_trials": 2})
    (lane,) = h.lanes
    for _ in range(2):
        a = h.next(lane)
        h.channel.push(Failed(lane.lane_id, a.seq, "ValueError: boom"))
        h.driver.step(0)
    assert isinstance(h.next(lane), Stop)
    h.end_lane(lane)
    out = h.driver.finish()
    assert out.state == "failed" and "2 trials failed" in out.reason


def test_the_trial_budget_stops_lanes_and_the_sweep_finishes():
    h = _started(budget={"trials": 2, "parallel": 1})
    (lane,) = h.lanes
    h.run_trial(lane, [0.5])
    h.run_trial(lane, [0.6])
    stop = h.next(lane)
    assert isinstance(stop, Stop) and "budget reached: 2/2" in stop.reason
    h.end_lane(lane)
    assert not h.driver.step(0), "no lane left: the loop ends"
    out = h.driver.finish()
    assert out.state == "finished" and out.reason.startswith("budget reached")
    assert h.study.user_attrs["sweeps.state"] == "finished"


def test_the_sweep_ends_without_waiting_for_a_lane_still_starting():
    h = _started(budget={"trials": 2, "parallel": 2})
    first, starting = h.lanes
    h.run_trial(first, [0.5])
    h.run_trial(first, [0.6])  # the other lane is still starting
    assert isinstance(h.next(first), Stop)
    h.end_lane(first)
    assert not h.driver.step(0), "the budget is spent: the lane still starting is not waited for"
    stop = h.channel.answers[next_key(starting.lane_id, 1)]
    assert isinstance(stop, Stop) and stop.keep_warm, "its first request is answered already"
    assert h.driver.finish().state == "finished"


def test_a_lane_still_starting_is_waited_for_while_trials_remain():
    h = _started(budget={"trials": 3, "parallel": 2})
    first, starting = h.lanes
    h.run_trial(first, [0.5])
    assert h.driver.step(0)
    assert next_key(starting.lane_id, 1) not in h.channel.answers


def test_on_two_cpus_the_second_lane_starts_once_the_work_left_outlasts_a_start():
    h = _started(cpus=2, budget={"trials": 5, "parallel": 2})
    (first,) = h.lanes
    assert h.driver.pool.active() == 2, "the second lane waits, counted against `parallel`"
    h.clock.t += 10  # the first lane's start-up
    assert isinstance(h.next(first), Assignment)
    h.driver.step(0)
    assert len(h.lanes) == 1, "no trial has run yet: nothing says a start would pay"
    h.clock.t += 2
    h.driver.step(0)
    assert len(h.lanes) == 1, "4 trials left x 2 s on one lane: 8 s, less than a 10 s start"
    h.clock.t += 1
    h.driver.step(0)
    # 4 x 3 s outlasts a 10 s start, but the start's 2 processes take a third of the running
    # trial's CPU meanwhile: 12.7 s with the second lane against 12 s without.
    assert len(h.lanes) == 1, "4 x 3 s: not enough once the start's CPU is counted"
    h.clock.t += 1
    h.driver.step(0)
    assert len(h.lanes) == 2, "4 x 4 s: 16 s of work left, 14.7 s with a second lane"
    big = _started(cpus=4, budget={"trials": 5, "parallel": 2})
    assert len(big.lanes) == 2, "four CPUs carry two cold starts at once"


def test_a_few_short_trials_run_on_the_first_lane_and_the_waiting_one_never_starts():
    h = _started(cpus=2, budget={"trials": 4, "parallel": 2})
    (first,) = h.lanes
    h.clock.t += 10
    for value in (0.1, 0.2, 0.3, 0.4):
        a = h.next(first)
        h.clock.t += 1
        h.driver.step(0)
        h.report(a, first, 1, val_accuracy=value)
        h.finish(a, first, val_accuracy=value)
    assert isinstance(h.next(first), Stop)
    h.end_lane(first)
    assert not h.driver.step(0)
    assert len(h.lanes) == 1 and h.driver.finish().state == "finished"


def test_a_lane_per_trial_on_two_cpus_ends_when_the_budget_is_spent():
    # Isolated mode: each lane runs one trial and is replaced. The last trial's lane is
    # recycled, not told the budget is spent, and the next lane still waits for CPUs: nothing
    # asks for another trial, yet the sweep must see that nothing more will run.
    h = _started(cpus=2, budget={"trials": 3, "parallel": 2}, execution={"recycle_after_trials": 1})
    for _ in range(3):
        lane = next(x for x in h.lanes if x.launched and not x.done.is_set())
        h.clock.t += 10
        h.run_trial(lane, [0.5])
        assert isinstance(h.next(lane), Stop)
        h.end_lane(lane)
    assert not h.driver.step(0), "the waiting lane is dropped and the loop ends"
    out = h.driver.finish()
    assert out.state == "finished" and "budget reached: 3/3" in out.reason


def test_a_lane_waiting_to_start_never_starts_once_the_sweep_drains():
    h = _started(cpus=2, budget={"trials": 10, "parallel": 2})
    (first,) = h.lanes
    h.study.set_user_attr("sweeps.stop_requested", time.time())
    h.clock.t += 3
    h.driver.step(0)
    assert isinstance(h.next(first), Stop)
    h.end_lane(first)
    assert not h.driver.step(0), "nothing runs, the waiting lane is dropped: the loop ends"
    assert len(h.lanes) == 1 and h.driver.finish().state == "stopped"


def test_a_lane_that_dies_starting_makes_room_for_the_one_waiting():
    h = _started(cpus=2, budget={"trials": 5, "parallel": 2})
    (first,) = h.lanes
    h.end_lane(first, RuntimeError("no workers"))
    second, replacement = h.lanes[1], h.driver.pool.newest()
    assert second.launched and not replacement.launched, "in order, one start at a time"
    h.clock.t += 10
    assert isinstance(h.next(second), Assignment)
    h.clock.t += 4  # 4 trials left x 4 s: more than a 10 s start and what it takes meanwhile
    h.driver.step(0)
    assert replacement.launched


def test_a_timeout_drains_and_the_sweep_ends_finished():
    h = _started(budget={"trials": 10, "parallel": 1, "timeout_s": 60})
    (lane,) = h.lanes
    h.run_trial(lane, [0.5])
    h.clock.t += 61
    h.driver.step(0)
    assert isinstance(h.next(lane), Stop)
    h.end_lane(lane)
    out = h.driver.finish()
    assert out.state == "finished" and "timeout after 60 s" in out.reason


def test_the_target_value_ends_the_search_early():
    h = _started(budget={"trials": 10, "parallel": 1, "target": 0.9})
    (lane,) = h.lanes
    h.run_trial(lane, [0.95])
    stop = h.next(lane)
    assert isinstance(stop, Stop) and "target reached" in stop.reason
    h.end_lane(lane)
    assert h.driver.finish().state == "finished"


def test_the_money_budget_stops_before_a_trial_forecast_to_cross_it(tmp_path, monkeypatch):
    table = tmp_path / "machines.yaml"
    table.write_text("machines:\n  dear: {vcpus: 1, memory_gb: 1, price_per_hour: 3600}\n")
    monkeypatch.setenv("SWEEPS_MACHINES", str(table))
    h = _started(
        budget={"trials": 10, "parallel": 1, "max_cost_usd": 25},
        resources={"machine_type": "dear"},
    )
    (lane,) = h.lanes
    for _ in range(2):  # $1 a second: each trial below costs $10
        a = h.next(lane)
        h.clock.t += 10
        h.finish(a, lane, val_accuracy=0.5)
    stop = h.next(lane)
    assert isinstance(stop, Stop) and "money budget" in stop.reason
    h.end_lane(lane)
    assert h.driver.finish().state == "finished"  # a budget reached, as with trials


def test_a_lane_that_dies_fails_its_trial_and_is_replaced():
    h = _started()
    (lane,) = h.lanes
    a = h.next(lane)
    h.end_lane(lane, RuntimeError("node died"))
    t = h.trial(a.trial_number)
    assert (
        t.state.name == "FAIL" and "worker group failed: node died" in t.user_attrs["sweeps.error"]
    )
    assert len(h.lanes) == 2 and not h.lanes[1].done.is_set(), "a fresh lane took its place"


def test_lanes_that_keep_dying_fail_the_sweep():
    h = _started(budget={"trials": 50, "parallel": 1})
    for _ in range(5):
        h.end_lane(h.lanes[-1], RuntimeError("cannot start workers"))
    assert not h.driver.status.launching
    assert "5 lanes failed" in h.driver.status.reason
    while len(h.driver.pool):
        h.end_lane(h.lanes[-1])
    assert h.driver.finish().state == "failed"


def test_a_restart_is_counted_and_a_checkpoint_remembered():
    h = _started()
    (lane,) = h.lanes
    a = h.next(lane)
    h.channel.push(
        Checkpointed(lane.lane_id, a.seq, 2, "/ckpt/trial0-step2"),
        Restarted(lane.lane_id, a.seq, 1),
        Log(lane.lane_id, a.seq, "epoch 2 done\n"),
    )
    h.driver.step(0)
    t = h.trial(a.trial_number)
    assert t.user_attrs["sweeps.restarts"] == 1
    assert t.user_attrs["sweeps.checkpoint"] == "/ckpt/trial0-step2"
    assert t.user_attrs["sweeps.checkpoint_step"] == 2
    assert ("trial_restarted", (a.trial_number, 1)) in h.tracker.calls


def test_ctrl_c_once_drains_twice_cancels_and_nothing_is_left_running():
    h = _started(budget={"trials": 5, "parallel": 1})
    (lane,) = h.lanes
    a = h.next(lane)
    h.driver.interrupt()
    assert h.report(a, lane, 1, val_accuracy=0.5) is Decision.CONTINUE, "running trials finish"
    h.driver.interrupt()
    assert h.report(a, lane, 2, val_accuracy=0.6) is Decision.CANCEL
    h.finish(a, lane, state="pruned")  # the worker raised TrialPruned("cancelled ...")
    assert isinstance(h.next(lane), Stop)
    h.end_lane(lane)
    out = h.driver.finish()
    assert out.state == "interrupted"
    assert h.trial(a.trial_number).state.name == "FAIL"
    with pytest.raises(KeyboardInterrupt):
        h.driver.interrupt()  # a third Ctrl-C: the user insists


def test_trials_of_a_dead_driver_are_failed_requeued_with_their_checkpoint_and_closed():
    first = _started(budget={"trials": 3, "parallel": 1})
    (lane,) = first.lanes
    a = first.next(lane)
    first.channel.push(Checkpointed(lane.lane_id, a.seq, 30, "/ckpt/trial0-step30"))
    first.driver.step(0)
    # The first driver dies: its heartbeat goes stale, its trial stays RUNNING.
    first.study.set_user_attr(f"sweeps.driver.{first.driver.driver_id}", {"t": 0, "pid": 1})
    second = Harness(study=first.study, budget={"trials": 3, "parallel": 1})
    second.driver.start()
    old = second.trial(a.trial_number)
    assert old.state.name == "FAIL" and "re-queued" in old.user_attrs["sweeps.error"]
    assert second.tracker.closed_stale == [f"run-{a.trial_number}"]
    (lane2,) = second.lanes
    again = second.next(lane2)
    assert isinstance(again, Assignment) and again.trial_number != a.trial_number
    assert again.params == a.params, "the same params"
    assert again.resume_from == "/ckpt/trial0-step30", "continues from its checkpoint"
    t = second.trial(again.trial_number)
    assert t.user_attrs["sweeps.resumed_from_trial"] == a.trial_number


def test_sweeps_stop_drains_and_the_sweep_ends_stopped():
    h = _started(budget={"trials": 10, "parallel": 1})
    (lane,) = h.lanes
    a = h.next(lane)
    h.study.set_user_attr("sweeps.stop_requested", time.time())
    h.clock.t += 3  # the driver looks for requests every 2 s
    h.driver.step(0)
    assert h.report(a, lane, 1, val_accuracy=0.5) is Decision.CONTINUE
    h.finish(a, lane, val_accuracy=0.5)
    assert isinstance(h.next(lane), Stop)
    h.end_lane(lane)
    out = h.driver.finish()
    assert (out.state, out.reason) == ("stopped", "stop requested (sweeps stop)")


def test_sweeps_cancel_stops_running_trials_and_ends_cancelled():
    h = _started(budget={"trials": 10, "parallel": 1})
    (lane,) = h.lanes
    a = h.next(lane)
    h.study.set_user_attr("sweeps.cancel_requested", time.time())
    h.clock.t += 3
    h.driver.step(0)
    assert h.report(a, lane, 1, val_accuracy=0.5) is Decision.CANCEL
    h.finish(a, lane, state="pruned")
    h.end_lane(lane)
    out = h.driver.finish()
    assert out.state == "cancelled"
    assert h.trial(a.trial_number).state.name == "FAIL"


def test_a_sweep_whose_every_trial_failed_is_failed_with_the_first_error():
    h = _started(budget={"trials": 2, "parallel": 1})
    (lane,) = h.lanes
    for msg in ("ImportError: no module named trainer.task", "ValueError: second"):
        a = h.next(lane)
        h.channel.push(Failed(lane.lane_id, a.seq, msg))
        h.driver.step(0)
    assert isinstance(h.next(lane), Stop)
    h.end_lane(lane)
    out = h.driver.finish()
    assert out.state == "failed"
    assert out.reason == (
        "all 2 trials failed; first error: ImportError: no module named trainer.task"
    )


def test_an_unknown_event_fails_loudly():
    h = _started()
    h.channel.push({"kind": "next", "lane": "x", "seq": 1})
    with pytest.raises(ProtocolError):
        h.driver.step(0)


def test_a_recycled_lane_stops_and_a_fresh_one_replaces_it():
    h = _started(budget={"trials": 3, "parallel": 1}, execution={"recycle_after_trials": 1})
    (lane,) = h.lanes
    h.run_trial(lane, [0.5])
    stop = h.next(lane)
    assert isinstance(stop, Stop) and "recycled after 1 trial" in stop.reason
    h.end_lane(lane)
    assert len(h.lanes) == 2
    assert isinstance(h.next(h.lanes[1]), Assignment)


def test_a_trial_of_another_shape_waits_for_a_lane_of_its_own():
    h = _started(
        budget={"trials": 4, "parallel": 1},
        sampler={"name": "random", "seed": 1},
        search_space={"resources.workers": {"type": "categorical", "choices": [2]}},
    )
    (lane,) = h.lanes
    assert lane.shape.workers == 1
    stop = h.next(lane)
    assert isinstance(stop, Stop) and "another shape" in stop.reason
    h.end_lane(lane)
    wide = h.lanes[1]
    assert wide.shape.workers == 2
    a = h.next(wide)
    assert isinstance(a, Assignment) and a.params["resources.workers"] == 2
    assert "resources.workers" not in a.config, "resources are not the training function's"


def test_the_hard_budget_cancels_running_trials(tmp_path, monkeypatch):
    table = tmp_path / "machines.yaml"
    table.write_text("machines:\n  dear: {vcpus: 1, memory_gb: 1, price_per_hour: 3600}\n")
    monkeypatch.setenv("SWEEPS_MACHINES", str(table))
    h = _started(
        budget={"trials": 10, "parallel": 1, "max_cost_usd": 5, "hard": True},
        resources={"machine_type": "dear"},
    )
    (lane,) = h.lanes
    a = h.next(lane)
    h.clock.t += 6  # $6 spent by the running trial
    h.driver.step(0)  # the loop's rules run every turn
    assert h.report(a, lane, 1, val_accuracy=0.5) is Decision.CANCEL
    assert "hard budget crossed" in h.driver.status.reason


def test_an_exhausted_grid_ends_the_search():
    h = _started(
        budget={"trials": 10, "parallel": 1},
        sampler={"name": "grid"},
        search_space={"lr": {"type": "categorical", "choices": [0.01, 0.02]}},
    )
    (lane,) = h.lanes
    h.run_trial(lane, [0.5])
    h.run_trial(lane, [0.6])
    stop = h.next(lane)
    assert isinstance(stop, Stop) and "search space exhausted" in stop.reason
    h.end_lane(lane)
    assert h.driver.finish().state == "finished"


def test_a_failing_observer_does_not_stop_the_sweep():
    class Broken(SweepObserver):
        def on_trial_end(self, ctx, t, end):
            raise RuntimeError("display gone")

    h = Harness(observers=[Broken()], budget={"trials": 1, "parallel": 1})
    h.driver.start()
    (lane,) = h.lanes
    a = h.run_trial(lane, [0.5])
    assert h.trial(a.trial_number).state.name == "COMPLETE"
    h.next(lane)
    h.end_lane(lane)
    out = h.driver.finish()
    assert out.state == "finished"
    assert any("Broken.on_trial_end: display gone" in e for e in out.errors)


def test_attrs_waiting_for_a_write_survive_its_failure(monkeypatch):
    calls = []

    def flaky(study, tid, attrs):
        calls.append(dict(attrs))
        if len(calls) == 1:
            raise ConnectionError("the database blinked")

    monkeypatch.setattr(st, "set_trial_attrs", flaky)
    pending = PendingAttrs(study=None, clock=lambda: 0.0)
    pending.add(7, {"sweeps.lane": "l0"})
    with pytest.raises(ConnectionError):
        pending.write(7, {"sweeps.checkpoint": "c1"})  # the caller retries its own attrs
    pending.write_overdue(all_=True)
    assert calls == [{"sweeps.lane": "l0", "sweeps.checkpoint": "c1"}, {"sweeps.lane": "l0"}]


def test_a_long_error_keeps_its_first_line_and_its_end():
    from sweeps.common.errors import error_summary, keep_end

    text = "ProgramError: train.py exited with code 1\n" + "x\n" * 3000 + "KeyError: 'lr'"
    kept = keep_end(text, 500)
    assert len(kept) == 500 and kept.endswith("KeyError: 'lr'")
    assert kept.startswith("ProgramError: train.py exited with code 1\n… (")
    assert keep_end("short") == "short"
    assert error_summary(text) == "ProgramError: train.py exited with code 1 … KeyError: 'lr'"
    assert error_summary("a" * 1000, 50).endswith("a") and len(error_summary("a" * 1000, 50)) == 50


def test_an_ending_is_said_once():
    from sweeps.driver.state import AFTER_DRAIN
    from sweeps.driver.summary import ending_text

    drained = "interrupted (Ctrl-C): running trials finished, no new ones started"
    assert drained in AFTER_DRAIN.values()
    assert ending_text("interrupted", drained) == drained
    assert ending_text("finished", "budget reached: 4/4 trials") == (
        "finished (budget reached: 4/4 trials)"
    )
    assert ending_text("failed", None) == "failed"


@pytest.mark.parametrize(
    "how, error, state",
    [
        ("ctrl-c twice", "interrupted (Ctrl-C)", "interrupted"),
        ("sigterm", "terminated (SIGTERM)", "cancelled"),
        ("sweeps cancel", "cancelled: sweeps cancel", "cancelled"),
        ("sweeps down", "interrupted: sweeps down", "interrupted"),
    ],
)
def test_a_cancelled_trial_names_what_cancelled_it_its_run_is_killed_and_resume_reruns_it(
    how, error, state
):
    """issue 29 #10, #11: the trial's error says what stopped it, its run ends KILLED (not
    FAILED), it is no failure of the sweep's, and a resumed sweep queues it again, uncounted."""
    h = _started(budget={"trials": 2, "parallel": 1})
    (lane,) = h.lanes
    a = h.next(lane)
    if how == "ctrl-c twice":
        h.driver.interrupt()
        h.driver.interrupt()
    elif how == "sigterm":
        h.driver.terminate()
    else:
        kind = "cancel" if how == "sweeps cancel" else "interrupt"
        h.study.set_user_attr(f"sweeps.{kind}_requested", time.time())
        h.clock.t += 3
        h.driver.step(0)
    assert h.report(a, lane, 1, val_accuracy=0.5) is Decision.CANCEL
    h.finish(a, lane, state="pruned")
    h.end_lane(lane)
    out = h.driver.finish()
    assert out.state == state
    t = h.trial(a.trial_number)
    assert t.state.name == "FAIL" and t.user_attrs["sweeps.error"] == error
    assert h.tracker.ends[a.trial_number].killed, "its MLflow run ends KILLED"
    for kind in ("cancel", "interrupt"):  # the fake clock runs behind time.time(): not stale
        h.study.set_user_attr(f"sweeps.{kind}_requested", 0)
    again = Harness(study=h.study, budget={"trials": 2, "parallel": 1})
    again.driver.start()
    (lane2,) = again.lanes
    b = again.next(lane2)
    assert isinstance(b, Assignment) and b.params == a.params, "the cancelled trial runs again"
    assert again.trial(b.trial_number).user_attrs["sweeps.requeued_from"] == a.trial_number
    again.finish(b, lane2, val_accuracy=0.7)
    c = again.next(lane2)
    assert isinstance(c, Assignment), "the re-run is not counted: one more trial of the budget"
