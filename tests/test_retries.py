"""budget.trial_timeout_s and `retries`: the pure rules (sweeps.driver.retries), the spec fields,
and the driver applying them, stepped against fakes (no Ray)."""

from __future__ import annotations

import pytest
from conftest import make_spec
from driver_fakes import Harness

from sweeps.common.errors import SpecError
from sweeps.contracts.protocol import Assignment, Checkpointed, Decision, Failed
from sweeps.contracts.records import TrialRecord
from sweeps.driver import retries

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(
    ("error", "cause"),
    [
        ("timed out (budget.trial_timeout_s=5)", "timeout"),
        ("worker group lost 1 times (resources.max_failures=0)", "worker_lost"),
        ("worker group failed: ActorDiedError: The actor died unexpectedly", "worker_lost"),
        ("lane ended while the trial ran", "worker_lost"),
        (
            "worker group failed: OutOfMemoryError: Task was killed due to the node running low on "
            "memory",
            "oom",
        ),
        ("OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "oom"),
        ("ProgramError: train.py was killed by SIGKILL", "signal"),
        ("ProgramError: train.sh exited with code 137", "signal"),
        ("ProgramError: train.py exited with code 1", "exception"),
        ("ValueError: lr too hot", "exception"),
    ],
)
def test_a_failure_is_classified_by_its_error(error, cause):
    assert retries.classify(error) == cause


def test_only_the_causes_asked_for_retry_and_only_max_times():
    on = ["worker_lost", "oom", "signal", "timeout"]
    assert retries.should_retry("worker_lost", 1, 2, on)
    assert retries.should_retry("timeout", 2, 2, on)
    assert not retries.should_retry("timeout", 3, 2, on), "the third failure is the last"
    assert not retries.should_retry("exception", 1, 2, on), "user errors are not retried"
    assert retries.should_retry("exception", 1, 2, [*on, "exception"])
    assert not retries.should_retry("oom", 1, 0, on), "max: 0 retries nothing"


def _rec(**kw):
    base = dict(
        number=4,
        trial_id=9,
        params={"lr": 0.01},
        config={},
        seed=1,
        asked_at=0.0,
        assigned_at=100.0,
    )
    return TrialRecord(**{**base, **kw})


def test_a_retry_continues_from_the_last_checkpoint_of_the_first_attempt():
    first = retries.retry_attrs(_rec(checkpoint="/c/4-step3", checkpoint_step=3))
    assert first == {
        "sweeps.requeued_from": 4,
        "sweeps.attempt": 2,
        "sweeps.retry_of": 4,
        "sweeps.resume_checkpoint": "/c/4-step3",
        "sweeps.resumed_from_trial": 4,
        "sweeps.resume_step": 3,
    }
    # A retry killed before its own first checkpoint starts again from the one it started from.
    again = retries.retry_attrs(_rec(number=6, attempt=2, retry_of=4, resume_from="/c/4-step3"))
    assert again["sweeps.attempt"] == 3 and again["sweeps.retry_of"] == 4
    assert again["sweeps.resume_checkpoint"] == "/c/4-step3"
    assert "sweeps.resume_checkpoint" not in retries.retry_attrs(_rec())


def test_overdue_and_stuck_trials():
    r = _rec(assigned_at=100.0)
    assert retries.overdue([r], 105.0, None) == []
    assert retries.overdue([r], 105.0, 10.0) == []
    assert retries.overdue([r], 111.0, 10.0) == [r]
    r.failure_cause = "timeout"
    assert retries.overdue([r], 111.0, 10.0) == [], "marked once"
    assert retries.stuck([r], 111.0 + retries.GRACE_S, 10.0) == [r]


def test_spec_fields_are_validated():
    s = make_spec(budget={"trial_timeout_s": 30}, retries={"max": 2, True: ["oom", "exception"]})
    assert s.budget.trial_timeout_s == 30
    assert s.retries.max == 2 and s.retries.on == ["oom", "exception"], "YAML's `on:` is True"
    assert make_spec().retries.max == 0, "no retries unless asked"
    with pytest.raises(SpecError, match=r"retries\.on\.0: unknown value 'bogus'"):
        make_spec(retries={"max": 1, "on": ["bogus"]})
    with pytest.raises(SpecError, match="trial_timeout_s"):
        make_spec(budget={"trial_timeout_s": 0})


def _started(**fields):
    h = Harness(**fields)
    h.driver.start()
    return h


def test_a_trial_past_its_time_limit_fails_as_timed_out_and_keeps_its_checkpoint():
    h = _started(budget={"trials": 1, "parallel": 1, "trial_timeout_s": 10})
    (lane,) = h.lanes
    a = h.next(lane)
    assert h.report(a, lane, 1, val_accuracy=0.1) is Decision.CONTINUE
    h.channel.push(Checkpointed(lane.lane_id, a.seq, 1, "/ckpt/0-step1"))
    h.clock.t += 11
    assert h.report(a, lane, 2, val_accuracy=0.2) is Decision.CANCEL
    h.finish(a, lane, state="pruned")  # the worker raised TrialPruned("cancelled ...")
    t = h.trial(a.trial_number)
    assert t.state.name == "FAIL"
    assert t.user_attrs["sweeps.error"] == "timed out (budget.trial_timeout_s=10)"
    assert t.user_attrs["sweeps.failure_cause"] == "timeout"
    assert t.user_attrs["sweeps.checkpoint"] == "/ckpt/0-step1"
    assert h.tracker.ends[a.trial_number].state == "FAIL"
    assert not h.tracker.ends[a.trial_number].killed, "its own failure, not a cancel"


def test_a_timed_out_trial_that_never_reports_fails_after_the_grace():
    h = _started(budget={"trials": 1, "parallel": 1, "trial_timeout_s": 10})
    (lane,) = h.lanes
    a = h.next(lane)
    h.clock.t += 11
    h.driver.step(0)
    assert h.trial(a.trial_number).state.name == "RUNNING", "it may still reach a report"
    h.clock.t += retries.GRACE_S
    h.driver.step(0)
    assert h.trial(a.trial_number).state.name == "FAIL"


def test_a_lost_worker_is_retried_with_the_same_params_from_its_checkpoint():
    h = _started(budget={"trials": 1, "parallel": 1}, retries={"max": 1})
    (lane,) = h.lanes
    a = h.next(lane)
    h.channel.push(
        Checkpointed(lane.lane_id, a.seq, 2, "/ckpt/0-step2"),
        Failed(lane.lane_id, a.seq, "worker group lost 1 times (resources.max_failures=0)"),
    )
    h.driver.step(0)
    first = h.trial(a.trial_number)
    assert first.state.name == "FAIL" and first.user_attrs["sweeps.retried"] is True
    b = h.next(lane)
    assert isinstance(b, Assignment), "the retry is not counted in the budget"
    assert b.params == a.params and b.resume_from == "/ckpt/0-step2"
    h.channel.push(Failed(lane.lane_id, b.seq, "worker group lost 1 times"))
    h.driver.step(0)
    second = h.trial(b.trial_number)
    assert second.user_attrs["sweeps.attempt"] == 2 and second.user_attrs["sweeps.retry_of"] == 0
    assert "sweeps.retried" not in second.user_attrs, "max: 1 retry"
    assert not isinstance(h.next(lane), Assignment)
    assert h.driver.finish().state == "failed"


def test_a_user_exception_is_not_retried_unless_asked():
    h = _started(budget={"trials": 1, "parallel": 1}, retries={"max": 2})
    (lane,) = h.lanes
    a = h.next(lane)
    h.channel.push(Failed(lane.lane_id, a.seq, "ValueError: too hot"))
    h.driver.step(0)
    assert "sweeps.retried" not in h.trial(a.trial_number).user_attrs
    assert not isinstance(h.next(lane), Assignment)

    h = _started(budget={"trials": 1, "parallel": 1}, retries={"max": 2, "on": ["exception"]})
    (lane,) = h.lanes
    a = h.next(lane)
    h.channel.push(Failed(lane.lane_id, a.seq, "ValueError: too hot"))
    h.driver.step(0)
    assert isinstance(h.next(lane), Assignment)


def test_a_retry_runs_on_a_spent_budget_but_not_in_a_failed_or_stopped_sweep():
    assert retries.may_run("running", "")
    assert retries.may_run("draining", "finished"), "its trial was counted in the budget"
    assert not retries.may_run("draining", "stopped")
    assert not retries.may_run("draining", "failed")
    assert not retries.may_run("cancelling", "cancelled")
    h = _started(budget={"trials": 2, "parallel": 2}, retries={"max": 1})
    one, two = h.lanes
    a, b = h.next(one), h.next(two)
    h.finish(a, one, val_accuracy=0.5)
    assert not isinstance(h.next(one), Assignment), "the budget is spent: the sweep drains"
    h.channel.push(Failed(two.lane_id, b.seq, "worker group lost 1 times"))
    h.driver.step(0)
    again = h.next(two)
    assert isinstance(again, Assignment) and again.params == b.params
    h.finish(again, two, val_accuracy=0.6)
    assert not isinstance(h.next(two), Assignment)
    assert [t.state.name for t in h.study.trials] == ["COMPLETE", "FAIL", "COMPLETE"]


def test_a_trial_time_limit_bounds_the_worst_case_cost():
    from tracking.costs import spec_cost_facts

    spec = make_spec(
        budget={"trials": 10, "trial_timeout_s": 1800},
        retries={"max": 1},
        resources={"machine_type": "e2-standard-2"},
    )
    facts = spec_cost_facts(spec)
    per_hour = facts["cost_per_hour_usd"]
    assert facts["trial_hours_bound"] == 0.5
    assert facts["worst_case_cost_usd"] == pytest.approx(20 * per_hour * 0.5)
    assert "20 trial attempts" in facts["worst_case_basis"]
    assert spec_cost_facts(make_spec())["worst_case_cost_usd"] is None
